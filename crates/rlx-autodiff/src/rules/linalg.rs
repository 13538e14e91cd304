//! VJPs of the linear-algebra family (OPS.md §15, §22): closed forms built from primitives and
//! the family's own solves, `EighBackward` for the eigendecompositions, and a closed form for
//! `EighBackward` itself (second order).
//!
//! Symmetric-input ops (`Cholesky`, `Eigh`) get the symmetric gradient `sym(Ā)`, as JAX and
//! PyTorch return, although their kernels read one triangle.

use super::matmul::swap_last;
use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, Op, OpKind, Shape, ValueId};
use rlx_opt::decompose::build::{scalar, vector};

pub const KINDS: &[OpKind] = &[
    OpKind::DenseSolve,
    OpKind::BatchedDenseSolve,
    OpKind::Cholesky,
    OpKind::TriangularSolve,
    OpKind::Det,
    OpKind::LogDet,
    OpKind::Svd,
    OpKind::Qr,
    OpKind::Eigh,
    OpKind::EighBatch,
    OpKind::EighBackward,
    OpKind::EighBatchBackward,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::DenseSolve(_) => solve(v, false),
        Op::BatchedDenseSolve(_) => solve(v, true),
        Op::Cholesky(_) => cholesky(v),
        Op::TriangularSolve(t) => triangular_solve(t.lower, t.transpose, v),
        Op::Det(_) => determinant(v, true),
        Op::LogDet(_) => determinant(v, false),
        Op::Svd(_) => svd(v),
        Op::Qr(_) => qr(v),
        Op::Eigh(_) | Op::EighBatch(_) => eigh(v),
        Op::EighBackward(_) | Op::EighBatchBackward(_) => eigh_backward(v),
        _ => return None,
    })
}

// ---- small graph helpers (shared with the spd rules) ----

pub(crate) fn bin(g: &mut Graph, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
    Ok(g.binary(op, a, b)?)
}

