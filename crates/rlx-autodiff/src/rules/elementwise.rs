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
    OpKind::ActivationBackward,
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
        Op::ActivationBackward(a) => activation_backward(a.kind, v),
        Op::SplineActivation(s) => spline(s, v),
        _ => return None,
    })
}

/// `ȳ·f′(x)` as `ActivationBackward` (`ReluBackward` for Relu; `−ȳ` for Neg, the one kind
/// that also takes C64, where `ActivationBackward` is float-only). Piecewise-constant kinds
/// follow the kernel's `f′`: zero for Floor/Ceil/Sign, one (straight-through) for Round.
fn activation(kind: ActivationKind, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy) = (v.inputs[0], v.ct(0)?);
    let dx = match kind {
        ActivationKind::Relu => v.g.add1(rlx_ir::ops::elementwise::ReluBackward {}, &[x, dy])?,
        ActivationKind::Neg => v.g.activation(ActivationKind::Neg, dy)?,
        kind => v.g.activation_backward(kind, x, dy)?,
    };
    Ok(vec![Some(dx)])
}

/// `(∂/∂a, ∂/∂b)` of each arithmetic op; bitwise ops are integer-only and never reached.
/// C64 `Mul`/`Div` take conjugates (`ȳ·conj(b)`, `ȳ/conj(b)`, ...): the cotangent is the
/// real-pair gradient (OPS.md §3, §23.2 item 16).
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
        BinaryOp::Mul => {
            let (ca, cb) = (conj(g, a)?, conj(g, b)?);
            (g.binary(BinaryOp::Mul, dy, cb)?, g.binary(BinaryOp::Mul, dy, ca)?)
        }
        BinaryOp::Div => {
            let (cb, cy) = (conj(g, b)?, conj(g, y)?);
            let da = g.binary(BinaryOp::Div, dy, cb)?;
            let q = g.binary(BinaryOp::Mul, da, cy)?;
            (da, g.activation(ActivationKind::Neg, q)?)
        }
        BinaryOp::Max | BinaryOp::Min => {
            // ȳ to the selected operand; a tie splits it ½–½ (OPS.md §3, torch.maximum).
            let wins = if op == BinaryOp::Max { CmpOp::Gt } else { CmpOp::Lt };
            let (a_wins, tie) = (g.compare(wins, a, b)?, g.compare(CmpOp::Eq, a, b)?);
            let (zero, half, one) = (scalar(g, dtype, 0.0)?, scalar(g, dtype, 0.5)?, scalar(g, dtype, 1.0)?);
            let share = g.select(tie, half, zero)?;
            let share = g.select(a_wins, one, share)?;
            let da = g.binary(BinaryOp::Mul, dy, share)?;
            (da, g.binary(BinaryOp::Sub, dy, da)?)
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

/// `conj(v)` for C64, `v` itself for real dtypes.
fn conj(g: &mut Graph, v: ValueId) -> Result<ValueId> {
    Ok(if g.ty(v).dtype == rlx_ir::DType::C64 { g.conjugate(v)? } else { v })
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

/// `ActivationBackward(x, ȳ) = ȳ·f′(x)`: linear in `ȳ` (its own VJP, `c̄·f′(x)`), and
/// `c̄·ȳ·f″(x)` for `x`.
fn activation_backward(kind: ActivationKind, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy, ct) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let ddy = if v.wants(1) { Some(v.g.activation_backward(kind, x, ct)?) } else { None };
    let dx = if v.wants(0) {
        Some(match second_derivative(v.g, kind, x)? {
            Some(f2) => {
                let p = v.g.binary(BinaryOp::Mul, ct, dy)?;
                v.g.binary(BinaryOp::Mul, p, f2)?
            }
            None => crate::reverse::zeros_like(v.g, x)?,
        })
    } else {
        None
    };
    Ok(vec![dx, ddy])
}

/// Builds elementwise expressions in one float dtype.
struct Expr<'g> {
    g: &'g mut Graph,
    dtype: rlx_ir::DType,
}

