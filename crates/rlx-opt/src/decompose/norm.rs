//! Decompositions of the norm family (OPS.md §6 and the norm backward ops of §22) into
//! `Reduce`, `Binary`, `Activation`, `Reshape`, `Transpose` and `Cast`.
//!
//! F16/BF16 operands are cast to F32 first and the results cast back, so the statistics are
//! F32 as OPS.md requires (a `Reduce` keeps its input dtype). Per-feature vectors `[D]` are
//! reshaped to `[D, 1, …]` to broadcast along their axis.

use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::norm::*;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{norm_axis, DType, Dim, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::LayerNorm,
    OpKind::LayerNorm2d,
    OpKind::GroupNorm,
    OpKind::RmsNorm,
    OpKind::BatchNormInference,
    OpKind::LayerNormBackwardInput,
    OpKind::LayerNormBackwardGamma,
    OpKind::RmsNormBackwardInput,
    OpKind::RmsNormBackwardGamma,
    OpKind::RmsNormBackwardBeta,
    OpKind::GroupNormBackwardInput,
    OpKind::GroupNormBackwardGamma,
    OpKind::GroupNormBackwardBeta,
    OpKind::BatchNormInferenceBackwardInput,
    OpKind::BatchNormInferenceBackwardGamma,
    OpKind::BatchNormInferenceBackwardBeta,
];

