//! Normalization kernels (OPS.md §6): LayerNorm, LayerNorm2d, GroupNorm, RmsNorm and
//! BatchNormInference; their backward ops (§22) are in `norm/backward.rs`.
//!
//! Contract shared by every kernel here: `x` is row-major with the dims of its `In`; the
//! per-feature vectors (`gamma`, `beta`, running statistics) are `[D]` in x's dtype. F32 and
//! F64 run natively; F16/BF16 operands are widened to F32 and the result rounded back once.
//! Statistics (means, variances, the sums of the backward ops) accumulate in f64 whatever the
//! dtype, so an f32 result is the correctly rounded f32 of an f64 computation up to the last
//! couple of ulps.

mod backward;

pub use backward::*;

use super::elementwise::cast;
use super::real::{Real, Scalar};
use super::{by_float, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::norm::{BatchNormInference, GroupNorm, LayerNorm, LayerNorm2d, RmsNorm};
use rlx_ir::{norm_axis, DType};

/// Whether `d` is a half-precision float that kernels widen to F32.
fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// The elements of `x` (any dtype) converted to f32.
fn widen(x: In) -> Vec<f32> {
    let mut buf = vec![0f32; x.numel()];
    let mut out = Out { dtype: DType::F32, dims: x.dims, bytes: bytemuck::cast_slice_mut(&mut buf) };
    cast(x, &mut out).expect("every dtype casts to f32");
    buf
}

/// The elements of `x` (any dtype, Bool as 0/1) converted to f64: for small side inputs
/// (tables, masks) whose dtype need not match the main operand's.
pub(crate) fn values_f64(x: In) -> Vec<f64> {
    let mut buf = vec![0f64; x.numel()];
    let mut out = Out { dtype: DType::F64, dims: x.dims, bytes: bytemuck::cast_slice_mut(&mut buf) };
    cast(x, &mut out).expect("every dtype casts to f64");
    buf
}

/// Runs the F32/F64 kernel `f` with every F16/BF16 operand widened to F32: half inputs are
/// converted before, half outputs are computed in F32 and rounded back after. Operands of
/// other dtypes pass through untouched.
pub(crate) fn through_f32(
    ins: &[In],
    outs: &mut [Out],
    f: impl FnOnce(&[In], &mut [Out]) -> Result<(), String>,
) -> Result<(), String> {
    if !ins.iter().any(|i| is_half(i.dtype)) && !outs.iter().any(|o| is_half(o.dtype)) {
        return f(ins, outs);
    }
    let in_bufs: Vec<Option<Vec<f32>>> = ins.iter().map(|i| is_half(i.dtype).then(|| widen(*i))).collect();
    let wide_ins: Vec<In> = ins
        .iter()
        .zip(&in_bufs)
        .map(|(i, b)| match b {
            Some(b) => In { dtype: DType::F32, dims: i.dims, bytes: bytemuck::cast_slice(b) },
            None => *i,
        })
        .collect();
    let mut out_bufs: Vec<Option<Vec<f32>>> = outs.iter().map(|o| is_half(o.dtype).then(|| vec![0f32; o.numel()])).collect();
    {
        let mut wide_outs: Vec<Out> = outs
            .iter_mut()
            .zip(out_bufs.iter_mut())
            .map(|(o, b)| match b {
                Some(b) => Out { dtype: DType::F32, dims: o.dims, bytes: bytemuck::cast_slice_mut(b) },
                None => Out { dtype: o.dtype, dims: o.dims, bytes: &mut *o.bytes },
            })
            .collect();
        f(&wide_ins, &mut wide_outs)?;
    }
    for (o, b) in outs.iter_mut().zip(&out_bufs) {
        if let Some(b) = b {
            cast(In { dtype: DType::F32, dims: o.dims, bytes: bytemuck::cast_slice(b) }, o)?;
        }
    }
    Ok(())
}

/// `x` seen as `[outer, n, inner]` around one axis: lane `(o, i)` holds the `n` elements
/// `o·n·inner + j·inner + i`, `j < n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lanes {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

impl Lanes {
    /// The lanes along `axis` of `dims`.
    pub fn around(dims: &[usize], axis: usize) -> Lanes {
        Lanes { outer: dims[..axis].iter().product(), n: dims[axis], inner: dims[axis + 1..].iter().product() }
    }

    /// Elements per outer block.
    pub fn block(&self) -> usize {
        self.n * self.inner
    }
}

/// The feature axis of a Python-style `axis` attribute over `dims`.
fn axis_of(axis: i32, dims: &[usize]) -> Result<usize, String> {
    norm_axis(axis as i64, dims.len())
}

/// Calls `f(o, x_block, out_block)` for every outer block of `block` elements (the same
/// block size in `x` and `out`), across threads when the tensor is large.
fn for_blocks<T: Real>(x: &[T], out: &mut [T], block: usize, f: impl Fn(usize, &[T], &mut [T]) + Sync) {
    if block == 0 {
        return;
    }
    if x.len() < PAR_MIN || x.len() == block {
        for (o, (xb, ob)) in x.chunks(block).zip(out.chunks_mut(block)).enumerate() {
            f(o, xb, ob);
        }
    } else {
        x.par_chunks(block).zip(out.par_chunks_mut(block)).enumerate().for_each(|(o, (xb, ob))| f(o, xb, ob));
    }
}

/// `Σ_o f(o, acc)` of per-feature `[n]` partial sums over `outer` blocks, accumulated in
/// f64. The blocks are split into fixed chunks whose partials are added in order, so the
/// result does not depend on the thread count.
fn feature_sums(outer: usize, n: usize, work: usize, f: impl Fn(usize, &mut [f64]) + Sync) -> Vec<f64> {
    const CHUNKS: usize = 64;
    let per = if work < PAR_MIN { outer.max(1) } else { outer.div_ceil(CHUNKS).max(1) };
    let starts: Vec<usize> = (0..outer).step_by(per).collect();
    let partials: Vec<Vec<f64>> = starts
        .par_iter()
        .map(|&s| {
            let mut acc = vec![0f64; n];
            for o in s..(s + per).min(outer) {
                f(o, &mut acc);
            }
            acc
        })
        .collect();
    let mut total = vec![0f64; n];
    for p in partials {
        total.iter_mut().zip(p).for_each(|(t, v)| *t += v);
    }
    total
}

/// Mean and `1/√(biased variance + eps)` of the `n` values `x[j·stride]` (two passes, f64).
fn moments<T: Real>(x: &[T], n: usize, stride: usize, eps: f64) -> (f64, f64) {
    let mean = (0..n).map(|j| x[j * stride].f64()).sum::<f64>() / n as f64;
    let var = (0..n).map(|j| (x[j * stride].f64() - mean).powi(2)).sum::<f64>() / n as f64;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `1/√(mean(x²) + eps)` of the `n` values `x[j·stride]`; a contiguous row summed by
/// [`lane_sum`] in f64 (vector lanes, where one chain waited on every add).
fn rms_scale<T: Real>(x: &[T], n: usize, stride: usize, eps: f64) -> f64 {
    let squares = if stride == 1 {
        lane_sum(&x[..n], |v| v.f64().powi(2))
    } else {
        (0..n).map(|j| x[j * stride].f64().powi(2)).sum::<f64>()
    };
    1.0 / (squares / n as f64 + eps).sqrt()
}

/// `Σ f(v)` over `v` with eight independent partial sums in `A`, so the loop vectorizes.
pub(crate) fn lane_sum<T: Copy, A>(v: &[T], f: impl Fn(T) -> A) -> A
where
    A: Copy + Default + std::ops::AddAssign + std::ops::Add<Output = A> + std::iter::Sum,
{
    let mut acc = [A::default(); 8];
    let chunks = v.chunks_exact(8);
    let tail: A = chunks.remainder().iter().map(|&x| f(x)).sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f(x);
        }
    }
    acc.iter().copied().sum::<A>() + tail
}

