//! Linear algebra: solves, factorizations, determinants and symmetric eigendecomposition
//! (OPS.md §15, backward ops §22).
//!
//! Every op here takes F32 or F64 tensors (one dtype across all operands) and returns that
//! dtype; the reference computes in F64 and casts back. Matrices are the trailing two axes.
//! Multi-result ops (`Svd`, `Qr`, `Eigh`, `EighBatch`) have several outputs instead of the
//! original's `part` selector or packed buffer (OPS.md §0); their output order is the packing
//! order OPS.md gives.

use super::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `x = A⁻¹·b` by LU with partial pivoting (`jnp.linalg.solve`); inputs `(A [N,N], b)`, `b`
/// either `[N]` or `[N,K]`; the output has `b`'s type. A singular `A` (an exactly zero LU
/// pivot) is a run-time error naming the pivot column (OPS.md leaves error or non-finite open).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DenseSolve {}

/// `DenseSolve` per batch item: `A [B,N,N]`, `b [B,N]` or `[B,N,K]` → `b`'s type (what vmap
/// of `DenseSolve` emits; batch sizes must match, there is no batch broadcasting).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchedDenseSolve {}

/// Lower Cholesky factor `L` of an SPD `A [n,n]` (`A = L·Lᵀ`, strict upper triangle zero);
/// only the lower triangle of `A` is read. Non-SPD input (a non-positive pivot) is a run-time
/// error naming the pivot column.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cholesky {}

/// Solves `op(A)·X = B` for triangular `A [n,n]`, `B [n]` or `[n,r]` → `B`'s type
/// (`lax.linalg.triangular_solve(left_side=True)`, non-unit diagonal).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriangularSolve {
    /// Read the lower triangle of `A` (else the upper); the other triangle is ignored.
    pub lower: bool,
    /// Solve with `Aᵀ` instead of `A`.
    pub transpose: bool,
}

/// Determinant of `A [n,n]` by LU, as a scalar `[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Det {}

/// `log|det A|` of `A [n,n]` as a scalar `[]`, summed from the LU pivots (sign discarded;
/// singular → −inf).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogDet {}

/// Thin SVD of `A [m,n]`: outputs `U [m,k]`, `S [k]` (descending), `Vt [k,n]`, `k = min(m,n)`
/// (`np.linalg.svd(full_matrices=False)`). Each pair `(u_i, v_i)` is sign-normalized so the
/// largest-magnitude entry of `u_i` (first on ties) is positive. Only `S` is differentiable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Svd {}

/// Thin Householder QR of `A [m,n]`: outputs `Q [m,k]`, `R [k,n]`, `k = min(m,n)`
/// (`mode='reduced'`), with LAPACK's reflector signs (OPS.md §15).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Qr {}

/// Symmetric eigendecomposition of `A [n,n]` (lower triangle read): outputs eigenvalues
/// `λ [n]` ascending and eigenvectors `U [n,n]` (column `j` belongs to `λ_j`), so that
/// `A = U·diag(λ)·Uᵀ` (`jnp.linalg.eigh`). The original packed them as `[λ ∥ U]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Eigh {}

/// Gradient of `Eigh`: inputs `(λ [n], U [n,n], λ̄ [n], Ū [n,n])` → `Ā [n,n]`,
/// `Ā = sym(U·(diag(λ̄) + F∘(Uᵀ·Ū))·Uᵀ)`, `F_ij = 1/(λ_j − λ_i)` off the diagonal and 0 for
/// (near-)degenerate pairs. The original took the packed `[λ ∥ U]` forward and cotangent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EighBackward {}

/// `Eigh` per slice of `A [B,n,n]`: outputs `λ [B,n]` and `U [B,n,n]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EighBatch {}

/// `EighBackward` per slice: inputs `(λ [B,n], U [B,n,n], λ̄ [B,n], Ū [B,n,n])` → `[B,n,n]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EighBatchBackward {}

// ---- shared checks (also used by the spd family) ----

/// Checks that every named operand is F32 or F64 and that they share one dtype.
pub(super) fn float_operands(named: &[(&str, &TensorType)]) -> Result<DType, String> {
    let (first, t0) = named[0];
    for (name, t) in named {
        if !matches!(t.dtype, DType::F32 | DType::F64) {
            return Err(format!("{name} must be f32 or f64, got {t}"));
        }
        if t.dtype != t0.dtype {
            return Err(format!("{name} {t} must have the dtype of {first} {t0}"));
        }
    }
    Ok(t0.dtype)
}

