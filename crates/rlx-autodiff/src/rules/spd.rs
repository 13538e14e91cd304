//! VJPs of the SPD-manifold family (OPS.md §16, §22): each forward op emits its `*Backward`
//! op(s); the eigenvalue-function backward ops (`ReEigBackward`, `LogEigBackward`,
//! `SpdMatrixFnBatchBackward`), the batch-norm and the AIRM map/transport backward ops have
//! closed-form second-order rules: reverse mode, written out, through the steps their kernels
//! take, with each Daleckii–Krein adjoint differentiated by [`dk_vjp`] and `EighBackward`. `BiMap` has none here: it is lowered to `MatMul` + `Transpose` before the sweep.

use super::linalg::{add, mm, mul, pair_gaps, scale, sub, sym, unsqueeze};
use super::matmul::swap_last;
use super::Vjp;
use crate::Result;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::ops::spd::SpdMatFn;
use rlx_ir::{Graph, Op, OpKind, ValueId};
use rlx_opt::decompose::build::scalar;

pub const KINDS: &[OpKind] = &[
    OpKind::ReEig,
    OpKind::LogEig,
    OpKind::SpdBatchNorm,
    OpKind::SpdLogMap,
    OpKind::SpdExpMap,
    OpKind::SpdParallelTransport,
    OpKind::SpdMatrixFnBatch,
    OpKind::ReEigBackward,
    OpKind::LogEigBackward,
    OpKind::SpdMatrixFnBatchBackward,
    OpKind::SpdBatchNormBackwardX,
    OpKind::SpdBatchNormBackwardG,
    OpKind::SpdLogMapBackward,
    OpKind::SpdExpMapBackward,
    OpKind::SpdParallelTransportBackward,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::ReEig(a) => eig_fn(v, |g, l, u, dy| Ok(g.re_eig_backward(l, u, dy, a.eps)?)),
        Op::LogEig(a) => eig_fn(v, |g, l, u, dy| Ok(g.log_eig_backward(l, u, dy, a.eps)?)),
        Op::SpdBatchNorm(a) => batch_norm(a.eps, v),
        Op::SpdLogMap(_) => {
            let (p, x, dy) = (v.inputs[0], v.inputs[1], v.ct(0));
            dy.and_then(|dy| Ok(v.g.spd_log_map_backward(p, x, dy)?.into_iter().map(Some).collect()))
        }
        Op::SpdExpMap(_) => {
            let (p, x, dy) = (v.inputs[0], v.inputs[1], v.ct(0));
            dy.and_then(|dy| Ok(v.g.spd_exp_map_backward(p, x, dy)?.into_iter().map(Some).collect()))
        }
        Op::SpdParallelTransport(_) => {
            let (p, q, x, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0));
            dy.and_then(|dy| Ok(v.g.spd_parallel_transport_backward(p, q, x, dy)?.into_iter().map(Some).collect()))
        }
        Op::SpdMatrixFnBatch(a) => {
            let (x, dy) = (v.inputs[0], v.ct(0));
            dy.and_then(|dy| Ok(vec![Some(v.g.spd_matrix_fn_batch_backward(x, dy, a.kind)?)]))
        }
        Op::ReEigBackward(a) => eig_fn_backward(Spectral::Floor(a.eps.into()), v),
        Op::LogEigBackward(a) => eig_fn_backward(Spectral::Log(a.eps.into()), v),
        Op::SpdMatrixFnBatchBackward(a) => matrix_fn_backward(a.kind, v),
        Op::SpdBatchNormBackwardX(a) => batch_norm_backward_x(a.eps, v),
        Op::SpdBatchNormBackwardG(a) => batch_norm_backward_g(a.eps.into(), v),
        Op::SpdLogMapBackward(_) => map_backward(Spectral::Log(0.0), v),
        Op::SpdExpMapBackward(_) => map_backward(Spectral::Exp, v),
        Op::SpdParallelTransportBackward(_) => transport_backward(v),
        _ => return None,
    })
}

