//! Elementwise ONNX ops: unary math and activations, broadcast arithmetic, comparisons and
//! logic, bitwise ops, `Where`, casts, `Clip` and the parameterised activations (lowered to
//! rlx's `Activation`, `Binary`, `Compare` and `Where`).

use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpResult};
use crate::onnx::tensor::dtype;
use rlx_ir::ops::elementwise::{Activation, ActivationKind, Binary, BinaryOp, Cast, CmpOp, Compare, Where};
use rlx_ir::ops::random::RngUniform;
use rlx_ir::{DType, Dim, Shape, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("Relu", |cx, n| unary(cx, n, ActivationKind::Relu)),
    ("Sigmoid", |cx, n| unary(cx, n, ActivationKind::Sigmoid)),
    ("Tanh", |cx, n| unary(cx, n, ActivationKind::Tanh)),
    ("Exp", |cx, n| unary(cx, n, ActivationKind::Exp)),
    ("Log", |cx, n| unary(cx, n, ActivationKind::Log)),
    ("Sqrt", |cx, n| unary(cx, n, ActivationKind::Sqrt)),
    ("Neg", |cx, n| unary(cx, n, ActivationKind::Neg)),
    ("Abs", |cx, n| unary(cx, n, ActivationKind::Abs)),
    ("Sin", |cx, n| unary(cx, n, ActivationKind::Sin)),
    ("Cos", |cx, n| unary(cx, n, ActivationKind::Cos)),
    ("Tan", |cx, n| unary(cx, n, ActivationKind::Tan)),
    ("Atan", |cx, n| unary(cx, n, ActivationKind::Atan)),
    ("Reciprocal", |cx, n| unary(cx, n, ActivationKind::Recip)),
    ("Floor", |cx, n| unary(cx, n, ActivationKind::Floor)),
    ("Ceil", |cx, n| unary(cx, n, ActivationKind::Ceil)),
    ("Round", |cx, n| unary(cx, n, ActivationKind::Round)),
    ("Sign", |cx, n| unary(cx, n, ActivationKind::Sign)),
    ("Softplus", |cx, n| unary(cx, n, ActivationKind::Softplus)),
    ("Softsign", |cx, n| unary(cx, n, ActivationKind::Softsign)),
    ("Erf", |cx, n| unary(cx, n, ActivationKind::Erf)),
    ("Mish", |cx, n| unary(cx, n, ActivationKind::Mish)),
    ("HardSwish", |cx, n| unary(cx, n, ActivationKind::HardSwish)),
    ("Asin", asin),
    ("Acos", acos),
    ("Sinh", sinh),
    ("Cosh", cosh),
    ("Asinh", asinh),
    ("Acosh", acosh),
    ("Atanh", atanh),
    ("Add", |cx, n| binary(cx, n, BinaryOp::Add)),
    ("Sub", |cx, n| binary(cx, n, BinaryOp::Sub)),
    ("Mul", |cx, n| binary(cx, n, BinaryOp::Mul)),
    ("Div", |cx, n| binary(cx, n, BinaryOp::Div)),
    ("Pow", pow),
    ("Mod", modulo),
    ("Max", |cx, n| variadic(cx, n, BinaryOp::Max)),
    ("Min", |cx, n| variadic(cx, n, BinaryOp::Min)),
    ("Sum", |cx, n| variadic(cx, n, BinaryOp::Add)),
    ("Mean", mean),
    ("BitwiseAnd", |cx, n| binary(cx, n, BinaryOp::BitAnd)),
    ("BitwiseOr", |cx, n| binary(cx, n, BinaryOp::BitOr)),
    ("BitwiseXor", |cx, n| binary(cx, n, BinaryOp::BitXor)),
    ("BitwiseNot", not),
    ("BitShift", bit_shift),
    ("And", |cx, n| binary(cx, n, BinaryOp::BitAnd)),
    ("Or", |cx, n| binary(cx, n, BinaryOp::BitOr)),
    ("Xor", |cx, n| binary(cx, n, BinaryOp::BitXor)),
    ("Not", not),
    ("Equal", |cx, n| compare(cx, n, CmpOp::Eq)),
    ("Less", |cx, n| compare(cx, n, CmpOp::Lt)),
    ("LessOrEqual", |cx, n| compare(cx, n, CmpOp::Le)),
    ("Greater", |cx, n| compare(cx, n, CmpOp::Gt)),
    ("GreaterOrEqual", |cx, n| compare(cx, n, CmpOp::Ge)),
    ("Where", |cx, n| Ok(vec![cx.add1(Where {}, &[n.input(0)?, n.input(1)?, n.input(2)?])?])),
    ("Cast", cast),
    ("CastLike", cast_like),
    ("Dropout", dropout),
    ("Clip", clip),
    ("IsNaN", is_nan),
    ("IsInf", is_inf),
    ("Elu", elu),
    ("Selu", selu),
    ("Celu", celu),
    ("LeakyRelu", leaky_relu),
    ("ThresholdedRelu", thresholded_relu),
    ("PRelu", prelu),
    ("HardSigmoid", hard_sigmoid),
    ("Gelu", gelu),
    ("Shrink", shrink),
    ("Swish", swish),
    ("SwiGLU", swiglu),
];

