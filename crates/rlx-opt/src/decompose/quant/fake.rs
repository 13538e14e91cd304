//! Quantization-aware training (OPS.md §14 `FakeQuantize`, `FakeQuantizeLSQ`; §22 their
//! backward ops): symmetric quantize-dequantize and the straight-through gradients, computed
//! in F32 (F64 inputs in F64) and cast back to `x`'s dtype.

use super::super::build::{channel_shape, reshape_if, scalar};
use super::clamp;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::quant::{FakeQuantize, FakeQuantizeBackward, ScaleMode, SteKind};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, IrError, ValueId};

/// `2^(bits−1) − 1`.
fn q_max(bits: u8) -> f64 {
    f64::from((1u32 << (bits - 1)) - 1)
}

/// The dtype the math runs in: F64 for F64 inputs, else F32.
fn compute_dtype(g: &Graph, x: ValueId) -> DType {
    if g.ty(x).dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// `v` cast to `dt` unless it has it.
fn as_dtype(g: &mut Graph, v: ValueId, dt: DType) -> Result<ValueId, IrError> {
    if g.ty(v).dtype == dt {
        Ok(v)
    } else {
        g.cast(v, dt)
    }
}

/// A given scale or state `[C]`/`[1]` shaped to broadcast along `axis` of `x`, in `dt`.
fn given_scale(g: &mut Graph, s: ValueId, x: ValueId, axis: Option<usize>, dt: DType) -> Result<ValueId, IrError> {
    let s = as_dtype(g, s, dt)?;
    let c = g.ty(s).shape.dims().first().cloned().unwrap_or(Dim::Static(1));
    let shape = channel_shape(g.ty(x).rank(), axis, c);
    reshape_if(g, s, &shape)
}

/// The per-batch scale `max|x[c-slice]|/q_max`, kept broadcastable along `axis`.
fn batch_scale(g: &mut Graph, x: ValueId, axis: Option<usize>, bits: u8) -> Result<ValueId, IrError> {
    let a = g.activation(ActivationKind::Abs, x)?;
    let axes: Vec<usize> = (0..g.ty(x).rank()).filter(|&i| Some(i) != axis).collect();
    let m = if axes.is_empty() { a } else { g.reduce(ReduceOp::Max, a, &axes, true)? };
    let q = scalar(g, g.ty(m).dtype, q_max(bits))?;
    g.binary(BinaryOp::Div, m, q)
}

/// `x/s` with a zero scale replaced by 1 (so a zero scale gives zero output once multiplied
/// back, OPS.md §14).
fn scaled(g: &mut Graph, x: ValueId, s: ValueId) -> Result<ValueId, IrError> {
    let dt = g.ty(s).dtype;
    let zero = scalar(g, dt, 0.0)?;
    let one = scalar(g, dt, 1.0)?;
    let is_zero = g.compare(CmpOp::Eq, s, zero)?;
    let safe = g.select(is_zero, one, s)?;
    g.binary(BinaryOp::Div, x, safe)
}

/// `clamp(round(x/s), −q_max, q_max)·s`.
fn quant_dequant(g: &mut Graph, x: ValueId, s: ValueId, bits: u8) -> Result<ValueId, IrError> {
    let z = scaled(g, x, s)?;
    let r = g.activation(ActivationKind::Round, z)?;
    let c = clamp(g, r, -q_max(bits), q_max(bits))?;
    g.binary(BinaryOp::Mul, c, s)
}

/// `FakeQuantize` with a per-batch or fixed scale; `None` for an EMA state, which the op
/// updates in place (no primitive writes an input).
pub fn fake_quantize(g: &mut Graph, f: &FakeQuantize, x: &[ValueId]) -> Option<Result<ValueId, IrError>> {
    if matches!(f.scale_mode, ScaleMode::Ema { .. }) {
        return None;
    }
    let run = |g: &mut Graph| -> Result<ValueId, IrError> {
        let dt = compute_dtype(g, x[0]);
        let xc = as_dtype(g, x[0], dt)?;
        let s = match f.scale_mode {
            ScaleMode::Fixed => given_scale(g, x[1], xc, f.axis, dt)?,
            _ => batch_scale(g, xc, f.axis, f.bits)?,
        };
        let y = quant_dequant(g, xc, s, f.bits)?;
        as_dtype(g, y, g.ty(x[0]).dtype)
    };
    Some(run(g))
}

/// `FakeQuantize` with the learned `scale`.
pub fn lsq(g: &mut Graph, bits: u8, axis: Option<usize>, x: ValueId, scale: ValueId) -> Result<ValueId, IrError> {
    let dt = compute_dtype(g, x);
    let xc = as_dtype(g, x, dt)?;
    let s = given_scale(g, scale, xc, axis, dt)?;
    let y = quant_dequant(g, xc, s, bits)?;
    as_dtype(g, y, g.ty(x).dtype)
}

/// `ȳ` where `|round(x/s)| ≤ q_max`, else 0 (PyTorch's clipped straight-through mask).
fn clipped(g: &mut Graph, z: ValueId, dy: ValueId, bits: u8) -> Result<ValueId, IrError> {
    let r = g.activation(ActivationKind::Round, z)?;
    let a = g.activation(ActivationKind::Abs, r)?;
    let dt = g.ty(z).dtype;
    let q = scalar(g, dt, q_max(bits))?;
    let inside = g.compare(CmpOp::Le, a, q)?;
    let zero = scalar(g, dt, 0.0)?;
    g.select(inside, dy, zero)
}

/// `FakeQuantizeBackward(x, ȳ[, s])` under its straight-through estimator; without `s` the
/// per-batch scale is recomputed.
pub fn backward(g: &mut Graph, f: &FakeQuantizeBackward, x: &[ValueId]) -> Result<ValueId, IrError> {
    if f.ste == SteKind::Identity {
        return Ok(x[1]);
    }
    let dt = compute_dtype(g, x[0]);
    let xc = as_dtype(g, x[0], dt)?;
    let dy = as_dtype(g, x[1], dt)?;
    let s = match x.get(2) {
        Some(&s) => given_scale(g, s, xc, f.axis, dt)?,
        None => batch_scale(g, xc, f.axis, f.bits)?,
    };
    let z = scaled(g, xc, s)?;
    let one = scalar(g, dt, 1.0)?;
    let d = match f.ste {
        SteKind::Identity => unreachable!("returned above"),
        SteKind::ClippedIdentity => clipped(g, z, dy, f.bits)?,
        SteKind::Tanh => {
            // ȳ·(1 − tanh²(x/s))
            let t = g.activation(ActivationKind::Tanh, z)?;
            let t2 = g.binary(BinaryOp::Mul, t, t)?;
            let slope = g.binary(BinaryOp::Sub, one, t2)?;
            g.binary(BinaryOp::Mul, dy, slope)?
        }
        SteKind::HardTanh => {
            // ȳ·max(0, 1 − |x/s|/q_max)
            let a = g.activation(ActivationKind::Abs, z)?;
            let q = scalar(g, dt, q_max(f.bits))?;
            let r = g.binary(BinaryOp::Div, a, q)?;
            let slope = g.binary(BinaryOp::Sub, one, r)?;
            let zero = scalar(g, dt, 0.0)?;
            let slope = g.binary(BinaryOp::Max, slope, zero)?;
            g.binary(BinaryOp::Mul, dy, slope)?
        }
    };
    as_dtype(g, d, g.ty(x[0]).dtype)
}

/// LSQ `dx`: the clipped straight-through mask with the learned scale; inputs `(x, s, ȳ)`.
pub fn lsq_backward_x(g: &mut Graph, bits: u8, axis: Option<usize>, x: &[ValueId]) -> Result<ValueId, IrError> {
    let dt = compute_dtype(g, x[0]);
    let xc = as_dtype(g, x[0], dt)?;
    let dy = as_dtype(g, x[2], dt)?;
    let s = given_scale(g, x[1], xc, axis, dt)?;
    let z = scaled(g, xc, s)?;
    let d = clipped(g, z, dy, bits)?;
    as_dtype(g, d, g.ty(x[0]).dtype)
}

/// LSQ `ds[c] = Σ_{i∈c} ψ(x_i/s[c])·ȳ_i`, `ψ(z) = round(z) − z` inside the code range, else
/// `sign(z)·q_max`; a `[1]` scale sums over everything. Inputs `(x, s, ȳ)`.
pub fn lsq_backward_scale(g: &mut Graph, bits: u8, axis: Option<usize>, x: &[ValueId]) -> Result<ValueId, IrError> {
    let dt = compute_dtype(g, x[0]);
    let xc = as_dtype(g, x[0], dt)?;
    let dy = as_dtype(g, x[2], dt)?;
    let s_ty = g.ty(x[1]).clone();
    let per_channel = s_ty.shape.dim(0) != &Dim::Static(1);
    let axis = if per_channel { axis } else { None };
    let s = given_scale(g, x[1], xc, axis, dt)?;
    let z = scaled(g, xc, s)?;
    let r = g.activation(ActivationKind::Round, z)?;
    let inner = g.binary(BinaryOp::Sub, r, z)?;
    let sign = g.activation(ActivationKind::Sign, z)?;
    let q = scalar(g, dt, q_max(bits))?;
    let outer = g.binary(BinaryOp::Mul, sign, q)?;
    let a = g.activation(ActivationKind::Abs, r)?;
    let inside = g.compare(CmpOp::Le, a, q)?;
    let psi = g.select(inside, inner, outer)?;
    let terms = g.binary(BinaryOp::Mul, psi, dy)?;
    let axes: Vec<usize> = (0..g.ty(xc).rank()).filter(|&i| Some(i) != axis).collect();
    let sum = if axes.is_empty() { terms } else { g.reduce(ReduceOp::Sum, terms, &axes, false)? };
    let sum = reshape_if(g, sum, &s_ty.shape)?;
    as_dtype(g, sum, s_ty.dtype)
}

#[cfg(test)]
mod tests {
    use super::super::super::build::testing::{count, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn fake_quantize_per_batch_and_fixed() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:BF16,shape:["B",3,4]))()
            %1 = FakeQuantize(bits:8,axis:Some(1),ste:ClippedIdentity,scale_mode:PerBatch)(%0)
            %2 = Param(name:"s",ty:(dtype:F32,shape:[3]))()
            %3 = FakeQuantize(bits:4,axis:Some(1),ste:Identity,scale_mode:Fixed)(%1, %2)
            %4 = FakeQuantizeLSQ(bits:4,axis:Some(1))(%3, %2)
            return %4"#,
            OpKind::FakeQuantize,
            &[],
        );
        assert_eq!(count(&out, OpKind::FakeQuantizeLSQ), 0);
        // Only the per-batch scale reduces (max over B and the last axis).
        assert_eq!(count(&out, OpKind::Reduce), 1);
    }

    #[test]
    fn straight_through_gradients() {
        for ste in ["Identity", "ClippedIdentity", "Tanh", "HardTanh"] {
            let src = format!(
                r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[5,3]))()
                %1 = Input(name:"dy",ty:(dtype:F32,shape:[5,3]))()
                %2 = Param(name:"s",ty:(dtype:F32,shape:[3]))()
                %3 = FakeQuantizeBackward(bits:8,axis:Some(1),ste:{ste})(%0, %1)
                %4 = FakeQuantizeBackward(bits:8,axis:Some(1),ste:{ste})(%0, %1, %2)
                return %3, %4"#
            );
            lower_text(&src, OpKind::FakeQuantizeBackward, &[]);
        }
    }

    #[test]
    fn lsq_gradients_reduce_to_the_scale() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3]))()
            %1 = Input(name:"dy",ty:(dtype:F32,shape:["B",3]))()
            %2 = Param(name:"s",ty:(dtype:F32,shape:[3]))()
            %3 = Param(name:"s1",ty:(dtype:F32,shape:[1]))()
            %4 = FakeQuantizeLSQBackwardX(bits:4,axis:Some(1))(%0, %2, %1)
            %5 = FakeQuantizeLSQBackwardScale(bits:4,axis:Some(1))(%0, %2, %1)
            %6 = FakeQuantizeLSQBackwardScale(bits:4,axis:Some(1))(%0, %3, %1)
            return %4, %5, %6"#,
            OpKind::FakeQuantizeLSQBackwardScale,
            &[],
        );
        assert_eq!(count(&out, OpKind::FakeQuantizeLSQBackwardX), 0);
        assert_eq!(count(&out, OpKind::Reduce), 2);
    }
}