/// Checks `t` is one square matrix `[n,n]` and returns `n`. Two dims match only when they are
/// the same static size or the same symbol.
pub(super) fn square(name: &str, t: &TensorType) -> Result<Dim, String> {
    match t.shape.dims() {
        [a, b] if a == b => Ok(a.clone()),
        [_, _] => Err(format!("{name} must be square, got {t}")),
        _ => Err(format!("{name} must be a matrix [n, n], got {t}")),
    }
}

/// Checks `t` is a batch of square matrices `[B,n,n]` and returns `(B, n)`.
pub(super) fn batch_square(name: &str, t: &TensorType) -> Result<(Dim, Dim), String> {
    match t.shape.dims() {
        [b, n, m] if n == m => Ok((b.clone(), n.clone())),
        [_, _, _] => Err(format!("{name} must hold square matrices, got {t}")),
        _ => Err(format!("{name} must be a batch of matrices [B, n, n], got {t}")),
    }
}

/// Checks `t` has exactly `shape`.
pub(super) fn expect_shape(name: &str, t: &TensorType, shape: &Shape) -> Result<(), String> {
    if &t.shape == shape {
        Ok(())
    } else {
        Err(format!("{name} must have shape {shape}, got {t}"))
    }
}

/// Checks a right-hand side `b [n]` or `[n,k]` (after `batch` leading dims) against the
/// system size `n`.
fn rhs(name: &str, b: &TensorType, batch: &[Dim], n: &Dim) -> Result<(), String> {
    let dims = b.shape.dims();
    let r = batch.len();
    if dims.len() != r + 1 && dims.len() != r + 2 {
        return Err(format!("{name} must have rank {} or {}, got {b}", r + 1, r + 2));
    }
    if dims[..r] != *batch {
        return Err(format!("{name} {b} must have batch dims {}", Shape(batch.to_vec())));
    }
    if &dims[r] != n {
        return Err(format!("{name} {b} must have {n} rows to match the system size"));
    }
    Ok(())
}

/// `k = min(m, n)`; needs static sizes unless `m` and `n` are the same dim.
fn min_dim(a: &TensorType) -> Result<Dim, String> {
    let [m, n] = a.shape.dims() else {
        return Err(format!("A must be a matrix [m, n], got {a}"));
    };
    if m == n {
        return Ok(m.clone());
    }
    Ok(Dim::Static(a.static_dim(0)?.min(a.static_dim(1)?)))
}

/// Checks an eigendecomposition `(λ [..,n], U [..,n,n])` with cotangents of the same types,
/// returning `U`'s type (the gradient's type).
fn eigh_grad(inputs: &[TensorType], batched: bool) -> Result<Vec<TensorType>, String> {
    let [lam, u, dlam, du] = inputs else {
        return Err(format!("needs (λ, U, λ̄, Ū), got {} inputs", inputs.len()));
    };
    float_operands(&[("λ", lam), ("U", u), ("λ̄", dlam), ("Ū", du)])?;
    let (batch, n) = if batched {
        let (b, n) = batch_square("U", u)?;
        (vec![b], n)
    } else {
        (Vec::new(), square("U", u)?)
    };
    let mut lam_shape = batch;
    lam_shape.push(n);
    expect_shape("λ", lam, &Shape(lam_shape))?;
    expect_shape("λ̄", dlam, &lam.shape)?;
    expect_shape("Ū", du, &u.shape)?;
    Ok(vec![u.clone()])
}

impl OpDef for DenseSolve {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (a, b) = (&inputs[0], &inputs[1]);
        float_operands(&[("A", a), ("b", b)])?;
        let n = square("A", a)?;
        rhs("b", b, &[], &n)?;
        Ok(vec![b.clone()])
    }
}

impl OpDef for BatchedDenseSolve {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (a, b) = (&inputs[0], &inputs[1]);
        float_operands(&[("A", a), ("b", b)])?;
        let (batch, n) = batch_square("A", a)?;
        rhs("b", b, &[batch], &n)?;
        Ok(vec![b.clone()])
    }
}

impl OpDef for Cholesky {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        float_operands(&[("A", &inputs[0])])?;
        square("A", &inputs[0])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for TriangularSolve {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (a, b) = (&inputs[0], &inputs[1]);
        float_operands(&[("A", a), ("B", b)])?;
        let n = square("A", a)?;
        rhs("B", b, &[], &n)?;
        Ok(vec![b.clone()])
    }
}

/// Shared rule of `Det` and `LogDet`: square `A` → scalar of its dtype.
fn determinant(a: &TensorType) -> Result<Vec<TensorType>, String> {
    let d = float_operands(&[("A", a)])?;
    square("A", a)?;
    Ok(vec![TensorType::new(d, Shape::scalar())])
}

