//! SPD-manifold ops: SPDNet layers, Riemannian batch-norm and AIRM geometry (OPS.md §16,
//! backward ops §22).
//!
//! Every op takes F32 or F64 tensors (one dtype across all operands; the reference widens to
//! F64) and returns that dtype. Matrix functions are spectral: `f(X) = U·f(Λ)·Uᵀ`. Where the
//! original packed several results into one flat buffer, these ops have several outputs in the
//! packing order OPS.md gives (`ReEig`/`LogEig`: `Y, λ, U`; map gradients: `dP, dX`/`dV`;
//! transport gradient: `dP, dQ, dV`).

use super::linalg::{add_all, batch_square, expect_shape, float_operands, square};
use super::{Arity, OpDef};
use crate::{Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// The spectral function of `SpdMatrixFnBatch` and its backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SpdMatFn {
    /// Matrix logarithm (SPD input).
    Logm,
    /// Matrix exponential (any symmetric input).
    Expm,
    /// Principal square root `X^{1/2}`.
    Sqrtm,
    /// Inverse principal square root `X^{−1/2}`.
    Invsqrtm,
}

/// SPDNet bilinear map `Y = W·X·Wᵀ`: `W [m,n]`, `X [n,n]` → `[m,m]` (the Stiefel constraint on
/// `W` is the optimizer's job).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BiMap {}

/// SPD "ReLU" `Y = U·max(eps, Λ)·Uᵀ` of `X [n,n]`: outputs `Y [n,n]`, `λ [n]`, `U [n,n]`, where
/// `λ, U` is the raw eigendecomposition of `X` (kept for `ReEigBackward`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReEig {
    /// Eigenvalue floor, finite and ≥ 0.
    pub eps: f32,
}

/// Log map at the identity `Y = U·log(max(eps, Λ))·Uᵀ` of `X [n,n]`: outputs `Y [n,n]`,
/// `λ [n]`, `U [n,n]` as `ReEig`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogEig {
    /// Eigenvalue floor, finite and > 0.
    pub eps: f32,
}

/// Riemannian batch-norm (Brooks et al. 2019): `Y_i = G^{1/2}·M^{−1/2}·X_i·M^{−1/2}·G^{1/2}`
/// for `X [B,n,n]`, batch mean `M [n,n]`, bias `G [n,n]` → `[B,n,n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdBatchNorm {
    /// Eigenvalue floor inside the matrix powers, finite and > 0.
    pub eps: f32,
}

/// AIRM Fréchet mean of `X [B,n,n]` → `[n,n]`: from the arithmetic mean, repeat at most
/// `iters` times `T = mean_i logm(M^{−1/2}X_iM^{−1/2})`, `M ← M^{1/2}·expm(T)·M^{1/2}`, stopping
/// once `‖T‖_F < tol`. A detached statistic (no gradient).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdKarcherMean {
    /// Iteration cap, at least 1.
    pub iters: u32,
    /// Stopping threshold on `‖T‖_F`, finite and ≥ 0.
    pub tol: f32,
}

/// Weighted AIRM barycentre of `X [B,n,n]` with weights `w [B]` (normalized by their sum) →
/// `[n,n]`; the `SpdKarcherMean` iteration with `T = Σ w̄_i logm(…)`. No gradient.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdKarcherMeanWeighted {
    /// Iteration cap, at least 1.
    pub iters: u32,
    /// Stopping threshold on `‖T‖_F`, finite and ≥ 0.
    pub tol: f32,
}

/// Riemannian log map `Log_P(X) = P^{1/2}·logm(P^{−1/2}XP^{−1/2})·P^{1/2}`: inputs `(P, X)`,
/// all `[n,n]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpdLogMap {}

/// Riemannian exp map `Exp_P(V) = P^{1/2}·expm(P^{−1/2}VP^{−1/2})·P^{1/2}`: inputs `(P, V)`,
/// all `[n,n]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpdExpMap {}

