//! Backward kernels of the norms (OPS.md §22 "Normalization"). Each recomputes the forward
//! statistics from `x`; with `x̂ = (x − μ)·r` and `g = ȳ·γ`, means over the normalized extent.
//! Same dtype contract as the forward kernels (F16/BF16 through F32, sums in f64).

use super::{axis_of, feature_sums, for_blocks, group_layout, moments, rms_scale, through_f32, vector, Lanes};
use crate::kernels::by_float;
use crate::kernels::real::{Real, Scalar};
use crate::view::{In, Out};
use rlx_ir::ops::norm::{
    BatchNormInferenceBackwardBeta, BatchNormInferenceBackwardGamma, BatchNormInferenceBackwardInput,
    GroupNormBackwardBeta, GroupNormBackwardGamma, GroupNormBackwardInput, LayerNormBackwardGamma,
    LayerNormBackwardInput, RmsNormBackwardBeta, RmsNormBackwardGamma, RmsNormBackwardInput,
};

/// Writes f64 sums into a `[n]` output of dtype `T`.
fn store<T: Real>(sums: &[f64], out: &mut Out) {
    out.get::<T>().iter_mut().zip(sums).for_each(|(o, s)| *o = T::of(*s));
}

/// `dx = r·(g − mean(g) − x̂·mean(g·x̂))` on one lane of `n` values at `stride`, `g_j = ȳ_j·γ(j)`.
fn layer_norm_dx<T: Real>(x: &[T], dy: &[T], dx: &mut [T], n: usize, stride: usize, eps: f64, gamma: impl Fn(usize) -> f64) {
    let (mean, r) = moments(x, n, stride, eps);
    let (mut mg, mut mgx) = (0f64, 0f64);
    for j in 0..n {
        let at = j * stride;
        let g = dy[at].f64() * gamma(j);
        mg += g;
        mgx += g * (x[at].f64() - mean) * r;
    }
    mg /= n as f64;
    mgx /= n as f64;
    for j in 0..n {
        let at = j * stride;
        let xh = (x[at].f64() - mean) * r;
        dx[at] = T::of(r * (dy[at].f64() * gamma(j) - mg - xh * mgx));
    }
}

/// `LayerNormBackwardInput(x, γ, ȳ)`: the input gradient over `axis`.
pub fn layer_norm_backward_input(a: &LayerNormBackwardInput, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let gamma = vector::<T>(ins[1]);
            let dy = ins[2].get::<T>();
            let (n, inner, block) = (lanes.n, lanes.inner, lanes.block());
            for_blocks(ins[0].get::<T>(), outs[0].get::<T>(), block, |o, xb, ob| {
                let db = &dy[o * block..(o + 1) * block];
                for i in 0..inner {
                    layer_norm_dx(&xb[i..], &db[i..], &mut ob[i..], n, inner, eps, |j| gamma[j]);
                }
            })
        })
    })
}

/// `LayerNormBackwardGamma(x, ȳ)`: `Σ_lanes ȳ·x̂`, shape `[D]`.
pub fn layer_norm_backward_gamma(a: &LayerNormBackwardGamma, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let (x, dy) = (ins[0].get::<T>(), ins[1].get::<T>());
            let (n, inner, block) = (lanes.n, lanes.inner, lanes.block());
            let sums = feature_sums(lanes.outer, n, x.len(), |o, acc| {
                let (xb, db) = (&x[o * block..(o + 1) * block], &dy[o * block..(o + 1) * block]);
                for i in 0..inner {
                    let (mean, r) = moments(&xb[i..], n, inner, eps);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let at = j * inner + i;
                        *acc += db[at].f64() * (xb[at].f64() - mean) * r;
                    }
                }
            });
            store::<T>(&sums, &mut outs[0])
        })
    })
}

/// `RmsNormBackwardInput(x, γ, β, ȳ)`: `dx = r·g − x·r³·mean(g·x)`, `r = 1/√(mean(x²) + eps)`.
pub fn rms_norm_backward_input(a: &RmsNormBackwardInput, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let gamma = vector::<T>(ins[1]);
            let dy = ins[3].get::<T>();
            let (n, inner, block) = (lanes.n, lanes.inner, lanes.block());
            for_blocks(ins[0].get::<T>(), outs[0].get::<T>(), block, |o, xb, ob| {
                let db = &dy[o * block..(o + 1) * block];
                for i in 0..inner {
                    let r = rms_scale(&xb[i..], n, inner, eps);
                    let mgx = gamma.iter().enumerate().map(|(j, g)| { let at = j * inner + i; db[at].f64() * g * xb[at].f64() }).sum::<f64>() / n as f64;
                    for (j, g) in gamma.iter().enumerate() {
                        let at = j * inner + i;
                        ob[at] = T::of(r * db[at].f64() * g - xb[at].f64() * r * r * r * mgx);
                    }
                }
            })
        })
    })
}

