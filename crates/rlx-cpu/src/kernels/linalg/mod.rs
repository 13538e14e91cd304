//! Dense linear algebra (OPS.md §15). Every routine computes in f64 whatever the tensor
//! dtype, as the LAPACK reference does, and results are cast back.
//!
//! Operands are row-major F32 or F64 (one dtype per op), matrices the trailing two axes.
//! Data-dependent failures are errors naming the operand and position: a non-finite entry in
//! any operand, a singular `A` in `DenseSolve`/`BatchedDenseSolve` (an exactly zero LU pivot)
//! or `TriangularSolve` (a zero diagonal entry), a non-positive Cholesky pivot, an iterative
//! solver (Jacobi `Eigh`/`Svd`) that does not converge. `Det` of a singular matrix is 0 and
//! `LogDet` −∞, as OPS.md defines; `Qr` of a wide matrix (m < n) is NumPy's (square `Q`,
//! trapezoidal `R`): OPS.md's "m < n unsupported" is about its gradient.

pub mod eigen;
pub mod eigh;
pub mod lu;
pub mod qr;
pub mod svd;
pub mod triangular;

use super::PAR_MIN;
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::linalg::TriangularSolve;
use rlx_ir::DType;

/// The elements of an F32 or F64 operand as f64; a non-finite entry is an error naming it.
fn read(name: &str, x: In) -> Result<Vec<f64>, String> {
    let v: Vec<f64> = match x.dtype {
        DType::F32 => x.get::<f32>().iter().map(|&v| f64::from(v)).collect(),
        DType::F64 => x.get::<f64>().to_vec(),
        d => return Err(format!("{name} must be f32 or f64, not {d}")),
    };
    match v.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(format!("{name} has the non-finite entry {} at {:?}", v[i], unravel(i, x.dims))),
        None => Ok(v),
    }
}

/// The multi-index of flat position `i` in `dims`.
fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for (ax, &d) in dims.iter().enumerate().rev() {
        idx[ax] = i % d.max(1);
        i /= d.max(1);
    }
    idx
}

/// Writes f64 results into an F32 or F64 output.
fn write(out: &mut Out, v: &[f64]) -> Result<(), String> {
    match out.dtype {
        DType::F32 => out.get::<f32>().iter_mut().zip(v).for_each(|(o, &x)| *o = x as f32),
        DType::F64 => out.get::<f64>().copy_from_slice(v),
        d => return Err(format!("outputs must be f32 or f64, not {d}")),
    }
    Ok(())
}

/// The rounding unit of the tensors' dtype (how close values are distinguishable).
fn eps_of(d: DType) -> f64 {
    if d == DType::F32 {
        f64::from(f32::EPSILON)
    } else {
        f64::EPSILON
    }
}

/// Runs `f(item)` for `0..count`, on rayon threads when `work` (flops) pays for them, and
/// concatenates the results; an item's error is prefixed by its batch index.
fn per_item(count: usize, work: usize, f: impl Fn(usize) -> Result<Vec<f64>, String> + Sync) -> Result<Vec<f64>, String> {
    let tagged = |b: usize| f(b).map_err(|e| format!("batch item {b}: {e}"));
    let parts: Vec<Vec<f64>> = if count > 1 && work >= PAR_MIN {
        (0..count).into_par_iter().map(tagged).collect::<Result<_, _>>()?
    } else {
        (0..count).map(tagged).collect::<Result<_, _>>()?
    };
    Ok(parts.concat())
}

/// The columns of a right-hand side `[.., n]` (1) or `[.., n, r]` (r), `batch` leading dims.
fn rhs_cols(b: &In, batch: usize) -> usize {
    if b.dims.len() == batch + 1 {
        1
    } else {
        b.dims[batch + 1]
    }
}

/// `x = A⁻¹·b` by LU with partial pivoting: `A [n,n]`, `b [n]` or `[n,r]` → `b`'s type.
/// An exactly zero pivot (singular `A`) is an error naming its column.
pub fn dense_solve(ins: &[In], out: &mut Out) -> Result<(), String> {
    let (a, b) = (read("A", ins[0])?, read("b", ins[1])?);
    let (n, r) = (ins[0].dims[0], rhs_cols(&ins[1], 0));
    write(out, &solve_one(&a, n, &b, r)?)
}

/// `DenseSolve` per batch item: `A [B,n,n]`, `b [B,n]` or `[B,n,r]` → `b`'s type.
pub fn batched_dense_solve(ins: &[In], out: &mut Out) -> Result<(), String> {
    let (a, b) = (read("A", ins[0])?, read("b", ins[1])?);
    let (count, n, r) = (ins[0].dims[0], ins[0].dims[1], rhs_cols(&ins[1], 1));
    let x = per_item(count, count * n * n * (n + r), |i| solve_one(&a[i * n * n..][..n * n], n, &b[i * n * r..][..n * r], r))?;
    write(out, &x)
}

fn solve_one(a: &[f64], n: usize, b: &[f64], r: usize) -> Result<Vec<f64>, String> {
    let f = lu::lu(a, n);
    match f.zero_pivot {
        Some(j) => Err(format!("A is singular: the LU pivot of column {j} is zero")),
        None => Ok(f.solve(b, r)),
    }
}