fn unary(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, kind: ActivationKind) -> OpResult<Vec<ValueId>> {
    Ok(vec![act(cx, kind, n.input(0)?)?])
}

fn binary(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, op: BinaryOp) -> OpResult<Vec<ValueId>> {
    Ok(vec![bin(cx, op, n.input(0)?, n.input(1)?)?])
}

fn compare(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, op: CmpOp) -> OpResult<Vec<ValueId>> {
    Ok(vec![cx.add1(Compare { op }, &[n.input(0)?, n.input(1)?])?])
}

pub(super) fn act(cx: &mut Cx<'_>, kind: ActivationKind, x: ValueId) -> OpResult<ValueId> {
    cx.add1(Activation { kind }, &[x])
}

pub(super) fn bin(cx: &mut Cx<'_>, op: BinaryOp, a: ValueId, b: ValueId) -> OpResult<ValueId> {
    cx.add1(Binary { op }, &[a, b])
}

/// `a op c` for a scalar constant `c` of `a`'s dtype.
pub(super) fn bin_scalar(cx: &mut Cx<'_>, op: BinaryOp, a: ValueId, c: f64) -> OpResult<ValueId> {
    let s = cx.scalar(cx.dtype(a), c)?;
    bin(cx, op, a, s)
}

pub(super) fn select(cx: &mut Cx<'_>, cond: ValueId, a: ValueId, b: ValueId) -> OpResult<ValueId> {
    cx.add1(Where {}, &[cond, a, b])
}

pub(super) fn cast_to(cx: &mut Cx<'_>, x: ValueId, to: DType) -> OpResult<ValueId> {
    if cx.dtype(x) == to {
        return Ok(x);
    }
    cx.add1(Cast { to }, &[x])
}

fn variadic(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, op: BinaryOp) -> OpResult<Vec<ValueId>> {
    let xs = n.present_inputs();
    let Some((&first, rest)) = xs.split_first() else { return invalid("needs at least one input") };
    let mut acc = first;
    for &x in rest {
        acc = bin(cx, op, acc, x)?;
    }
    Ok(vec![acc])
}

fn mean(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let sum = variadic(cx, n, BinaryOp::Add)?[0];
    Ok(vec![bin_scalar(cx, BinaryOp::Div, sum, n.present_inputs().len() as f64)?])
}

/// `Pow`: an exponent of another dtype is cast to the base's (ONNX allows mixed types).
fn pow(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = cx.dtype(x);
    let y = cast_to(cx, n.input(1)?, dt)?;
    if dt.is_float() {
        return Ok(vec![bin(cx, BinaryOp::Pow, x, y)?]);
    }
    let (xf, yf) = (cast_to(cx, x, DType::F64)?, cast_to(cx, y, DType::F64)?);
    let p = bin(cx, BinaryOp::Pow, xf, yf)?;
    Ok(vec![cast_to(cx, p, dt)?])
}

/// `Mod`: `fmod = 1` is C's truncated remainder (rlx's `Mod`); `fmod = 0` takes the sign of
/// the divisor (Python's `%`): a non-zero remainder whose sign differs from `b` gets `b` added.
fn modulo(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    let r = bin(cx, BinaryOp::Mod, a, b)?;
    if n.int("fmod", 0) == 1 {
        return Ok(vec![r]);
    }
    let zero = cx.scalar(cx.dtype(a), 0.0)?;
    let r_neg = cx.add1(Compare { op: CmpOp::Lt }, &[r, zero])?;
    let b_neg = cx.add1(Compare { op: CmpOp::Lt }, &[b, zero])?;
    let signs_differ = cx.add1(Compare { op: CmpOp::Ne }, &[r_neg, b_neg])?;
    let nonzero = cx.add1(Compare { op: CmpOp::Ne }, &[r, zero])?;
    let fix = bin(cx, BinaryOp::BitAnd, signs_differ, nonzero)?;
    let shifted = bin(cx, BinaryOp::Add, r, b)?;
    Ok(vec![select(cx, fix, shifted, r)?])
}

