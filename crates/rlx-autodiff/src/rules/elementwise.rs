//! VJPs of the elementwise family (OPS.md §3). Gradients of broadcast operands are summed
//! back to the operand's shape.

use super::Vjp;
use crate::Result;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::{Graph, Op, OpKind, ValueId};
use rlx_opt::decompose::build::{scalar, unbroadcast};

pub const KINDS: &[OpKind] = &[
    OpKind::Activation,
    OpKind::Binary,
    OpKind::Where,
    OpKind::Cast,
    OpKind::Fma,
    OpKind::ReluBackward,
    OpKind::SplineActivation,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Activation(a) => activation(a.kind, v),
        Op::Binary(b) => binary(b.op, v),
        Op::Where(_) => select(v),
        Op::Cast(_) => cast(v),
        Op::Fma(_) => fma(v),
        Op::ReluBackward(_) => relu_backward(v),
        Op::SplineActivation(s) => spline(s, v),
        _ => return None,
    })
}

/// `ȳ·f′(x)` as `ActivationBackward` (`ReluBackward` for Relu). Piecewise-constant kinds
/// follow the kernel's `f′`: zero for Floor/Ceil/Sign, one (straight-through) for Round.
fn activation(kind: ActivationKind, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy) = (v.inputs[0], v.ct(0)?);
    let dx = match kind {
        ActivationKind::Relu => v.g.add1(rlx_ir::ops::elementwise::ReluBackward {}, &[x, dy])?,
        kind => v.g.activation_backward(kind, x, dy)?,
    };
    Ok(vec![Some(dx)])
}

