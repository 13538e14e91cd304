//! Backward ops of the norms (OPS.md §22 "Normalization"). Each recomputes the statistics it
//! needs from the forward inputs and carries the forward's attributes.

use super::{axis_norm, check_dy, check_vector, check_x, group_channels, feature_axis, vector_type};
use crate::ops::{Arity, OpDef};
use crate::{Graph, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `dx` of `LayerNorm`: `r·(g − mean(g) − x̂·mean(g·x̂))` with `g = ȳ·γ`; inputs `(x, γ, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNormBackwardInput {
    pub axis: i32,
    pub eps: f32,
}

/// `dγ` of `LayerNorm`: `Σ_leading ȳ·x̂`, shape `[D]`; inputs `(x, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNormBackwardGamma {
    pub axis: i32,
    pub eps: f32,
}

/// `dx` of `RmsNorm`: `r·g − x·r³·mean(g·x)` with `g = ȳ·γ`; inputs `(x, γ, β, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RmsNormBackwardInput {
    pub axis: i32,
    pub eps: f32,
}

/// `dγ` of `RmsNorm`: `Σ_leading ȳ·x·r`, shape `[D]`; inputs `(x, γ, β, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RmsNormBackwardGamma {
    pub axis: i32,
    pub eps: f32,
}

/// `dβ` of `RmsNorm`: `Σ_leading ȳ`, shape `[D]`; inputs `(x, γ, β, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RmsNormBackwardBeta {
    pub axis: i32,
    pub eps: f32,
}

/// `dx` of `GroupNorm`: the LayerNorm input gradient per `(n, group)` with `g = ȳ·γ[c]`;
/// inputs `(x, γ, β, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupNormBackwardInput {
    pub num_groups: usize,
    pub eps: f32,
}

/// `dγ` of `GroupNorm`: `Σ_{n, spatial} ȳ·x̂` per channel, shape `[C]`; inputs `(x, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupNormBackwardGamma {
    pub num_groups: usize,
    pub eps: f32,
}

/// `dβ` of `GroupNorm`: `Σ_{n, spatial} ȳ` per channel, shape `[C]`; inputs `(x, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupNormBackwardBeta {
    pub num_groups: usize,
    pub eps: f32,
}

/// `dx` of `BatchNormInference`: `ȳ·γ/√(var + eps)` (frozen statistics, `x` only typed);
/// inputs `(x, γ, mean, var, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchNormInferenceBackwardInput {
    pub eps: f32,
    pub axis: i32,
}

/// `dγ` of `BatchNormInference`: `Σ ȳ·(x − mean)/√(var + eps)` over every axis but `axis`,
/// shape `[C]`; inputs `(x, mean, var, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchNormInferenceBackwardGamma {
    pub eps: f32,
    pub axis: i32,
}

/// `dβ` of `BatchNormInference`: `Σ ȳ` over every axis but `axis`, shape `[C]`; input `(ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchNormInferenceBackwardBeta {
    pub axis: i32,
}

/// Checks `x` and `ȳ` of a one-axis norm's backward; returns the feature axis.
fn axis_grad(axis: i32, eps: f32, x: &TensorType, dy: &TensorType) -> Result<usize, String> {
    let axis = axis_norm(axis, eps, x)?;
    check_dy(dy, x)?;
    Ok(axis)
}

/// Checks `(x, γ, β, ȳ)` of the RmsNorm backward ops; returns the feature axis.
fn rms_grad(axis: i32, eps: f32, inputs: &[TensorType]) -> Result<usize, String> {
    let x = &inputs[0];
    let axis = axis_grad(axis, eps, x, &inputs[3])?;
    check_vector("gamma", &inputs[1], x, axis)?;
    check_vector("beta", &inputs[2], x, axis)?;
    Ok(axis)
}

/// Checks `x` and `ȳ` of the GroupNorm backward ops.
fn group_grad(num_groups: usize, eps: f32, x: &TensorType, dy: &TensorType) -> Result<(), String> {
    group_channels(num_groups, eps, x)?;
    check_dy(dy, x)
}

impl OpDef for LayerNormBackwardInput {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_grad(self.axis, self.eps, x, &inputs[2])?;
        check_vector("gamma", &inputs[1], x, axis)?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for LayerNormBackwardGamma {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_grad(self.axis, self.eps, x, &inputs[1])?;
        Ok(vec![vector_type(x, axis)])
    }
}

impl OpDef for RmsNormBackwardInput {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        rms_grad(self.axis, self.eps, inputs)?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for RmsNormBackwardGamma {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let axis = rms_grad(self.axis, self.eps, inputs)?;
        Ok(vec![vector_type(&inputs[0], axis)])
    }
}

impl OpDef for RmsNormBackwardBeta {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let axis = rms_grad(self.axis, self.eps, inputs)?;
        Ok(vec![vector_type(&inputs[0], axis)])
    }
}

impl OpDef for GroupNormBackwardInput {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        group_grad(self.num_groups, self.eps, x, &inputs[3])?;
        check_vector("gamma", &inputs[1], x, 1)?;
        check_vector("beta", &inputs[2], x, 1)?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for GroupNormBackwardGamma {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        group_grad(self.num_groups, self.eps, &inputs[0], &inputs[1])?;
        Ok(vec![vector_type(&inputs[0], 1)])
    }
}

impl OpDef for GroupNormBackwardBeta {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        group_grad(self.num_groups, self.eps, &inputs[0], &inputs[1])?;
        Ok(vec![vector_type(&inputs[0], 1)])
    }
}