/// `ReEig`/`LogEig` (outputs `Y, λ, U`): `X̄` is the function's backward op for `Ȳ` plus
/// `EighBackward` for cotangents reaching the raw eigendecomposition.
fn eig_fn(
    v: &mut Vjp,
    backward: impl Fn(&mut Graph, ValueId, ValueId, ValueId) -> Result<ValueId>,
) -> Result<Vec<Option<ValueId>>> {
    let (lam, u) = (v.outputs[1], v.outputs[2]);
    let mut dx = match v.cts[0] {
        Some(dy) => Some(backward(v.g, lam, u, dy)?),
        None => None,
    };
    if v.cts[1].is_some() || v.cts[2].is_some() {
        let (dlam, du) = (v.ct(1)?, v.ct(2)?);
        let de = v.g.eigh_backward(lam, u, dlam, du)?;
        dx = Some(match dx {
            Some(d) => add(v.g, d, de)?,
            None => de,
        });
    }
    Ok(vec![dx])
}

/// `(X, M, G)`: `SpdBatchNormBackwardX` and `SpdBatchNormBackwardG`; the batch mean `M` is a
/// detached statistic (OPS.md §16) and gets none.
fn batch_norm(eps: f32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, m, gm, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let dx = if v.wanted[0] { Some(v.g.spd_batch_norm_backward_x(m, gm, dy, eps)?) } else { None };
    let dg = if v.wanted[2] { Some(v.g.spd_batch_norm_backward_g(x, m, gm, dy, eps)?) } else { None };
    Ok(vec![dx, None, dg])
}

/// Second order of `dX_i = Aᵀ·Ȳ_i·A`, `A = G^{1/2}M^{−1/2}`: with `X̄̄` the cotangent,
/// `Ȳ̄_i = A·X̄̄_i·Aᵀ` (the forward op applied to it) and `Ḡ` = `SpdBatchNormBackwardG` with
/// `X̄̄` in the place of `X` (both are `Σ⟨·, G^{1/2}·Z_i·G^{1/2}⟩` with `Z_i = M^{−1/2}·X̄̄_i·M^{−1/2}`);
/// `M` none, as in the forward.
fn batch_norm_backward_x(eps: f32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (m, gm, dy, c) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let d_dy = if v.wanted[2] { Some(v.g.spd_batch_norm(c, m, gm, eps)?) } else { None };
    let dg = if v.wanted[1] { Some(v.g.spd_batch_norm_backward_g(c, m, gm, dy, eps)?) } else { None };
    Ok(vec![None, dg, d_dy])
}

/// Second order of `dG = SpdBatchNormBackwardG(X, M, G, Ȳ)`, the adjoint of `√·` at `G` applied
/// to `R̄ = Σ_i (Ȳ_i·R·Z_iᵀ + Z_iᵀ·R·Ȳ_i)`, rebuilt from `Eigh(G)` and `Eigh(M)` with the op's
/// floors (`R = G^{1/2}`, `T = M^{−1/2}`, `Z_i = T·X_i·T`). With `K` the cotangent of `R̄` from
/// [`dk_vjp`]: `Ȳ̄_i = K·Z_i·R + R·Z_i·K`, `X̄_i = T·(Kᵀ·Ȳ_i·R + R·Ȳ_i·Kᵀ)·T`, and `Ḡ` is
/// `EighBackward` of the decomposition's cotangents plus the adjoint of `√·` applied to
/// `Σ_i (Ȳ_iᵀ·K·Z_i + Z_i·K·Ȳ_iᵀ)`. `M` none, as in the forward.
fn batch_norm_backward_g(eps: f64, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, m, gm, dy, c) = (v.inputs[0], v.inputs[1], v.inputs[2], v.inputs[3], v.ct(0)?);
    let g = &mut *v.g;
    let root = Spectral::Sqrt(eps);
    let ge = g.eigh(gm)?;
    let me = g.eigh(m)?;
    let r = spectral(g, root, ge[0], ge[1])?;
    let t = spectral(g, Spectral::InvSqrt(eps), me[0], me[1])?;
    let tx = mm(g, t, x)?;
    let z = mm(g, tx, t)?;
    let zt = swap_last(g, z)?;
    let yr = mm(g, dy, r)?;
    let a = mm(g, yr, zt)?;
    let zr = mm(g, zt, r)?;
    let b = mm(g, zr, dy)?;
    let ab = add(g, a, b)?;
    let rbar = g.reduce(ReduceOp::Sum, ab, &[0], false)?;
    let [dlam, du, k] = dk_vjp(g, root, ge[0], ge[1], rbar, c)?;

    let kz = mm(g, k, z)?;
    let a = mm(g, kz, r)?;
    let rz = mm(g, r, z)?;
    let b = mm(g, rz, k)?;
    let d_dy = add(g, a, b)?;

    let kt = swap_last(g, k)?;
    let ky = mm(g, kt, dy)?;
    let a = mm(g, ky, r)?;
    let ry = mm(g, r, dy)?;
    let b = mm(g, ry, kt)?;
    let zbar = add(g, a, b)?;
    let tz = mm(g, t, zbar)?;
    let dx = mm(g, tz, t)?;

    let dyt = swap_last(g, dy)?;
    let yk = mm(g, dyt, k)?;
    let a = mm(g, yk, z)?;
    let zk = mm(g, z, k)?;
    let b = mm(g, zk, dyt)?;
    let ab = add(g, a, b)?;
    let rb = g.reduce(ReduceOp::Sum, ab, &[0], false)?;
    let through_root = dk(g, root, ge[0], ge[1], rb)?;
    let through_eig = g.eigh_backward(ge[0], ge[1], dlam, du)?;
    let dg = add(g, through_root, through_eig)?;
    Ok(vec![Some(dx), None, Some(dg), Some(d_dy)])
}