/// The f64 values of a per-feature vector.
fn vector<T: Real>(v: In) -> Vec<f64> {
    v.get::<T>().iter().map(|x| x.f64()).collect()
}

/// LayerNorm over `lanes` of `x`: `y = (x − μ)·r·γ[j] + β[j]` per lane.
fn layer_norm_lanes<T: Real>(x: &[T], gamma: &[f64], beta: &[f64], out: &mut [T], lanes: Lanes, eps: f64) {
    let (n, inner) = (lanes.n, lanes.inner);
    for_blocks(x, out, lanes.block(), |_, xb, ob| {
        for i in 0..inner {
            let (mean, r) = moments(&xb[i..], n, inner, eps);
            for j in 0..n {
                let at = j * inner + i;
                ob[at] = T::of((xb[at].f64() - mean) * r * gamma[j] + beta[j]);
            }
        }
    });
}

/// `LayerNorm` over `axis` of `x`; inputs `(x, gamma [D], beta [D])`, any axis (strided when
/// not the last).
pub fn layer_norm(a: &LayerNorm, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => layer_norm_lanes(ins[0].get::<T>(), &vector::<T>(ins[1]), &vector::<T>(ins[2]), outs[0].get::<T>(), lanes, a.eps as f64))
    })
}

/// `LayerNorm2d` of `x [N, C, H, W]`: a LayerNorm over the channel axis (stride `H·W`).
pub fn layer_norm_2d(a: &LayerNorm2d, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    layer_norm(&LayerNorm { axis: 1, eps: a.eps }, ins, outs)
}