impl OpDef for BatchNormInferenceBackwardInput {
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_grad(self.axis, self.eps, x, &inputs[4])?;
        for (name, v) in ["gamma", "running_mean", "running_var"].iter().zip(&inputs[1..4]) {
            check_vector(name, v, x, axis)?;
        }
        Ok(vec![x.clone()])
    }
}

impl OpDef for BatchNormInferenceBackwardGamma {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_grad(self.axis, self.eps, x, &inputs[3])?;
        check_vector("running_mean", &inputs[1], x, axis)?;
        check_vector("running_var", &inputs[2], x, axis)?;
        Ok(vec![vector_type(x, axis)])
    }
}

impl OpDef for BatchNormInferenceBackwardBeta {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let dy = &inputs[0];
        check_x(dy, 1, "a channel axis").map_err(|e| e.replacen("x ", "the upstream gradient ", 1))?;
        let axis = feature_axis(self.axis, dy)?;
        Ok(vec![vector_type(dy, axis)])
    }
}

/// Builders for the norm backward ops; each takes the attributes of its forward op.
impl Graph {
    /// `dx` of `LayerNorm(x, gamma, ·)` for the upstream `dy`.
    pub fn layer_norm_backward_input(&mut self, attrs: LayerNormBackwardInput, x: ValueId, gamma: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, dy])
    }

    /// `dgamma` of `LayerNorm`.
    pub fn layer_norm_backward_gamma(&mut self, attrs: LayerNormBackwardGamma, x: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, dy])
    }

    /// `dx` of `RmsNorm(x, gamma, beta)`.
    pub fn rms_norm_backward_input(&mut self, attrs: RmsNormBackwardInput, x: ValueId, gamma: ValueId, beta: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, beta, dy])
    }

    /// `dgamma` of `RmsNorm(x, gamma, beta)`.
    pub fn rms_norm_backward_gamma(&mut self, attrs: RmsNormBackwardGamma, x: ValueId, gamma: ValueId, beta: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, beta, dy])
    }

    /// `dbeta` of `RmsNorm(x, gamma, beta)`.
    pub fn rms_norm_backward_beta(&mut self, attrs: RmsNormBackwardBeta, x: ValueId, gamma: ValueId, beta: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, beta, dy])
    }

    /// `dx` of `GroupNorm(x, gamma, beta)`.
    pub fn group_norm_backward_input(&mut self, attrs: GroupNormBackwardInput, x: ValueId, gamma: ValueId, beta: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, beta, dy])
    }

    /// `dgamma` of `GroupNorm`.
    pub fn group_norm_backward_gamma(&mut self, attrs: GroupNormBackwardGamma, x: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, dy])
    }

    /// `dbeta` of `GroupNorm`.
    pub fn group_norm_backward_beta(&mut self, attrs: GroupNormBackwardBeta, x: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, dy])
    }

    /// `dx` of `BatchNormInference(x, gamma, ·, mean, var)`.
    pub fn batch_norm_inference_backward_input(
        &mut self,
        attrs: BatchNormInferenceBackwardInput,
        x: ValueId,
        gamma: ValueId,
        mean: ValueId,
        var: ValueId,
        dy: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, mean, var, dy])
    }

    /// `dgamma` of `BatchNormInference(x, ·, ·, mean, var)`.
    pub fn batch_norm_inference_backward_gamma(&mut self, attrs: BatchNormInferenceBackwardGamma, x: ValueId, mean: ValueId, var: ValueId, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, mean, var, dy])
    }

    /// `dbeta` of `BatchNormInference`: `dy` summed over every axis but `axis`.
    pub fn batch_norm_inference_backward_beta(&mut self, axis: i32, dy: ValueId) -> crate::Result<ValueId> {
        self.add1(BatchNormInferenceBackwardBeta { axis }, &[dy])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Dim, Shape};

    #[test]
    fn parameter_grads_are_feature_vectors() {
        let mut g = Graph::new();
        let ty = TensorType::new(DType::BF16, Shape(vec![Dim::sym("B"), Dim::Static(4), Dim::Static(8)]));
        let x = g.input("x", ty.clone());
        let dy = g.input("dy", ty.clone());
        let dg = g.layer_norm_backward_gamma(LayerNormBackwardGamma { axis: -1, eps: 1e-5 }, x, dy).unwrap();
        assert_eq!(g.ty(dg), &TensorType::of(DType::BF16, &[8]));
        let db = g.batch_norm_inference_backward_beta(1, dy).unwrap();
        assert_eq!(g.ty(db), &TensorType::of(DType::BF16, &[4]));
        let dg = g.group_norm_backward_gamma(GroupNormBackwardGamma { num_groups: 2, eps: 1e-5 }, x, dy).unwrap();
        assert_eq!(g.ty(dg), &TensorType::of(DType::BF16, &[4]));
    }

    #[test]
    fn upstream_gradient_must_match_x() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[2, 8]));
        let gamma = g.param("g", TensorType::of(DType::F32, &[8]));
        let dy = g.input("dy", TensorType::of(DType::F32, &[8]));
        let attrs = RmsNormBackwardInput { axis: -1, eps: 1e-6 };
        let e = g.rms_norm_backward_input(attrs, x, gamma, gamma, dy).unwrap_err().to_string();
        assert!(e.contains("the upstream gradient f32[8] must have the type of x f32[2, 8]"), "{e}");
        let i = g.input("i", TensorType::of(DType::I32, &[8]));
        let e = g.batch_norm_inference_backward_beta(0, i).unwrap_err().to_string();
        assert!(e.contains("the upstream gradient i32[8] must be a float tensor"), "{e}");
    }
}