/// Parallel transport of the tangent `V` from `P` to `Q`: `E·V·Eᵀ`, `E = (Q·P⁻¹)^{1/2}`
/// computed as `P^{1/2}(P^{−1/2}QP^{−1/2})^{1/2}P^{−1/2}`; inputs `(P, Q, V)`, all `[n,n]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpdParallelTransport {}

/// Spectral `kind` applied to each slice of `X [B,n,n]` → `[B,n,n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdMatrixFnBatch {
    pub kind: SpdMatFn,
}

/// Gradient of `ReEig` by Daleckii–Krein (`f = max(λ, eps)`, `f′ = 1[λ > eps]`): inputs
/// `(λ [n], U [n,n], Ȳ [n,n])` from the forward's outputs → `X̄ [n,n]` (OPS.md §23.2 item 13).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReEigBackward {
    /// The forward's floor, finite and ≥ 0.
    pub eps: f32,
}

/// Gradient of `LogEig` by Daleckii–Krein (`f = log max(λ, eps)`, `f′ = 1/λ`, 0 below eps):
/// inputs `(λ [n], U [n,n], Ȳ [n,n])` → `X̄ [n,n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogEigBackward {
    /// The forward's floor, finite and > 0.
    pub eps: f32,
}

/// Gradient of `SpdBatchNorm` w.r.t. `X`: inputs `(M, G, Ȳ [B,n,n])` → `dX_i = Aᵀ·Ȳ_i·A`,
/// `A = G^{1/2}M^{−1/2}`, shape `[B,n,n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdBatchNormBackwardX {
    /// The forward's floor, finite and > 0.
    pub eps: f32,
}

/// Gradient of `SpdBatchNorm` w.r.t. the bias `G`: inputs `(X, M, G, Ȳ)` → `[n,n]`, the
/// Daleckii–Krein adjoint of `√·` applied to `Σ_i (Ȳ_i·R·Z_iᵀ + Z_iᵀ·R·Ȳ_i)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdBatchNormBackwardG {
    /// The forward's floor, finite and > 0.
    pub eps: f32,
}

/// Full AIRM adjoint of `SpdLogMap`: inputs `(P, X, Ȳ)` → outputs `dP`, `dX` (each `[n,n]`;
/// the original packed them as `[2,n,n]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpdLogMapBackward {}

/// Full AIRM adjoint of `SpdExpMap`: inputs `(P, V, Ȳ)` → outputs `dP`, `dV`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpdExpMapBackward {}

/// Adjoint of `SpdParallelTransport`: inputs `(P, Q, V, Ȳ)` → outputs `dP`, `dQ`, `dV`
/// (`dV = Eᵀ·Ȳ·E`; `Ē = Ȳ·E·Vᵀ + Ȳᵀ·E·V` pushed through `E(P, Q)`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpdParallelTransportBackward {}

/// Per-slice Daleckii–Krein adjoint of `SpdMatrixFnBatch{kind}`: inputs `(X, Ȳ)`, both
/// `[B,n,n]` → `[B,n,n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdMatrixFnBatchBackward {
    pub kind: SpdMatFn,
}

/// Checks an eigenvalue floor: finite, and positive when `strict` (it is then logged or
/// inverted), else non-negative.
fn check_eps(eps: f32, strict: bool) -> Result<(), String> {
    let ok = eps.is_finite() && if strict { eps > 0.0 } else { eps >= 0.0 };
    if ok {
        Ok(())
    } else {
        let want = if strict { "> 0" } else { "≥ 0" };
        Err(format!("eps must be finite and {want}, got {eps}"))
    }
}

/// Checks the Karcher iteration attributes.
fn check_karcher(iters: u32, tol: f32) -> Result<(), String> {
    if iters == 0 {
        return Err("iters must be at least 1".into());
    }
    if !(tol.is_finite() && tol >= 0.0) {
        return Err(format!("tol must be finite and ≥ 0, got {tol}"));
    }
    Ok(())
}

/// Checks that every named operand is a float `[n,n]` matrix of the first one's type and
/// returns that type.
fn same_squares(named: &[(&str, &TensorType)]) -> Result<TensorType, String> {
    float_operands(named)?;
    let (first, t0) = named[0];
    square(first, t0)?;
    for (name, t) in &named[1..] {
        expect_shape(name, t, &t0.shape)?;
    }
    Ok(t0.clone())
}

