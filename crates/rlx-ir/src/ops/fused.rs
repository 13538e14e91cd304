//! Fused ops (OPS.md §19, backward ops §22): patterns that optimization passes fold into one
//! node. Every one has a primitive decomposition, so emitting them is always safe.
//!
//! The per-element regions (`ElementwiseRegion`, `TransformRegion`, `BatchElementwiseRegion`)
//! live in `fused/region.rs`; the layer-level blocks (attention, transformer layer, conv epilogue)
//! in `fused/block.rs`; this file holds the small epilogue fusions and the shape checks they share.
//!
//! The fused ops check their operands with private rules of their own rather than by calling
//! the inference of the ops they fuse (`MatMul`, `LayerNorm`, `Conv`, `Attention`), so the
//! checks here are self-contained.

use super::elementwise::ActivationKind;
use super::{Arity, OpDef};
use crate::{broadcast, DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

mod block;
mod region;

pub use block::{FusedAttentionBlock, FusedConvBiasAct, FusedTransformerLayer};
pub use region::{
    chain_dtypes, BatchElementwiseRegion, ChainStep, ElementwiseRegion, Operand, RegionPrologue, TransformRegion,
    TransformStep, MAX_REGION_INPUTS,
};

/// `act(x·w + bias)`: a matmul with its bias add and optional activation folded in.
/// Inputs `(x [.., M, K], w [K, N], bias [N])`; output `[.., M, N]` in the dtype of `x`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedMatMulBiasAct {
    pub activation: Option<ActivationKind>,
}

/// `silu(gate)·up` over the two halves of `x [.., 2N]` (a concatenated gate/up projection);
/// `up` is the first half unless `gate_first`. Output `[.., N]`, cast to `cast_to` if set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedSwiGLU {
    pub cast_to: Option<DType>,
    pub gate_first: bool,
}

/// `LayerNorm(x + residual [+ bias])` over the last axis with `γ, β`.
/// Inputs `(x, residual, gamma, beta)`, or `(x, residual, bias, gamma, beta)` with `has_bias`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedResidualLN {
    pub has_bias: bool,
    pub eps: f32,
}

/// `RmsNorm(x + residual [+ bias])` over the last axis with `γ, β`; inputs as
/// [`FusedResidualLN`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedResidualRmsNorm {
    pub has_bias: bool,
    pub eps: f32,
}

/// The normalization inside [`AdaLayerNorm`], applied without an affine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AdaNormKind {
    /// Mean-subtracted (`LayerNorm(elementwise_affine=False)`).
    LayerNorm,
    /// Plain RMS scaling, no mean subtraction.
    RmsNorm,
}

/// DiT adaLN-Zero modulation `norm(x)·(1 + scale) + shift` over the last axis.
/// Inputs `(x [.., D], scale, shift)`; `scale`/`shift` share a shape that broadcasts to `x`
/// with last dim `D` (e.g. `[B, 1, D]` over `[B, S, D]`), so no `Expand` is materialized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaLayerNorm {
    pub norm: AdaNormKind,
    pub eps: f32,
}

/// `x + gate·y`, the DiT post-attention / post-MLP join. Inputs `(x [.., D], y, gate)`:
/// `y` has the type of `x`, `gate` broadcasts to it with last dim `D`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GatedResidual {}

/// Gradient of [`AdaLayerNorm`]: inputs `(x, scale, shift, ȳ)`, outputs `(dx, dscale, dshift)`
/// (the multi-output form of OPS.md's packed `dx ∥ dscale ∥ dshift`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaLayerNormBackward {
    pub norm: AdaNormKind,
    pub eps: f32,
}

/// Gradient of [`GatedResidual`]: inputs `(x, y, gate, ȳ)`, outputs `(dx, dy, dgate)`
/// (the multi-output form of OPS.md's packed `dx ∥ dy ∥ dgate`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GatedResidualBackward {}

/// True when two dims may be the same size: equal extents, or a symbol on either side (bound
/// at run time; `broadcast` gives symbols the same benefit of the doubt).
fn dims_agree(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Static(x), Dim::Static(y)) => x == y,
        _ => true,
    }
}