/// Per-feature sums over the lanes of `x`/`ȳ` of `f(x, ȳ, r)`, `r` the lane's RMS scale.
fn rms_sums<T: Real>(x: &[T], dy: &[T], lanes: Lanes, eps: f64, f: impl Fn(f64, f64, f64) -> f64 + Sync) -> Vec<f64> {
    let (n, inner, block) = (lanes.n, lanes.inner, lanes.block());
    feature_sums(lanes.outer, n, x.len(), |o, acc| {
        let (xb, db) = (&x[o * block..(o + 1) * block], &dy[o * block..(o + 1) * block]);
        for i in 0..inner {
            let r = rms_scale(&xb[i..], n, inner, eps);
            for (j, acc) in acc.iter_mut().enumerate() {
                let at = j * inner + i;
                *acc += f(xb[at].f64(), db[at].f64(), r);
            }
        }
    })
}

/// `RmsNormBackwardGamma(x, γ, β, ȳ)`: `Σ_lanes ȳ·x·r`, shape `[D]`.
pub fn rms_norm_backward_gamma(a: &RmsNormBackwardGamma, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let sums = rms_sums(ins[0].get::<T>(), ins[3].get::<T>(), lanes, a.eps as f64, |x, dy, r| dy * x * r);
            store::<T>(&sums, &mut outs[0])
        })
    })
}

/// Per-feature `Σ ȳ` over the lanes of `ȳ` around `axis` (the β gradients).
fn sum_lanes(dy: In, axis: usize, outs: &mut [Out]) -> Result<(), String> {
    through_f32(&[dy], outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let d = ins[0].get::<T>();
            let (n, inner, block) = (lanes.n, lanes.inner, lanes.block());
            let sums = feature_sums(lanes.outer, n, d.len(), |o, acc| {
                for (k, v) in d[o * block..(o + 1) * block].iter().enumerate() {
                    acc[k / inner] += v.f64();
                }
            });
            store::<T>(&sums, &mut outs[0])
        })
    })
}

/// `RmsNormBackwardBeta(x, γ, β, ȳ)`: `Σ_lanes ȳ`, shape `[D]`.
pub fn rms_norm_backward_beta(a: &RmsNormBackwardBeta, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    sum_lanes(ins[3], axis_of(a.axis, ins[0].dims)?, outs)
}

/// `GroupNormBackwardInput(x, γ, β, ȳ)`: the LayerNorm input gradient per `(n, group)`
/// block with `g = ȳ·γ[c]`.
pub fn group_norm_backward_input(a: &GroupNormBackwardInput, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let (g, cg, sp) = group_layout(a.num_groups, ins[0].dims);
        by_float!(ins[0].dtype, T => {
            let gamma = vector::<T>(ins[1]);
            let dy = ins[3].get::<T>();
            let n = cg * sp;
            for_blocks(ins[0].get::<T>(), outs[0].get::<T>(), n, |o, xb, ob| {
                let c0 = (o % g) * cg;
                layer_norm_dx(xb, &dy[o * n..(o + 1) * n], ob, n, 1, eps, |j| gamma[c0 + j / sp]);
            })
        })
    })
}

/// `GroupNormBackwardGamma(x, ȳ)`: `Σ_{n, spatial} ȳ·x̂` per channel, shape `[C]`.
pub fn group_norm_backward_gamma(a: &GroupNormBackwardGamma, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let (g, cg, sp) = group_layout(a.num_groups, ins[0].dims);
        by_float!(ins[0].dtype, T => {
            let (x, dy) = (ins[0].get::<T>(), ins[1].get::<T>());
            let n = cg * sp;
            let sums = feature_sums(ins[0].dims[0] * g, g * cg, x.len(), |o, acc| {
                let (xb, db) = (&x[o * n..(o + 1) * n], &dy[o * n..(o + 1) * n]);
                let (mean, r) = moments(xb, n, 1, eps);
                let c0 = (o % g) * cg;
                for (j, (xv, d)) in xb.iter().zip(db).enumerate() {
                    acc[c0 + j / sp] += d.f64() * (xv.f64() - mean) * r;
                }
            });
            store::<T>(&sums, &mut outs[0])
        })
    })
}

/// `GroupNormBackwardBeta(x, ȳ)`: `Σ_{n, spatial} ȳ` per channel, shape `[C]`.
pub fn group_norm_backward_beta(_: &GroupNormBackwardBeta, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    sum_lanes(ins[1], 1, outs)
}

/// `BatchNormInferenceBackwardInput(x, γ, mean, var, ȳ)`: `ȳ·γ/√(var + eps)` per channel.
pub fn batch_norm_inference_backward_input(a: &BatchNormInferenceBackwardInput, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let (gamma, var) = (vector::<T>(ins[1]), vector::<T>(ins[3]));
            let scale: Vec<f64> = gamma.iter().zip(&var).map(|(g, v)| g / (v + eps).sqrt()).collect();
            let inner = lanes.inner;
            for_blocks(ins[4].get::<T>(), outs[0].get::<T>(), lanes.block(), |_, db, ob| {
                for (at, (o, d)) in ob.iter_mut().zip(db).enumerate() {
                    *o = T::of(d.f64() * scale[at / inner]);
                }
            })
        })
    })
}