/// A spectral function as the kernels evaluate it: floored ones clamp `λ` to
/// `max(λ, floor)` and have zero derivatives at `λ ≤ floor`.
#[derive(Clone, Copy)]
enum Spectral {
    /// `max(λ, floor)` (`ReEig`).
    Floor(f64),
    /// `log max(λ, floor)`.
    Log(f64),
    Exp,
    /// `max(λ, floor)^{1/2}`.
    Sqrt(f64),
    /// `max(λ, floor)^{−1/2}`.
    InvSqrt(f64),
}

impl Spectral {
    fn of(kind: SpdMatFn) -> Spectral {
        match kind {
            SpdMatFn::Logm => Spectral::Log(0.0),
            SpdMatFn::Expm => Spectral::Exp,
            SpdMatFn::Sqrtm => Spectral::Sqrt(0.0),
            SpdMatFn::Invsqrtm => Spectral::InvSqrt(0.0),
        }
    }

    /// `(f, f′, f″)` at each entry of `lam`.
    fn eval(self, g: &mut Graph, lam: ValueId) -> Result<[ValueId; 3]> {
        use ActivationKind::{Exp, Log, Recip, Rsqrt, Sqrt};
        let floor = match self {
            Spectral::Floor(e) | Spectral::Log(e) | Spectral::Sqrt(e) | Spectral::InvSqrt(e) => e,
            Spectral::Exp => {
                let e = g.activation(Exp, lam)?;
                return Ok([e, e, e]);
            }
        };
        let dtype = g.ty(lam).dtype;
        let fl = scalar(g, dtype, floor)?;
        let x = g.binary(BinaryOp::Max, lam, fl)?;
        let (f, d1, d2) = match self {
            Spectral::Floor(_) => (x, scalar(g, dtype, 1.0)?, scalar(g, dtype, 0.0)?),
            Spectral::Log(_) => {
                let r = g.activation(Recip, x)?;
                let r2 = mul(g, r, r)?;
                (g.activation(Log, x)?, r, g.activation(ActivationKind::Neg, r2)?)
            }
            Spectral::Sqrt(_) | Spectral::InvSqrt(_) => {
                let s = g.activation(Sqrt, x)?;
                let rs = g.activation(Rsqrt, x)?;
                let r = g.activation(Recip, x)?;
                let x32 = mul(g, rs, r)?;
                if matches!(self, Spectral::Sqrt(_)) {
                    let x12 = scale(g, rs, 0.5)?;
                    let x32 = scale(g, x32, -0.25)?;
                    (s, x12, x32)
                } else {
                    let x52 = mul(g, x32, r)?;
                    (rs, scale(g, x32, -0.5)?, scale(g, x52, 0.75)?)
                }
            }
            Spectral::Exp => unreachable!("returned above"),
        };
        let above = g.compare(CmpOp::Gt, lam, fl)?;
        let zero = scalar(g, dtype, 0.0)?;
        Ok([f, g.select(above, d1, zero)?, g.select(above, d2, zero)?])
    }
}

