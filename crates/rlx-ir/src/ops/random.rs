//! Random numbers and sampling (OPS.md §12).
//!
//! The ops are functional (JAX-style keys): the same `key`/`op_seed`/`seed` and shape give the
//! same values on every run, so CSE may merge identical nodes. Values come from counter-based
//! Philox-4×32 (uniforms from the top 24 bits of a u32, normals by Box–Muller) as [`stream`]
//! specifies, and every backend must produce exactly those numbers: bit for bit for uniforms
//! and sample draws, for normals up to the last-place rounding of f64 `ln`/`cos`/`sin` (see
//! [`stream`]). None of them is differentiable.

pub mod stream;

use super::{Arity, OpDef};
use crate::{DType, Graph, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// I.i.d. `N(mean, scale²)` F32 samples (ONNX `RandomNormal` / `RandomNormalLike`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RngNormal {
    pub mean: f32,
    /// The standard deviation.
    pub scale: f32,
    pub key: u64,
    /// ONNX's `seed`; when present it is mixed into `key`.
    pub op_seed: Option<f32>,
    /// The output shape of the no-input form; `None` takes the shape of the one input (a
    /// template whose values are ignored).
    pub shape: Option<Shape>,
}

/// I.i.d. `U[low, high)` F32 samples (ONNX `RandomUniform` / `RandomUniformLike`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RngUniform {
    pub low: f32,
    pub high: f32,
    pub key: u64,
    /// ONNX's `seed`; when present it is mixed into `key`.
    pub op_seed: Option<f32>,
    /// The output shape of the no-input form; `None` takes the shape of the one input (a
    /// template whose values are ignored).
    pub shape: Option<Shape>,
}

/// Fused LLM token sampler: one I64 token id per row of `logits [.., V]` (temperature, then
/// top-k, softmax, top-p, one uniform draw per row from a single stream). The output keeps the
/// leading axes (the flattened rows of OPS.md, as one buffer). Greedy decoding is `top_k = 1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Keep the `top_k` largest logits (ties at the cutoff survive); 0 turns it off.
    pub top_k: usize,
    /// Keep the smallest most-probable prefix reaching `top_p`; 1.0 turns it off.
    pub top_p: f32,
    /// Logits are divided by `max(temperature, 1e-6)`.
    pub temperature: f32,
    /// 0 means the fixed default seed.
    pub seed: u64,
}

/// The no-input form needs a shape, the template form must not have one: arity follows.
fn rng_arity(shape: &Option<Shape>) -> Arity {
    Arity::Exact(if shape.is_some() { 0 } else { 1 })
}

/// The F32 output: the declared shape, or that of the template input.
fn rng_output(shape: &Option<Shape>, op_seed: Option<f32>, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    if let Some(s) = op_seed.filter(|s| !s.is_finite()) {
        return Err(format!("op_seed must be finite, got {s}"));
    }
    let shape = match (shape, inputs.first()) {
        (Some(shape), _) => shape.clone(),
        (None, Some(template)) => template.shape.clone(),
        (None, None) => return Err("the no-input form needs a shape".into()),
    };
    Ok(vec![TensorType::new(DType::F32, shape)])
}

impl OpDef for RngNormal {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        if let Some(s) = &mut self.shape {
            s.bind(sizes);
        }
    }
    fn arity(&self) -> Arity {
        rng_arity(&self.shape)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        if !(self.mean.is_finite() && self.scale.is_finite() && self.scale >= 0.0) {
            return Err(format!(
                "mean {} must be finite and scale {} finite and non-negative",
                self.mean, self.scale
            ));
        }
        rng_output(&self.shape, self.op_seed, inputs)
    }
}

impl OpDef for RngUniform {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        if let Some(s) = &mut self.shape {
            s.bind(sizes);
        }
    }
    fn arity(&self) -> Arity {
        rng_arity(&self.shape)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        if !(self.low.is_finite() && self.high.is_finite() && self.low < self.high) {
            return Err(format!("[low, high) = [{}, {}) must be a finite, non-empty range", self.low, self.high));
        }
        rng_output(&self.shape, self.op_seed, inputs)
    }
}

