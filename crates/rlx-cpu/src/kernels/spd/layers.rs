//! SPDNet layers and batch-level matrix functions: `ReEig`, `LogEig`, `SpdMatrixFnBatch`,
//! `SpdBatchNorm` and their gradients.

use super::mat::{prod, Mat};
use super::spectral::{Domain, Eig, Spectral};
use super::{mat, mats, per_slice, read, write, write_mats};
use crate::view::{In, Out};
use rlx_ir::ops::spd::SpdMatFn;

/// Outputs `Y = f(X)`, `λ`, `U` of `X [n,n]`.
fn eig_fn(f: Spectral, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let e = Eig::of("X", &mat("X", ins[0])?)?;
    write(&mut outs[0], &e.apply(f)?.a);
    write(&mut outs[1], &e.values);
    write(&mut outs[2], &e.u.a);
    Ok(())
}

/// `X̄` from the saved `λ [n]`, `U [n,n]` and `Ȳ [n,n]`.
fn eig_fn_backward(f: Spectral, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let e = Eig::from_parts("X", read("λ", ins[0])?, mat("U", ins[1])?);
    write(&mut outs[0], &e.adjoint(f, &mat("Ȳ", ins[2])?).a);
    Ok(())
}

/// `ReEig`: `X [n,n]` → `U·max(eps, Λ)·Uᵀ`, `λ`, `U` (any symmetric `X`).
pub fn re_eig(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    eig_fn(Spectral::Floor(eps.into()), ins, outs)
}

/// `LogEig`: `X [n,n]` → `U·log max(eps, Λ)·Uᵀ`, `λ`, `U` (any symmetric `X`).
pub fn log_eig(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    eig_fn(Spectral::Log(eps.into()), ins, outs)
}

/// `ReEigBackward`: `(λ, U, Ȳ)` → `X̄ [n,n]`.
pub fn re_eig_backward(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    eig_fn_backward(Spectral::Floor(eps.into()), ins, outs)
}

/// `LogEigBackward`: `(λ, U, Ȳ)` → `X̄ [n,n]`.
pub fn log_eig_backward(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    eig_fn_backward(Spectral::Log(eps.into()), ins, outs)
}

/// The spectral function of `kind` and the inputs its forward and backward ops accept.
fn matrix_fn(kind: SpdMatFn) -> (Spectral, Domain, Domain) {
    match kind {
        SpdMatFn::Logm => (Spectral::Log(0.0), Domain::Pd, Domain::Pd),
        SpdMatFn::Expm => (Spectral::Exp, Domain::Symmetric, Domain::Symmetric),
        SpdMatFn::Sqrtm => (Spectral::Sqrt(0.0), Domain::Psd, Domain::Pd),
        SpdMatFn::Invsqrtm => (Spectral::InvSqrt(0.0), Domain::Pd, Domain::Pd),
    }
}

/// `SpdMatrixFnBatch`: `kind` applied to each slice of `X [B,n,n]`.
pub fn spd_matrix_fn_batch(kind: SpdMatFn, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let (f, domain, _) = matrix_fn(kind);
    let xs = mats("X", ins[0])?;
    let n = xs.first().map_or(0, |x| x.n);
    let ys = per_slice(xs.len(), n, |i| Eig::of(format!("X[{i}]"), &xs[i])?.require(domain)?.apply(f))?;
    write_mats(&mut outs[0], &ys);
    Ok(())
}

/// `SpdMatrixFnBatchBackward`: `(X, Ȳ)` → per-slice Daleckii–Krein adjoint `[B,n,n]`.
pub fn spd_matrix_fn_batch_backward(kind: SpdMatFn, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let (f, _, domain) = matrix_fn(kind);
    let (xs, dys) = (mats("X", ins[0])?, mats("Ȳ", ins[1])?);
    let n = xs.first().map_or(0, |x| x.n);
    let dxs = per_slice(xs.len(), n, |i| Ok(Eig::of(format!("X[{i}]"), &xs[i])?.require(domain)?.adjoint(f, &dys[i])))?;
    write_mats(&mut outs[0], &dxs);
    Ok(())
}

/// The batch-norm factors: `G`'s decomposition, `R = G^{1/2}` and `T = M^{−1/2}` (both SPD,
/// eigenvalues floored at `eps`).
struct BnFactors {
    g: Eig,
    r: Mat,
    t: Mat,
}

impl BnFactors {
    fn new(m: In, g: In, eps: f32) -> Result<BnFactors, String> {
        let eps = f64::from(eps);
        let t = Eig::of("M", &mat("M", m)?)?.require(Domain::Pd)?.apply(Spectral::InvSqrt(eps))?;
        let g = Eig::of("G", &mat("G", g)?)?.require(Domain::Pd)?;
        let r = g.apply(Spectral::Sqrt(eps))?;
        Ok(BnFactors { g, r, t })
    }

    /// `A = G^{1/2}·M^{−1/2}`, so that `Y_i = A·X_i·Aᵀ`.
    fn a(&self) -> Mat {
        self.r.dot(&self.t)
    }
}

/// `SpdBatchNorm`: `(X [B,n,n], M, G)` → `Y_i = G^{1/2}·M^{−1/2}·X_i·M^{−1/2}·G^{1/2}`.
pub fn spd_batch_norm(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let a = BnFactors::new(ins[1], ins[2], eps)?.a();
    let at = a.t();
    let xs = mats("X", ins[0])?;
    let ys = per_slice(xs.len(), a.n, |i| Ok(prod(&[&a, &xs[i], &at])))?;
    write_mats(&mut outs[0], &ys);
    Ok(())
}

/// `SpdBatchNormBackwardX`: `(M, G, Ȳ [B,n,n])` → `dX_i = Aᵀ·Ȳ_i·A`.
pub fn spd_batch_norm_backward_x(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let a = BnFactors::new(ins[0], ins[1], eps)?.a();
    let at = a.t();
    let dys = mats("Ȳ", ins[2])?;
    let dxs = per_slice(dys.len(), a.n, |i| Ok(prod(&[&at, &dys[i], &a])))?;
    write_mats(&mut outs[0], &dxs);
    Ok(())
}

/// `SpdBatchNormBackwardG`: `(X, M, G, Ȳ)` → `dG [n,n]`, the adjoint of `G ↦ G^{1/2}` applied to
/// `R̄ = Σ_i (Ȳ_i·R·Z_iᵀ + Z_iᵀ·R·Ȳ_i)`, `Z_i = M^{−1/2}·X_i·M^{−1/2}`.
pub fn spd_batch_norm_backward_g(eps: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let bn = BnFactors::new(ins[1], ins[2], eps)?;
    let (xs, dys) = (mats("X", ins[0])?, mats("Ȳ", ins[3])?);
    let n = bn.r.n;
    let terms = per_slice(xs.len(), n, |i| {
        let zt = prod(&[&bn.t, &xs[i], &bn.t]).t();
        Ok(prod(&[&dys[i], &bn.r, &zt]).add(&prod(&[&zt, &bn.r, &dys[i]])))
    })?;
    let rbar = terms.iter().fold(Mat::zeros(n), |acc, t| acc.add(t));
    write(&mut outs[0], &bn.g.adjoint(Spectral::Sqrt(f64::from(eps)), &rbar).a);
    Ok(())
}