/// The divided differences `L_ij = (f_i − f_j)/(λ_i − λ_j)` (`f′_i` where `λ_i = λ_j`) and
/// their slopes `E_ij = ∂L_ij/∂λ_i = (f′_i − L_ij)/(λ_i − λ_j)` (`f″_i/2` where tied), as
/// `[.., n, n]`. Formed directly (the kernel's cancellation-free forms are not reproduced), so
/// very close eigenvalues lose precision.
fn divided(g: &mut Graph, f: Spectral, lam: ValueId) -> Result<[ValueId; 2]> {
    let dtype = g.ty(lam).dtype;
    let r = g.ty(lam).rank();
    let [fv, f1, f2] = f.eval(g, lam)?;
    let gap = pair_gaps(g, lam)?;
    let zero = scalar(g, dtype, 0.0)?;
    let one = scalar(g, dtype, 1.0)?;
    let tied = g.compare(CmpOp::Eq, gap, zero)?;
    let safe = g.select(tied, one, gap)?;
    let fgap = pair_gaps(g, fv)?;
    let quotient = g.binary(BinaryOp::Div, fgap, safe)?;
    let f1c = unsqueeze(g, f1, r)?;
    let l = g.select(tied, f1c, quotient)?;
    let lf = sub(g, l, f1c)?;
    let slope = g.binary(BinaryOp::Div, lf, safe)?;
    let f2c = unsqueeze(g, f2, r)?;
    let half_f2 = scale(g, f2c, 0.5)?;
    Ok([l, g.select(tied, half_f2, slope)?])
}

/// `U·f(Λ)·Uᵀ`.
fn spectral(g: &mut Graph, f: Spectral, lam: ValueId, u: ValueId) -> Result<ValueId> {
    let [fv, _, _] = f.eval(g, lam)?;
    let r = g.ty(lam).rank();
    let row = unsqueeze(g, fv, r - 1)?;
    let uf = mul(g, u, row)?;
    let ut = swap_last(g, u)?;
    mm(g, uf, ut)
}

/// The Daleckii–Krein adjoint `U·(L∘(Uᵀ·sym(Ȳ)·U))·Uᵀ` of `X ↦ f(X)` at `X = U·Λ·Uᵀ`.
fn dk(g: &mut Graph, f: Spectral, lam: ValueId, u: ValueId, dy: ValueId) -> Result<ValueId> {
    let [l, _] = divided(g, f, lam)?;
    let s = sym(g, dy)?;
    let ut = swap_last(g, u)?;
    let su = mm(g, s, u)?;
    let t = mm(g, ut, su)?;
    let w = mul(g, l, t)?;
    let uw = mm(g, u, w)?;
    mm(g, uw, ut)
}

/// Closed-form VJP of the Daleckii–Krein adjoint `X̄ = U·(L∘(Uᵀ·S·U))·Uᵀ`, `S = sym(Ȳ)`,
/// `L_ij = (f_i − f_j)/(λ_i − λ_j)` (`f′_i` where `λ_i = λ_j`), w.r.t. `(λ, U, Ȳ)` for the
/// cotangent `c`. With `T = Uᵀ·S·U`, `W = L∘T`, `W̄ = Uᵀ·c·U`, `T̄ = L∘W̄`:
/// `Ū = (c + cᵀ)·U·W + S·U·(T̄ + T̄ᵀ)`, `Ȳ̄ = U·sym(T̄)·Uᵀ`, and
/// `λ̄_k = Σ_j (L̄ + L̄ᵀ)_kj·E_kj` with `L̄ = T∘W̄`, `E_kj = ∂L_kj/∂λ_k = (f′_k − L_kj)/(λ_k − λ_j)`
/// (`f″_k/2` where `λ_k = λ_j`), both from [`divided`].
fn dk_vjp(g: &mut Graph, f: Spectral, lam: ValueId, u: ValueId, dy: ValueId, c: ValueId) -> Result<[ValueId; 3]> {
    let r = g.ty(lam).rank();
    let [l, e] = divided(g, f, lam)?;
    let s = sym(g, dy)?;
    let ut = swap_last(g, u)?;
    let su = mm(g, s, u)?;
    let t = mm(g, ut, su)?;
    let w = mul(g, l, t)?;
    let cu = mm(g, c, u)?;
    let wbar = mm(g, ut, cu)?;
    let tbar = mul(g, l, wbar)?;
    let lbar = mul(g, t, wbar)?;

    let ct = swap_last(g, c)?;
    let ctu = mm(g, ct, u)?;
    let cc = add(g, cu, ctu)?;
    let u1 = mm(g, cc, w)?;
    let tbar_t = swap_last(g, tbar)?;
    let tt = add(g, tbar, tbar_t)?;
    let u2 = mm(g, su, tt)?;
    let du = add(g, u1, u2)?;

    let ts = scale(g, tt, 0.5)?;
    let uts = mm(g, u, ts)?;
    let d_dy = mm(g, uts, ut)?;

    let lbar_t = swap_last(g, lbar)?;
    let ll = add(g, lbar, lbar_t)?;
    let le = mul(g, ll, e)?;
    let dlam = g.reduce(ReduceOp::Sum, le, &[r], false)?;
    Ok([dlam, du, d_dy])
}