impl OpDef for Sample {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let logits = &inputs[0];
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(format!("top_p must lie in [0, 1], got {}", self.top_p));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!("temperature must be finite and non-negative, got {}", self.temperature));
        }
        if !logits.dtype.is_float() {
            return Err(format!("logits {logits} must be a float tensor"));
        }
        match logits.shape.dims().split_last() {
            Some((_, rows)) => Ok(vec![TensorType::new(DType::I64, Shape(rows.to_vec()))]),
            None => Err(format!("logits {logits} need a vocabulary axis")),
        }
    }
}

/// Builders for the random family.
impl Graph {
    /// Normal samples: of `attrs.shape`, or shaped like `like` when the shape is `None`.
    pub fn rng_normal(&mut self, attrs: RngNormal, like: Option<ValueId>) -> crate::Result<ValueId> {
        self.add1(attrs, &Vec::from_iter(like))
    }

    /// Uniform samples: of `attrs.shape`, or shaped like `like` when the shape is `None`.
    pub fn rng_uniform(&mut self, attrs: RngUniform, like: Option<ValueId>) -> crate::Result<ValueId> {
        self.add1(attrs, &Vec::from_iter(like))
    }

    /// One sampled token id per row of `logits`.
    pub fn sample(&mut self, attrs: Sample, logits: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[logits])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dim;

    fn normal(shape: Option<Shape>) -> RngNormal {
        RngNormal { mean: 0.0, scale: 0.02, key: 7, op_seed: None, shape }
    }

    #[test]
    fn shape_comes_from_the_attribute_or_the_template() {
        let mut g = Graph::new();
        let shape = Shape(vec![Dim::sym("B"), Dim::Static(16)]);
        let a = g.rng_normal(normal(Some(shape.clone())), None).unwrap();
        assert_eq!(g.ty(a), &TensorType::new(DType::F32, shape.clone()));
        let t = g.input("t", TensorType::of(DType::F16, &[3, 4]));
        let b = g.rng_normal(normal(None), Some(t)).unwrap();
        assert_eq!(g.ty(b), &TensorType::of(DType::F32, &[3, 4]));
        let e = g.rng_normal(normal(Some(shape)), Some(t)).unwrap_err().to_string();
        assert!(e.contains("takes 0 inputs, got 1"), "{e}");
        assert!(g.rng_normal(normal(None), None).unwrap_err().to_string().contains("takes 1 inputs, got 0"));
    }

    #[test]
    fn ranges_are_checked() {
        let mut g = Graph::new();
        let u = RngUniform { low: 1.0, high: 1.0, key: 0, op_seed: None, shape: Some(Shape::of(&[2])) };
        assert!(g.rng_uniform(u, None).unwrap_err().to_string().contains("non-empty range"));
        let n = RngNormal { scale: -1.0, ..normal(Some(Shape::of(&[2]))) };
        assert!(g.rng_normal(n, None).unwrap_err().to_string().contains("non-negative"));
    }

    #[test]
    fn sample_gives_one_i64_id_per_row() {
        let mut g = Graph::new();
        let logits = g.input("logits", TensorType::new(DType::F32, Shape(vec![Dim::sym("B"), Dim::Static(32000)])));
        let attrs = Sample { top_k: 50, top_p: 0.9, temperature: 0.7, seed: 0 };
        let ids = g.sample(attrs.clone(), logits).unwrap();
        assert_eq!(g.ty(ids), &TensorType::new(DType::I64, Shape(vec![Dim::sym("B")])));
        let bad = Sample { top_p: 1.5, ..attrs };
        assert!(g.sample(bad, logits).unwrap_err().to_string().contains("top_p must lie in [0, 1], got 1.5"));
    }
}
