//! Random numbers and the token sampler (OPS.md §12) over rlx-ir's random stream
//! ([`rlx_ir::ops::random::stream`]: Philox-4×32-10 blocks, their counters and the maps to
//! uniform and normal values), which defines the numbers every backend produces. Each output
//! element is a pure function of the op's attributes and its position, so the same attributes
//! give the same values on every run and on any number of threads.

use super::PAR_MIN;
use crate::view::{In, Out};
use half::{bf16, f16};
use rayon::prelude::*;
use rlx_ir::ops::random::stream::{self, Stream};
use rlx_ir::ops::random::{RngNormal, RngUniform, Sample};
use rlx_ir::DType;

/// Fills `out` so that element `i` is `f(block(i / 4), i % 4)`, blocks in parallel when large.
fn fill(out: &mut [f32], s: Stream, f: impl Fn(&[u32; 4], usize) -> f32 + Sync) {
    const CHUNK: usize = 4 * 1024;
    let chunk = |(c, ys): (usize, &mut [f32])| {
        for (q, quad) in ys.chunks_mut(4).enumerate() {
            let w = s.block(((c * CHUNK) / 4 + q) as u64);
            for (j, y) in quad.iter_mut().enumerate() {
                *y = f(&w, j);
            }
        }
    };
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(CHUNK).enumerate().for_each(chunk);
    } else {
        out.chunks_mut(CHUNK).enumerate().for_each(chunk);
    }
}

/// `RngUniform`: F32 `out` of i.i.d. `U[low, high)` (the stream's uniform elements); an
/// optional template input is not read.
pub fn rng_uniform(a: &RngUniform, out: &mut Out) -> Result<(), String> {
    fill(out.get::<f32>(), Stream::rng(a.key, a.op_seed), |w, j| stream::uniform(a.low, a.high, w, j));
    Ok(())
}

/// `RngNormal`: F32 `out` of i.i.d. `N(mean, scale²)` (the stream's normal elements); an
/// optional template input is not read.
pub fn rng_normal(a: &RngNormal, out: &mut Out) -> Result<(), String> {
    fill(out.get::<f32>(), Stream::rng(a.key, a.op_seed), |w, j| stream::normal(a.mean, a.scale, w, j));
    Ok(())
}

/// One row of `Sample`: the token drawn with `u ∈ (0, 1]` (OPS.md §12, in f64).
fn sample_row(a: &Sample, logits: impl Iterator<Item = f64>, u: f64) -> i64 {
    let t = (a.temperature as f64).max(1e-6);
    let mut z: Vec<f64> = logits.map(|v| v / t).collect();
    let v = z.len();
    if a.top_k > 0 && a.top_k < v {
        let mut desc = z.clone();
        let (_, &mut cut, _) = desc.select_nth_unstable_by(a.top_k - 1, |x, y| y.total_cmp(x));
        z.iter_mut().filter(|x| **x < cut).for_each(|x| *x = f64::NEG_INFINITY);
    }
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut p: Vec<f64> = z.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = p.iter().sum();
    p.iter_mut().for_each(|x| *x /= s);
    if a.top_p < 1.0 {
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&i, &j| p[j].total_cmp(&p[i]));
        let (mut cum, mut kept) = (0.0, 0);
        for &i in &order {
            cum += p[i];
            kept += 1;
            if cum >= a.top_p as f64 {
                break;
            }
        }
        for &i in &order[kept..] {
            p[i] = 0.0;
        }
        p.iter_mut().for_each(|x| *x /= cum);
    }
    let mut cum = 0.0;
    for (i, &q) in p.iter().enumerate() {
        cum += q;
        if cum >= u {
            return i as i64;
        }
    }
    // Rounding left the total just under u: the last token still in play.
    p.iter().rposition(|&q| q > 0.0).unwrap_or(v.saturating_sub(1)) as i64
}