/// Checks `(λ [n], U [n,n], Ȳ [n,n])` of an eigenvalue-function gradient; returns `U`'s type.
fn eig_fn_grad(inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let (lam, u, dy) = (&inputs[0], &inputs[1], &inputs[2]);
    float_operands(&[("λ", lam), ("U", u), ("Ȳ", dy)])?;
    let n = square("U", u)?;
    expect_shape("λ", lam, &Shape(vec![n]))?;
    expect_shape("Ȳ", dy, &u.shape)?;
    Ok(vec![u.clone()])
}

/// Outputs `Y, λ, U` of an eigenvalue-function forward on a square `X`.
fn eig_fn(x: &TensorType) -> Result<Vec<TensorType>, String> {
    let d = float_operands(&[("X", x)])?;
    let n = square("X", x)?;
    Ok(vec![x.clone(), TensorType::new(d, Shape(vec![n])), x.clone()])
}

/// Checks the batch `x [B,n,n]` (called `name`) against matrices `[n,n]` named in `mats`;
/// returns `(x's type, [n,n])`.
fn batch_with(name: &str, x: &TensorType, mats: &[(&str, &TensorType)]) -> Result<(TensorType, TensorType), String> {
    let mut named = vec![(name, x)];
    named.extend_from_slice(mats);
    let d = float_operands(&named)?;
    let (_, n) = batch_square(name, x)?;
    let mat = TensorType::new(d, Shape(vec![n.clone(), n]));
    for (name, t) in mats {
        expect_shape(name, t, &mat.shape)?;
    }
    Ok((x.clone(), mat))
}

impl OpDef for BiMap {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (w, x) = (&inputs[0], &inputs[1]);
        let d = float_operands(&[("W", w), ("X", x)])?;
        let n = square("X", x)?;
        let [m, k] = w.shape.dims() else {
            return Err(format!("W must be a matrix [m, n], got {w}"));
        };
        if *k != n {
            return Err(format!("W {w} must have {n} columns to match X {x}"));
        }
        Ok(vec![TensorType::new(d, Shape(vec![m.clone(), m.clone()]))])
    }
}

impl OpDef for ReEig {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, false)?;
        eig_fn(&inputs[0])
    }
}

impl OpDef for LogEig {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, true)?;
        eig_fn(&inputs[0])
    }
}

impl OpDef for SpdBatchNorm {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, true)?;
        let (x, _) = batch_with("X", &inputs[0], &[("M", &inputs[1]), ("G", &inputs[2])])?;
        Ok(vec![x])
    }
}

impl OpDef for SpdKarcherMean {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_karcher(self.iters, self.tol)?;
        let (_, mat) = batch_with("X", &inputs[0], &[])?;
        Ok(vec![mat])
    }
}

impl OpDef for SpdKarcherMeanWeighted {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_karcher(self.iters, self.tol)?;
        let (x, w) = (&inputs[0], &inputs[1]);
        let (_, mat) = batch_with("X", x, &[])?;
        float_operands(&[("X", x), ("w", w)])?;
        expect_shape("w", w, &Shape(vec![x.shape.dim(0).clone()]))?;
        Ok(vec![mat])
    }
}

impl OpDef for SpdLogMap {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![same_squares(&[("P", &inputs[0]), ("X", &inputs[1])])?])
    }
}

impl OpDef for SpdExpMap {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![same_squares(&[("P", &inputs[0]), ("V", &inputs[1])])?])
    }
}

impl OpDef for SpdParallelTransport {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![same_squares(&[("P", &inputs[0]), ("Q", &inputs[1]), ("V", &inputs[2])])?])
    }
}

impl OpDef for SpdMatrixFnBatch {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, _) = batch_with("X", &inputs[0], &[])?;
        Ok(vec![x])
    }
}

impl OpDef for ReEigBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, false)?;
        eig_fn_grad(inputs)
    }
}