/// `Not` / `BitwiseNot`: xor with all ones (true for Bool).
fn not(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = cx.dtype(x);
    let ones = match dt {
        DType::Bool => cx.scalar(dt, 1.0)?,
        DType::U8 => cx.scalar(dt, u8::MAX as f64)?,
        DType::U16 => cx.scalar(dt, u16::MAX as f64)?,
        DType::U32 => cx.scalar(dt, u32::MAX as f64)?,
        DType::U64 => cx.scalar(dt, u64::MAX as f64)?,
        _ => cx.scalar(dt, -1.0)?,
    };
    Ok(vec![bin(cx, BinaryOp::BitXor, x, ones)?])
}

/// `BitShift`: a shift by a negative amount or by the bit width or more gives 0 (or −1 for a
/// right shift of a negative signed value), which rlx's shifts leave undefined.
fn bit_shift(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, s) = (n.input(0)?, n.input(1)?);
    let left = match n.string("direction", "").as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        d => return invalid(format!("direction `{d}` is neither LEFT nor RIGHT")),
    };
    let dt = cx.dtype(x);
    let shifted = bin(cx, if left { BinaryOp::Shl } else { BinaryOp::Shr }, x, s)?;
    let zero = cx.scalar(dt, 0.0)?;
    let width = cx.scalar(dt, (dt.size() * 8) as f64)?;
    let negative = cx.add1(Compare { op: CmpOp::Lt }, &[s, zero])?;
    let too_far = cx.add1(Compare { op: CmpOp::Ge }, &[s, width])?;
    let out_of_range = bin(cx, BinaryOp::BitOr, negative, too_far)?;
    let fill = if left {
        zero
    } else {
        let x_negative = cx.add1(Compare { op: CmpOp::Lt }, &[x, zero])?;
        let minus_one = cx.scalar(dt, -1.0)?;
        select(cx, x_negative, minus_one, zero)?
    };
    Ok(vec![select(cx, out_of_range, fill, shifted)?])
}

/// `x · sigmoid(α·x)`.
fn swish(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let ax = bin_scalar(cx, BinaryOp::Mul, x, n.float("alpha", 1.0) as f64)?;
    let s = act(cx, ActivationKind::Sigmoid, ax)?;
    Ok(vec![bin(cx, BinaryOp::Mul, x, s)?])
}

/// `SwiGLU` (opset 28): `Swish_α(A)·B` for same-shaped gate `A` and value `B`.
fn swiglu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (a, b) = (n.input(0)?, n.input(1)?);
    if cx.ty(a).shape != cx.ty(b).shape {
        return invalid(format!("gate {} and value {} must have one shape", cx.ty(a), cx.ty(b)));
    }
    let gate = swish(cx, n)?[0];
    Ok(vec![bin(cx, BinaryOp::Mul, gate, b)?])
}

/// The `to` dtype of `Cast`.
fn target(n: &OnnxNode<'_, '_>) -> OpResult<DType> {
    let code = n.int("to", 0) as i32;
    dtype(code).map_or_else(|| unsupported(format!("cast to {}", crate::onnx::tensor::type_name(code))), Ok)
}

fn cast(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let to = target(n)?;
    Ok(vec![cast_value(cx, n, n.input(0)?, to)?])
}

fn cast_like(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let to = cx.dtype(n.input(1)?);
    Ok(vec![cast_value(cx, n, n.input(0)?, to)?])
}