/// Second order of `ReEigBackward`/`LogEigBackward(λ, U, Ȳ)`: [`dk_vjp`] at the given `λ`, `U`.
fn eig_fn_backward(f: Spectral, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (lam, u, dy, c) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let [dlam, du, d_dy] = dk_vjp(v.g, f, lam, u, dy, c)?;
    Ok(vec![Some(dlam), Some(du), Some(d_dy)])
}

/// Second order of `SpdMatrixFnBatchBackward{kind}(X, Ȳ)`: the op is the Daleckii–Krein adjoint
/// at `EighBatch(X)`, so [`dk_vjp`] at that decomposition, chained into `EighBatchBackward`.
fn matrix_fn_backward(kind: SpdMatFn, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy, c) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let g = &mut *v.g;
    let lu = g.eigh_batch(x)?;
    let [dlam, du, d_dy] = dk_vjp(g, Spectral::of(kind), lu[0], lu[1], dy, c)?;
    let dx = if v.wanted[0] { Some(g.eigh_batch_backward(lu[0], lu[1], dlam, du)?) } else { None };
    Ok(vec![dx, Some(d_dy)])
}


/// `xs[0]·xs[1]·…` (matrix products over the last two axes).
fn prod(g: &mut Graph, xs: &[ValueId]) -> Result<ValueId> {
    let mut acc = xs[0];
    for &x in &xs[1..] {
        acc = mm(g, acc, x)?;
    }
    Ok(acc)
}

/// `a·b·c + d·e·f`.
fn two(g: &mut Graph, [a, b, c]: [ValueId; 3], [d, e, f]: [ValueId; 3]) -> Result<ValueId> {
    let x = prod(g, &[a, b, c])?;
    let y = prod(g, &[d, e, f])?;
    add(g, x, y)
}

/// A base point `P` as the geometry kernels use it: its eigendecomposition and `S = P^{1/2}`,
/// `T = P^{−1/2}`.
struct Base {
    lam: ValueId,
    u: ValueId,
    s: ValueId,
    t: ValueId,
}

impl Base {
    fn new(g: &mut Graph, p: ValueId) -> Result<Base> {
        let e = g.eigh(p)?;
        let s = spectral(g, Spectral::Sqrt(0.0), e[0], e[1])?;
        let t = spectral(g, Spectral::InvSqrt(0.0), e[0], e[1])?;
        Ok(Base { lam: e[0], u: e[1], s, t })
    }

    /// `P̄ = DK_√(S̄) + DK_{1/√}(T̄)`.
    fn adjoint(&self, g: &mut Graph, sbar: ValueId, tbar: ValueId) -> Result<ValueId> {
        let a = dk(g, Spectral::Sqrt(0.0), self.lam, self.u, sbar)?;
        let b = dk(g, Spectral::InvSqrt(0.0), self.lam, self.u, tbar)?;
        add(g, a, b)
    }

    /// The cotangent of `P` from the cotangent `c` of `adjoint(S̄, T̄)`: `(S̄̄, T̄̄)` and the part
    /// through the decomposition (`EighBackward`).
    fn adjoint_vjp(&self, g: &mut Graph, sbar: ValueId, tbar: ValueId, c: ValueId) -> Result<[ValueId; 3]> {
        let [l1, u1, dsbar] = dk_vjp(g, Spectral::Sqrt(0.0), self.lam, self.u, sbar, c)?;
        let [l2, u2, dtbar] = dk_vjp(g, Spectral::InvSqrt(0.0), self.lam, self.u, tbar, c)?;
        let (l, u) = (add(g, l1, l2)?, add(g, u1, u2)?);
        Ok([dsbar, dtbar, g.eigh_backward(self.lam, self.u, l, u)?])
    }
}