/// True when `t` has rank `want.len()` and every dim agrees with `want`.
fn shape_agrees(t: &TensorType, want: &[Dim]) -> bool {
    t.rank() == want.len() && t.shape.dims().iter().zip(want).all(|(a, b)| dims_agree(a, b))
}

/// Checks `t` against the expected dims, naming the operand and the rule (`formula`).
fn expect_dims(what: &str, t: &TensorType, formula: &str, want: &[Dim]) -> Result<(), String> {
    if shape_agrees(t, want) {
        Ok(())
    } else {
        Err(format!("{what} {t} must be {formula} = {}", Shape(want.to_vec())))
    }
}

/// The shared float dtype of the named operands (the first sets it).
fn same_float(operands: &[(&str, &TensorType)]) -> Result<DType, String> {
    let (first, t0) = operands[0];
    if !t0.dtype.is_float() {
        return Err(format!("{first} {t0} must be a float tensor"));
    }
    match operands[1..].iter().find(|(_, t)| t.dtype != t0.dtype) {
        Some((name, t)) => Err(format!("{name} {t} must have the dtype of {first} ({})", t0.dtype)),
        None => Ok(t0.dtype),
    }
}

/// The last (feature) dim of `t`, which must have one.
fn last_dim<'a>(what: &str, t: &'a TensorType) -> Result<&'a Dim, String> {
    t.shape.dims().last().ok_or_else(|| format!("{what} {t} needs a feature axis"))
}

/// `eps` must be a finite, non-negative number.
fn check_eps(eps: f32) -> Result<(), String> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(format!("eps must be finite and non-negative, got {eps}"))
    }
}

/// `[.., M, K] × [K, N] → [.., M, N]` with `w` a plain matrix (the fused matmuls' weights).
fn matmul_shape(x: &TensorType, w: &TensorType) -> Result<Shape, String> {
    if x.rank() < 2 || w.rank() != 2 {
        return Err(format!("matmul needs x [.., M, K] and w [K, N], got {x} and {w}"));
    }
    let xd = x.shape.dims();
    let wd = w.shape.dims();
    if !dims_agree(&xd[xd.len() - 1], &wd[0]) {
        return Err(format!("inner dims differ: {} x {}", x.shape, w.shape));
    }
    let mut out = xd.to_vec();
    *out.last_mut().expect("rank >= 2") = wd[1].clone();
    Ok(Shape(out))
}

/// Checks that `v` broadcasts to exactly `x`'s shape and ends in `x`'s feature dim (the
/// modulation / gate operands of the DiT ops).
fn check_modulation(what: &str, v: &TensorType, x: &TensorType) -> Result<(), String> {
    let d = last_dim("x", x)?;
    let fits = matches!(broadcast(&x.shape, &v.shape), Ok(s) if s == x.shape);
    let ends_in_d = v.shape.dims().last().is_some_and(|e| dims_agree(e, d));
    if fits && ends_in_d {
        Ok(())
    } else {
        Err(format!("{what} {v} must broadcast to x {x} and end in its feature dim {d}"))
    }
}

/// Checks `x, residual [, bias], gamma, beta` of the fused residual norms; returns `x`'s type.
fn residual_norm(has_bias: bool, eps: f32, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    check_eps(eps)?;
    let (x, residual) = (&inputs[0], &inputs[1]);
    let mut named = vec![("x", x), ("residual", residual)];
    if has_bias {
        named.push(("bias", &inputs[2]));
    }
    let k = named.len();
    named.push(("gamma", &inputs[k]));
    named.push(("beta", &inputs[k + 1]));
    same_float(&named)?;
    let d = last_dim("x", x)?.clone();
    if !matches!(broadcast(&x.shape, &residual.shape), Ok(s) if s == x.shape) {
        return Err(format!("residual {residual} must broadcast to x {x}"));
    }
    for (name, t) in &named[2..] {
        expect_dims(name, t, "[D]", std::slice::from_ref(&d))?;
    }
    Ok(vec![x.clone()])
}