impl OpDef for LogEigBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, true)?;
        eig_fn_grad(inputs)
    }
}

impl OpDef for SpdBatchNormBackwardX {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, true)?;
        let (dy, _) = batch_with("Ȳ", &inputs[2], &[("M", &inputs[0]), ("G", &inputs[1])])?;
        Ok(vec![dy])
    }
}

impl OpDef for SpdBatchNormBackwardG {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_eps(self.eps, true)?;
        let (x, mat) = batch_with("X", &inputs[0], &[("M", &inputs[1]), ("G", &inputs[2])])?;
        float_operands(&[("X", &x), ("Ȳ", &inputs[3])])?;
        expect_shape("Ȳ", &inputs[3], &x.shape)?;
        Ok(vec![mat])
    }
}

impl OpDef for SpdLogMapBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let t = same_squares(&[("P", &inputs[0]), ("X", &inputs[1]), ("Ȳ", &inputs[2])])?;
        Ok(vec![t.clone(), t])
    }
}

impl OpDef for SpdExpMapBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let t = same_squares(&[("P", &inputs[0]), ("V", &inputs[1]), ("Ȳ", &inputs[2])])?;
        Ok(vec![t.clone(), t])
    }
}

impl OpDef for SpdParallelTransportBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let named = [("P", &inputs[0]), ("Q", &inputs[1]), ("V", &inputs[2]), ("Ȳ", &inputs[3])];
        let t = same_squares(&named)?;
        Ok(vec![t.clone(), t.clone(), t])
    }
}

impl OpDef for SpdMatrixFnBatchBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, dy) = (&inputs[0], &inputs[1]);
        let (x, _) = batch_with("X", x, &[])?;
        float_operands(&[("X", &x), ("Ȳ", dy)])?;
        expect_shape("Ȳ", dy, &x.shape)?;
        Ok(vec![x])
    }
}

/// Builders for the spd family.
impl crate::Graph {
    /// `W·X·Wᵀ`.
    pub fn bi_map(&mut self, w: ValueId, x: ValueId) -> crate::Result<ValueId> {
        self.add1(BiMap {}, &[w, x])
    }

    /// Eigenvalue floor; returns `[Y, λ, U]`.
    pub fn re_eig(&mut self, x: ValueId, eps: f32) -> crate::Result<Vec<ValueId>> {
        add_all(self, ReEig { eps }, &[x])
    }

    /// Floored matrix log; returns `[Y, λ, U]`.
    pub fn log_eig(&mut self, x: ValueId, eps: f32) -> crate::Result<Vec<ValueId>> {
        add_all(self, LogEig { eps }, &[x])
    }

    /// Riemannian batch-norm of `x [B,n,n]` with mean `m` and bias `g`.
    pub fn spd_batch_norm(&mut self, x: ValueId, m: ValueId, g: ValueId, eps: f32) -> crate::Result<ValueId> {
        self.add1(SpdBatchNorm { eps }, &[x, m, g])
    }

    /// AIRM Fréchet mean of a batch.
    pub fn spd_karcher_mean(&mut self, x: ValueId, iters: u32, tol: f32) -> crate::Result<ValueId> {
        self.add1(SpdKarcherMean { iters, tol }, &[x])
    }

    /// Weighted AIRM barycentre of a batch.
    pub fn spd_karcher_mean_weighted(&mut self, x: ValueId, w: ValueId, iters: u32, tol: f32) -> crate::Result<ValueId> {
        self.add1(SpdKarcherMeanWeighted { iters, tol }, &[x, w])
    }

    /// `Log_P(X)`.
    pub fn spd_log_map(&mut self, p: ValueId, x: ValueId) -> crate::Result<ValueId> {
        self.add1(SpdLogMap {}, &[p, x])
    }

    /// `Exp_P(V)`.
    pub fn spd_exp_map(&mut self, p: ValueId, v: ValueId) -> crate::Result<ValueId> {
        self.add1(SpdExpMap {}, &[p, v])
    }

