//! Elementwise ops and casts (OPS.md §3, backward ops §22), and the activation formulas
//! every backend computes: [`table`] (written once over [`expr::Scalar`]), [`emit`] (their
//! CUDA C and WGSL source).

pub mod emit;
pub mod expr;
pub mod table;

use super::{Arity, OpDef};
use crate::{broadcast, DType, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// The unary functions of `Activation` (OPS.md §3 table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActivationKind {
    /// Exact, erf-based GELU (PyTorch `approximate='none'`).
    Gelu,
    /// Tanh-approximated GELU (PyTorch `approximate='tanh'`).
    GeluApprox,
    Silu,
    Relu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Neg,
    Abs,
    Sin,
    Cos,
    Tan,
    Atan,
    Recip,
    /// Round half to even.
    Round,
    Floor,
    Ceil,
    Sign,
    Softplus,
    /// ELU with α = 1.
    Elu,
    Erf,
    HardSwish,
    HardSigmoid,
    Mish,
    Softsign,
    LogSigmoid,
}

impl ActivationKind {
    /// Every kind, in declaration order.
    pub const ALL: [ActivationKind; 29] = {
        use ActivationKind::*;
        [
            Gelu, GeluApprox, Silu, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt, Neg, Abs, Sin, Cos,
            Tan, Atan, Recip, Round, Floor, Ceil, Sign, Softplus, Elu, Erf, HardSwish, HardSigmoid,
            Mish, Softsign, LogSigmoid,
        ]
    };

    /// Kinds that also apply to signed integers (exactly, with no rounding).
    pub fn accepts_int(self) -> bool {
        matches!(self, ActivationKind::Neg | ActivationKind::Abs | ActivationKind::Sign | ActivationKind::Relu)
    }

    /// Kinds that may appear inside an `ElementwiseRegion` chain (OPS.md §3).
    pub fn region_fusable(self) -> bool {
        use ActivationKind::*;
        !matches!(
            self,
            Floor | Ceil | Sign | Softplus | Elu | Erf | HardSwish | HardSigmoid | Mish | Softsign | LogSigmoid
        )
    }
}

/// Two-operand arithmetic of `Binary`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Integers truncate toward zero; division by zero gives 0.
    Div,
    Max,
    Min,
    Pow,
    /// Truncated remainder (C `fmod`): the result has the sign of `a`.
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Atan2,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 14] = {
        use BinaryOp::*;
        [Add, Sub, Mul, Div, Max, Min, Pow, Mod, BitAnd, BitOr, BitXor, Shl, Shr, Atan2]
    };

    fn is_bitwise(self) -> bool {
        matches!(self, BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr)
    }
}

/// Comparisons of `Compare`; the result is Bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// `y = f(x)` per element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    pub kind: ActivationKind,
}

/// Dtype conversion with Rust `as` semantics (float→int truncates and saturates, NaN → 0).
/// Into a minifloat dtype: round to nearest even, overflowing to ±inf or NaN as the format has
/// them (FP4 saturates); into E8M0: the exponent rounded up, saturating.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cast {
    pub to: DType,
}

/// Identity that blocks gradients.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StopGradient {}

/// `a op b` with NumPy broadcasting; both operands share one dtype.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Binary {
    pub op: BinaryOp,
}

/// `a op b` → Bool, broadcast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compare {
    pub op: CmpOp,
}

/// `cond ? on_true : on_false`, broadcast over all three.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Where {}

/// `a·b + c` with a single rounding, broadcast.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fma {}

/// KAN per-channel activation: a sum of `num_basis` Gaussian bumps on an even grid over
/// `[grid_min, grid_max]`, weighted by `coeff [C, num_basis]` (channel = last axis of `x`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplineActivation {
    pub num_basis: u32,
    pub grid_min: f32,
    pub grid_max: f32,
}

/// `ȳ·1[x > 0]`; inputs `(x, ȳ)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReluBackward {}

/// `ȳ·f′(x)` for the activation `kind`; inputs `(x, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivationBackward {
    pub kind: ActivationKind,
}

/// Gradient of `SplineActivation` w.r.t. `x`; inputs `(x, coeff, ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplineActivationBackwardX {
    pub num_basis: u32,
    pub grid_min: f32,
    pub grid_max: f32,
}

/// Gradient of `SplineActivation` w.r.t. `coeff`; inputs `(x, ȳ)`, output `[C, num_basis]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplineActivationBackwardCoeff {
    pub num_basis: u32,
    pub grid_min: f32,
    pub grid_max: f32,
}

fn same_dtype(what: &str, types: &[TensorType]) -> Result<DType, String> {
    let d = types[0].dtype;
    if let Some(t) = types.iter().find(|t| t.dtype != d) {
        return Err(format!("{what} must share one dtype, got {d} and {}", t.dtype));
    }
    Ok(d)
}