/// Checks `x, scale, shift` of the adaLN ops.
fn check_ada(eps: f32, x: &TensorType, scale: &TensorType, shift: &TensorType) -> Result<(), String> {
    check_eps(eps)?;
    same_float(&[("x", x), ("scale", scale), ("shift", shift)])?;
    if scale.shape != shift.shape {
        return Err(format!("scale {scale} and shift {shift} must have one shape"));
    }
    check_modulation("scale", scale, x)
}

/// Checks `x, y, gate` of the gated residual ops.
fn check_gated(x: &TensorType, y: &TensorType, gate: &TensorType) -> Result<(), String> {
    same_float(&[("x", x), ("y", y), ("gate", gate)])?;
    if x != y {
        return Err(format!("y {y} must have the type of x {x}"));
    }
    check_modulation("gate", gate, x)
}

/// The upstream gradient must have the forward output's type.
fn check_upstream(dy: &TensorType, out: &TensorType) -> Result<(), String> {
    if dy == out {
        Ok(())
    } else {
        Err(format!("the upstream gradient {dy} must have the output type {out}"))
    }
}

impl OpDef for FusedMatMulBiasAct {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, w, bias) = (&inputs[0], &inputs[1], &inputs[2]);
        let dtype = same_float(&[("x", x), ("w", w), ("bias", bias)])?;
        let out = matmul_shape(x, w)?;
        let n = last_dim("w", w)?;
        expect_dims("bias", bias, "[N]", std::slice::from_ref(n))?;
        Ok(vec![TensorType::new(dtype, out)])
    }
}

impl OpDef for FusedSwiGLU {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        same_float(&[("x", x)])?;
        let axis = x.rank().checked_sub(1).ok_or_else(|| format!("x {x} needs a feature axis"))?;
        let two_n = x.static_dim(axis)?;
        if two_n % 2 != 0 {
            return Err(format!("the last dim of x {x} must be even (gate and up halves)"));
        }
        let mut dims = x.shape.dims().to_vec();
        dims[axis] = Dim::Static(two_n / 2);
        Ok(vec![TensorType::new(self.cast_to.unwrap_or(x.dtype), Shape(dims))])
    }
}

impl OpDef for FusedResidualLN {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.has_bias { 5 } else { 4 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        residual_norm(self.has_bias, self.eps, inputs)
    }
}

impl OpDef for FusedResidualRmsNorm {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.has_bias { 5 } else { 4 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        residual_norm(self.has_bias, self.eps, inputs)
    }
}

impl OpDef for AdaLayerNorm {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_ada(self.eps, &inputs[0], &inputs[1], &inputs[2])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for GatedResidual {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_gated(&inputs[0], &inputs[1], &inputs[2])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for AdaLayerNormBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, scale, shift) = (&inputs[0], &inputs[1], &inputs[2]);
        check_ada(self.eps, x, scale, shift)?;
        check_upstream(&inputs[3], x)?;
        Ok(vec![x.clone(), scale.clone(), shift.clone()])
    }
}

impl OpDef for GatedResidualBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, y, gate) = (&inputs[0], &inputs[1], &inputs[2]);
        check_gated(x, y, gate)?;
        check_upstream(&inputs[3], x)?;
        Ok(vec![x.clone(), y.clone(), gate.clone()])
    }
}

/// Builders for the epilogue fusions and the DiT ops; multi-output kinds return one value per
/// output, in order.
impl crate::Graph {
    /// `act(x·w + bias)`.
    pub fn fused_matmul_bias_act(
        &mut self,
        x: ValueId,
        w: ValueId,
        bias: ValueId,
        activation: Option<ActivationKind>,
    ) -> crate::Result<ValueId> {
        self.add1(FusedMatMulBiasAct { activation }, &[x, w, bias])
    }

    /// `silu(gate)·up` over the halves of `x`'s last axis, optionally cast.
    pub fn fused_swiglu(&mut self, x: ValueId, gate_first: bool, cast_to: Option<DType>) -> crate::Result<ValueId> {
        self.add1(FusedSwiGLU { cast_to, gate_first }, &[x])
    }

