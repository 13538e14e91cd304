//! VJPs of the quant family (OPS.md §5, §14; backward ops §22).
//!
//! Quantizers are straight-through: `Quantize`, `Dequantize`, `ScaledQuantize` and
//! `ScaledDequantize` pass `ȳ` unchanged, and the integer matmuls differentiate as float
//! matmuls over their centred codes. The integer outputs of [`STRAIGHT_THROUGH`] kinds carry
//! F32 cotangents so that `Quantize → QMatMul → Dequantize` passes a gradient. Scales, zero
//! points and packed weights are frozen: they receive none. `FakeQuantizeBackward` and
//! `FakeQuantizeLSQBackwardX` differentiate through their decompositions.

use super::matmul::swap_last;
use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::conv::{Conv2dBackwardInput, Conv2dBackwardWeight};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::quant::{
    DequantGroupedMatMul, DequantGroupedMatMulMlx, DequantMatMul, DequantMoEWeights, FakeQuantize, FakeQuantizeBackward,
    FakeQuantizeLSQBackwardScale, FakeQuantizeLSQBackwardX, QConv2d, QMatMul, QuantScheme, ScaleMode, ScaledMatMul,
    SteKind,
};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, Op, OpKind, Shape, TensorType, ValueId};
use rlx_opt::decompose::build::{channel_shape, scalar, vector};

pub const KINDS: &[OpKind] = &[
    OpKind::Quantize,
    OpKind::Dequantize,
    OpKind::QMatMul,
    OpKind::QConv2d,
    OpKind::DequantMatMul,
    OpKind::DequantGroupedMatMul,
    OpKind::DequantGroupedMatMulMlx,
    OpKind::FakeQuantize,
    OpKind::FakeQuantizeLSQ,
    OpKind::FakeQuantizeLSQBackwardScale,
    OpKind::ScaledQuantScale,
    OpKind::ScaledQuantize,
    OpKind::ScaledDequantize,
    OpKind::ScaledMatMul,
];

/// Kinds whose integer outputs carry an F32 cotangent (straight-through estimators).
pub const STRAIGHT_THROUGH: &[OpKind] = &[OpKind::Quantize, OpKind::QMatMul, OpKind::QConv2d, OpKind::ScaledQuantize];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Quantize(_) | Op::ScaledQuantize(_) => pass_to_float(v),
        Op::Dequantize(_) => v.ct(0).map(|d| vec![Some(d)]),
        Op::ScaledDequantize(_) => v.ct(0).map(|d| vec![Some(d), None]),
        Op::ScaledQuantScale(_) => Ok(vec![None]),
        Op::QMatMul(q) => qmatmul(q, v),
        Op::QConv2d(q) => qconv2d(q, v),
        Op::ScaledMatMul(s) => scaled_matmul(s, v),
        Op::DequantMatMul(d) => dequant_matmul(d, v),
        Op::DequantGroupedMatMul(d) => dequant_grouped(d, v),
        Op::DequantGroupedMatMulMlx(m) => dequant_grouped_mlx(m, v),
        Op::FakeQuantize(f) => fake_quantize(f, v),
        Op::FakeQuantizeLSQ(f) => lsq(f.bits, f.axis, v),
        Op::FakeQuantizeLSQBackwardScale(f) => lsq_backward_scale(f, v),
        _ => return None,
    })
}

/// The cotangent of output `i` of a straight-through op: F32 zeros where none arrived (the
/// output itself may be integer).
fn st_ct(v: &mut Vjp, i: usize) -> Result<ValueId> {
    if let Some(c) = v.cts[i] {
        return Ok(c);
    }
    let s = scalar(v.g, DType::F32, 0.0)?;
    let shape = v.g.ty(v.outputs[i]).shape.clone();
    Ok(v.g.expand_to(s, &shape)?)
}

/// `v` cast to `dtype` unless it has it.
fn as_dtype(g: &mut Graph, v: ValueId, dtype: DType) -> Result<ValueId> {
    Ok(if g.ty(v).dtype == dtype { v } else { g.cast(v, dtype)? })
}

