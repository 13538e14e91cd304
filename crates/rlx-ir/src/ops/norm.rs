//! Normalization ops (OPS.md §6; their backward ops §22 live in `norm/backward.rs`).
//!
//! Every norm uses the biased variance with `eps` inside the square root,
//! `x̂ = (x − μ)/√(σ² + eps)`, and computes its statistics in F32. The per-feature vectors
//! (`gamma`, `beta`, running statistics) share the dtype of `x`: mixed-precision graphs cast
//! them first, so kernels see one dtype per node.

mod backward;
pub use backward::*;

use super::{Arity, OpDef};
use crate::{norm_axis, Dim, Graph, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `y = x̂·γ + β` over one feature axis (`torch.nn.LayerNorm` over one dim); inputs
/// `(x, gamma [D], beta [D])` with `D` the size of `axis`. Several trailing normalized dims
/// (ONNX `LayerNormalization`) are reshaped into one by importers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNorm {
    /// The feature axis, Python-style (normally −1).
    pub axis: i32,
    pub eps: f32,
}

/// SAM/candle `LayerNorm2d`: normalizes `x [N, C, H, W]` across the channel axis at every
/// `(n, h, w)`, then applies the per-channel `gamma [C]`, `beta [C]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNorm2d {
    pub eps: f32,
}

/// `torch.nn.GroupNorm`: statistics per `(n, group)` of `x [N, C, spatial..]` over
/// `C/num_groups` consecutive channels and all spatial positions, then per-channel affine.
/// Zero spatial axes (`[N, C]`) are allowed, as in PyTorch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupNorm {
    pub num_groups: usize,
    pub eps: f32,
}

/// `y = x/√(mean(x²) + eps)·γ + β` over one feature axis (no mean subtraction; Llama's
/// RMSNorm is `β = 0`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RmsNorm {
    /// The feature axis, Python-style (normally −1).
    pub axis: i32,
    pub eps: f32,
    /// The output is `[∏ leading, D]` instead of the shape of `x`: the fused trailing
    /// `Reshape` that OPS.md §6 lets a fusion pass declare. Needs a last-axis norm of rank > 2.
    #[serde(default)]
    pub flatten_leading: bool,
}

/// Inference batch norm with frozen statistics: `y = (x − mean)/√(var + eps)·γ + β`; inputs
/// `(x, gamma, beta, running_mean, running_var)`, each vector `[C]` with `C` the size of
/// `axis` (ONNX `BatchNormalization` order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchNormInference {
    pub eps: f32,
    /// The channel axis, Python-style; 1 by default (ONNX / PyTorch `[N, C, spatial..]`),
    /// −1 for graphs from the original, which normalized the last axis.
    #[serde(default = "channel_axis")]
    pub axis: i32,
}

/// The default `BatchNormInference` axis: the channel axis of `[N, C, ..]`.
fn channel_axis() -> i32 {
    1
}

/// Rejects a negative, NaN or infinite `eps`.
fn check_eps(eps: f32) -> Result<(), String> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(format!("eps must be finite and non-negative, got {eps}"))
    }
}

/// `x` must be a real float tensor of rank at least `min_rank` (`layout` says why).
fn check_x(x: &TensorType, min_rank: usize, layout: &str) -> Result<(), String> {
    if !x.dtype.is_float() {
        return Err(format!("x {x} must be a float tensor"));
    }
    if x.rank() < min_rank {
        return Err(format!("x {x} must have rank at least {min_rank} ({layout})"));
    }
    Ok(())
}

/// The feature axis of `x`, normalized.
fn feature_axis(axis: i32, x: &TensorType) -> Result<usize, String> {
    norm_axis(axis as i64, x.rank()).map_err(|e| format!("{e} of x {x}"))
}

/// A per-feature vector must be `[d]` of x's dtype, `d` being the size of `axis` of `x`.
fn check_vector(name: &str, v: &TensorType, x: &TensorType, axis: usize) -> Result<(), String> {
    let want = vector_type(x, axis);
    if *v != want {
        return Err(format!("{name} {v} must be {want}, the size of axis {axis} of x {x}"));
    }
    Ok(())
}

/// `[d]` of x's dtype, `d` being the size of `axis` of `x` (the type of per-feature grads).
fn vector_type(x: &TensorType, axis: usize) -> TensorType {
    TensorType::new(x.dtype, Shape(vec![x.shape.dim(axis).clone()]))
}

/// The upstream gradient of a shape-preserving norm has the type of `x`.
fn check_dy(dy: &TensorType, x: &TensorType) -> Result<(), String> {
    if dy != x {
        return Err(format!("the upstream gradient {dy} must have the type of x {x}"));
    }
    Ok(())
}