    /// `LayerNorm(x + residual [+ bias])`; `has_bias` follows `bias`.
    pub fn fused_residual_ln(
        &mut self,
        x: ValueId,
        residual: ValueId,
        bias: Option<ValueId>,
        gamma: ValueId,
        beta: ValueId,
        eps: f32,
    ) -> crate::Result<ValueId> {
        let inputs = residual_inputs(x, residual, bias, gamma, beta);
        self.add1(FusedResidualLN { has_bias: bias.is_some(), eps }, &inputs)
    }

    /// `RmsNorm(x + residual [+ bias])`; `has_bias` follows `bias`.
    pub fn fused_residual_rms_norm(
        &mut self,
        x: ValueId,
        residual: ValueId,
        bias: Option<ValueId>,
        gamma: ValueId,
        beta: ValueId,
        eps: f32,
    ) -> crate::Result<ValueId> {
        let inputs = residual_inputs(x, residual, bias, gamma, beta);
        self.add1(FusedResidualRmsNorm { has_bias: bias.is_some(), eps }, &inputs)
    }

    /// `norm(x)·(1 + scale) + shift`.
    pub fn ada_layer_norm(
        &mut self,
        norm: AdaNormKind,
        eps: f32,
        x: ValueId,
        scale: ValueId,
        shift: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(AdaLayerNorm { norm, eps }, &[x, scale, shift])
    }

    /// `x + gate·y`.
    pub fn gated_residual(&mut self, x: ValueId, y: ValueId, gate: ValueId) -> crate::Result<ValueId> {
        self.add1(GatedResidual {}, &[x, y, gate])
    }

    /// `[dx, dscale, dshift]` of [`AdaLayerNorm`].
    pub fn ada_layer_norm_backward(
        &mut self,
        norm: AdaNormKind,
        eps: f32,
        x: ValueId,
        scale: ValueId,
        shift: ValueId,
        dy: ValueId,
    ) -> crate::Result<Vec<ValueId>> {
        let id = self.add(AdaLayerNormBackward { norm, eps }, &[x, scale, shift, dy])?;
        Ok((0..3).map(|i| ValueId::new(id, i)).collect())
    }

    /// `[dx, dy, dgate]` of [`GatedResidual`].
    pub fn gated_residual_backward(
        &mut self,
        x: ValueId,
        y: ValueId,
        gate: ValueId,
        dy: ValueId,
    ) -> crate::Result<Vec<ValueId>> {
        let id = self.add(GatedResidualBackward {}, &[x, y, gate, dy])?;
        Ok((0..3).map(|i| ValueId::new(id, i)).collect())
    }
}