/// A quantizer: `ȳ` back to the float operand in its dtype; the scale operand gets none.
fn pass_to_float(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let dy = st_ct(v, 0)?;
    let dx = as_dtype(v.g, dy, v.g.ty(v.inputs[0]).dtype)?;
    let mut out = vec![Some(dx)];
    out.resize(v.inputs.len(), None);
    Ok(out)
}

/// Integer codes as F32 minus their zero point.
fn centred(g: &mut Graph, codes: ValueId, zp: i32) -> Result<ValueId> {
    let f = g.cast(codes, DType::F32)?;
    if zp == 0 {
        return Ok(f);
    }
    let zp = scalar(g, DType::F32, f64::from(zp))?;
    Ok(g.binary(BinaryOp::Sub, f, zp)?)
}

/// `ȳ·mult`, the cotangent of the integer accumulator.
fn requant_ct(v: &mut Vjp, mult: f32) -> Result<ValueId> {
    let dy = st_ct(v, 0)?;
    let m = scalar(v.g, DType::F32, f64::from(mult))?;
    Ok(v.g.binary(BinaryOp::Mul, dy, m)?)
}

/// Straight-through float matmul over centred codes: with `ȳ' = ȳ·mult`,
/// `x̄ = ȳ'·(w − w_zp)ᵀ`, `w̄ = (x − x_zp)ᵀ·ȳ'`. The I32 bias carries none (no op produces an
/// I32 value with a cotangent).
fn qmatmul(q: &QMatMul, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let d = requant_ct(v, q.mult)?;
    let (x, w) = (v.inputs[0], v.inputs[1]);
    let dx = if v.wants(0) {
        let wc = centred(v.g, w, q.w_zp)?;
        let wt = swap_last(v.g, wc)?;
        Some(v.g.matmul(d, wt)?)
    } else {
        None
    };
    let dw = if v.wants(1) {
        let xc = centred(v.g, x, q.x_zp)?;
        let xt = swap_last(v.g, xc)?;
        Some(v.g.matmul(xt, d)?)
    } else {
        None
    };
    Ok(vec![dx, dw, None])
}

/// As [`qmatmul`] with the conv backward ops over the centred codes.
fn qconv2d(q: &QConv2d, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let d = requant_ct(v, q.mult)?;
    let (x, w) = (v.inputs[0], v.inputs[1]);
    let (kernel_size, stride, padding, dilation, groups) =
        (q.kernel_size.clone(), q.stride.clone(), q.padding.clone(), q.dilation.clone(), q.groups);
    let dx = if v.wants(0) {
        let wc = centred(v.g, w, q.w_zp)?;
        let input_size = v.g.ty(x).shape.dims()[2..].to_vec();
        let attrs = Conv2dBackwardInput {
            kernel_size: kernel_size.clone(),
            stride: stride.clone(),
            padding: padding.clone(),
            dilation: dilation.clone(),
            groups,
            input_size,
        };
        Some(v.g.conv2d_backward_input(d, wc, attrs)?)
    } else {
        None
    };
    let dw = if v.wants(1) {
        let xc = centred(v.g, x, q.x_zp)?;
        let attrs = Conv2dBackwardWeight { kernel_size, stride, padding, dilation, groups };
        Some(v.g.conv2d_backward_weight(xc, d, attrs)?)
    } else {
        None
    };
    Ok(vec![dx, dw, None])
}