    /// Transports the tangent `v` from `p` to `q`.
    pub fn spd_parallel_transport(&mut self, p: ValueId, q: ValueId, v: ValueId) -> crate::Result<ValueId> {
        self.add1(SpdParallelTransport {}, &[p, q, v])
    }

    /// Spectral `kind` per slice.
    pub fn spd_matrix_fn_batch(&mut self, x: ValueId, kind: SpdMatFn) -> crate::Result<ValueId> {
        self.add1(SpdMatrixFnBatch { kind }, &[x])
    }

    /// Gradient of `ReEig` from its `λ`, `U` and `Ȳ`.
    pub fn re_eig_backward(&mut self, lam: ValueId, u: ValueId, dy: ValueId, eps: f32) -> crate::Result<ValueId> {
        self.add1(ReEigBackward { eps }, &[lam, u, dy])
    }

    /// Gradient of `LogEig` from its `λ`, `U` and `Ȳ`.
    pub fn log_eig_backward(&mut self, lam: ValueId, u: ValueId, dy: ValueId, eps: f32) -> crate::Result<ValueId> {
        self.add1(LogEigBackward { eps }, &[lam, u, dy])
    }

    /// Gradient of `SpdBatchNorm` w.r.t. `X`.
    pub fn spd_batch_norm_backward_x(&mut self, m: ValueId, g: ValueId, dy: ValueId, eps: f32) -> crate::Result<ValueId> {
        self.add1(SpdBatchNormBackwardX { eps }, &[m, g, dy])
    }

    /// Gradient of `SpdBatchNorm` w.r.t. `G`.
    pub fn spd_batch_norm_backward_g(&mut self, x: ValueId, m: ValueId, g: ValueId, dy: ValueId, eps: f32) -> crate::Result<ValueId> {
        self.add1(SpdBatchNormBackwardG { eps }, &[x, m, g, dy])
    }