/// `(∂/∂a, ∂/∂b)` of each arithmetic op; bitwise ops are integer-only and never reached.
/// `Max`/`Min` send the whole cotangent to `a` on ties (`a ≥ b` for Max); `Pow`'s `∂/∂b`
/// is `ȳ·aᵇ·ln a` where `a > 0` and zero elsewhere (as JAX); `Mod`'s `∂/∂b` is
/// `−ȳ·trunc(a/b)`.
fn binary(op: BinaryOp, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (a, b, y, dy) = (v.inputs[0], v.inputs[1], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let dtype = g.ty(y).dtype;
    let (da, db) = match op {
        BinaryOp::Add => (dy, dy),
        BinaryOp::Sub => (dy, g.activation(ActivationKind::Neg, dy)?),
        BinaryOp::Mul => (g.binary(BinaryOp::Mul, dy, b)?, g.binary(BinaryOp::Mul, dy, a)?),
        BinaryOp::Div => {
            let da = g.binary(BinaryOp::Div, dy, b)?;
            let q = g.binary(BinaryOp::Mul, da, y)?;
            (da, g.activation(ActivationKind::Neg, q)?)
        }
        BinaryOp::Max | BinaryOp::Min => {
            let cmp = if op == BinaryOp::Max { CmpOp::Ge } else { CmpOp::Le };
            let pick_a = g.compare(cmp, a, b)?;
            let zero = scalar(g, dtype, 0.0)?;
            (g.select(pick_a, dy, zero)?, g.select(pick_a, zero, dy)?)
        }
        BinaryOp::Pow => {
            let one = scalar(g, dtype, 1.0)?;
            let bm1 = g.binary(BinaryOp::Sub, b, one)?;
            let p = g.binary(BinaryOp::Pow, a, bm1)?;
            let da = g.binary(BinaryOp::Mul, p, b)?;
            let da = g.binary(BinaryOp::Mul, da, dy)?;
            let zero = scalar(g, dtype, 0.0)?;
            let pos = g.compare(CmpOp::Gt, a, zero)?;
            let safe = g.select(pos, a, one)?;
            let ln = g.activation(ActivationKind::Log, safe)?;
            let db = g.binary(BinaryOp::Mul, y, ln)?;
            let db = g.binary(BinaryOp::Mul, db, dy)?;
            (da, g.select(pos, db, zero)?)
        }
        BinaryOp::Atan2 => {
            let aa = g.binary(BinaryOp::Mul, a, a)?;
            let bb = g.binary(BinaryOp::Mul, b, b)?;
            let r2 = g.binary(BinaryOp::Add, aa, bb)?;
            let s = g.binary(BinaryOp::Div, dy, r2)?;
            let da = g.binary(BinaryOp::Mul, s, b)?;
            let db = g.binary(BinaryOp::Mul, s, a)?;
            (da, g.activation(ActivationKind::Neg, db)?)
        }
        BinaryOp::Mod => {
            let q = g.binary(BinaryOp::Div, a, b)?;
            let t = trunc(g, q)?;
            let db = g.binary(BinaryOp::Mul, dy, t)?;
            (dy, g.activation(ActivationKind::Neg, db)?)
        }
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => return Ok(vec![None, None]),
    };
    Ok(vec![Some(back_to(g, da, a)?), Some(back_to(g, db, b)?)])
}

/// `trunc(q)`: `Floor` for `q ≥ 0`, `Ceil` below.
fn trunc(g: &mut Graph, q: ValueId) -> Result<ValueId> {
    let zero = scalar(g, g.ty(q).dtype, 0.0)?;
    let pos = g.compare(CmpOp::Ge, q, zero)?;
    let f = g.activation(ActivationKind::Floor, q)?;
    let c = g.activation(ActivationKind::Ceil, q)?;
    Ok(g.select(pos, f, c)?)
}

/// `ct` summed down to the shape of `operand`.
pub(crate) fn back_to(g: &mut Graph, ct: ValueId, operand: ValueId) -> Result<ValueId> {
    let shape = g.ty(operand).shape.clone();
    Ok(unbroadcast(g, ct, &shape)?)
}

/// `Where(c, t, f)`: `ȳ` where `c` to `t`, elsewhere to `f`; the condition gets none.
fn select(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (c, t, f, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let g = &mut *v.g;
    let zero = scalar(g, g.ty(dy).dtype, 0.0)?;
    let dt = g.select(c, dy, zero)?;
    let df = g.select(c, zero, dy)?;
    Ok(vec![None, Some(back_to(g, dt, t)?), Some(back_to(g, df, f)?)])
}

/// A cast between float and C64 dtypes passes `ȳ` back in the operand's dtype (real → C64
/// back as the real part, C64 → real back as `ȳ + 0i`, OPS.md §23.2 item 16).
fn cast(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let to = v.g.ty(v.inputs[0]).dtype;
    if !(to.is_float() || to == rlx_ir::DType::C64) {
        return Ok(vec![None]);
    }
    let dy = v.ct(0)?;
    Ok(vec![Some(v.g.cast(dy, to)?)])
}

/// `a·b + c`: `(ȳ·b, ȳ·a, ȳ)`.
fn fma(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (a, b, c, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let g = &mut *v.g;
    let da = g.binary(BinaryOp::Mul, dy, b)?;
    let db = g.binary(BinaryOp::Mul, dy, a)?;
    Ok(vec![Some(back_to(g, da, a)?), Some(back_to(g, db, b)?), Some(back_to(g, dy, c)?)])
}

/// `ReluBackward(x, ȳ) = ȳ·1[x > 0]` is linear in `ȳ` (its own VJP) and flat in `x`.
fn relu_backward(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, ct) = (v.inputs[0], v.ct(0)?);
    Ok(vec![None, Some(v.g.add1(rlx_ir::ops::elementwise::ReluBackward {}, &[x, ct])?)])
}

/// `SplineActivationBackwardX` and `SplineActivationBackwardCoeff`.
fn spline(s: &rlx_ir::ops::elementwise::SplineActivation, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    use rlx_ir::ops::elementwise::{SplineActivationBackwardCoeff, SplineActivationBackwardX};
    let (x, coeff, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let (num_basis, grid_min, grid_max) = (s.num_basis, s.grid_min, s.grid_max);
    let dx = v.g.add1(SplineActivationBackwardX { num_basis, grid_min, grid_max }, &[x, coeff, dy])?;
    let dc = v.g.add1(SplineActivationBackwardCoeff { num_basis, grid_min, grid_max }, &[x, dy])?;
    Ok(vec![Some(dx), Some(dc)])
}
