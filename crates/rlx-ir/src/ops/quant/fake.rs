//! Quantization-aware training: symmetric quantize-dequantize with straight-through
//! gradients (OPS.md §14 `FakeQuantize`, `FakeQuantizeLSQ`; backward ops §22).
//!
//! `q_max = 2^(bits−1) − 1`, `bits ∈ [2, 8]`; `axis` (if any) is the channel axis of the
//! per-channel scale `s[c]`; a scale operand is `[C]` or `[1]`. Rounding is half to even.

use super::need_float;
use crate::ops::matmul::dims_agree;
use crate::ops::{Arity, OpDef};
use crate::{Dim, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// How the gradient passes through `FakeQuantize`'s rounding (straight-through estimators).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SteKind {
    /// `ȳ` unchanged (autodiff emits no backward op).
    Identity,
    /// `ȳ·1[|round(x/s)| ≤ q_max]` (PyTorch's mask).
    ClippedIdentity,
    /// `ȳ·(1 − tanh²(x/s))`.
    Tanh,
    /// `ȳ·max(0, 1 − |x/(q_max·s)|)`.
    HardTanh,
}

/// Where `FakeQuantize`'s scale comes from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ScaleMode {
    /// `s[c] = max|x[c-slice]| / q_max`, recomputed for every batch; no state input.
    PerBatch,
    /// A state input holds the running max-abs `m[c]`, updated in place
    /// `m ← decay·m + (1−decay)·max|x|` before use; `s = m/q_max`.
    Ema { decay: f32 },
    /// The state input is the scale `s[c]` itself (read only).
    Fixed,
}

/// `clamp(round(x/s[c]), −q_max, q_max)·s[c]`; inputs `x`, plus the state `[C]`/`[1]` for
/// `Ema`/`Fixed`. Output: `x`'s type ([def] OPS.md says F32; other float dtypes pass through).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeQuantize {
    pub bits: u8,
    pub axis: Option<usize>,
    pub ste: SteKind,
    pub scale_mode: ScaleMode,
}

/// Learned-step-size fake quantization (Esser et al. 2020): as `FakeQuantize` with the
/// trainable `scale` as second input; the paper's gradient-scale factor is not applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeQuantizeLSQ {
    pub bits: u8,
    pub axis: Option<usize>,
}

/// LSQ gradient w.r.t. `x`: the clipped STE `ȳ·1[|round(x/s[c])| ≤ q_max]`; inputs `(x, s, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeQuantizeLSQBackwardX {
    pub bits: u8,
    pub axis: Option<usize>,
}

/// LSQ gradient w.r.t. the scale: `ds[c] = Σ_{i∈c} ψ(x_i/s[c])·ȳ_i` with `ψ(z) = round(z) − z`
/// inside the code range, else `sign(z)·q_max`; inputs `(x, s, ȳ)`, output `s`'s type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeQuantizeLSQBackwardScale {
    pub bits: u8,
    pub axis: Option<usize>,
}

/// `FakeQuantize`'s gradient w.r.t. `x` under `ste`; inputs `(x, ȳ)` recompute the per-batch
/// scale, [def] `(x, ȳ, s)` use the scale `s [C]`/`[1]` the forward used (`Ema`/`Fixed`,
/// as OPS.md §23.2 item 14 asks of new implementations).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FakeQuantizeBackward {
    pub bits: u8,
    pub axis: Option<usize>,
    pub ste: SteKind,
}

/// Checks `bits ∈ [2, 8]`, a float `x` and that `axis` exists; returns the channel count
/// (`None` per tensor).
fn check_x(bits: u8, axis: Option<usize>, x: &TensorType) -> Result<Option<Dim>, String> {
    if !(2..=8).contains(&bits) {
        return Err(format!("bits must be in 2..=8, got {bits}"));
    }
    need_float("x", x)?;
    match axis {
        None => Ok(None),
        Some(a) if a < x.rank() => Ok(Some(x.shape.dim(a).clone())),
        Some(a) => Err(format!("axis {a} is out of range for x {x}")),
    }
}

/// Checks a per-channel operand (scale or state): float `[C]`, or `[1]`.
fn check_channel_param(what: &str, channels: &Option<Dim>, s: &TensorType) -> Result<(), String> {
    need_float(what, s)?;
    let ok = s.rank() == 1 && {
        let d = s.shape.dim(0);
        dims_agree(d, &Dim::Static(1)) || channels.as_ref().is_some_and(|c| dims_agree(d, c))
    };
    if ok {
        return Ok(());
    }
    match channels {
        Some(c) => Err(format!("{what} must be [{c}] (one per channel) or [1], got {s}")),
        None => Err(format!("{what} must be [1] without an axis, got {s}")),
    }
}

/// Checks that the upstream gradient has `x`'s type.
fn check_grad(x: &TensorType, dy: &TensorType) -> Result<(), String> {
    if x == dy {
        Ok(())
    } else {
        Err(format!("the upstream gradient {dy} must have the type of x {x}"))
    }
}

impl OpDef for FakeQuantize {
    fn arity(&self) -> Arity {
        match self.scale_mode {
            ScaleMode::PerBatch => Arity::Exact(1),
            ScaleMode::Ema { .. } | ScaleMode::Fixed => Arity::Exact(2),
        }
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let channels = check_x(self.bits, self.axis, &inputs[0])?;
        if let ScaleMode::Ema { decay } = self.scale_mode {
            if !(0.0..=1.0).contains(&decay) {
                return Err(format!("EMA decay must be in [0, 1], got {decay}"));
            }
        }
        if let Some(state) = inputs.get(1) {
            check_channel_param("state", &channels, state)?;
        }
        Ok(vec![inputs[0].clone()])
    }
    fn mutated_inputs(&self) -> Vec<usize> {
        match self.scale_mode {
            ScaleMode::Ema { .. } => vec![1],
            ScaleMode::PerBatch | ScaleMode::Fixed => Vec::new(),
        }
    }
}