impl OpDef for Det {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        determinant(&inputs[0])
    }
}

impl OpDef for LogDet {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        determinant(&inputs[0])
    }
}

impl OpDef for Svd {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let a = &inputs[0];
        let d = float_operands(&[("A", a)])?;
        let k = min_dim(a)?;
        let (m, n) = (a.shape.dim(0).clone(), a.shape.dim(1).clone());
        Ok(vec![
            TensorType::new(d, Shape(vec![m, k.clone()])),
            TensorType::new(d, Shape(vec![k.clone()])),
            TensorType::new(d, Shape(vec![k, n])),
        ])
    }
}

impl OpDef for Qr {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let a = &inputs[0];
        let d = float_operands(&[("A", a)])?;
        let k = min_dim(a)?;
        let (m, n) = (a.shape.dim(0).clone(), a.shape.dim(1).clone());
        Ok(vec![
            TensorType::new(d, Shape(vec![m, k.clone()])),
            TensorType::new(d, Shape(vec![k, n])),
        ])
    }
}

impl OpDef for Eigh {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let a = &inputs[0];
        let d = float_operands(&[("A", a)])?;
        let n = square("A", a)?;
        Ok(vec![TensorType::new(d, Shape(vec![n])), a.clone()])
    }
}

impl OpDef for EighBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        eigh_grad(inputs, false)
    }
}

impl OpDef for EighBatch {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let a = &inputs[0];
        let d = float_operands(&[("A", a)])?;
        let (b, n) = batch_square("A", a)?;
        Ok(vec![TensorType::new(d, Shape(vec![b, n])), a.clone()])
    }
}

impl OpDef for EighBatchBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        eigh_grad(inputs, true)
    }
}

/// Appends a multi-output op and returns all of its values, in output order.
pub(super) fn add_all(
    g: &mut crate::Graph,
    op: impl Into<super::Op>,
    inputs: &[ValueId],
) -> crate::Result<Vec<ValueId>> {
    let id = g.add(op, inputs)?;
    let n = g.node(id).outputs.len() as u32;
    Ok((0..n).map(|i| ValueId::new(id, i)).collect())
}

/// Builders for the linalg family.
impl crate::Graph {
    /// `A⁻¹·b` for `A [N,N]`, `b [N]` or `[N,K]`.
    pub fn dense_solve(&mut self, a: ValueId, b: ValueId) -> crate::Result<ValueId> {
        self.add1(DenseSolve {}, &[a, b])
    }

    /// Per-item `A⁻¹·b` for `A [B,N,N]`, `b [B,N]` or `[B,N,K]`.
    pub fn batched_dense_solve(&mut self, a: ValueId, b: ValueId) -> crate::Result<ValueId> {
        self.add1(BatchedDenseSolve {}, &[a, b])
    }

    /// Lower Cholesky factor of an SPD matrix.
    pub fn cholesky(&mut self, a: ValueId) -> crate::Result<ValueId> {
        self.add1(Cholesky {}, &[a])
    }

    /// Solves `op(A)·X = B` for triangular `A`.
    pub fn triangular_solve(&mut self, a: ValueId, b: ValueId, lower: bool, transpose: bool) -> crate::Result<ValueId> {
        self.add1(TriangularSolve { lower, transpose }, &[a, b])
    }

    /// `det A` as a scalar.
    pub fn det(&mut self, a: ValueId) -> crate::Result<ValueId> {
        self.add1(Det {}, &[a])
    }

    /// `log|det A|` as a scalar.
    pub fn log_det(&mut self, a: ValueId) -> crate::Result<ValueId> {
        self.add1(LogDet {}, &[a])
    }