/// Second order of `SpdLogMapBackward`/`SpdExpMapBackward(P, Z, Ȳ)`, whose kernel computes
/// `C = T·Z·T`, `F = f(C)`, `C̄ = DK_f(C)[S·Ȳ·S]`,
/// `dP = DK_√(P)[Ȳ·S·F + F·S·Ȳ] + DK_{1/√}(P)[C̄·T·Zᵀ + Zᵀ·T·C̄]`, `dZ = T·C̄·T`.
fn map_backward(f: Spectral, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (p, z, dy) = (v.inputs[0], v.inputs[1], v.inputs[2]);
    let (a, b) = (v.ct(0)?, v.ct(1)?);
    let g = &mut *v.g;
    let base = Base::new(g, p)?;
    let (s, t) = (base.s, base.t);
    let c = prod(g, &[t, z, t])?;
    let ce = g.eigh(c)?;
    let fc = spectral(g, f, ce[0], ce[1])?;
    let fb = prod(g, &[s, dy, s])?;
    let sb = two(g, [dy, s, fc], [fc, s, dy])?;
    let cb = dk(g, f, ce[0], ce[1], fb)?;
    let zt = swap_last(g, z)?;
    let tb = two(g, [cb, t, zt], [zt, t, cb])?;
    let [sb_bar, tb_bar, mut p_bar] = base.adjoint_vjp(g, sb, tb, a)?;

    let (cbt, dyt, tbt) = (swap_last(g, cb)?, swap_last(g, dy)?, swap_last(g, tb_bar)?);
    let mut t_bar = two(g, [b, t, cbt], [cbt, t, b])?;
    let x = two(g, [cbt, tb_bar, z], [z, tb_bar, cbt])?;
    t_bar = add(g, t_bar, x)?;
    let cb_bar = prod(g, &[t, b, t])?;
    let x = two(g, [tb_bar, z, t], [t, z, tb_bar])?;
    let cb_bar = add(g, cb_bar, x)?;
    let mut z_bar = two(g, [tbt, cb, t], [t, cb, tbt])?;

    let [lc, uc, fb_bar] = dk_vjp(g, f, ce[0], ce[1], fb, cb_bar)?;
    let mut dy_bar = two(g, [sb_bar, fc, s], [s, fc, sb_bar])?;
    let x = prod(g, &[s, fb_bar, s])?;
    dy_bar = add(g, dy_bar, x)?;
    let mut s_bar = two(g, [dyt, sb_bar, fc], [fc, sb_bar, dyt])?;
    let x = two(g, [fb_bar, s, dyt], [dyt, s, fb_bar])?;
    s_bar = add(g, s_bar, x)?;
    let f_bar = two(g, [s, dyt, sb_bar], [sb_bar, dyt, s])?;

    let c1 = dk(g, f, ce[0], ce[1], f_bar)?;
    let c2 = g.eigh_backward(ce[0], ce[1], lc, uc)?;
    let c_bar = add(g, c1, c2)?;
    let x = two(g, [c_bar, t, zt], [zt, t, c_bar])?;
    t_bar = add(g, t_bar, x)?;
    let x = prod(g, &[t, c_bar, t])?;
    z_bar = add(g, z_bar, x)?;
    let x = base.adjoint(g, s_bar, t_bar)?;
    p_bar = add(g, p_bar, x)?;
    Ok(vec![Some(p_bar), Some(z_bar), Some(dy_bar)])
}

/// `acc + x`, in place.
fn acc(g: &mut Graph, acc: &mut ValueId, x: ValueId) -> Result<()> {
    *acc = add(g, *acc, x)?;
    Ok(())
}