/// ONNX casts where rlx's `as`-style `Cast` differs:
/// - to Bool means "non-zero", which rlx's cast does not promise;
/// - to the FP8 types, `saturate` (default 1) clamps to ±max finite first (±inf included,
///   NaN kept); rlx's cast overflows to inf or NaN as ONNX's `saturate=0` does;
/// - to E8M0 rlx rounds the exponent up: only `round_mode="up"` (the default), saturating;
/// - from floats to the sub-byte integers ONNX leaves out-of-range values undefined and its
///   reference (ml_dtypes) gives 0 where the truncated value leaves the range, NaN too; rlx's
///   cast saturates, so those inputs are zeroed first.
pub(super) fn cast_value(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, x: ValueId, to: DType) -> OpResult<ValueId> {
    let from = cx.dtype(x);
    if to == DType::Bool && from != DType::Bool {
        let zero = cx.scalar(from, 0.0)?;
        return cx.add1(Compare { op: CmpOp::Ne }, &[x, zero]);
    }
    if to == DType::F8E8M0 {
        let mode = n.string("round_mode", "up");
        if mode != "up" || n.int("saturate", 1) == 0 {
            return unsupported(format!("cast to {to} with round_mode `{mode}` and saturate {}", n.int("saturate", 1)));
        }
    }
    let saturating = to != DType::F8E8M0 && to.is_minifloat() && n.int("saturate", 1) != 0;
    let from_float = from.is_float() || from.is_minifloat();
    if !(saturating || (to.is_narrow_int() && from_float)) {
        return cast_to(cx, x, to);
    }
    let x = if from.is_float() { x } else { cast_to(cx, x, DType::F32)? };
    let x = if saturating {
        let max = rlx_ir::ops::quant::minifloat::format_of(to).map_or(f32::MAX, |f| f.max_finite()) as f64;
        let x = bin_scalar(cx, BinaryOp::Max, x, -max)?;
        bin_scalar(cx, BinaryOp::Min, x, max)?
    } else {
        let (lo, hi) = match to {
            DType::I4 => (-8.0, 7.0),
            DType::U4 => (0.0, 15.0),
            DType::I2 => (-2.0, 1.0),
            _ => (0.0, 3.0),
        };
        let lo_bound = cx.scalar(cx.dtype(x), lo - 1.0)?;
        let hi_bound = cx.scalar(cx.dtype(x), hi + 1.0)?;
        let above = cx.add1(Compare { op: CmpOp::Gt }, &[x, lo_bound])?;
        let below = cx.add1(Compare { op: CmpOp::Lt }, &[x, hi_bound])?;
        let keep = bin(cx, BinaryOp::BitAnd, above, below)?;
        let zero = cx.scalar(cx.dtype(x), 0.0)?;
        select(cx, keep, x, zero)?
    };
    cast_to(cx, x, to)
}

/// `Dropout` at inference: the input, and an all-true mask when asked for.
/// `Dropout`: the identity (with an all-true mask) outside training mode or at ratio 0; in
/// training mode, `x·mask/(1 − ratio)` with `mask = U[0, 1) ≥ ratio` drawn by `RngUniform`
/// (the `seed` attribute fixes rlx's stream, not NumPy's).
fn dropout(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let training = match n.opt_input(2) {
        Some(t) => cx.const_ints(t, "training_mode")?.first().copied().unwrap_or(0) != 0,
        None => false,
    };
    let no_drop = n.opt_input(1).and_then(|r| cx.const_f64s(r)).is_some_and(|r| r.iter().all(|&v| v == 0.0));
    let dims = cx.dims(x)?;
    if !training || no_drop {
        let mut outs = vec![x];
        if n.proto.output.len() > 1 {
            let count = dims.iter().product();
            outs.push(cx.values(DType::Bool, &dims, &vec![1.0; count])?);
        }
        return Ok(outs);
    }
    let dt = cx.dtype(x);
    let ratio = match n.opt_input(1) {
        Some(r) => cast_to(cx, r, dt)?,
        None => cx.scalar(dt, 0.5)?,
    };
    let seed = n.attr("seed").map(|a| a.i as f32);
    let u = cx.add1(RngUniform { low: 0.0, high: 1.0, key: 0, op_seed: seed, shape: Some(Shape::of(&dims)) }, &[])?;
    let u = cast_to(cx, u, dt)?;
    let keep = cx.add1(Compare { op: CmpOp::Ge }, &[u, ratio])?;
    let one = cx.scalar(dt, 1.0)?;
    let kept = bin(cx, BinaryOp::Sub, one, ratio)?;
    let scaled = bin(cx, BinaryOp::Div, x, kept)?;
    let zero = cx.scalar(dt, 0.0)?;
    Ok(vec![select(cx, keep, scaled, zero)?, keep])
}

/// `Clip`: bounds as attributes before opset 11, optional inputs from 11.
fn clip(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let mut x = n.input(0)?;
    let dt = cx.dtype(x);
    let (lo, hi) = if n.opset < 11 {
        let lo = n.attr("min").map(|a| a.f);
        let hi = n.attr("max").map(|a| a.f);
        (lo.map(|v| cx.scalar(dt, v as f64)).transpose()?, hi.map(|v| cx.scalar(dt, v as f64)).transpose()?)
    } else {
        (n.opt_input(1), n.opt_input(2))
    };
    if let Some(lo) = lo {
        x = bin(cx, BinaryOp::Max, x, lo)?;
    }
    if let Some(hi) = hi {
        x = bin(cx, BinaryOp::Min, x, hi)?;
    }
    Ok(vec![x])
}