/// Straight-through: the float matmul VJP over the dequantized operands
/// (`l̄hs = ȳ·rhs_f`, `r̄hs = ȳᵀ·lhs_f`, TN layout), back to the codes; the bias gets `Σ_m ȳ`,
/// the scales none.
fn scaled_matmul(s: &ScaledMatMul, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let dy = v.ct(0)?;
    let (lhs, rhs, ls, rs) = (v.inputs[0], v.inputs[1], v.inputs[2], v.inputs[3]);
    let dlhs = if v.wants(0) {
        let rf = v.g.scaled_dequantize(s.rhs_format.clone(), s.scale_layout.clone(), rhs, rs)?;
        Some(v.g.matmul(dy, rf)?)
    } else {
        None
    };
    let drhs = if v.wants(1) {
        let lf = v.g.scaled_dequantize(s.lhs_format.clone(), s.scale_layout.clone(), lhs, ls)?;
        let dyt = swap_last(v.g, dy)?;
        Some(v.g.matmul(dyt, lf)?)
    } else {
        None
    };
    let mut out = vec![dlhs, drhs, None, None];
    if s.has_bias {
        out.push(Some(v.g.reduce(ReduceOp::Sum, dy, &[0], false)?));
    }
    Ok(out)
}

/// The static extent of `axis` of `v`, or an error naming `op`.
fn extent(g: &Graph, v: ValueId, axis: usize, op: &'static str) -> Result<usize> {
    let ty = g.ty(v);
    ty.shape.dim(axis).as_static().ok_or_else(|| AdError::Rule {
        op,
        msg: format!("the gradient materializes the weight and needs a static extent on axis {axis} of {ty}"),
    })
}

/// The F32 identity `[n, n]` (`Compare Eq` of two iotas, `Cast`).
fn eye(g: &mut Graph, n: usize) -> Result<ValueId> {
    let iota: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let iota = vector(g, DType::F32, &iota)?;
    let rows = g.reshape_to(iota, &Shape(vec![Dim::Static(n), Dim::Static(1)]))?;
    let cols = g.reshape_to(iota, &Shape(vec![Dim::Static(1), Dim::Static(n)]))?;
    let hit = g.compare(CmpOp::Eq, rows, cols)?;
    Ok(g.cast(hit, DType::F32)?)
}

/// A GGUF expert stack (`[E, N, row_bytes]` or a blob) dequantized to the `[E, K, N]` bank.
fn gguf_bank(g: &mut Graph, scheme: &QuantScheme, packed: ValueId, k: usize, n: usize) -> Result<ValueId> {
    let t = scheme.gguf().ok_or_else(|| AdError::Rule { op: "DequantMatMul", msg: format!("{scheme:?} is not GGUF") })?;
    let row = t.row_bytes(k).map_err(|msg| AdError::Rule { op: "DequantMatMul", msg })?;
    let ty = g.ty(packed).clone();
    let bytes = ty.shape.dims().iter().map(Dim::as_static).product::<Option<usize>>().ok_or_else(|| AdError::Rule {
        op: "DequantMatMul",
        msg: format!("the gradient dequantizes the weight and needs its static byte count, got {ty}"),
    })?;
    let experts = bytes / (n * row);
    let packed = if ty.rank() == 2 { g.reshape_to(packed, &Shape(vec![Dim::Static(bytes)]))? } else { packed };
    Ok(g.dequant_moe_weights(DequantMoEWeights { scheme: scheme.clone(), experts, k, n }, packed)?)
}

/// `x̄ = ȳ·Wᵀ` with the dequantized weight `W [k, n]` recomputed: GGUF rows through the
/// `DequantMoEWeights` decoder, every other scheme as the op applied to the identity
/// (`k²·n` work, where the forward is `m·k·n`). Weight operands get none (frozen).
fn dequant_matmul(d: &DequantMatMul, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, y, dy) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let rank = v.g.ty(x).rank();
    let k = extent(v.g, x, rank - 1, "DequantMatMul")?;
    let n = extent(v.g, y, rank - 1, "DequantMatMul")?;
    let w = if d.scheme.gguf().is_some() {
        let bank = gguf_bank(v.g, &d.scheme, v.inputs[1], k, n)?;
        v.g.reshape_to(bank, &Shape(vec![Dim::Static(k), Dim::Static(n)]))?
    } else {
        let id = eye(v.g, k)?;
        v.g.dequant_matmul(d.clone(), id, &v.inputs[1..])?
    };
    let wt = swap_last(v.g, w)?;
    let dx = v.g.matmul(dy, wt)?;
    let dx = as_dtype(v.g, dx, v.g.ty(x).dtype)?;
    let mut out = vec![Some(dx)];
    out.resize(v.inputs.len(), None);
    Ok(out)
}