    /// Thin SVD; returns `[U, S, Vt]`.
    pub fn svd(&mut self, a: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, Svd {}, &[a])
    }

    /// Thin QR; returns `[Q, R]`.
    pub fn qr(&mut self, a: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, Qr {}, &[a])
    }

    /// Symmetric eigendecomposition; returns `[λ, U]`.
    pub fn eigh(&mut self, a: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, Eigh {}, &[a])
    }

    /// Gradient of `Eigh` w.r.t. `A` from the forward `(λ, U)` and their cotangents.
    pub fn eigh_backward(&mut self, lam: ValueId, u: ValueId, d_lam: ValueId, d_u: ValueId) -> crate::Result<ValueId> {
        self.add1(EighBackward {}, &[lam, u, d_lam, d_u])
    }

    /// Batched symmetric eigendecomposition; returns `[λ, U]`.
    pub fn eigh_batch(&mut self, a: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, EighBatch {}, &[a])
    }

    /// Gradient of `EighBatch` w.r.t. `A`, per slice.
    pub fn eigh_batch_backward(&mut self, lam: ValueId, u: ValueId, d_lam: ValueId, d_u: ValueId) -> crate::Result<ValueId> {
        self.add1(EighBatchBackward {}, &[lam, u, d_lam, d_u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn f64s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F64, dims)
    }

    fn sym(dims: &[&str]) -> TensorType {
        TensorType::new(DType::F32, Shape(dims.iter().map(|&d| Dim::sym(d)).collect()))
    }

    #[test]
    fn solves_keep_the_rhs_type_and_check_rows() {
        let mut g = Graph::new();
        let a = g.input("a", sym(&["N", "N"]));
        let b = g.input("b", sym(&["N", "K"]));
        let x = g.dense_solve(a, b).unwrap();
        assert_eq!(g.ty(x), &sym(&["N", "K"]));
        let v = g.input("v", sym(&["M"]));
        let e = g.dense_solve(a, v).unwrap_err().to_string();
        assert!(e.contains("b f32[M] must have N rows"), "{e}");
        let t = g.triangular_solve(a, b, true, false).unwrap();
        assert_eq!(g.ty(t), &sym(&["N", "K"]));
    }

    #[test]
    fn batched_solve_needs_matching_batch() {
        let mut g = Graph::new();
        let a = g.input("a", f64s(&[8, 3, 3]));
        let b = g.input("b", f64s(&[8, 3]));
        let x = g.batched_dense_solve(a, b).unwrap();
        assert_eq!(g.ty(x), &f64s(&[8, 3]));
        let c = g.input("c", f64s(&[4, 3, 2]));
        let e = g.batched_dense_solve(a, c).unwrap_err().to_string();
        assert!(e.contains("must have batch dims [8]"), "{e}");
    }

    #[test]
    fn square_and_dtype_rules() {
        let mut g = Graph::new();
        let r = g.input("r", f64s(&[3, 4]));
        assert!(g.cholesky(r).unwrap_err().to_string().contains("A must be square, got f64[3, 4]"));
        let h = g.input("h", TensorType::of(DType::F16, &[3, 3]));
        assert!(g.det(h).unwrap_err().to_string().contains("must be f32 or f64"));
        let a = g.input("a", f64s(&[3, 3]));
        let l = g.log_det(a).unwrap();
        assert_eq!(g.ty(l), &f64s(&[]));
        let b = g.input("b", TensorType::of(DType::F32, &[3]));
        assert!(g.dense_solve(a, b).unwrap_err().to_string().contains("dtype of A"));
    }

    #[test]
    fn svd_and_qr_have_thin_outputs() {
        let mut g = Graph::new();
        let a = g.input("a", f64s(&[5, 3]));
        let usv: Vec<_> = g.svd(a).unwrap().into_iter().map(|v| g.ty(v).clone()).collect();
        assert_eq!(usv, vec![f64s(&[5, 3]), f64s(&[3]), f64s(&[3, 3])]);
        let qr: Vec<_> = g.qr(a).unwrap().into_iter().map(|v| g.ty(v).clone()).collect();
        assert_eq!(qr, vec![f64s(&[5, 3]), f64s(&[3, 3])]);
        let s = g.input("s", sym(&["n", "n"]));
        let sv = g.svd(s).unwrap();
        assert_eq!(g.ty(sv[1]), &sym(&["n"]));
        let m = g.input("m", TensorType::new(DType::F32, Shape(vec![Dim::sym("m"), Dim::Static(4)])));
        assert!(g.qr(m).unwrap_err().to_string().contains("static size is required"));
    }

    #[test]
    fn eigh_outputs_and_backward() {
        let mut g = Graph::new();
        let a = g.input("a", f64s(&[4, 4]));
        let lu = g.eigh(a).unwrap();
        assert_eq!((g.ty(lu[0]), g.ty(lu[1])), (&f64s(&[4]), &f64s(&[4, 4])));
        let da = g.eigh_backward(lu[0], lu[1], lu[0], lu[1]).unwrap();
        assert_eq!(g.ty(da), &f64s(&[4, 4]));
        let e = g.eigh_backward(lu[1], lu[1], lu[0], lu[1]).unwrap_err().to_string();
        assert!(e.contains("λ must have shape [4]"), "{e}");
        let ab = g.input("ab", f64s(&[2, 4, 4]));
        let lub = g.eigh_batch(ab).unwrap();
        assert_eq!(g.ty(lub[0]), &f64s(&[2, 4]));
        let dab = g.eigh_batch_backward(lub[0], lub[1], lub[0], lub[1]).unwrap();
        assert_eq!(g.ty(dab), &f64s(&[2, 4, 4]));
    }
}