type R<T = ValueId> = Result<T, IrError>;

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<R<Vec<ValueId>>> {
    let out = match op {
        Op::LayerNorm(a) => in_f32(g, x, |g, x| layer_norm(g, x, a.axis, a.eps)),
        Op::LayerNorm2d(a) => layer_norm_2d(g, x, a.eps),
        Op::GroupNorm(a) => in_f32(g, x, |g, x| group_norm(g, x, a.num_groups, a.eps)),
        Op::RmsNorm(a) => in_f32(g, x, |g, x| rms_norm(g, x, a)),
        Op::BatchNormInference(a) => in_f32(g, x, |g, x| batch_norm(g, x, a.axis, a.eps)),
        Op::LayerNormBackwardInput(a) => in_f32(g, x, |g, x| layer_norm_dx(g, x, a.axis, a.eps)),
        Op::LayerNormBackwardGamma(a) => in_f32(g, x, |g, x| layer_norm_dgamma(g, x, a.axis, a.eps)),
        Op::RmsNormBackwardInput(a) => in_f32(g, x, |g, x| rms_norm_dx(g, x, a.axis, a.eps)),
        Op::RmsNormBackwardGamma(a) => in_f32(g, x, |g, x| rms_norm_dgamma(g, x, a.axis, a.eps)),
        Op::RmsNormBackwardBeta(a) => in_f32(g, x, |g, x| sum_but(g, x[3], axis(g, x[0], a.axis)?)),
        Op::GroupNormBackwardInput(a) => in_f32(g, x, |g, x| group_norm_dx(g, x, a.num_groups, a.eps)),
        Op::GroupNormBackwardGamma(a) => in_f32(g, x, |g, x| group_norm_dgamma(g, x, a.num_groups, a.eps)),
        Op::GroupNormBackwardBeta(_) => in_f32(g, x, |g, x| sum_but(g, x[1], 1)),
        Op::BatchNormInferenceBackwardInput(a) => in_f32(g, x, |g, x| batch_norm_dx(g, x, a.axis, a.eps)),
        Op::BatchNormInferenceBackwardGamma(a) => in_f32(g, x, |g, x| batch_norm_dgamma(g, x, a.axis, a.eps)),
        Op::BatchNormInferenceBackwardBeta(a) => in_f32(g, x, |g, x| sum_but(g, x[0], axis(g, x[0], a.axis)?)),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// A rank-0 constant `v` of the float dtype `dtype` (F32 or F64).
pub(super) fn scalar(g: &mut Graph, dtype: DType, v: f64) -> R {
    let data = match dtype {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F64 => v.to_le_bytes().to_vec(),
        d => return Err(IrError::Invalid(format!("no {d} scalar constant in a decomposition (half floats are widened first)"))),
    };
    g.constant(TensorType::of(dtype, &[]), data)
}

fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// Runs the decomposition `f` with every F16/BF16 operand cast to F32 and casts its result
/// back to the dtype of `x[0]`.
pub(super) fn in_f32(g: &mut Graph, x: &[ValueId], f: impl FnOnce(&mut Graph, &[ValueId]) -> R) -> R {
    let dtype = g.ty(x[0]).dtype;
    let wide: Vec<ValueId> = x
        .iter()
        .map(|&v| if is_half(g.ty(v).dtype) { g.cast(v, DType::F32) } else { Ok(v) })
        .collect::<R<_>>()?;
    let y = f(g, &wide)?;
    if g.ty(y).dtype != dtype {
        g.cast(y, dtype)
    } else {
        Ok(y)
    }
}

/// The normalized feature axis of `x`.
fn axis(g: &Graph, x: ValueId, axis: i32) -> R<usize> {
    norm_axis(axis as i64, g.ty(x).rank()).map_err(IrError::Invalid)
}

/// A `[D]` vector reshaped to `[D, 1, …]` so that it broadcasts along `axis` of a rank-`rank`
/// tensor (unchanged for the last axis).
fn along(g: &mut Graph, v: ValueId, axis: usize, rank: usize) -> R {
    if axis + 1 == rank {
        return Ok(v);
    }
    let mut dims = vec![g.ty(v).shape.dim(0).clone()];
    dims.extend(std::iter::repeat_n(Dim::Static(1), rank - 1 - axis));
    g.reshape_to(v, &Shape(dims))
}

fn bin(g: &mut Graph, op: BinaryOp, a: ValueId, b: ValueId) -> R {
    g.binary(op, a, b)
}

fn mean(g: &mut Graph, x: ValueId, axes: &[usize]) -> R {
    g.reduce(ReduceOp::Mean, x, axes, true)
}

/// `1/√(v + eps)`.
fn rsqrt_eps(g: &mut Graph, v: ValueId, eps: f32) -> R {
    let e = scalar(g, g.ty(v).dtype, eps as f64)?;
    let ve = bin(g, BinaryOp::Add, v, e)?;
    g.activation(ActivationKind::Rsqrt, ve)
}

/// `(x̂, r)` of `x` over `axes` (kept): `x̂ = (x − mean)·r`, `r = 1/√(var + eps)`.
fn standardize(g: &mut Graph, x: ValueId, axes: &[usize], eps: f32) -> R<(ValueId, ValueId)> {
    let m = mean(g, x, axes)?;
    let xc = bin(g, BinaryOp::Sub, x, m)?;
    let sq = bin(g, BinaryOp::Mul, xc, xc)?;
    let var = mean(g, sq, axes)?;
    let r = rsqrt_eps(g, var, eps)?;
    Ok((bin(g, BinaryOp::Mul, xc, r)?, r))
}

/// `x̂·γ + β` with `γ`, `β` broadcast along `axis`.
fn affine(g: &mut Graph, xh: ValueId, gamma: ValueId, beta: ValueId, axis: usize) -> R {
    let rank = g.ty(xh).rank();
    let ga = along(g, gamma, axis, rank)?;
    let ba = along(g, beta, axis, rank)?;
    let y = bin(g, BinaryOp::Mul, xh, ga)?;
    bin(g, BinaryOp::Add, y, ba)
}

/// `Σ` of `x` over every axis but `keep`, giving `[dim(keep)]`.
fn sum_but(g: &mut Graph, x: ValueId, keep: usize) -> R {
    let axes: Vec<usize> = (0..g.ty(x).rank()).filter(|&a| a != keep).collect();
    if axes.is_empty() {
        return Ok(x);
    }
    g.reduce(ReduceOp::Sum, x, &axes, false)
}

/// `(x, γ, β)` → `x̂·γ + β` over `axis`.
fn layer_norm(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let (xh, _) = standardize(g, x[0], &[a], eps)?;
    affine(g, xh, x[1], x[2], a)
}

/// `Transpose(0,2,3,1)` → `LayerNorm(axis −1)` → `Transpose(0,3,1,2)`.
fn layer_norm_2d(g: &mut Graph, x: &[ValueId], eps: f32) -> R {
    let nhwc = g.transpose(x[0], &[0, 2, 3, 1])?;
    let y = g.layer_norm(nhwc, x[1], x[2], -1, eps)?;
    g.transpose(y, &[0, 3, 1, 2])
}

/// `x [N, C, sp..]` as `[N, G, C/G, sp..]`, and the axes `2..` that hold one group.
fn grouped(g: &mut Graph, x: ValueId, groups: usize) -> R<(ValueId, Vec<usize>)> {
    let dims = g.ty(x).shape.dims().to_vec();
    let c = dims[1].as_static().ok_or_else(|| IrError::Invalid("GroupNorm needs a static channel count".into()))?;
    let mut gd = vec![dims[0].clone(), Dim::Static(groups), Dim::Static(c / groups)];
    gd.extend(dims[2..].iter().cloned());
    let axes = (2..gd.len()).collect();
    Ok((g.reshape_to(x, &Shape(gd))?, axes))
}

/// `x̂` of GroupNorm, shaped like `x`.
fn group_xhat(g: &mut Graph, x: ValueId, groups: usize, eps: f32) -> R {
    let shape = g.ty(x).shape.clone();
    let (xg, axes) = grouped(g, x, groups)?;
    let (xh, _) = standardize(g, xg, &axes, eps)?;
    g.reshape_to(xh, &shape)
}

/// `(x, γ, β)` → per-group standardization, per-channel affine.
fn group_norm(g: &mut Graph, x: &[ValueId], groups: usize, eps: f32) -> R {
    let xh = group_xhat(g, x[0], groups, eps)?;
    affine(g, xh, x[1], x[2], 1)
}

/// `1/√(mean(x²) + eps)` over `axis` (kept).
fn rms_scale(g: &mut Graph, x: ValueId, a: usize, eps: f32) -> R {
    let sq = bin(g, BinaryOp::Mul, x, x)?;
    let ms = mean(g, sq, &[a])?;
    rsqrt_eps(g, ms, eps)
}

/// `(x, γ, β)` → `x·r·γ + β`, reshaped to `[∏ leading, D]` when `flatten_leading`.
fn rms_norm(g: &mut Graph, x: &[ValueId], attrs: &RmsNorm) -> R {
    let a = axis(g, x[0], attrs.axis)?;
    let r = rms_scale(g, x[0], a, attrs.eps)?;
    let xr = bin(g, BinaryOp::Mul, x[0], r)?;
    let y = affine(g, xr, x[1], x[2], a)?;
    if !attrs.flatten_leading {
        return Ok(y);
    }
    let out = g.infer(&Op::RmsNorm(attrs.clone()), x)?.remove(0);
    g.reshape_to(y, &out.shape)
}

/// `(x, γ, β, mean, var)` → `(x − mean)·γ/√(var + eps) + β` along `axis`.
fn batch_norm(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let rank = g.ty(x[0]).rank();
    let r = rsqrt_eps(g, x[4], eps)?;
    let scale = bin(g, BinaryOp::Mul, x[1], r)?;
    let m = along(g, x[3], a, rank)?;
    let xc = bin(g, BinaryOp::Sub, x[0], m)?;
    affine(g, xc, scale, x[2], a)
}

/// `r·(gy − mean(gy) − x̂·mean(gy·x̂))` over `axes` (the LayerNorm input gradient).
fn standardized_dx(g: &mut Graph, xh: ValueId, r: ValueId, gy: ValueId, axes: &[usize]) -> R {
    let mg = mean(g, gy, axes)?;
    let gx = bin(g, BinaryOp::Mul, gy, xh)?;
    let mgx = mean(g, gx, axes)?;
    let t = bin(g, BinaryOp::Mul, xh, mgx)?;
    let d = bin(g, BinaryOp::Sub, gy, mg)?;
    let d = bin(g, BinaryOp::Sub, d, t)?;
    bin(g, BinaryOp::Mul, r, d)
}

/// `(x, γ, ȳ)` → the LayerNorm input gradient.
fn layer_norm_dx(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let rank = g.ty(x[0]).rank();
    let (xh, r) = standardize(g, x[0], &[a], eps)?;
    let ga = along(g, x[1], a, rank)?;
    let gy = bin(g, BinaryOp::Mul, x[2], ga)?;
    standardized_dx(g, xh, r, gy, &[a])
}

/// `(x, ȳ)` → `Σ_leading ȳ·x̂`.
fn layer_norm_dgamma(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let (xh, _) = standardize(g, x[0], &[a], eps)?;
    let p = bin(g, BinaryOp::Mul, x[1], xh)?;
    sum_but(g, p, a)
}

/// `(x, γ, β, ȳ)` → `r·g − x·r³·mean(g·x)`, `g = ȳ·γ`.
fn rms_norm_dx(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let rank = g.ty(x[0]).rank();
    let r = rms_scale(g, x[0], a, eps)?;
    let ga = along(g, x[1], a, rank)?;
    let gy = bin(g, BinaryOp::Mul, x[3], ga)?;
    let gx = bin(g, BinaryOp::Mul, gy, x[0])?;
    let mgx = mean(g, gx, &[a])?;
    let r2 = bin(g, BinaryOp::Mul, r, r)?;
    let r3 = bin(g, BinaryOp::Mul, r2, r)?;
    let t = bin(g, BinaryOp::Mul, x[0], r3)?;
    let t = bin(g, BinaryOp::Mul, t, mgx)?;
    let rg = bin(g, BinaryOp::Mul, r, gy)?;
    bin(g, BinaryOp::Sub, rg, t)
}

/// `(x, γ, β, ȳ)` → `Σ_leading ȳ·x·r`.
fn rms_norm_dgamma(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let r = rms_scale(g, x[0], a, eps)?;
    let xr = bin(g, BinaryOp::Mul, x[0], r)?;
    let p = bin(g, BinaryOp::Mul, x[3], xr)?;
    sum_but(g, p, a)
}

/// `(x, γ, β, ȳ)` → the LayerNorm input gradient per `(n, group)` with `g = ȳ·γ[c]`.
fn group_norm_dx(g: &mut Graph, x: &[ValueId], groups: usize, eps: f32) -> R {
    let shape = g.ty(x[0]).shape.clone();
    let rank = shape.rank();
    let ga = along(g, x[1], 1, rank)?;
    let gy = bin(g, BinaryOp::Mul, x[3], ga)?;
    let (xg, axes) = grouped(g, x[0], groups)?;
    let (gyg, _) = grouped(g, gy, groups)?;
    let (xh, r) = standardize(g, xg, &axes, eps)?;
    let dx = standardized_dx(g, xh, r, gyg, &axes)?;
    g.reshape_to(dx, &shape)
}

/// `(x, ȳ)` → `Σ_{n, spatial} ȳ·x̂` per channel.
fn group_norm_dgamma(g: &mut Graph, x: &[ValueId], groups: usize, eps: f32) -> R {
    let xh = group_xhat(g, x[0], groups, eps)?;
    let p = bin(g, BinaryOp::Mul, x[1], xh)?;
    sum_but(g, p, 1)
}

/// `(x, γ, mean, var, ȳ)` → `ȳ·γ/√(var + eps)` along `axis`.
fn batch_norm_dx(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let rank = g.ty(x[0]).rank();
    let r = rsqrt_eps(g, x[3], eps)?;
    let scale = bin(g, BinaryOp::Mul, x[1], r)?;
    let s = along(g, scale, a, rank)?;
    bin(g, BinaryOp::Mul, x[4], s)
}

/// `(x, mean, var, ȳ)` → `Σ ȳ·(x − mean)/√(var + eps)` over every axis but `axis`.
fn batch_norm_dgamma(g: &mut Graph, x: &[ValueId], ax: i32, eps: f32) -> R {
    let a = axis(g, x[0], ax)?;
    let rank = g.ty(x[0]).rank();
    let r = rsqrt_eps(g, x[2], eps)?;
    let m = along(g, x[1], a, rank)?;
    let r = along(g, r, a, rank)?;
    let xc = bin(g, BinaryOp::Sub, x[0], m)?;
    let xh = bin(g, BinaryOp::Mul, xc, r)?;
    let p = bin(g, BinaryOp::Mul, x[3], xh)?;
    sum_but(g, p, a)
}

#[cfg(test)]
mod tests {
    use crate::decompose::PRIMITIVES;
    use rlx_ir::text::parse;

    /// Legalizes `src` for a backend of primitives only and checks that `gone` disappeared.
    fn lowers(src: &str, gone: &str) -> String {
        let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let (out, _) = crate::legalize(&g, "test", PRIMITIVES).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&out).unwrap();
        let text = out.to_string();
        assert!(!text.contains(&format!("{gone}(")), "{gone} survived:\n{text}");
        text
    }

    const X: &str = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",6,4,5]))()\n";

    #[test]
    fn layer_norms_lower_to_reductions() {
        let src = format!("{X}%1 = Param(name:\"g\",ty:(dtype:F32,shape:[5]))()\n%2 = LayerNorm(axis:-1,eps:1e-5)(%0, %1, %1)\nreturn %2\n");
        let text = lowers(&src, "LayerNorm");
        assert!(text.contains("Reduce(op:Mean,axes:[3],keep_dim:true)") && text.contains("Activation(kind:Rsqrt)"), "{text}");
        let src = format!("{X}%1 = Param(name:\"g\",ty:(dtype:F32,shape:[4]))()\n%2 = LayerNorm(axis:2,eps:1e-5)(%0, %1, %1)\nreturn %2\n");
        assert!(lowers(&src, "LayerNorm").contains("Reshape(new_shape:[4,1])"));
        let src = format!("{X}%1 = Param(name:\"g\",ty:(dtype:F32,shape:[6]))()\n%2 = LayerNorm2d(eps:1e-6)(%0, %1, %1)\nreturn %2\n");
        let text = lowers(&src, "LayerNorm2d");
        assert!(text.contains("Transpose(perm:[0,2,3,1])") && !text.contains("LayerNorm("), "{text}");
    }

    #[test]
    fn group_norm_reduces_each_group_and_keeps_symbolic_dims() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:BF16,shape:[\"N\",6,\"H\",5]))()\n\
                   %1 = Param(name:\"g\",ty:(dtype:BF16,shape:[6]))()\n\
                   %2 = GroupNorm(num_groups:3,eps:1e-5)(%0, %1, %1)\nreturn %2\n";
        let text = lowers(src, "GroupNorm");
        assert!(text.contains("Reshape(new_shape:[\"N\",3,2,\"H\",5])"), "{text}");
        assert!(text.contains("Reduce(op:Mean,axes:[2,3,4],keep_dim:true)"), "{text}");
        assert!(text.contains("Cast(to:F32)") && text.contains("Cast(to:BF16)"), "{text}");
    }

    #[test]
    fn rms_and_batch_norms_lower() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,3,8]))()\n\
                   %1 = Param(name:\"g\",ty:(dtype:F32,shape:[8]))()\n\
                   %2 = RmsNorm(axis:-1,eps:1e-6,flatten_leading:true)(%0, %1, %1)\nreturn %2\n";
        assert!(lowers(src, "RmsNorm").contains("Reshape(new_shape:[6,8])"));
        let src = format!("{X}%1 = Param(name:\"v\",ty:(dtype:F32,shape:[6]))()\n%2 = BatchNormInference(eps:0.001,axis:1)(%0, %1, %1, %1, %1)\nreturn %2\n");
        lowers(&src, "BatchNormInference");
    }

    #[test]
    fn backward_ops_lower() {
        let v = |d: usize| format!("%1 = Param(name:\"v\",ty:(dtype:F32,shape:[{d}]))()\n%2 = Input(name:\"dy\",ty:(dtype:F32,shape:[\"B\",6,4,5]))()\n");
        let cases = [
            (5, "LayerNormBackwardInput(axis:-1,eps:1e-5)(%0, %1, %2)", "LayerNormBackwardInput"),
            (5, "LayerNormBackwardGamma(axis:-1,eps:1e-5)(%0, %2)", "LayerNormBackwardGamma"),
            (4, "RmsNormBackwardInput(axis:2,eps:1e-5)(%0, %1, %1, %2)", "RmsNormBackwardInput"),
            (4, "RmsNormBackwardGamma(axis:2,eps:1e-5)(%0, %1, %1, %2)", "RmsNormBackwardGamma"),
            (4, "RmsNormBackwardBeta(axis:2,eps:1e-5)(%0, %1, %1, %2)", "RmsNormBackwardBeta"),
            (6, "GroupNormBackwardInput(num_groups:2,eps:1e-5)(%0, %1, %1, %2)", "GroupNormBackwardInput"),
            (6, "GroupNormBackwardGamma(num_groups:2,eps:1e-5)(%0, %2)", "GroupNormBackwardGamma"),
            (6, "GroupNormBackwardBeta(num_groups:2,eps:1e-5)(%0, %2)", "GroupNormBackwardBeta"),
            (6, "BatchNormInferenceBackwardInput(eps:1e-3,axis:1)(%0, %1, %1, %1, %2)", "BatchNormInferenceBackwardInput"),
            (6, "BatchNormInferenceBackwardGamma(eps:1e-3,axis:1)(%0, %1, %1, %2)", "BatchNormInferenceBackwardGamma"),
            (6, "BatchNormInferenceBackwardBeta(axis:1)(%2)", "BatchNormInferenceBackwardBeta"),
        ];
        for (d, op, kind) in cases {
            lowers(&format!("{X}{}%3 = {op}\nreturn %3\n", v(d)), kind);
        }
    }
}