fn is_nan(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    Ok(vec![cx.add1(Compare { op: CmpOp::Ne }, &[x, x])?])
}

fn is_inf(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = cx.dtype(x);
    let pos = cx.scalar(dt, f64::INFINITY)?;
    let neg = cx.scalar(dt, f64::NEG_INFINITY)?;
    let is_pos = cx.add1(Compare { op: CmpOp::Eq }, &[x, pos])?;
    let is_neg = cx.add1(Compare { op: CmpOp::Eq }, &[x, neg])?;
    let out = match (n.int("detect_positive", 1) != 0, n.int("detect_negative", 1) != 0) {
        (true, true) => bin(cx, BinaryOp::BitOr, is_pos, is_neg)?,
        (true, false) => is_pos,
        (false, true) => is_neg,
        (false, false) => cx.add1(Compare { op: CmpOp::Ne }, &[pos, pos])?,
    };
    Ok(vec![expand_like(cx, out, x)?])
}

/// Broadcasts a Bool result to `like`'s shape where it came out smaller.
fn expand_like(cx: &mut Cx<'_>, v: ValueId, like: ValueId) -> OpResult<ValueId> {
    if cx.ty(v).shape == cx.ty(like).shape {
        return Ok(v);
    }
    let shape = cx.ty(like).shape;
    cx.add1(rlx_ir::ops::shape::Expand { target_shape: shape.dims().iter().map(Into::into).collect() }, &[v])
}

/// `x < 0 ? f(x) : x`.
fn negative_part(cx: &mut Cx<'_>, x: ValueId, f: ValueId) -> OpResult<ValueId> {
    let zero = cx.scalar(cx.dtype(x), 0.0)?;
    let neg = cx.add1(Compare { op: CmpOp::Lt }, &[x, zero])?;
    select(cx, neg, f, x)
}

/// `α·(exp(x) − 1)`.
fn expm1_scaled(cx: &mut Cx<'_>, x: ValueId, alpha: f64) -> OpResult<ValueId> {
    let e = act(cx, ActivationKind::Exp, x)?;
    let e1 = bin_scalar(cx, BinaryOp::Sub, e, 1.0)?;
    bin_scalar(cx, BinaryOp::Mul, e1, alpha)
}

fn elu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let f = expm1_scaled(cx, x, n.float("alpha", 1.0) as f64)?;
    Ok(vec![negative_part(cx, x, f)?])
}

fn selu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let alpha = n.float("alpha", 1.673_263_2) as f64;
    let gamma = n.float("gamma", 1.050_701) as f64;
    let f = expm1_scaled(cx, x, alpha)?;
    let y = negative_part(cx, x, f)?;
    Ok(vec![bin_scalar(cx, BinaryOp::Mul, y, gamma)?])
}

/// `max(0, x) + min(0, α·(exp(x/α) − 1))`.
fn celu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let alpha = n.float("alpha", 1.0) as f64;
    let scaled = bin_scalar(cx, BinaryOp::Div, x, alpha)?;
    let f = expm1_scaled(cx, scaled, alpha)?;
    Ok(vec![negative_part(cx, x, f)?])
}

fn leaky_relu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let f = bin_scalar(cx, BinaryOp::Mul, x, n.float("alpha", 0.01) as f64)?;
    Ok(vec![negative_part(cx, x, f)?])
}

/// `PRelu`; before opset 7 a 1-D slope of `C` entries is per channel (axis 1), not trailing.
fn prelu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let mut slope = n.input(1)?;
    let (xr, sd) = (cx.rank(x), cx.ty(slope).shape.0.clone());
    if n.opset < 7 && xr > 2 && sd.len() == 1 && sd[0].as_static().is_some_and(|c| c > 1) {
        let mut dims = vec![Dim::Static(1); xr - 1];
        dims[0] = sd[0].clone();
        slope = super::shape::reshape_dims(cx, slope, &dims)?;
    }
    let f = bin(cx, BinaryOp::Mul, x, slope)?;
    Ok(vec![negative_part(cx, x, f)?])
}

fn thresholded_relu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let alpha = cx.scalar(cx.dtype(x), n.float("alpha", 1.0) as f64)?;
    let zero = cx.scalar(cx.dtype(x), 0.0)?;
    let above = cx.add1(Compare { op: CmpOp::Gt }, &[x, alpha])?;
    Ok(vec![select(cx, above, x, zero)?])
}