fn broadcast_all(types: &[TensorType]) -> Result<Shape, String> {
    types[1..]
        .iter()
        .try_fold(types[0].shape.clone(), |acc, t| broadcast(&acc, &t.shape))
}

fn float_only(what: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(format!("{what} needs a float tensor, got {t}"))
    }
}

/// Checks `(x, ȳ)` of a pointwise backward op: same type; returns `x`'s type.
fn pointwise_grad(inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let (x, dy) = (&inputs[0], &inputs[1]);
    float_only("x", x)?;
    if x != dy {
        return Err(format!("the upstream gradient {dy} must have the type of x {x}"));
    }
    Ok(vec![x.clone()])
}

impl OpDef for Activation {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let ok = x.dtype.is_float()
            || (self.kind.accepts_int() && x.dtype.is_int())
            || (self.kind == ActivationKind::Neg && x.dtype == DType::C64);
        if !ok {
            return Err(format!("{:?} does not apply to {}", self.kind, x.dtype));
        }
        Ok(vec![x.clone()])
    }
}

impl OpDef for Cast {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].with_dtype(self.to)])
    }
}

impl OpDef for StopGradient {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for Binary {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let d = same_dtype("operands", inputs)?;
        let ok = match self.op {
            _ if d.is_minifloat() || d.is_narrow_int() => false,
            op if op.is_bitwise() => d.is_int() || d == DType::Bool,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => d != DType::Bool,
            BinaryOp::Pow | BinaryOp::Atan2 => d.is_float(),
            _ => d != DType::Bool && d != DType::C64,
        };
        if !ok {
            return Err(format!("{:?} does not apply to {d}", self.op));
        }
        Ok(vec![TensorType::new(d, broadcast_all(inputs)?)])
    }
}

impl OpDef for Compare {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let d = same_dtype("operands", inputs)?;
        if d == DType::C64 && !matches!(self.op, CmpOp::Eq | CmpOp::Ne) {
            return Err(format!("{:?} does not order complex numbers", self.op));
        }
        Ok(vec![TensorType::new(DType::Bool, broadcast_all(inputs)?)])
    }
}

impl OpDef for Where {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let d = same_dtype("branches", &inputs[1..])?;
        Ok(vec![TensorType::new(d, broadcast_all(inputs)?)])
    }
}

impl OpDef for Fma {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let d = same_dtype("operands", inputs)?;
        if !d.is_float() {
            return Err(format!("Fma needs float operands, got {d}"));
        }
        Ok(vec![TensorType::new(d, broadcast_all(inputs)?)])
    }
}

fn check_spline(num_basis: u32, grid_min: f32, grid_max: f32, x: &TensorType) -> Result<(), String> {
    float_only("x", x)?;
    if x.rank() == 0 {
        return Err(format!("x {x} needs a channel axis"));
    }
    if num_basis == 0 {
        return Err("num_basis must be at least 1".into());
    }
    if num_basis > 1 && grid_max.partial_cmp(&grid_min) != Some(std::cmp::Ordering::Greater) {
        return Err(format!("grid_max {grid_max} must exceed grid_min {grid_min}"));
    }
    Ok(())
}

/// Checks `coeff [C, G]` against `x [.., C]`.
fn check_coeff(num_basis: u32, x: &TensorType, coeff: &TensorType) -> Result<(), String> {
    let c = x.shape.dims().last().cloned();
    let want = Shape(vec![c.unwrap_or(crate::Dim::Static(0)), crate::Dim::Static(num_basis as usize)]);
    if coeff.shape != want || coeff.dtype != x.dtype {
        return Err(format!("coeff {coeff} must be {}{want}", x.dtype));
    }
    Ok(())
}

impl OpDef for SplineActivation {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_spline(self.num_basis, self.grid_min, self.grid_max, &inputs[0])?;
        check_coeff(self.num_basis, &inputs[0], &inputs[1])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for ReluBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        pointwise_grad(inputs)
    }
}

impl OpDef for ActivationBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        pointwise_grad(inputs)
    }
}

impl OpDef for SplineActivationBackwardX {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_spline(self.num_basis, self.grid_min, self.grid_max, &inputs[0])?;
        check_coeff(self.num_basis, &inputs[0], &inputs[1])?;
        pointwise_grad(&[inputs[0].clone(), inputs[2].clone()])
    }
}

impl OpDef for SplineActivationBackwardCoeff {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_spline(self.num_basis, self.grid_min, self.grid_max, &inputs[0])?;
        pointwise_grad(inputs)?;
        let c = inputs[0].shape.dims().last().cloned().unwrap_or(crate::Dim::Static(0));
        Ok(vec![TensorType::new(
            inputs[0].dtype,
            Shape(vec![c, crate::Dim::Static(self.num_basis as usize)]),
        )])
    }
}