/// Second order of `SpdParallelTransportBackward(P, Q, V, Ȳ)`, whose kernel computes
/// `K = T·Q·T`, `R = K^{1/2}`, `E = S·R·T`, `Ē = Ȳ·E·Vᵀ + Ȳᵀ·E·V`, `K̄ = DK_√(K)[S·Ē·T]`,
/// `dP = DK_√(P)[Ē·T·R] + DK_{1/√}(P)[R·S·Ē + K̄·T·Qᵀ + Qᵀ·T·K̄]`, `dQ = T·K̄·T`, `dV = Eᵀ·Ȳ·E`.
fn transport_backward(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (p, q, x, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.inputs[3]);
    let (a, bq, cv) = (v.ct(0)?, v.ct(1)?, v.ct(2)?);
    let g = &mut *v.g;
    let root = Spectral::Sqrt(0.0);
    let base = Base::new(g, p)?;
    let (s, t) = (base.s, base.t);
    let k = prod(g, &[t, q, t])?;
    let ke = g.eigh(k)?;
    let r = spectral(g, root, ke[0], ke[1])?;
    let e = prod(g, &[s, r, t])?;
    let [xt, dyt, qt, et] = [x, dy, q, e].map(|m| swap_last(g, m));
    let (xt, dyt, qt, et) = (xt?, dyt?, qt?, et?);
    let ebar = two(g, [dy, e, xt], [dyt, e, x])?;
    let sbar = prod(g, &[ebar, t, r])?;
    let rbar = prod(g, &[s, ebar, t])?;
    let kbar = dk(g, root, ke[0], ke[1], rbar)?;
    let mut tbar = prod(g, &[r, s, ebar])?;
    let y = two(g, [kbar, t, qt], [qt, t, kbar])?;
    acc(g, &mut tbar, y)?;

    let [sbar_c, tbar_c, mut p_c] = base.adjoint_vjp(g, sbar, tbar, a)?;
    let (kbart, ebart, tbar_ct) = (swap_last(g, kbar)?, swap_last(g, ebar)?, swap_last(g, tbar_c)?);
    let mut t_c = two(g, [bq, t, kbart], [kbart, t, bq])?;
    let mut kbar_c = prod(g, &[t, bq, t])?;
    let mut dy_c = prod(g, &[e, cv, et])?;
    let cvt = swap_last(g, cv)?;
    let mut e_c = two(g, [dy, e, cvt], [dyt, e, cv])?;
    let mut r_c = prod(g, &[tbar_c, ebart, s])?;
    let mut s_c = prod(g, &[r, tbar_c, ebart])?;
    let mut ebar_c = prod(g, &[s, r, tbar_c])?;
    let y = two(g, [tbar_c, q, t], [t, q, tbar_c])?;
    acc(g, &mut kbar_c, y)?;
    let y = two(g, [kbart, tbar_c, q], [q, tbar_c, kbart])?;
    acc(g, &mut t_c, y)?;
    let mut q_c = two(g, [tbar_ct, kbar, t], [t, kbar, tbar_ct])?;

    let [lk, uk, rbar_c] = dk_vjp(g, root, ke[0], ke[1], rbar, kbar_c)?;
    let y = prod(g, &[rbar_c, t, ebart])?;
    acc(g, &mut s_c, y)?;
    let y = prod(g, &[s, rbar_c, t])?;
    acc(g, &mut ebar_c, y)?;
    let y = prod(g, &[ebart, s, rbar_c])?;
    acc(g, &mut t_c, y)?;
    let y = prod(g, &[sbar_c, r, t])?;
    acc(g, &mut ebar_c, y)?;
    let y = prod(g, &[ebart, sbar_c, r])?;
    acc(g, &mut t_c, y)?;
    let y = prod(g, &[t, ebart, sbar_c])?;
    acc(g, &mut r_c, y)?;

    let ebar_ct = swap_last(g, ebar_c)?;
    let y = two(g, [ebar_c, x, et], [e, x, ebar_ct])?;
    acc(g, &mut dy_c, y)?;
    let y = two(g, [dyt, ebar_c, x], [dy, ebar_c, xt])?;
    acc(g, &mut e_c, y)?;
    let x_c = two(g, [ebar_ct, dy, e], [et, dy, ebar_c])?;

    let y = prod(g, &[e_c, t, r])?;
    acc(g, &mut s_c, y)?;
    let y = prod(g, &[s, e_c, t])?;
    acc(g, &mut r_c, y)?;
    let y = prod(g, &[r, s, e_c])?;
    acc(g, &mut t_c, y)?;
    let mut k_c = dk(g, root, ke[0], ke[1], r_c)?;
    let y = g.eigh_backward(ke[0], ke[1], lk, uk)?;
    acc(g, &mut k_c, y)?;
    let y = two(g, [k_c, t, qt], [qt, t, k_c])?;
    acc(g, &mut t_c, y)?;
    let y = prod(g, &[t, k_c, t])?;
    acc(g, &mut q_c, y)?;
    let y = base.adjoint(g, s_c, t_c)?;
    acc(g, &mut p_c, y)?;
    Ok(vec![Some(p_c), Some(q_c), Some(x_c), Some(dy_c)])
}