/// `RmsNorm` over `axis` of `x`; inputs `(x, gamma, beta)`. With `flatten_leading` only the
/// declared output dims differ: the bytes are the same.
pub fn rms_norm(a: &RmsNorm, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let (gamma, beta) = (vector::<T>(ins[1]), vector::<T>(ins[2]));
            let (n, inner) = (lanes.n, lanes.inner);
            for_blocks(ins[0].get::<T>(), outs[0].get::<T>(), lanes.block(), |_, xb, ob| {
                if inner == 1 {
                    let r = rms_scale(xb, n, 1, eps);
                    for (((y, x), g), b) in ob.iter_mut().zip(xb).zip(&gamma).zip(&beta) {
                        *y = T::of(x.f64() * r * g + b);
                    }
                    return;
                }
                for i in 0..inner {
                    let r = rms_scale(&xb[i..], n, inner, eps);
                    for j in 0..n {
                        let at = j * inner + i;
                        ob[at] = T::of(xb[at].f64() * r * gamma[j] + beta[j]);
                    }
                }
            })
        })
    })
}

/// The group layout of `x [N, C, spatial..]`: `(groups, channels per group, spatial size)`.
fn group_layout(num_groups: usize, dims: &[usize]) -> (usize, usize, usize) {
    let spatial: usize = dims[2..].iter().product();
    (num_groups, dims[1] / num_groups, spatial)
}

/// `GroupNorm` of `x [N, C, spatial..]`; inputs `(x, gamma [C], beta [C])`. Statistics per
/// `(n, group)` block of `C/G · spatial` contiguous elements, then per-channel affine.
pub fn group_norm(a: &GroupNorm, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let (g, cg, sp) = group_layout(a.num_groups, ins[0].dims);
        by_float!(ins[0].dtype, T => {
            let (gamma, beta) = (vector::<T>(ins[1]), vector::<T>(ins[2]));
            let n = cg * sp;
            for_blocks(ins[0].get::<T>(), outs[0].get::<T>(), n, |o, xb, ob| {
                let (mean, r) = moments(xb, n, 1, eps);
                let c0 = (o % g) * cg;
                for (j, (y, x)) in ob.iter_mut().zip(xb).enumerate() {
                    let c = c0 + j / sp;
                    *y = T::of((x.f64() - mean) * r * gamma[c] + beta[c]);
                }
            })
        })
    })
}