/// Lower Cholesky factor of an SPD `A [n,n]` (lower triangle read, strict upper triangle of
/// the result zero). A non-positive pivot is an error naming its column.
pub fn cholesky(a: In, out: &mut Out) -> Result<(), String> {
    write(out, &triangular::cholesky(&read("A", a)?, a.dims[0])?)
}

/// Solves `op(A)·X = B` for triangular `A [n,n]` (only the selected triangle read),
/// `B [n]` or `[n,r]` → `B`'s type. A zero diagonal entry is an error naming it.
pub fn triangular_solve(t: &TriangularSolve, ins: &[In], out: &mut Out) -> Result<(), String> {
    let (a, b) = (read("A", ins[0])?, read("B", ins[1])?);
    let (n, r) = (ins[0].dims[0], rhs_cols(&ins[1], 0));
    write(out, &triangular::triangular_solve(&a, n, t.lower, t.transpose, &b, r)?)
}

/// `det A` of `A [n,n]` as a scalar (0 for a singular matrix).
pub fn det(a: In, out: &mut Out) -> Result<(), String> {
    write(out, &[lu::lu(&read("A", a)?, a.dims[0]).det()])
}

/// `log|det A|` of `A [n,n]` as a scalar (−∞ for a singular matrix).
pub fn log_det(a: In, out: &mut Out) -> Result<(), String> {
    write(out, &[lu::lu(&read("A", a)?, a.dims[0]).log_abs_det()])
}

/// Thin SVD of `A [m,n]` → `U [m,k]`, `S [k]` descending, `Vt [k,n]`, signs as
/// [`svd::Svd`] states.
pub fn svd(a: In, outs: &mut [Out]) -> Result<(), String> {
    let (m, n) = (a.dims[0], a.dims[1]);
    let f = svd::svd(&read("A", a)?, m, n)?;
    write(&mut outs[0], &f.u)?;
    write(&mut outs[1], &f.s)?;
    write(&mut outs[2], &f.vt)
}

/// Thin QR of `A [m,n]` → `Q [m,k]`, `R [k,n]` with LAPACK's reflector signs (`k = min(m,n)`;
/// a wide matrix gives a square `Q`, as `np.linalg.qr`).
pub fn qr(a: In, outs: &mut [Out]) -> Result<(), String> {
    let (m, n) = (a.dims[0], a.dims[1]);
    let (q, r) = qr::qr(&read("A", a)?, m, n);
    write(&mut outs[0], &q)?;
    write(&mut outs[1], &r)
}

/// Eigendecomposition of a symmetric `A [n,n]` (lower triangle read) → `λ [n]` ascending,
/// `U [n,n]` with sign-normalized eigenvector columns.
pub fn eigh(a: In, outs: &mut [Out]) -> Result<(), String> {
    let e = eigen::sym_eigen(&read("A", a)?, a.dims[0])?;
    write(&mut outs[0], &e.values)?;
    write(&mut outs[1], &e.vectors)
}

/// `Eigh` per slice of `A [B,n,n]` → `λ [B,n]`, `U [B,n,n]`.
pub fn eigh_batch(a: In, outs: &mut [Out]) -> Result<(), String> {
    let x = read("A", a)?;
    let (count, n) = (a.dims[0], a.dims[1]);
    let both = per_item(count, count * n * n * n * 10, |i| {
        let e = eigen::sym_eigen(&x[i * n * n..][..n * n], n)?;
        Ok([e.values, e.vectors].concat())
    })?;
    let (values, vectors): (Vec<_>, Vec<_>) = both.chunks(n * n + n).map(|c| c.split_at(n)).unzip();
    write(&mut outs[0], &values.concat())?;
    write(&mut outs[1], &vectors.concat())
}

/// Gradient of `Eigh`: `(λ [n], U [n,n], λ̄ [n], Ū [n,n])` → `Ā [n,n]` (see [`eigh::eigh_backward`]).
pub fn eigh_backward(ins: &[In], out: &mut Out) -> Result<(), String> {
    let [lam, u, dlam, du] = read_all(ins, ["λ", "U", "λ̄", "Ū"])?;
    write(out, &eigh::eigh_backward(&lam, &u, &dlam, &du, ins[0].dims[0], eps_of(ins[0].dtype)))
}

/// `EighBackward` per slice: `(λ [B,n], U [B,n,n], λ̄ [B,n], Ū [B,n,n])` → `[B,n,n]`.
pub fn eigh_batch_backward(ins: &[In], out: &mut Out) -> Result<(), String> {
    let [lam, u, dlam, du] = read_all(ins, ["λ", "U", "λ̄", "Ū"])?;
    let (count, n, eps) = (ins[0].dims[0], ins[0].dims[1], eps_of(ins[0].dtype));
    let grad = per_item(count, count * 3 * n * n * n, |i| {
        let (v, m) = (i * n..(i + 1) * n, i * n * n..(i + 1) * n * n);
        Ok(eigh::eigh_backward(&lam[v.clone()], &u[m.clone()], &dlam[v], &du[m], n, eps))
    })?;
    write(out, &grad)
}

fn read_all<const N: usize>(ins: &[In], names: [&str; N]) -> Result<[Vec<f64>; N], String> {
    let mut vals = Vec::with_capacity(N);
    for (x, name) in ins.iter().zip(names) {
        vals.push(read(name, *x)?);
    }
    vals.try_into().map_err(|_| format!("needs {N} operands, got {}", ins.len()))
}