    /// Gradients of `SpdLogMap`; returns `[dP, dX]`.
    pub fn spd_log_map_backward(&mut self, p: ValueId, x: ValueId, dy: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, SpdLogMapBackward {}, &[p, x, dy])
    }

    /// Gradients of `SpdExpMap`; returns `[dP, dV]`.
    pub fn spd_exp_map_backward(&mut self, p: ValueId, v: ValueId, dy: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, SpdExpMapBackward {}, &[p, v, dy])
    }

    /// Gradients of `SpdParallelTransport`; returns `[dP, dQ, dV]`.
    pub fn spd_parallel_transport_backward(&mut self, p: ValueId, q: ValueId, v: ValueId, dy: ValueId) -> crate::Result<Vec<ValueId>> {
        add_all(self, SpdParallelTransportBackward {}, &[p, q, v, dy])
    }

    /// Gradient of `SpdMatrixFnBatch{kind}` w.r.t. `X`.
    pub fn spd_matrix_fn_batch_backward(&mut self, x: ValueId, dy: ValueId, kind: SpdMatFn) -> crate::Result<ValueId> {
        self.add1(SpdMatrixFnBatchBackward { kind }, &[x, dy])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Dim, Graph};

    fn f64s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F64, dims)
    }

    fn batch(n: usize) -> TensorType {
        TensorType::new(DType::F64, Shape(vec![Dim::sym("B"), Dim::Static(n), Dim::Static(n)]))
    }

    #[test]
    fn bimap_maps_n_to_m() {
        let mut g = Graph::new();
        let w = g.param("w", f64s(&[8, 16]));
        let x = g.input("x", f64s(&[16, 16]));
        let y = g.bi_map(w, x).unwrap();
        assert_eq!(g.ty(y), &f64s(&[8, 8]));
        let e = g.bi_map(x, y).unwrap_err().to_string();
        assert!(e.contains("W f64[16, 16] must have 8 columns"), "{e}");
    }

    #[test]
    fn eig_functions_have_three_outputs_and_check_eps() {
        let mut g = Graph::new();
        let x = g.input("x", f64s(&[5, 5]));
        let out = g.re_eig(x, 1e-4).unwrap();
        let tys: Vec<_> = out.iter().map(|&v| g.ty(v).clone()).collect();
        assert_eq!(tys, vec![f64s(&[5, 5]), f64s(&[5]), f64s(&[5, 5])]);
        assert!(g.re_eig(x, 0.0).is_ok());
        let e = g.log_eig(x, 0.0).unwrap_err().to_string();
        assert!(e.contains("eps must be finite and > 0, got 0"), "{e}");
        let dx = g.log_eig_backward(out[1], out[2], out[0], 1e-4).unwrap();
        assert_eq!(g.ty(dx), &f64s(&[5, 5]));
        assert!(g.re_eig_backward(out[0], out[2], out[0], 1e-4).is_err());
    }

    #[test]
    fn batch_norm_and_its_gradients() {
        let mut g = Graph::new();
        let x = g.input("x", batch(4));
        let m = g.spd_karcher_mean(x, 20, 1e-6).unwrap();
        assert_eq!(g.ty(m), &f64s(&[4, 4]));
        let bias = g.param("g", f64s(&[4, 4]));
        let y = g.spd_batch_norm(x, m, bias, 1e-5).unwrap();
        assert_eq!(g.ty(y), &batch(4));
        let dx = g.spd_batch_norm_backward_x(m, bias, y, 1e-5).unwrap();
        assert_eq!(g.ty(dx), &batch(4));
        let dg = g.spd_batch_norm_backward_g(x, m, bias, y, 1e-5).unwrap();
        assert_eq!(g.ty(dg), &f64s(&[4, 4]));
        let small = g.input("s", f64s(&[3, 3]));
        let e = g.spd_batch_norm(x, small, bias, 1e-5).unwrap_err().to_string();
        assert!(e.contains("M must have shape [4, 4], got f64[3, 3]"), "{e}");
        assert!(g.spd_karcher_mean(x, 0, 1e-6).unwrap_err().to_string().contains("iters"));
    }

    #[test]
    fn weighted_mean_needs_one_weight_per_item() {
        let mut g = Graph::new();
        let x = g.input("x", batch(3));
        let w = g.input("w", TensorType::new(DType::F64, Shape(vec![Dim::sym("B")])));
        assert!(g.spd_karcher_mean_weighted(x, w, 10, 0.0).is_ok());
        let v = g.input("v", f64s(&[7]));
        let e = g.spd_karcher_mean_weighted(x, v, 10, 0.0).unwrap_err().to_string();
        assert!(e.contains("w must have shape [B]"), "{e}");
    }

    #[test]
    fn geometry_gradients_have_one_output_per_operand() {
        let mut g = Graph::new();
        let p = g.input("p", f64s(&[3, 3]));
        let q = g.input("q", f64s(&[3, 3]));
        let v = g.spd_log_map(p, q).unwrap();
        let t = g.spd_parallel_transport(p, q, v).unwrap();
        assert_eq!(g.spd_log_map_backward(p, q, v).unwrap().len(), 2);
        assert_eq!(g.spd_exp_map_backward(p, v, t).unwrap().len(), 2);
        let grads = g.spd_parallel_transport_backward(p, q, v, t).unwrap();
        assert_eq!(grads.len(), 3);
        assert_eq!(g.ty(grads[2]), &f64s(&[3, 3]));
        let f = g.input("f", TensorType::of(DType::F32, &[3, 3]));
        assert!(g.spd_exp_map(p, f).unwrap_err().to_string().contains("dtype of P"));
    }

    #[test]
    fn matrix_fn_batch_keeps_the_batch() {
        let mut g = Graph::new();
        let x = g.input("x", batch(6));
        let y = g.spd_matrix_fn_batch(x, SpdMatFn::Invsqrtm).unwrap();
        assert_eq!(g.ty(y), &batch(6));
        let dx = g.spd_matrix_fn_batch_backward(x, y, SpdMatFn::Invsqrtm).unwrap();
        assert_eq!(g.ty(dx), &batch(6));
        let flat = g.input("flat", f64s(&[6, 6]));
        assert!(g.spd_matrix_fn_batch(flat, SpdMatFn::Expm).is_err());
    }
}