/// `max(0, min(1, α·x + β))`.
fn hard_sigmoid(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let ax = bin_scalar(cx, BinaryOp::Mul, x, n.float("alpha", 0.2) as f64)?;
    let y = bin_scalar(cx, BinaryOp::Add, ax, n.float("beta", 0.5) as f64)?;
    let y = bin_scalar(cx, BinaryOp::Min, y, 1.0)?;
    Ok(vec![bin_scalar(cx, BinaryOp::Max, y, 0.0)?])
}

fn gelu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let kind = match n.string("approximate", "none").as_str() {
        "none" => ActivationKind::Gelu,
        "tanh" => ActivationKind::GeluApprox,
        a => return invalid(format!("approximate = `{a}`")),
    };
    unary(cx, n, kind)
}

/// `x < −λ ? x + bias : x > λ ? x − bias : 0`.
fn shrink(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = cx.dtype(x);
    let (lambd, bias) = (n.float("lambd", 0.5) as f64, n.float("bias", 0.0) as f64);
    let lo = cx.scalar(dt, -lambd)?;
    let hi = cx.scalar(dt, lambd)?;
    let zero = cx.scalar(dt, 0.0)?;
    let below = cx.add1(Compare { op: CmpOp::Lt }, &[x, lo])?;
    let above = cx.add1(Compare { op: CmpOp::Gt }, &[x, hi])?;
    let plus = bin_scalar(cx, BinaryOp::Add, x, bias)?;
    let minus = bin_scalar(cx, BinaryOp::Sub, x, bias)?;
    let upper = select(cx, above, minus, zero)?;
    Ok(vec![select(cx, below, plus, upper)?])
}

/// `√(1 − x²)`.
fn one_minus_sq_root(cx: &mut Cx<'_>, x: ValueId) -> OpResult<ValueId> {
    let sq = bin(cx, BinaryOp::Mul, x, x)?;
    let one = cx.scalar(cx.dtype(x), 1.0)?;
    let d = bin(cx, BinaryOp::Sub, one, sq)?;
    act(cx, ActivationKind::Sqrt, d)
}

fn asin(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let c = one_minus_sq_root(cx, x)?;
    Ok(vec![bin(cx, BinaryOp::Atan2, x, c)?])
}

fn acos(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let s = one_minus_sq_root(cx, x)?;
    Ok(vec![bin(cx, BinaryOp::Atan2, s, x)?])
}

/// `(exp(x) ∓ exp(−x)) / 2`.
fn exp_pair(cx: &mut Cx<'_>, x: ValueId, op: BinaryOp) -> OpResult<ValueId> {
    let e = act(cx, ActivationKind::Exp, x)?;
    let nx = act(cx, ActivationKind::Neg, x)?;
    let en = act(cx, ActivationKind::Exp, nx)?;
    let s = bin(cx, op, e, en)?;
    bin_scalar(cx, BinaryOp::Mul, s, 0.5)
}

fn sinh(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    Ok(vec![exp_pair(cx, n.input(0)?, BinaryOp::Sub)?])
}

fn cosh(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    Ok(vec![exp_pair(cx, n.input(0)?, BinaryOp::Add)?])
}

/// `log(x + √(x² ± 1))`.
fn log_root(cx: &mut Cx<'_>, x: ValueId, op: BinaryOp) -> OpResult<ValueId> {
    let sq = bin(cx, BinaryOp::Mul, x, x)?;
    let d = bin_scalar(cx, op, sq, 1.0)?;
    let r = act(cx, ActivationKind::Sqrt, d)?;
    let s = bin(cx, BinaryOp::Add, x, r)?;
    act(cx, ActivationKind::Log, s)
}

fn asinh(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    Ok(vec![log_root(cx, n.input(0)?, BinaryOp::Add)?])
}

fn acosh(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    Ok(vec![log_root(cx, n.input(0)?, BinaryOp::Sub)?])
}

/// `½·log((1 + x)/(1 − x))`.
fn atanh(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let one = cx.scalar(cx.dtype(x), 1.0)?;
    let num = bin(cx, BinaryOp::Add, one, x)?;
    let den = bin(cx, BinaryOp::Sub, one, x)?;
    let q = bin(cx, BinaryOp::Div, num, den)?;
    let l = act(cx, ActivationKind::Log, q)?;
    Ok(vec![bin_scalar(cx, BinaryOp::Mul, l, 0.5)?])
}