/// Checks `x` and `eps` of a one-axis norm and returns the normalized feature axis.
fn axis_norm(axis: i32, eps: f32, x: &TensorType) -> Result<usize, String> {
    check_eps(eps)?;
    check_x(x, 1, "a feature axis")?;
    feature_axis(axis, x)
}

/// Checks `x [N, C, spatial..]`, `eps` and `num_groups`; returns `C`.
fn group_channels(num_groups: usize, eps: f32, x: &TensorType) -> Result<usize, String> {
    check_eps(eps)?;
    check_x(x, 2, "[N, C, spatial..]")?;
    if num_groups == 0 {
        return Err("num_groups must be at least 1".into());
    }
    let c = x.static_dim(1)?;
    if c % num_groups != 0 {
        return Err(format!("the {c} channels of x {x} do not split into {num_groups} groups"));
    }
    Ok(c)
}

/// Checks `x [N, C, H, W]` and `eps` of `LayerNorm2d`.
fn check_2d(eps: f32, x: &TensorType) -> Result<(), String> {
    check_eps(eps)?;
    check_x(x, 4, "[N, C, H, W]")?;
    if x.rank() != 4 {
        return Err(format!("x {x} must be [N, C, H, W]"));
    }
    Ok(())
}

/// The `[∏ leading, D]` shape of the flattened `RmsNorm` output. A product of dims exists when
/// they are all static, or when one is symbolic and the rest are 1.
fn flatten_leading(x: &TensorType) -> Result<Shape, String> {
    let Some((last, leading)) = x.shape.dims().split_last() else {
        return Err(format!("x {x} has no feature axis to keep"));
    };
    let mut size = 1usize;
    let mut symbol: Option<&Dim> = None;
    for d in leading {
        match d {
            Dim::Static(n) => {
                size = size
                    .checked_mul(*n)
                    .ok_or_else(|| format!("the leading dims of x {x} overflow"))?
            }
            Dim::Sym(_) if symbol.is_none() => symbol = Some(d),
            Dim::Sym(_) => return Err(format!("the leading dims of x {x} hold two symbols; their product is no dim")),
        }
    }
    let rows = match symbol {
        None => Dim::Static(size),
        Some(s) if size == 1 => s.clone(),
        Some(_) => {
            return Err(format!("the leading dims of x {x} mix a symbol with sizes; their product is no dim"))
        }
    };
    Ok(Shape(vec![rows, last.clone()]))
}

impl OpDef for LayerNorm {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_norm(self.axis, self.eps, x)?;
        check_vector("gamma", &inputs[1], x, axis)?;
        check_vector("beta", &inputs[2], x, axis)?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for LayerNorm2d {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        check_2d(self.eps, x)?;
        check_vector("gamma", &inputs[1], x, 1)?;
        check_vector("beta", &inputs[2], x, 1)?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for GroupNorm {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        group_channels(self.num_groups, self.eps, x)?;
        check_vector("gamma", &inputs[1], x, 1)?;
        check_vector("beta", &inputs[2], x, 1)?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for RmsNorm {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_norm(self.axis, self.eps, x)?;
        check_vector("gamma", &inputs[1], x, axis)?;
        check_vector("beta", &inputs[2], x, axis)?;
        if !self.flatten_leading {
            return Ok(vec![x.clone()]);
        }
        if x.rank() <= 2 || axis + 1 != x.rank() {
            return Err(format!(
                "flatten_leading needs the last axis of a rank > 2 input; x is {x}, axis {}",
                self.axis
            ));
        }
        Ok(vec![TensorType::new(x.dtype, flatten_leading(x)?)])
    }
}

impl OpDef for BatchNormInference {
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let axis = axis_norm(self.axis, self.eps, x)?;
        for (name, v) in ["gamma", "beta", "running_mean", "running_var"].iter().zip(&inputs[1..]) {
            check_vector(name, v, x, axis)?;
        }
        Ok(vec![x.clone()])
    }
}

/// Builders for the forward norms.
impl Graph {
    /// LayerNorm of `x` over `axis` with affine `gamma`, `beta`.
    pub fn layer_norm(&mut self, x: ValueId, gamma: ValueId, beta: ValueId, axis: i32, eps: f32) -> crate::Result<ValueId> {
        self.add1(LayerNorm { axis, eps }, &[x, gamma, beta])
    }

    /// Channel LayerNorm of an NCHW `x`.
    pub fn layer_norm_2d(&mut self, x: ValueId, gamma: ValueId, beta: ValueId, eps: f32) -> crate::Result<ValueId> {
        self.add1(LayerNorm2d { eps }, &[x, gamma, beta])
    }

    /// GroupNorm of `x [N, C, ..]` with `num_groups` groups.
    pub fn group_norm(&mut self, x: ValueId, gamma: ValueId, beta: ValueId, num_groups: usize, eps: f32) -> crate::Result<ValueId> {
        self.add1(GroupNorm { num_groups, eps }, &[x, gamma, beta])
    }