/// `x̄[i] = ȳ[i]·bank[e_i]ᵀ` as a `GroupedMatMul` of `ȳ` with the transposed `[E, K, N]` bank.
fn grouped_input_grad(v: &mut Vjp, bank: ValueId, idx: ValueId) -> Result<ValueId> {
    let dy = v.ct(0)?;
    let bt = v.g.transpose(bank, &[0, 2, 1])?;
    let dx = v.g.grouped_matmul(dy, bt, idx)?;
    as_dtype(v.g, dx, v.g.ty(v.inputs[0]).dtype)
}

/// GGUF MoE: the bank through `DequantMoEWeights`, then the `GroupedMatMul` VJP for the
/// input; weights and expert ids get none.
fn dequant_grouped(d: &DequantGroupedMatMul, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, w, idx, y) = (v.inputs[0], v.inputs[1], v.inputs[2], v.outputs[0]);
    let k = extent(v.g, x, 1, "DequantGroupedMatMul")?;
    let n = extent(v.g, y, 1, "DequantGroupedMatMul")?;
    let bank = gguf_bank(v.g, &d.scheme, w, k, n)?;
    Ok(vec![Some(grouped_input_grad(v, bank, idx)?), None, None])
}

/// MLX MoE: the bank `[E, K, out]` as the op applied to `E` stacked identities (expert `e`'s
/// rows routed to `e`), then the `GroupedMatMul` VJP for the input; the rest get none.
fn dequant_grouped_mlx(m: &DequantGroupedMatMulMlx, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, scales, idx, y) = (v.inputs[0], v.inputs[2], v.inputs[4], v.outputs[0]);
    let k = extent(v.g, x, 1, "DequantGroupedMatMulMlx")?;
    let e = extent(v.g, scales, 0, "DequantGroupedMatMulMlx")?;
    let out = extent(v.g, y, 1, "DequantGroupedMatMulMlx")?;
    let id = eye(v.g, k)?;
    let stacked = v.g.expand_to(id, &Shape(vec![Dim::Static(e), Dim::Static(k), Dim::Static(k)]))?;
    let rows = v.g.reshape_to(stacked, &Shape(vec![Dim::Static(e * k), Dim::Static(k)]))?;
    let experts: Vec<u8> = (0..e * k).flat_map(|i| ((i / k) as i64).to_le_bytes()).collect();
    let ids = v.g.constant(TensorType::of(DType::I64, &[e * k]), experts)?;
    let mut ins = vec![rows];
    ins.extend_from_slice(&v.inputs[1..4]);
    ins.push(ids);
    let w = v.g.add1(m.clone(), &ins)?;
    let bank = v.g.reshape_to(w, &Shape(vec![Dim::Static(e), Dim::Static(k), Dim::Static(out)]))?;
    Ok(vec![Some(grouped_input_grad(v, bank, idx)?), None, None, None, None])
}

/// `Identity`: `ȳ`; other estimators: `FakeQuantizeBackward` with the scale the forward used
/// (recomputed per batch, or the `Fixed` state). The state gets none. An `Ema` state is
/// updated in place before use, so no graph value holds its scale: only `Identity` works there.
fn fake_quantize(f: &FakeQuantize, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy) = (v.inputs[0], v.ct(0)?);
    let backward = FakeQuantizeBackward { bits: f.bits, axis: f.axis, ste: f.ste };
    let dx = match (f.ste, f.scale_mode) {
        (SteKind::Identity, _) => dy,
        (_, ScaleMode::PerBatch) => v.g.add1(backward, &[x, dy])?,
        (_, ScaleMode::Fixed) => v.g.add1(backward, &[x, dy, v.inputs[1]])?,
        (ste, ScaleMode::Ema { .. }) => {
            return Err(AdError::Rule {
                op: "FakeQuantize",
                msg: format!(
                    "the {ste:?} estimator needs the EMA scale, which the op updates in place; \
                     use Identity or a Fixed state"
                ),
            })
        }
    };
    let mut out = vec![Some(dx)];
    out.resize(v.inputs.len(), None);
    Ok(out)
}