/// `BatchNormInferenceBackwardGamma(x, mean, var, ȳ)`: `Σ ȳ·(x − mean)/√(var + eps)` over
/// every axis but `axis`.
pub fn batch_norm_inference_backward_gamma(a: &BatchNormInferenceBackwardGamma, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let axis = axis_of(a.axis, ins[0].dims)?;
    let eps = a.eps as f64;
    through_f32(ins, outs, |ins, outs| {
        let lanes = Lanes::around(ins[0].dims, axis);
        by_float!(ins[0].dtype, T => {
            let (mean, var) = (vector::<T>(ins[1]), vector::<T>(ins[2]));
            let r: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
            let (x, dy) = (ins[0].get::<T>(), ins[3].get::<T>());
            let (inner, block) = (lanes.inner, lanes.block());
            let sums = feature_sums(lanes.outer, lanes.n, x.len(), |o, acc| {
                let (xb, db) = (&x[o * block..(o + 1) * block], &dy[o * block..(o + 1) * block]);
                for (at, (xv, d)) in xb.iter().zip(db).enumerate() {
                    let c = at / inner;
                    acc[c] += d.f64() * (xv.f64() - mean[c]) * r[c];
                }
            });
            store::<T>(&sums, &mut outs[0])
        })
    })
}

/// `BatchNormInferenceBackwardBeta(ȳ)`: `Σ ȳ` over every axis but `axis`.
pub fn batch_norm_inference_backward_beta(a: &BatchNormInferenceBackwardBeta, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    sum_lanes(ins[0], axis_of(a.axis, ins[0].dims)?, outs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    /// Central finite differences of `Σ w·LayerNorm(x)` against the input-gradient kernel.
    #[test]
    fn layer_norm_input_gradient_matches_finite_differences() {
        let dims = [2usize, 5];
        let x: Vec<f64> = vec![0.3, -1.2, 2.0, 0.7, -0.4, 1.1, 1.5, -0.2, 0.9, -2.2];
        let gamma: Vec<f64> = vec![1.0, -0.5, 2.0, 0.25, 1.5];
        let dy: Vec<f64> = vec![0.5, 1.0, -1.0, 2.0, 0.3, -0.7, 0.2, 1.1, -0.4, 0.6];
        let eps = 1e-5;
        let f = |x: &[f64]| -> f64 {
            x.chunks(5).zip(dy.chunks(5)).map(|(row, d)| {
                let m = row.iter().sum::<f64>() / 5.0;
                let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / 5.0;
                row.iter().zip(d).zip(&gamma).map(|((a, d), g)| (a - m) / (v + eps).sqrt() * g * d).sum::<f64>()
            }).sum()
        };
        let d5 = [5usize];
        let ins = [
            In { dtype: DType::F64, dims: &dims, bytes: bytemuck::cast_slice(&x) },
            In { dtype: DType::F64, dims: &d5, bytes: bytemuck::cast_slice(&gamma) },
            In { dtype: DType::F64, dims: &dims, bytes: bytemuck::cast_slice(&dy) },
        ];
        let mut dx = vec![0f64; 10];
        let mut outs = [Out { dtype: DType::F64, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut dx) }];
        layer_norm_backward_input(&LayerNormBackwardInput { axis: -1, eps: eps as f32 }, &ins, &mut outs).unwrap();
        for k in 0..10 {
            let (mut p, mut m) = (x.clone(), x.clone());
            p[k] += 1e-6;
            m[k] -= 1e-6;
            let fd = (f(&p) - f(&m)) / 2e-6;
            assert!((fd - dx[k]).abs() < 1e-6, "{k}: {fd} vs {}", dx[k]);
        }
    }

    #[test]
    fn gamma_sums_over_many_threads_match_a_serial_sum() {
        let (rows, d) = (300usize, 130usize);
        let x: Vec<f32> = (0..rows * d).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let dy: Vec<f32> = (0..rows * d).map(|i| ((i * 53 % 97) as f32 - 48.0) / 30.0).collect();
        let dims = [rows, d];
        let ins = [&x, &dy].map(|v| In { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice(v) });
        let mut dg = vec![0f32; d];
        let dd = [d];
        let mut outs = [Out { dtype: DType::F32, dims: &dd, bytes: bytemuck::cast_slice_mut(&mut dg) }];
        layer_norm_backward_gamma(&LayerNormBackwardGamma { axis: -1, eps: 1e-5 }, &ins, &mut outs).unwrap();
        let mut want = vec![0f64; d];
        for (xr, dr) in x.chunks(d).zip(dy.chunks(d)) {
            let m = xr.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = xr.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / d as f64;
            let r = 1.0 / (var + 1e-5f32 as f64).sqrt();
            for j in 0..d {
                want[j] += dr[j] as f64 * (xr[j] as f64 - m) * r;
            }
        }
        for (g, w) in dg.iter().zip(&want) {
            assert!((*g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}