    /// RMSNorm of `x` over `axis`, output shaped like `x`.
    pub fn rms_norm(&mut self, x: ValueId, gamma: ValueId, beta: ValueId, axis: i32, eps: f32) -> crate::Result<ValueId> {
        self.add1(RmsNorm { axis, eps, flatten_leading: false }, &[x, gamma, beta])
    }

    /// Batch norm of `x` with frozen `mean`/`var` over the channel axis of `attrs`.
    pub fn batch_norm_inference(
        &mut self,
        attrs: BatchNormInference,
        x: ValueId,
        gamma: ValueId,
        beta: ValueId,
        mean: ValueId,
        var: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, gamma, beta, mean, var])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{text, DType};

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    fn sym(dims: &[&str]) -> Shape {
        Shape(dims.iter().map(|d| d.parse::<usize>().map(Dim::Static).unwrap_or_else(|_| Dim::sym(d))).collect())
    }

    #[test]
    fn layer_norm_checks_vectors_against_the_feature_axis() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, sym(&["B", "S", "768"])));
        let w = g.param("w", f32s(&[768]));
        let y = g.layer_norm(x, w, w, -1, 1e-5).unwrap();
        assert_eq!(g.ty(y), g.ty(x));
        let e = g.layer_norm(x, w, w, 1, 1e-5).unwrap_err().to_string();
        assert!(e.contains("gamma f32[768] must be f32[S], the size of axis 1"), "{e}");
        assert!(g.layer_norm(x, w, w, 3, 1e-5).unwrap_err().to_string().contains("axis 3 is out of range"));
        assert!(g.layer_norm(x, w, w, -1, -1.0).unwrap_err().to_string().contains("eps"));
        let h = g.param("h", TensorType::of(DType::F16, &[768]));
        assert!(g.layer_norm(x, h, w, -1, 1e-5).unwrap_err().to_string().contains("gamma f16[768] must be f32[768]"));
    }

    #[test]
    fn group_norm_needs_whole_groups_of_static_channels() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, sym(&["N", "32", "H", "W"])));
        let w = g.param("w", f32s(&[32]));
        assert!(g.group_norm(x, w, w, 8, 1e-5).is_ok());
        let e = g.group_norm(x, w, w, 6, 1e-5).unwrap_err().to_string();
        assert!(e.contains("32 channels of x f32[N, 32, H, W] do not split into 6 groups"), "{e}");
        assert!(g.group_norm(x, w, w, 0, 1e-5).is_err());
        let c = g.input("c", TensorType::new(DType::F32, sym(&["N", "C"])));
        assert!(g.group_norm(c, w, w, 1, 1e-5).unwrap_err().to_string().contains("symbolic (C)"));
    }

    #[test]
    fn rms_norm_may_flatten_leading_dims() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, sym(&["1", "S", "64"])));
        let w = g.param("w", f32s(&[64]));
        let flat = RmsNorm { axis: -1, eps: 1e-6, flatten_leading: true };
        let y = g.add1(flat.clone(), &[x, w, w]).unwrap();
        assert_eq!(g.ty(y).shape, sym(&["S", "64"]));
        let z = g.input("z", TensorType::new(DType::F32, sym(&["2", "S", "64"])));
        assert!(g.add1(flat.clone(), &[z, w, w]).unwrap_err().to_string().contains("mix a symbol"));
        let two = g.input("two", f32s(&[3, 64]));
        assert!(g.add1(flat, &[two, w, w]).unwrap_err().to_string().contains("rank > 2"));
    }

    #[test]
    fn batch_norm_axis_defaults_to_channels_in_text() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"N\",16,8,8]))()\n\
                   %1 = Param(name:\"v\",ty:(dtype:F32,shape:[16]))()\n\
                   %2 = BatchNormInference(eps:0.001)(%0, %1, %1, %1, %1)\n\
                   return %2\n";
        let g = text::parse(src).unwrap();
        assert!(g.to_string().contains("BatchNormInference(eps:0.001,axis:1)"), "{g}");
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[4, 16, 8, 8]));
        let v = g.param("v", f32s(&[16]));
        let e = g.batch_norm_inference(BatchNormInference { eps: 1e-3, axis: -1 }, x, v, v, v, v).unwrap_err().to_string();
        assert!(e.contains("gamma f32[16] must be f32[8], the size of axis 3"), "{e}");
    }

    #[test]
    fn layer_norm_2d_wants_nchw() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 256, 64]));
        let w = g.param("w", f32s(&[256]));
        assert!(g.layer_norm_2d(x, w, w, 1e-6).unwrap_err().to_string().contains("[N, C, H, W]"));
    }
}