pub(crate) fn mul(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId> {
    bin(g, BinaryOp::Mul, a, b)
}

pub(crate) fn add(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId> {
    bin(g, BinaryOp::Add, a, b)
}

pub(crate) fn sub(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId> {
    bin(g, BinaryOp::Sub, a, b)
}

pub(crate) fn neg(g: &mut Graph, a: ValueId) -> Result<ValueId> {
    Ok(g.activation(ActivationKind::Neg, a)?)
}

pub(crate) fn mm(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId> {
    Ok(g.matmul(a, b)?)
}

/// `x·c` for a constant `c`.
pub(crate) fn scale(g: &mut Graph, x: ValueId, c: f64) -> Result<ValueId> {
    let s = scalar(g, g.ty(x).dtype, c)?;
    mul(g, x, s)
}

/// `½(x + xᵀ)` over the last two axes.
pub(crate) fn sym(g: &mut Graph, x: ValueId) -> Result<ValueId> {
    let xt = swap_last(g, x)?;
    let s = add(g, x, xt)?;
    scale(g, s, 0.5)
}

/// The static size of the last axis of `x`, or an error naming `op`.
pub(crate) fn order(g: &Graph, x: ValueId, op: &'static str) -> Result<usize> {
    let ty = g.ty(x);
    ty.shape.dims().last().and_then(Dim::as_static).ok_or_else(|| AdError::Rule {
        op,
        msg: format!("the gradient needs a static matrix size, got {ty}"),
    })
}

/// The constant `[n,n]` matrix `f(i, j)` in `dtype`.
pub(crate) fn matrix(g: &mut Graph, dtype: DType, n: usize, f: impl Fn(usize, usize) -> f64) -> Result<ValueId> {
    let values: Vec<f64> = (0..n * n).map(|k| f(k / n, k % n)).collect();
    let flat = vector(g, dtype, &values)?;
    Ok(g.reshape_to(flat, &Shape::of(&[n, n]))?)
}

/// The identity `[n,n]` in `dtype`.
pub(crate) fn eye(g: &mut Graph, dtype: DType, n: usize) -> Result<ValueId> {
    matrix(g, dtype, n, |i, j| f64::from(u8::from(i == j)))
}

/// `x` with a size-1 axis inserted at `axis`.
pub(crate) fn unsqueeze(g: &mut Graph, x: ValueId, axis: usize) -> Result<ValueId> {
    let mut dims = g.ty(x).shape.dims().to_vec();
    dims.insert(axis, Dim::Static(1));
    Ok(g.reshape_to(x, &Shape(dims))?)
}

/// The diagonals `[.., n]` of the matrices `x [.., n, n]`.
pub(crate) fn diag(g: &mut Graph, x: ValueId, n: usize) -> Result<ValueId> {
    let i = eye(g, g.ty(x).dtype, n)?;
    let d = mul(g, x, i)?;
    let r = g.ty(x).rank();
    Ok(g.reduce(ReduceOp::Sum, d, &[r - 1], false)?)
}

/// `diag(v)` for each vector of `v [.., n]`, as `[.., n, n]`.
pub(crate) fn diag_embed(g: &mut Graph, v: ValueId, n: usize) -> Result<ValueId> {
    let r = g.ty(v).rank();
    let row = unsqueeze(g, v, r - 1)?;
    let i = eye(g, g.ty(v).dtype, n)?;
    mul(g, row, i)
}

/// `v_j − v_i` at `[.., i, j]` for `v [.., n]`.
pub(crate) fn pair_gaps(g: &mut Graph, v: ValueId) -> Result<ValueId> {
    let r = g.ty(v).rank();
    let row = unsqueeze(g, v, r - 1)?;
    let col = unsqueeze(g, v, r)?;
    sub(g, row, col)
}

/// `x` masked by the constant 0/1 pattern `keep(i, j)` over its last two axes.
pub(crate) fn masked(g: &mut Graph, x: ValueId, n: usize, keep: impl Fn(usize, usize) -> f64) -> Result<ValueId> {
    let m = matrix(g, g.ty(x).dtype, n, keep)?;
    mul(g, x, m)
}

/// `x` with a trailing unit axis when it is a vector right-hand side of a rank-`rank` system.
fn as_columns(g: &mut Graph, x: ValueId, rank: usize) -> Result<ValueId> {
    if g.ty(x).rank() < rank {
        unsqueeze(g, x, rank - 1)
    } else {
        Ok(x)
    }
}

// ---- rules ----

/// `x = A⁻¹b`: `b̄ = solve(Aᵀ, ȳ)`, `Ā = −b̄·xᵀ` (an outer product for vector `b`).
fn solve(v: &mut Vjp, batched: bool) -> Result<Vec<Option<ValueId>>> {
    let (a, x, dy) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let at = swap_last(g, a)?;
    let db = if batched { g.batched_dense_solve(at, dy)? } else { g.dense_solve(at, dy)? };
    let da = if v.wanted[0] {
        let rank = g.ty(a).rank();
        let (dbc, xc) = (as_columns(g, db, rank)?, as_columns(g, x, rank)?);
        let xt = swap_last(g, xc)?;
        let p = mm(g, dbc, xt)?;
        Some(neg(g, p)?)
    } else {
        None
    };
    Ok(vec![da, Some(db)])
}

/// `A = L·Lᵀ`: `Ā = L⁻ᵀ·sym(Φ(Lᵀ·L̄))·L⁻¹` with `Φ` the lower triangle, diagonal halved,
/// which equals OPS.md's `sym(L⁻ᵀ·Φ(Lᵀ·L̄)·L⁻¹)` (PyTorch's `cholesky_backward`).
fn cholesky(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (l, dl) = (v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let n = order(g, l, "Cholesky")?;
    let lt = swap_last(g, l)?;
    let p = mm(g, lt, dl)?;
    let phi = masked(g, p, n, |i, j| if i > j { 1.0 } else if i == j { 0.5 } else { 0.0 })?;
    let s = sym(g, phi)?;
    let left = g.triangular_solve(l, s, true, true)?;
    let left_t = swap_last(g, left)?;
    let m_t = g.triangular_solve(l, left_t, true, true)?;
    Ok(vec![Some(swap_last(g, m_t)?)])
}

/// `op(A)·X = B`: `B̄ = op(A)⁻ᵀ·X̄`; `Ā = −B̄·Xᵀ` (`−X·B̄ᵀ` when transposed) on the triangle
/// the op reads.
fn triangular_solve(lower: bool, transpose: bool, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (a, x, dx) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let db = g.triangular_solve(a, dx, lower, !transpose)?;
    let da = if v.wanted[0] {
        let n = order(g, a, "TriangularSolve")?;
        let (dbc, xc) = (as_columns(g, db, 2)?, as_columns(g, x, 2)?);
        let p = if transpose {
            let dbt = swap_last(g, dbc)?;
            mm(g, xc, dbt)?
        } else {
            let xt = swap_last(g, xc)?;
            mm(g, dbc, xt)?
        };
        let p = neg(g, p)?;
        Some(masked(g, p, n, |i, j| f64::from(u8::from(if lower { i >= j } else { i <= j })))?)
    } else {
        None
    };
    Ok(vec![da, Some(db)])
}

/// `Det`: `Ā = ȳ·det(A)·A⁻ᵀ`; `LogDet`: `Ā = ȳ·A⁻ᵀ` (`A⁻ᵀ` by one solve against `I`).
fn determinant(v: &mut Vjp, det: bool) -> Result<Vec<Option<ValueId>>> {
    let (a, y, dy) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let n = order(g, a, if det { "Det" } else { "LogDet" })?;
    let at = swap_last(g, a)?;
    let i = eye(g, g.ty(a).dtype, n)?;
    let inv_t = g.dense_solve(at, i)?;
    let s = if det { mul(g, dy, y)? } else { dy };
    Ok(vec![Some(mul(g, inv_t, s)?)])
}

/// `Ā = U·diag(S̄)·Vᵀ`. `U` and `Vt` are forward-only (OPS.md §15): a cotangent reaching
/// either is an error rather than a silently dropped term.
fn svd(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    for (i, part) in [(0, "U"), (2, "Vt")] {
        if v.cts[i].is_some() {
            return Err(AdError::Rule {
                op: "Svd",
                msg: format!("{part} is forward-only (OPS.md §15): only S has a gradient; detach {part} with StopGradient"),
            });
        }
    }
    let (u, vt, ds) = (v.outputs[0], v.outputs[2], v.ct(1)?);
    let g = &mut *v.g;
    let row = unsqueeze(g, ds, 0)?;
    let us = mul(g, u, row)?;
    Ok(vec![Some(mm(g, us, vt)?)])
}

/// Thin QR with `m ≥ n`: `M = R·R̄ᵀ − Q̄ᵀ·Q`, `Ā = (Q̄ + Q·copyltu(M))·R⁻ᵀ`,
/// `copyltu(M) = tril(M) + tril(M, −1)ᵀ` (PyTorch's `linalg_qr_backward`). Wide inputs have
/// no gradient (OPS.md §15).
fn qr(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (a, q, r) = (v.inputs[0], v.outputs[0], v.outputs[1]);
    let ty = v.g.ty(a).clone();
    let (m, n) = match ty.shape.dims() {
        [Dim::Static(m), Dim::Static(n)] => (*m, *n),
        _ => return Err(AdError::Rule { op: "Qr", msg: format!("the gradient needs static sizes, got {ty}") }),
    };
    if m < n {
        return Err(AdError::Rule { op: "Qr", msg: format!("no gradient for a wide matrix {ty} (OPS.md §15 needs m ≥ n)") });
    }
    let (dq, dr) = (v.ct(0)?, v.ct(1)?);
    let g = &mut *v.g;
    let drt = swap_last(g, dr)?;
    let rr = mm(g, r, drt)?;
    let dqt = swap_last(g, dq)?;
    let qq = mm(g, dqt, q)?;
    let mmat = sub(g, rr, qq)?;
    let low = masked(g, mmat, n, |i, j| f64::from(u8::from(i >= j)))?;
    let strict = masked(g, mmat, n, |i, j| f64::from(u8::from(i > j)))?;
    let strict_t = swap_last(g, strict)?;
    let c = add(g, low, strict_t)?;
    let qc = mm(g, q, c)?;
    let z = add(g, dq, qc)?;
    let zt = swap_last(g, z)?;
    let y = g.triangular_solve(r, zt, false, false)?;
    Ok(vec![Some(swap_last(g, y)?)])
}

/// `Ā = EighBackward(λ, U, λ̄, Ū)` (`EighBatchBackward` per slice).
fn eigh(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (lam, u) = (v.outputs[0], v.outputs[1]);
    let (dlam, du) = (v.ct(0)?, v.ct(1)?);
    let batched = v.g.ty(u).rank() == 3;
    let da = if batched { v.g.eigh_batch_backward(lam, u, dlam, du)? } else { v.g.eigh_backward(lam, u, dlam, du)? };
    Ok(vec![Some(da)])
}

/// `F_ij = 1/(λ_j − λ_i)`, zero on the diagonal and for pairs closer than `n·eps·max|λ|` (the
/// kernel's degeneracy cut, `eps` the rounding unit of the dtype).
fn inverse_gaps(g: &mut Graph, lam: ValueId, n: usize) -> Result<ValueId> {
    let dtype = g.ty(lam).dtype;
    let gap = pair_gaps(g, lam)?;
    let r = g.ty(lam).rank();
    let abs = g.activation(ActivationKind::Abs, lam)?;
    let top = g.reduce(ReduceOp::Max, abs, &[r - 1], true)?;
    let unit = if dtype == DType::F32 { f64::from(f32::EPSILON) } else { f64::EPSILON };
    let tol = scale(g, top, n as f64 * unit)?;
    let tol = unsqueeze(g, tol, r)?;
    let gap_abs = g.activation(ActivationKind::Abs, gap)?;
    let apart = g.compare(CmpOp::Gt, gap_abs, tol)?;
    let one = scalar(g, dtype, 1.0)?;
    let zero = scalar(g, dtype, 0.0)?;
    let safe = g.select(apart, gap, one)?;
    let inv = g.activation(ActivationKind::Recip, safe)?;
    Ok(g.select(apart, inv, zero)?)
}

/// Second order: `Ā = sym(U·D·Uᵀ)`, `D = diag(λ̄) + F∘(Uᵀ·Ū)`, differentiated in closed form
/// with `F` as [`inverse_gaps`] (its degenerate pairs stay cut). With `G̃ = sym(Ā̄)` and
/// `D̄ = Uᵀ·G̃·U`: `λ̄̄ = diag(D̄)`, `Ū̄ = U·(F∘D̄)`, `Ū += G̃·U·(D + Dᵀ) + Ū·(F∘D̄)ᵀ`, and
/// `λ̄_k = Σ_j H_kj − Σ_i H_ik` with `H = (Uᵀ·Ū)∘D̄∘F∘F`.
fn eigh_backward(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (lam, u, dlam, du) = (v.inputs[0], v.inputs[1], v.inputs[2], v.inputs[3]);
    let ct = v.ct(0)?;
    let g = &mut *v.g;
    let n = order(g, u, "EighBackward")?;
    let r = g.ty(u).rank();
    let f = inverse_gaps(g, lam, n)?;
    let ut = swap_last(g, u)?;
    let k = mm(g, ut, du)?;
    let gs = sym(g, ct)?;
    let gu = mm(g, gs, u)?;
    let dd = mm(g, ut, gu)?;
    let kbar = mul(g, f, dd)?;
    let d_dlam = diag(g, dd, n)?;
    let d_du = mm(g, u, kbar)?;
    let fk = mul(g, f, k)?;
    let dl = diag_embed(g, dlam, n)?;
    let d = add(g, dl, fk)?;
    let dt = swap_last(g, d)?;
    let dsum = add(g, d, dt)?;
    let u1 = mm(g, gu, dsum)?;
    let kbar_t = swap_last(g, kbar)?;
    let u2 = mm(g, du, kbar_t)?;
    let d_u = add(g, u1, u2)?;
    let h = mul(g, k, dd)?;
    let h = mul(g, h, f)?;
    let h = mul(g, h, f)?;
    let rows = g.reduce(ReduceOp::Sum, h, &[r - 1], false)?;
    let cols = g.reduce(ReduceOp::Sum, h, &[r - 2], false)?;
    let d_lam = sub(g, rows, cols)?;
    Ok(vec![Some(d_lam), Some(d_u), Some(d_dlam), Some(d_du)])
}