/// `FakeQuantizeLSQBackwardX` and `FakeQuantizeLSQBackwardScale` of `(x, s, ȳ)`.
fn lsq(bits: u8, axis: Option<usize>, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, s, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let dx = v.g.add1(FakeQuantizeLSQBackwardX { bits, axis }, &[x, s, dy])?;
    let ds = v.g.add1(FakeQuantizeLSQBackwardScale { bits, axis }, &[x, s, dy])?;
    Ok(vec![Some(dx), Some(ds)])
}

/// `ds = Σ ψ(x/s)·ȳ` (per channel) is linear in `ȳ`: `ȳ̄ = c̄·ψ(x/s)`. With `z = x/s`,
/// `ψ = round(z) − z` inside the code range (`|round z| ≤ q_max`) and constant outside, so
/// `x̄ = −c̄·ȳ/s` and `s̄ = Σ c̄·ȳ·x/s²` inside, zero outside (the true derivative of the
/// rounding, zero almost everywhere, not `Round`'s straight-through one). `ψ` reads
/// `round(z)` through `StopGradient` for the same reason, so that differentiating `ȳ̄` again
/// gives `∂ψ/∂z = −1` inside.
fn lsq_backward_scale(f: &FakeQuantizeLSQBackwardScale, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, s, dy, ct) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let want = [v.wants(0), v.wants(1), v.wants(2)];
    let g = &mut *v.g;
    let (xt, st) = (g.ty(x).clone(), g.ty(s).clone());
    let dt = xt.dtype;
    let per_channel = st.shape.dim(0) != &Dim::Static(1);
    let axis = if per_channel { f.axis } else { None };
    let wide = channel_shape(xt.rank(), axis, st.shape.dim(0).clone());
    let sb = as_dtype(g, s, dt)?;
    let sb = g.reshape_to(sb, &wide)?;
    let cb = as_dtype(g, ct, dt)?;
    let cb = g.reshape_to(cb, &wide)?;
    let z = g.binary(BinaryOp::Div, x, sb)?;
    let r = g.activation(ActivationKind::Round, z)?;
    let r = g.stop_gradient(r)?;
    let a = g.activation(ActivationKind::Abs, r)?;
    let q = scalar(g, dt, f64::from((1u32 << (f.bits - 1)) - 1))?;
    let inside = g.compare(CmpOp::Le, a, q)?;
    let zero = scalar(g, dt, 0.0)?;
    let ddy = if want[2] {
        let inner = g.binary(BinaryOp::Sub, r, z)?;
        let sign = g.activation(ActivationKind::Sign, z)?;
        let outer = g.binary(BinaryOp::Mul, sign, q)?;
        let psi = g.select(inside, inner, outer)?;
        Some(g.binary(BinaryOp::Mul, cb, psi)?)
    } else {
        None
    };
    let cdy = g.binary(BinaryOp::Mul, cb, dy)?;
    let cdy = g.select(inside, cdy, zero)?;
    let dx = if want[0] {
        let t = g.binary(BinaryOp::Div, cdy, sb)?;
        Some(g.activation(ActivationKind::Neg, t)?)
    } else {
        None
    };
    let ds = if want[1] {
        let t = g.binary(BinaryOp::Mul, cdy, z)?;
        let t = g.binary(BinaryOp::Div, t, sb)?;
        let axes: Vec<usize> = (0..xt.rank()).filter(|&i| Some(i) != axis).collect();
        let t = if axes.is_empty() { t } else { g.reduce(ReduceOp::Sum, t, &axes, false)? };
        let t = g.reshape_to(t, &st.shape)?;
        Some(as_dtype(g, t, st.dtype)?)
    } else {
        None
    };
    Ok(vec![dx, ds, ddy])
}