/// Builders for the elementwise family.
impl crate::Graph {
    pub fn activation(&mut self, kind: ActivationKind, x: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(Activation { kind }, &[x])
    }

    pub fn cast(&mut self, x: crate::ValueId, to: DType) -> crate::Result<crate::ValueId> {
        self.add1(Cast { to }, &[x])
    }

    pub fn stop_gradient(&mut self, x: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(StopGradient {}, &[x])
    }

    pub fn binary(&mut self, op: BinaryOp, a: crate::ValueId, b: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(Binary { op }, &[a, b])
    }

    pub fn compare(&mut self, op: CmpOp, a: crate::ValueId, b: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(Compare { op }, &[a, b])
    }

    pub fn select(&mut self, cond: crate::ValueId, on_true: crate::ValueId, on_false: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(Where {}, &[cond, on_true, on_false])
    }

    pub fn fma(&mut self, a: crate::ValueId, b: crate::ValueId, c: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(Fma {}, &[a, b, c])
    }

    pub fn spline_activation(
        &mut self,
        x: crate::ValueId,
        coeff: crate::ValueId,
        grid_min: f32,
        grid_max: f32,
    ) -> crate::Result<crate::ValueId> {
        let num_basis = self.ty(coeff).shape.dims().last().and_then(crate::Dim::as_static).unwrap_or(0) as u32;
        self.add1(SplineActivation { num_basis, grid_min, grid_max }, &[x, coeff])
    }

    pub fn relu_backward(&mut self, x: crate::ValueId, dy: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(ReluBackward {}, &[x, dy])
    }

    pub fn activation_backward(&mut self, kind: ActivationKind, x: crate::ValueId, dy: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(ActivationBackward { kind }, &[x, dy])
    }

    pub fn spline_activation_backward_x(&mut self, attrs: SplineActivationBackwardX, x: crate::ValueId, coeff: crate::ValueId, dy: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, coeff, dy])
    }

    pub fn spline_activation_backward_coeff(&mut self, attrs: SplineActivationBackwardCoeff, x: crate::ValueId, dy: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, dy])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    #[test]
    fn binary_broadcasts_and_names_bad_shapes() {
        let mut g = Graph::new();
        let a = g.input("a", f32s(&[2, 1, 4]));
        let b = g.input("b", f32s(&[3, 1]));
        let c = g.binary(BinaryOp::Add, a, b).unwrap();
        assert_eq!(g.ty(c), &f32s(&[2, 3, 4]));
        let d = g.input("d", f32s(&[5]));
        let e = g.binary(BinaryOp::Mul, a, d).unwrap_err().to_string();
        assert_eq!(e, "Binary(%0: f32[2, 1, 4], %3: f32[5]): shapes [2, 1, 4] and [5] do not broadcast");
    }

    #[test]
    fn compare_gives_bool_and_where_takes_branch_dtype() {
        let mut g = Graph::new();
        let a = g.input("a", f32s(&[3]));
        let m = g.compare(CmpOp::Lt, a, a).unwrap();
        assert_eq!(g.ty(m).dtype, DType::Bool);
        let w = g.select(m, a, a).unwrap();
        assert_eq!(g.ty(w), &f32s(&[3]));
        let i = g.input("i", TensorType::of(DType::I32, &[3]));
        assert!(g.select(m, a, i).unwrap_err().to_string().contains("share one dtype"));
    }

    #[test]
    fn dtype_rules() {
        let mut g = Graph::new();
        let i = g.input("i", TensorType::of(DType::I32, &[3]));
        assert!(g.activation(ActivationKind::Exp, i).is_err());
        assert!(g.activation(ActivationKind::Abs, i).is_ok());
        assert!(g.binary(BinaryOp::BitXor, i, i).is_ok());
        let x = g.input("x", f32s(&[3]));
        assert!(g.binary(BinaryOp::Shl, x, x).is_err());
        let h = g.cast(x, DType::F16).unwrap();
        assert_eq!(g.ty(h).dtype, DType::F16);
    }

    #[test]
    fn spline_shapes() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 5, 3]));
        let c = g.input("c", f32s(&[3, 8]));
        let y = g.spline_activation(x, c, -2.0, 2.0).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 5, 3]));
        let attrs = SplineActivationBackwardCoeff { num_basis: 8, grid_min: -2.0, grid_max: 2.0 };
        let dc = g.spline_activation_backward_coeff(attrs, x, y).unwrap();
        assert_eq!(g.ty(dc), &f32s(&[3, 8]));
        let bad = g.input("bad", f32s(&[4, 8]));
        assert!(g.spline_activation(x, bad, -2.0, 2.0).unwrap_err().to_string().contains("coeff"));
    }
}