impl OpDef for FakeQuantizeLSQ {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let channels = check_x(self.bits, self.axis, &inputs[0])?;
        check_channel_param("scale", &channels, &inputs[1])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for FakeQuantizeLSQBackwardX {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let channels = check_x(self.bits, self.axis, &inputs[0])?;
        check_channel_param("scale", &channels, &inputs[1])?;
        check_grad(&inputs[0], &inputs[2])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for FakeQuantizeLSQBackwardScale {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let channels = check_x(self.bits, self.axis, &inputs[0])?;
        check_channel_param("scale", &channels, &inputs[1])?;
        check_grad(&inputs[0], &inputs[2])?;
        Ok(vec![inputs[1].clone()])
    }
}

impl OpDef for FakeQuantizeBackward {
    fn arity(&self) -> Arity {
        Arity::Between(2, 3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let channels = check_x(self.bits, self.axis, &inputs[0])?;
        check_grad(&inputs[0], &inputs[1])?;
        if let Some(s) = inputs.get(2) {
            check_channel_param("scale", &channels, s)?;
        }
        Ok(vec![inputs[0].clone()])
    }
}

/// Builders for quantization-aware training.
impl crate::Graph {
    /// Fake-quantizes `x`; `state` is required exactly for `Ema`/`Fixed` scale modes.
    pub fn fake_quantize(&mut self, attrs: FakeQuantize, x: ValueId, state: Option<ValueId>) -> crate::Result<ValueId> {
        let inputs: Vec<ValueId> = std::iter::once(x).chain(state).collect();
        self.add1(attrs, &inputs)
    }

    /// LSQ fake quantization with a trainable `scale`.
    pub fn fake_quantize_lsq(&mut self, bits: u8, axis: Option<usize>, x: ValueId, scale: ValueId) -> crate::Result<ValueId> {
        self.add1(FakeQuantizeLSQ { bits, axis }, &[x, scale])
    }

    /// LSQ gradient w.r.t. `x`.
    pub fn fake_quantize_lsq_backward_x(
        &mut self,
        bits: u8,
        axis: Option<usize>,
        x: ValueId,
        scale: ValueId,
        dy: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(FakeQuantizeLSQBackwardX { bits, axis }, &[x, scale, dy])
    }

    /// LSQ gradient w.r.t. the scale.
    pub fn fake_quantize_lsq_backward_scale(
        &mut self,
        bits: u8,
        axis: Option<usize>,
        x: ValueId,
        scale: ValueId,
        dy: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(FakeQuantizeLSQBackwardScale { bits, axis }, &[x, scale, dy])
    }

    /// `FakeQuantize`'s STE gradient; pass the forward's `scale` for `Ema`/`Fixed` modes.
    pub fn fake_quantize_backward(
        &mut self,
        attrs: FakeQuantizeBackward,
        x: ValueId,
        dy: ValueId,
        scale: Option<ValueId>,
    ) -> crate::Result<ValueId> {
        let inputs: Vec<ValueId> = [x, dy].into_iter().chain(scale).collect();
        self.add1(attrs, &inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph, OpDef};

    #[test]
    fn state_follows_the_scale_mode() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[16, 64]));
        let per_batch = FakeQuantize { bits: 8, axis: Some(1), ste: SteKind::ClippedIdentity, scale_mode: ScaleMode::PerBatch };
        assert!(g.fake_quantize(per_batch.clone(), x, None).is_ok());
        let m = g.param("m", TensorType::of(DType::F32, &[64]));
        let ema = FakeQuantize { scale_mode: ScaleMode::Ema { decay: 0.99 }, ..per_batch.clone() };
        assert_eq!(ema.mutated_inputs(), vec![1]);
        assert!(g.fake_quantize(ema.clone(), x, Some(m)).is_ok());
        assert!(g.fake_quantize(ema, x, None).unwrap_err().to_string().contains("takes 2 inputs"));
        let wrong = g.param("wrong", TensorType::of(DType::F32, &[16]));
        let fixed = FakeQuantize { scale_mode: ScaleMode::Fixed, ..per_batch.clone() };
        let e = g.fake_quantize(fixed, x, Some(wrong)).unwrap_err().to_string();
        assert!(e.contains("state must be [64] (one per channel) or [1]"), "{e}");
        let e = g.fake_quantize(FakeQuantize { bits: 9, ..per_batch }, x, None).unwrap_err().to_string();
        assert!(e.contains("bits must be in 2..=8"), "{e}");
    }

    #[test]
    fn lsq_gradients_take_their_operand_types() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[4, 8]));
        let s = g.param("s", TensorType::of(DType::F32, &[1]));
        let y = g.fake_quantize_lsq(4, None, x, s).unwrap();
        let dx = g.fake_quantize_lsq_backward_x(4, None, x, s, y).unwrap();
        assert_eq!(g.ty(dx), g.ty(x));
        let ds = g.fake_quantize_lsq_backward_scale(4, None, x, s, y).unwrap();
        assert_eq!(g.ty(ds), g.ty(s));
        let e = g.fake_quantize_lsq_backward_scale(4, None, x, s, s).unwrap_err().to_string();
        assert!(e.contains("upstream gradient"), "{e}");
        let attrs = FakeQuantizeBackward { bits: 4, axis: None, ste: SteKind::Tanh };
        assert!(g.fake_quantize_backward(attrs.clone(), x, y, Some(s)).is_ok());
        assert!(g.fake_quantize_backward(attrs, x, y, Some(x)).is_err());
    }
}