/// `BatchNormInference` with frozen statistics; inputs `(x, gamma, beta, mean, var)`, the
/// vectors indexed by the coordinate on `axis`.
pub fn batch_norm_inference(a: &BatchNormInference, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let [gamma, beta, mean, var] = [1, 2, 3, 4].map(|i| vector::<T>(ins[i]));
            let scale: Vec<f64> = gamma.iter().zip(&var).map(|(g, v)| g / (v + eps).sqrt()).collect();
            let inner = lanes.inner;
            for_blocks(ins[0].get::<T>(), outs[0].get::<T>(), lanes.block(), |_, xb, ob| {
                for (at, (y, x)) in ob.iter_mut().zip(xb).enumerate() {
                    let c = at / inner;
                    *y = T::of((x.f64() - mean[c]) * scale[c] + beta[c]);
                }
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: impl FnOnce(&[In], &mut [Out]) -> Result<(), String>, x: &[f32], dims: &[usize], vecs: &[&[f32]]) -> Vec<f32> {
        let vd: Vec<Vec<usize>> = vecs.iter().map(|v| vec![v.len()]).collect();
        let mut ins = vec![In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) }];
        for (v, d) in vecs.iter().zip(&vd) {
            ins.push(In { dtype: DType::F32, dims: d, bytes: bytemuck::cast_slice(v) });
        }
        let mut y = vec![0f32; x.len()];
        let mut outs = [Out { dtype: DType::F32, dims, bytes: bytemuck::cast_slice_mut(&mut y) }];
        f(&ins, &mut outs).unwrap();
        y
    }

    #[test]
    fn layer_norm_over_a_middle_axis_equals_the_last_axis_of_the_transpose() {
        // x [2, 3, 2] normalized over axis 1; the transpose [2, 2, 3] over axis 2.
        let x: Vec<f32> = (0..12).map(|i| ((i * 7) % 5) as f32 - 1.5 + i as f32 * 0.1).collect();
        let gamma = [1.0, 2.0, -0.5];
        let beta = [0.0, 0.5, 1.0];
        let mid = run(|i, o| layer_norm(&LayerNorm { axis: 1, eps: 1e-5 }, i, o), &x, &[2, 3, 2], &[&gamma, &beta]);
        let t: Vec<f32> = (0..12).map(|k| { let (b, w, c) = (k / 6, (k / 3) % 2, k % 3); x[b * 6 + c * 2 + w] }).collect();
        let last = run(|i, o| layer_norm(&LayerNorm { axis: -1, eps: 1e-5 }, i, o), &t, &[2, 2, 3], &[&gamma, &beta]);
        for (k, y) in last.iter().enumerate() {
            let (b, w, c) = (k / 6, (k / 3) % 2, k % 3);
            assert!((y - mid[b * 6 + c * 2 + w]).abs() < 1e-6);
        }
    }

    #[test]
    fn group_norm_with_one_channel_per_group_is_instance_norm() {
        let x = [1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0];
        let y = run(|i, o| group_norm(&GroupNorm { num_groups: 2, eps: 0.0 }, i, o), &x, &[1, 2, 3], &[&[1.0, 1.0], &[0.0, 0.0]]);
        let s = (1.5f32).sqrt();
        for (got, want) in y.iter().zip([-s, 0.0, s, -s, 0.0, s]) {
            assert!((got - want).abs() < 1e-6, "{y:?}");
        }
    }

    #[test]
    fn half_inputs_round_once() {
        let x: Vec<half::f16> = [1.0f32, -2.0, 3.0, 0.5].iter().map(|v| half::f16::from_f32(*v)).collect();
        let one: Vec<half::f16> = vec![half::f16::ONE; 4];
        let zero: Vec<half::f16> = vec![half::f16::ZERO; 4];
        let d = [4usize];
        let ins = [&x, &one, &zero].map(|v| In { dtype: DType::F16, dims: &d, bytes: bytemuck::cast_slice(v) });
        let mut y = vec![half::f16::ZERO; 4];
        let mut outs = [Out { dtype: DType::F16, dims: &d, bytes: bytemuck::cast_slice_mut(&mut y) }];
        rms_norm(&RmsNorm { axis: -1, eps: 0.0, flatten_leading: false }, &ins, &mut outs).unwrap();
        let r = (14.25f64 / 4.0).sqrt();
        for (got, v) in y.iter().zip([1.0, -2.0, 3.0, 0.5]) {
            assert_eq!(*got, half::f16::from_f64(v / r));
        }
    }
}
