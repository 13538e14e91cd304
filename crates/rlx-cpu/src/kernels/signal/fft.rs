//! `Fft` (any length, through rustfft's planner) and the gated radix-2 `FftButterflyStage`.

use crate::kernels::real::Real;
use crate::kernels::{on_floats, FloatKernel, PAR_MIN};
use crate::view::{In, Out};
use num_complex::{Complex32, Complex64};
use rayon::prelude::*;
use rlx_ir::ops::signal::{Fft, FftButterflyStage, FftNorm};
use rlx_ir::DType;
use rustfft::FftPlanner;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A plan for length-`n` transforms, from one process-wide planner (which keeps every plan it
/// made, so each length and direction is planned once).
pub(super) fn plan(n: usize, inverse: bool) -> Arc<dyn rustfft::Fft<f64>> {
    static PLANNER: OnceLock<Mutex<FftPlanner<f64>>> = OnceLock::new();
    let mut planner = PLANNER.get_or_init(|| Mutex::new(FftPlanner::new())).lock().unwrap_or_else(PoisonError::into_inner);
    if inverse {
        planner.plan_fft_inverse(n)
    } else {
        planner.plan_fft_forward(n)
    }
}

/// Runs `plan` over every length-`n` row of `data` in place, on rayon threads when large.
pub(super) fn transform_rows(plan: &dyn rustfft::Fft<f64>, data: &mut [Complex64], n: usize) {
    let scratch = || vec![Complex64::ZERO; plan.get_inplace_scratch_len()];
    if data.is_empty() {
        return;
    }
    if data.len() < PAR_MIN || data.len() == n {
        plan.process_with_scratch(data, &mut scratch());
    } else {
        let rows_per_task = (PAR_MIN / 4).div_ceil(n);
        data.par_chunks_mut(rows_per_task * n).for_each_init(scratch, |s, rows| plan.process_with_scratch(rows, s));
    }
}

/// `Fft{inverse, norm}` along the last axis: F32/F64 in the 2N real-block layout (last axis
/// `2N`, which must be even and non-zero), or C64 with `N` complex elements (non-zero). Scale
/// per OPS.md §17's table; computed in f64.
pub fn fft(a: &Fft, x: In, out: &mut Out) -> Result<(), String> {
    let last = x.dims.last().copied().unwrap_or(0);
    let n = match x.dtype {
        DType::C64 => last,
        DType::F32 | DType::F64 if last % 2 == 0 => last / 2,
        DType::F32 | DType::F64 => {
            return Err(format!("last axis of {:?} has odd length {last}, not 2N re/im blocks", x.dims))
        }
        d => return Err(format!("Fft takes f32, f64 or c64, not {d}")),
    };
    if n == 0 {
        return Err(format!("last axis of {:?} has no elements to transform", x.dims));
    }
    let n_f = n as f64;
    let scale = match (a.norm, a.inverse) {
        (FftNorm::Backward, true) | (FftNorm::Forward, false) => 1.0 / n_f,
        (FftNorm::Ortho, _) => 1.0 / n_f.sqrt(),
        _ => 1.0,
    };
    let mut data: Vec<Complex64> = match x.dtype {
        DType::C64 => x.get::<Complex32>().iter().map(|z| Complex64::new(z.re.into(), z.im.into())).collect(),
        DType::F32 => from_blocks(x.get::<f32>(), n),
        _ => from_blocks(x.get::<f64>(), n),
    };
    transform_rows(plan(n, a.inverse).as_ref(), &mut data, n);
    match out.dtype {
        DType::C64 => {
            for (o, z) in out.get::<Complex32>().iter_mut().zip(&data) {
                *o = Complex32::new((z.re * scale) as f32, (z.im * scale) as f32);
            }
        }
        DType::F32 => to_blocks(&data, scale, n, out.get::<f32>()),
        _ => to_blocks(&data, scale, n, out.get::<f64>()),
    }
    Ok(())
}

/// Rows of `[re.., im..]` blocks of length `2n` as complex rows of length `n`.
fn from_blocks<T: Real>(x: &[T], n: usize) -> Vec<Complex64> {
    x.chunks_exact(2 * n).flat_map(|row| (0..n).map(move |k| Complex64::new(row[k].f64(), row[n + k].f64()))).collect()
}

/// Complex rows of length `n`, times `scale`, written as `[re.., im..]` blocks.
fn to_blocks<T: Real>(z: &[Complex64], scale: f64, n: usize, out: &mut [T]) {
    for (row, zs) in out.chunks_exact_mut(2 * n).zip(z.chunks_exact(n)) {
        let (re, im) = row.split_at_mut(n);
        for ((r, i), z) in re.iter_mut().zip(im).zip(zs) {
            *r = T::of(z.re * scale);
            *i = T::of(z.im * scale);
        }
    }
}

/// `FftButterflyStage{stage, n_fft}`: `state [B, n_fft, 2]` (interleaved re/im), `gate, rev,
/// tw_re, tw_im [n_fft/2]`, all one float dtype → `[B, n_fft, 2]`. Butterfly `b` pairs
/// `i0 = ⌊b/m⌋·2m + b mod m` with `i1 = i0 + m` (`m = 2^stage`): a zero gate copies both,
/// otherwise `(s[i0] + w·s[i1], s[i0] − w·s[i1])`, swapped when `rev[b] ≥ 0.5`. Complex
/// products in f64, rounded once.
pub fn fft_butterfly_stage(a: &FftButterflyStage, ins: &[In], out: &mut Out) -> Result<(), String> {
    on_floats(&Butterfly { stage: a.stage }, ins, std::slice::from_mut(out))
}

struct Butterfly {
    stage: u32,
}

impl FloatKernel for Butterfly {
    fn run<T: Real>(&self, ins: &[&[T]], dims: &[&[usize]], outs: &mut [&mut [T]]) -> Result<(), String> {
        let (state, gate, rev, tw_re, tw_im) = (ins[0], ins[1], ins[2], ins[3], ins[4]);
        let n = dims[0][1];
        let m = 1usize << self.stage;
        let stage = |s: &[T], o: &mut [T]| {
            for b in 0..n / 2 {
                let i0 = (b / m) * 2 * m + b % m;
                let i1 = i0 + m;
                let (p, q) = ((2 * i0, 2 * i0 + 1), (2 * i1, 2 * i1 + 1));
                if gate[b] == T::ZERO {
                    o[p.0] = s[p.0];
                    o[p.1] = s[p.1];
                    o[q.0] = s[q.0];
                    o[q.1] = s[q.1];
                    continue;
                }
                let w = Complex64::new(tw_re[b].f64(), tw_im[b].f64());
                let t = w * Complex64::new(s[q.0].f64(), s[q.1].f64());
                let top = Complex64::new(s[p.0].f64(), s[p.1].f64());
                let (mut hi, mut lo) = (top + t, top - t);
                if rev[b].f64() >= 0.5 {
                    std::mem::swap(&mut hi, &mut lo);
                }
                o[p.0] = T::of(hi.re);
                o[p.1] = T::of(hi.im);
                o[q.0] = T::of(lo.re);
                o[q.1] = T::of(lo.im);
            }
        };
        let row = 2 * n;
        if state.len() < PAR_MIN {
            state.chunks_exact(row).zip(outs[0].chunks_exact_mut(row)).for_each(|(s, o)| stage(s, o));
        } else {
            state.par_chunks_exact(row).zip(outs[0].par_chunks_exact_mut(row)).for_each(|(s, o)| stage(s, o));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `Fft` on f32 data of `dims`, as the executor would after specialization.
    fn run(dims: &[usize], x: &[f32]) -> Result<Vec<f32>, String> {
        let mut y = vec![0.0f32; x.len()];
        let x = In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) };
        let mut out = Out { dtype: DType::F32, dims, bytes: bytemuck::cast_slice_mut(&mut y) };
        fft(&Fft { inverse: false, norm: FftNorm::Ortho }, x, &mut out)?;
        Ok(y)
    }

    #[test]
    fn the_kernel_itself_rejects_odd_and_empty_blocks() {
        assert!(run(&[1, 3], &[1.0, 2.0, 3.0]).unwrap_err().contains("odd length 3"));
        assert!(run(&[2, 0], &[]).unwrap_err().contains("no elements"));
        // One complex sample 3 + 4i is its own orthonormal transform.
        assert_eq!(run(&[1, 2], &[3.0, 4.0]).unwrap(), [3.0, 4.0]);
    }
}