impl Expr<'_> {
    fn c(&mut self, v: f64) -> Result<ValueId> {
        Ok(scalar(self.g, self.dtype, v)?)
    }
    fn f(&mut self, kind: ActivationKind, a: ValueId) -> Result<ValueId> {
        Ok(self.g.activation(kind, a)?)
    }
    fn op(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
        Ok(self.g.binary(op, a, b)?)
    }
    fn mul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.op(BinaryOp::Mul, a, b)
    }
    /// `k·a`.
    fn scale(&mut self, k: f64, a: ValueId) -> Result<ValueId> {
        let k = self.c(k)?;
        self.mul(k, a)
    }
    /// `k + a`.
    fn shift(&mut self, k: f64, a: ValueId) -> Result<ValueId> {
        let k = self.c(k)?;
        self.op(BinaryOp::Add, k, a)
    }
    /// `1 − a`.
    fn one_minus(&mut self, a: ValueId) -> Result<ValueId> {
        let one = self.c(1.0)?;
        self.op(BinaryOp::Sub, one, a)
    }
    /// `σ(x)·(1 − σ(x))`.
    fn sigmoid_slope(&mut self, x: ValueId) -> Result<ValueId> {
        let s = self.f(ActivationKind::Sigmoid, x)?;
        let r = self.one_minus(s)?;
        self.mul(s, r)
    }
}