/// `Sample`: `logits [.., V]` float; I64 `out [..]`, one token per row: temperature, top-k
/// (ties at the cutoff survive), softmax, top-p (smallest most-probable prefix reaching
/// `top_p`, renormalized), then the first token (vocabulary order) whose cumulative
/// probability reaches the row's draw. Greedy decoding is `top_k = 1`.
pub fn sample(a: &Sample, logits: In, out: &mut Out) -> Result<(), String> {
    let v = logits.dims.last().copied().unwrap_or(1);
    if v == 0 {
        return Err("Sample needs a non-empty vocabulary".into());
    }
    let draw = |r: usize| stream::sample_draw(a, r as u64);
    let ids = out.get::<i64>();
    macro_rules! rows {
        ($t:ty, $f:expr) => {{
            let x = logits.get::<$t>();
            let row = |(r, id): (usize, &mut i64)| *id = sample_row(a, x[r * v..(r + 1) * v].iter().map($f), draw(r));
            if x.len() >= PAR_MIN {
                ids.par_iter_mut().enumerate().for_each(row);
            } else {
                ids.iter_mut().enumerate().for_each(row);
            }
        }};
    }
    match logits.dtype {
        DType::F32 => rows!(f32, |&x: &f32| x as f64),
        DType::F64 => rows!(f64, |&x: &f64| x),
        DType::F16 => rows!(f16, |&x: &f16| x.to_f64()),
        DType::BF16 => rows!(bf16, |&x: &bf16| x.to_f64()),
        d => return Err(format!("Sample needs float logits, not {d}")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Shape;

    fn uniform(key: u64, op_seed: Option<f32>, n: usize, low: f32, high: f32) -> Vec<f32> {
        let a = RngUniform { low, high, key, op_seed, shape: Some(Shape::of(&[n])) };
        let mut y = vec![0f32; n];
        rng_uniform(&a, &mut Out { dtype: DType::F32, dims: &[n], bytes: bytemuck::cast_slice_mut(&mut y) }).unwrap();
        y
    }

    fn normal(key: u64, n: usize, mean: f32, scale: f32) -> Vec<f32> {
        let a = RngNormal { mean, scale, key, op_seed: None, shape: Some(Shape::of(&[n])) };
        let mut y = vec![0f32; n];
        rng_normal(&a, &mut Out { dtype: DType::F32, dims: &[n], bytes: bytemuck::cast_slice_mut(&mut y) }).unwrap();
        y
    }

    /// Mean and the central moments 2, 3, 4.
    fn moments(x: &[f32]) -> [f64; 4] {
        let n = x.len() as f64;
        let m = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let c = |k: i32| x.iter().map(|&v| (v as f64 - m).powi(k)).sum::<f64>() / n;
        [m, c(2), c(3), c(4)]
    }

    #[test]
    fn kernels_give_the_streams_values() {
        // Past PAR_MIN and not a whole number of blocks: the threaded path, a partial block.
        let n = 40_003;
        let a = RngUniform { low: -1.0, high: 2.0, key: 0x1234_5678_9abc, op_seed: Some(7.0), shape: Some(Shape::of(&[n])) };
        let got = uniform(a.key, a.op_seed, n, a.low, a.high);
        assert!(got.iter().enumerate().all(|(i, &v)| v.to_bits() == stream::uniform_at(&a, i as u64).to_bits()));
        let a = RngNormal { mean: 0.5, scale: 3.0, key: 99, op_seed: None, shape: Some(Shape::of(&[n])) };
        let got = normal(a.key, n, a.mean, a.scale);
        assert!(got.iter().enumerate().all(|(i, &v)| v.to_bits() == stream::normal_at(&a, i as u64).to_bits()));
    }

    #[test]
    fn same_attributes_give_the_same_values_and_others_differ() {
        let a = uniform(7, None, 1 << 16, 0.0, 1.0);
        assert_eq!(a, uniform(7, None, 1 << 16, 0.0, 1.0));
        // A prefix of a longer output: element i depends only on i (and threads do not matter).
        assert_eq!(a[..1001], uniform(7, None, 1001, 0.0, 1.0)[..]);
        assert_ne!(a[..64], uniform(8, None, 64, 0.0, 1.0)[..]);
        let s1 = uniform(7, Some(1.0), 64, 0.0, 1.0);
        assert_ne!(a[..64], s1[..]);
        assert_ne!(s1, uniform(7, Some(2.0), 64, 0.0, 1.0));
        assert_eq!(uniform(7, Some(0.0), 64, 0.0, 1.0), uniform(7, Some(-0.0), 64, 0.0, 1.0));
        assert_ne!(uniform(7, Some(0.0), 64, 0.0, 1.0), a[..64]);
        assert_eq!(normal(3, 999, 0.0, 1.0), normal(3, 999, 0.0, 1.0));
    }

    #[test]
    fn uniform_moments_and_range() {
        let (lo, hi) = (-2.0f32, 3.0f32);
        let x = uniform(11, None, 1 << 20, lo, hi);
        assert!(x.iter().all(|&v| (lo..hi).contains(&v)));
        let [m, var, skew, _] = moments(&x);
        // Standard errors at n = 2^20: mean 0.0014, variance 0.0018.
        assert!((m - 0.5).abs() < 0.01, "mean {m}");
        assert!((var - 25.0 / 12.0).abs() < 0.01, "variance {var}");
        assert!(skew.abs() < 0.02, "third moment {skew}");
        // Each decile holds a tenth.
        let mut bins = [0usize; 10];
        x.iter().for_each(|&v| bins[(((v - lo) / (hi - lo)) * 10.0) as usize] += 1);
        assert!(bins.iter().all(|&b| (b as f64 / x.len() as f64 - 0.1).abs() < 0.002), "{bins:?}");
        // Rounding never reaches high even on a narrow range.
        assert!(uniform(1, None, 4096, 1.0, 1.0 + f32::EPSILON).iter().all(|&v| v == 1.0));
    }

    #[test]
    fn normal_moments() {
        let x = normal(5, 1 << 20, 1.5, 2.0);
        let [m, var, c3, c4] = moments(&x);
        assert!((m - 1.5).abs() < 0.01, "mean {m}");
        assert!((var - 4.0).abs() < 0.03, "variance {var}");
        assert!((c3 / var.powf(1.5)).abs() < 0.02, "skewness");
        assert!((c4 / (var * var) - 3.0).abs() < 0.03, "kurtosis");
        // Neighbouring elements (cos and sin of one pair, and pairs of one block) are uncorrelated.
        let n = x.len() - 1;
        let cov = (0..n).map(|i| (x[i] as f64 - m) * (x[i + 1] as f64 - m)).sum::<f64>() / n as f64;
        assert!((cov / var).abs() < 0.01, "lag-1 correlation {}", cov / var);
        let within = x.iter().filter(|&&v| ((v - 1.5) / 2.0).abs() < 1.0).count() as f64 / x.len() as f64;
        assert!((within - 0.682_689).abs() < 0.002, "P(|z| < 1) = {within}");
    }

    fn sample_ids(a: &Sample, logits: &[f32], v: usize) -> Vec<i64> {
        let rows = logits.len() / v;
        let mut ids = vec![-1i64; rows];
        let dims = [rows, v];
        let x = In { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice(logits) };
        sample(a, x, &mut Out { dtype: DType::I64, dims: &[rows], bytes: bytemuck::cast_slice_mut(&mut ids) }).unwrap();
        ids
    }

    #[test]
    fn greedy_sampling_is_argmax() {
        let v = 37;
        let logits: Vec<f32> = (0..v * 9).map(|i| ((i * 7919) % 1009) as f32 / 100.0).collect();
        let a = Sample { top_k: 1, top_p: 1.0, temperature: 1.0, seed: 3 };
        let ids = sample_ids(&a, &logits, v);
        for (r, &id) in ids.iter().enumerate() {
            let row = &logits[r * v..(r + 1) * v];
            let best = (0..v).fold(0, |b, j| if row[j] > row[b] { j } else { b });
            assert_eq!(id as usize, best);
        }
    }

    #[test]
    fn sampling_follows_the_filtered_distribution() {
        let p = [0.1f32, 0.2, 0.3, 0.4];
        let rows = 40_000;
        let logits: Vec<f32> = (0..rows).flat_map(|_| p.iter().map(|q| q.ln())).collect();
        let freq = |a: Sample| {
            let mut count = [0usize; 4];
            sample_ids(&a, &logits, 4).iter().for_each(|&i| count[i as usize] += 1);
            count.map(|c| c as f64 / rows as f64)
        };
        let plain = freq(Sample { top_k: 0, top_p: 1.0, temperature: 1.0, seed: 0 });
        for (f, q) in plain.iter().zip(p) {
            assert!((f - q as f64).abs() < 0.01, "{plain:?}");
        }
        // top_k 2 keeps {0.3, 0.4}; top_p 0.6 keeps the same prefix (0.4 + 0.3 ≥ 0.6).
        for a in [Sample { top_k: 2, top_p: 1.0, temperature: 1.0, seed: 9 }, Sample { top_k: 0, top_p: 0.6, temperature: 1.0, seed: 9 }] {
            let f = freq(a);
            assert_eq!(f[0] + f[1], 0.0, "{f:?}");
            assert!((f[3] - 4.0 / 7.0).abs() < 0.01, "{f:?}");
        }
        // Temperature 0.5 squares the odds: p ∝ p².
        let t = freq(Sample { top_k: 0, top_p: 1.0, temperature: 0.5, seed: 2 });
        assert!((t[3] - 16.0 / 30.0).abs() < 0.01, "{t:?}");
        assert_eq!(freq(Sample { top_k: 0, top_p: 0.0, temperature: 1.0, seed: 2 }), [0.0, 0.0, 0.0, 1.0]);
    }
}