fn residual_inputs(x: ValueId, residual: ValueId, bias: Option<ValueId>, gamma: ValueId, beta: ValueId) -> Vec<ValueId> {
    let mut inputs = vec![x, residual];
    inputs.extend(bias);
    inputs.extend([gamma, beta]);
    inputs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    fn sym(dims: &[Dim]) -> TensorType {
        TensorType::new(DType::F32, Shape(dims.to_vec()))
    }

    #[test]
    fn matmul_bias_act_keeps_batch_dims_and_names_inner_mismatch() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["B".into(), 7.into(), 384.into()]));
        let w = g.param("w", f32s(&[384, 1536]));
        let b = g.param("b", f32s(&[1536]));
        let y = g.fused_matmul_bias_act(x, w, b, Some(ActivationKind::Gelu)).unwrap();
        assert_eq!(g.ty(y), &sym(&["B".into(), 7.into(), 1536.into()]));
        let w2 = g.param("w2", f32s(&[512, 1536]));
        let e = g.fused_matmul_bias_act(x, w2, b, None).unwrap_err().to_string();
        assert!(e.ends_with("inner dims differ: [B, 7, 384] x [512, 1536]"), "{e}");
        let b2 = g.param("b2", f32s(&[384]));
        let e = g.fused_matmul_bias_act(x, w, b2, None).unwrap_err().to_string();
        assert!(e.contains("bias f32[384] must be [N] = [1536]"), "{e}");
    }

    #[test]
    fn swiglu_halves_and_casts() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["T".into(), 2816.into()]));
        let y = g.fused_swiglu(x, false, Some(DType::F16)).unwrap();
        assert_eq!(g.ty(y), &TensorType::new(DType::F16, Shape(vec!["T".into(), 1408.into()])));
        let odd = g.input("odd", f32s(&[2, 5]));
        assert!(g.fused_swiglu(odd, true, None).unwrap_err().to_string().contains("must be even"));
        let dynamic = g.input("dyn", sym(&[2.into(), "N".into()]));
        assert!(g.fused_swiglu(dynamic, true, None).unwrap_err().to_string().contains("symbolic"));
    }

    #[test]
    fn residual_norms_check_bias_and_affine() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["B".into(), "S".into(), 768.into()]));
        let d = g.param("d", f32s(&[768]));
        let y = g.fused_residual_ln(x, x, Some(d), d, d, 1e-12).unwrap();
        assert_eq!(g.ty(y), g.ty(x));
        assert_eq!(g.node(y.node).inputs.len(), 5);
        let y = g.fused_residual_rms_norm(x, x, None, d, d, 1e-6).unwrap();
        assert_eq!(g.ty(y), g.ty(x));
        let wrong = g.param("wrong", f32s(&[512]));
        let e = g.fused_residual_ln(x, x, None, wrong, d, 1e-5).unwrap_err().to_string();
        assert!(e.contains("gamma f32[512] must be [D] = [768]"), "{e}");
        assert!(g.fused_residual_rms_norm(x, x, None, d, d, -1.0).is_err());
        let big = g.input("big", sym(&["B".into(), "S".into(), 2.into(), 768.into()]));
        let e = g.fused_residual_ln(x, big, None, d, d, 1e-5).unwrap_err().to_string();
        assert!(e.contains("must broadcast to x"), "{e}");
    }

    #[test]
    fn ada_layer_norm_modulates_without_expand() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["B".into(), 256.into(), 1152.into()]));
        let m = g.input("m", sym(&["B".into(), 1.into(), 1152.into()]));
        let y = g.ada_layer_norm(AdaNormKind::LayerNorm, 1e-6, x, m, m).unwrap();
        assert_eq!(g.ty(y), g.ty(x));
        let grads = g.ada_layer_norm_backward(AdaNormKind::LayerNorm, 1e-6, x, m, m, y).unwrap();
        assert_eq!(g.ty(grads[0]), g.ty(x));
        assert_eq!(g.ty(grads[1]), g.ty(m));
        let col = g.input("col", sym(&["B".into(), 256.into(), 1.into()]));
        let e = g.ada_layer_norm(AdaNormKind::RmsNorm, 1e-6, x, col, col).unwrap_err().to_string();
        assert!(e.contains("end in its feature dim 1152"), "{e}");
        let e = g.ada_layer_norm(AdaNormKind::RmsNorm, 1e-6, x, m, col).unwrap_err().to_string();
        assert!(e.contains("must have one shape"), "{e}");
    }

    #[test]
    fn gated_residual_and_its_gradients() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 16, 64]));
        let gate = g.input("gate", f32s(&[2, 1, 64]));
        let y = g.gated_residual(x, x, gate).unwrap();
        let grads = g.gated_residual_backward(x, x, gate, y).unwrap();
        let types: Vec<_> = grads.iter().map(|v| g.ty(*v).clone()).collect();
        assert_eq!(types, vec![f32s(&[2, 16, 64]), f32s(&[2, 16, 64]), f32s(&[2, 1, 64])]);
        let e = g.gated_residual_backward(x, x, gate, gate).unwrap_err().to_string();
        assert!(e.contains("upstream gradient f32[2, 1, 64]"), "{e}");
        let h = g.input("h", TensorType::of(DType::F16, &[2, 16, 64]));
        let e = g.gated_residual(x, h, gate).unwrap_err().to_string();
        assert!(e.contains("y f16[2, 16, 64] must have the dtype of x (f32)"), "{e}");
    }
}