/// `f″(x)` from primitives (the derivative of OPS.md §3's `f′` column); `None` where it is
/// zero almost everywhere (piecewise-linear and piecewise-constant kinds).
fn second_derivative(g: &mut Graph, kind: ActivationKind, x: ValueId) -> Result<Option<ValueId>> {
    use ActivationKind::*;
    let mut e = Expr { dtype: g.ty(x).dtype, g };
    let f2 = match kind {
        Relu | Neg | Abs | Round | Floor | Ceil | Sign | HardSigmoid => return Ok(None),
        // φ(x)·(2 − x²), φ the standard normal density.
        Gelu => {
            let xx = e.mul(x, x)?;
            let h = e.scale(-0.5, xx)?;
            let p = e.f(Exp, h)?;
            let phi = e.scale(0.398_942_280_401_432_7, p)?;
            let two = e.c(2.0)?;
            let w = e.op(BinaryOp::Sub, two, xx)?;
            e.mul(phi, w)?
        }
        // With u = k(x + c·x³), t = tanh u, u′ = k(1 + 3c·x²): (1 − t²)·(u′ + 3ck·x² − x·t·u′²).
        GeluApprox => {
            let (k, c) = (0.797_884_560_802_865_4, 0.044715);
            let xx = e.mul(x, x)?;
            let xxx = e.mul(xx, x)?;
            let cx3 = e.scale(c, xxx)?;
            let inner = e.op(BinaryOp::Add, x, cx3)?;
            let u = e.scale(k, inner)?;
            let t = e.f(Tanh, u)?;
            let tt = e.mul(t, t)?;
            let s = e.one_minus(tt)?;
            let q = e.scale(3.0 * c, xx)?;
            let q = e.shift(1.0, q)?;
            let du = e.scale(k, q)?;
            let a = e.scale(3.0 * c * k, xx)?;
            let a = e.op(BinaryOp::Add, du, a)?;
            let du2 = e.mul(du, du)?;
            let xt = e.mul(x, t)?;
            let b = e.mul(xt, du2)?;
            let w = e.op(BinaryOp::Sub, a, b)?;
            e.mul(s, w)?
        }
        // σ(1 − σ)·(2 + x(1 − 2σ)).
        Silu => {
            let s = e.f(Sigmoid, x)?;
            let d = e.sigmoid_slope(x)?;
            let s2 = e.scale(-2.0, s)?;
            let w = e.shift(1.0, s2)?;
            let w = e.mul(x, w)?;
            let w = e.shift(2.0, w)?;
            e.mul(d, w)?
        }
        // σ(1 − σ)(1 − 2σ).
        Sigmoid => {
            let s = e.f(Sigmoid, x)?;
            let d = e.sigmoid_slope(x)?;
            let s2 = e.scale(-2.0, s)?;
            let w = e.shift(1.0, s2)?;
            e.mul(d, w)?
        }
        Softplus => e.sigmoid_slope(x)?,
        LogSigmoid => {
            let d = e.sigmoid_slope(x)?;
            e.f(Neg, d)?
        }
        // −2t(1 − t²).
        Tanh => {
            let t = e.f(Tanh, x)?;
            let tt = e.mul(t, t)?;
            let s = e.one_minus(tt)?;
            let m = e.scale(-2.0, t)?;
            e.mul(m, s)?
        }
        Exp => e.f(Exp, x)?,
        // −1/x².
        Log => {
            let xx = e.mul(x, x)?;
            let r = e.f(Recip, xx)?;
            e.f(Neg, r)?
        }
        // −¼·x^(−3/2).
        Sqrt => {
            let r = e.f(Rsqrt, x)?;
            let r = e.op(BinaryOp::Div, r, x)?;
            e.scale(-0.25, r)?
        }
        // ¾·x^(−5/2).
        Rsqrt => {
            let r = e.f(Rsqrt, x)?;
            let xx = e.mul(x, x)?;
            let r = e.op(BinaryOp::Div, r, xx)?;
            e.scale(0.75, r)?
        }
        Sin => {
            let s = e.f(Sin, x)?;
            e.f(Neg, s)?
        }
        Cos => {
            let c = e.f(Cos, x)?;
            e.f(Neg, c)?
        }
        // 2t(1 + t²).
        Tan => {
            let t = e.f(Tan, x)?;
            let tt = e.mul(t, t)?;
            let s = e.shift(1.0, tt)?;
            let t2 = e.scale(2.0, t)?;
            e.mul(t2, s)?
        }
        // −2x/(1 + x²)².
        Atan => {
            let xx = e.mul(x, x)?;
            let d = e.shift(1.0, xx)?;
            let dd = e.mul(d, d)?;
            let n = e.scale(-2.0, x)?;
            e.op(BinaryOp::Div, n, dd)?
        }
        // 2/x³.
        Recip => {
            let xx = e.mul(x, x)?;
            let xxx = e.mul(xx, x)?;
            let r = e.f(Recip, xxx)?;
            e.scale(2.0, r)?
        }
        // 0 above zero, eˣ below.
        Elu => {
            let zero = e.c(0.0)?;
            let pos = e.g.compare(CmpOp::Gt, x, zero)?;
            let ex = e.f(Exp, x)?;
            e.g.select(pos, zero, ex)?
        }
        // −2x·(2/√π)·e^(−x²).
        Erf => {
            let xx = e.mul(x, x)?;
            let n = e.f(Neg, xx)?;
            let p = e.f(Exp, n)?;
            let m = e.scale(-2.0 * std::f64::consts::FRAC_2_SQRT_PI, x)?;
            e.mul(m, p)?
        }
        // ⅓ on [−3, 3].
        HardSwish => {
            let a = e.f(Abs, x)?;
            let three = e.c(3.0)?;
            let inside = e.g.compare(CmpOp::Le, a, three)?;
            let third = e.c(1.0 / 3.0)?;
            let zero = e.c(0.0)?;
            e.g.select(inside, third, zero)?
        }
        // With T = tanh(softplus x): σ(1 − T²)·(2 + x(1 − σ − 2Tσ)).
        Mish => {
            let sp = e.f(Softplus, x)?;
            let t = e.f(Tanh, sp)?;
            let tt = e.mul(t, t)?;
            let s1 = e.one_minus(tt)?;
            let s = e.f(Sigmoid, x)?;
            let ts = e.mul(t, s)?;
            let ts2 = e.scale(2.0, ts)?;
            let w = e.one_minus(s)?;
            let w = e.op(BinaryOp::Sub, w, ts2)?;
            let w = e.mul(x, w)?;
            let w = e.shift(2.0, w)?;
            let a = e.mul(s, s1)?;
            e.mul(a, w)?
        }
        // −2·sign(x)/(1 + |x|)³.
        Softsign => {
            let a = e.f(Abs, x)?;
            let d = e.shift(1.0, a)?;
            let dd = e.mul(d, d)?;
            let ddd = e.mul(dd, d)?;
            let sg = e.f(Sign, x)?;
            let n = e.scale(-2.0, sg)?;
            e.op(BinaryOp::Div, n, ddd)?
        }
    };
    Ok(Some(f2))
}
