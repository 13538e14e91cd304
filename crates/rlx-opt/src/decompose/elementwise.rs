//! Decompositions of the elementwise family.

use super::build::{scalar, vector};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{Dim, Graph, IrError, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Fma,
    OpKind::ReluBackward,
    OpKind::StopGradient,
    OpKind::SplineActivation,
    OpKind::SplineActivationBackwardX,
    OpKind::SplineActivationBackwardCoeff,
];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::Fma(_) => fma(g, x),
        Op::ReluBackward(_) => relu_backward(g, x),
        Op::StopGradient(_) => Ok(x[0]),
        Op::SplineActivation(a) => spline(g, (a.num_basis, a.grid_min, a.grid_max), x),
        Op::SplineActivationBackwardX(a) => spline_backward_x(g, (a.num_basis, a.grid_min, a.grid_max), x),
        Op::SplineActivationBackwardCoeff(a) => spline_backward_coeff(g, (a.num_basis, a.grid_min, a.grid_max), x),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// `a·b + c`, rounding twice (the only difference from the fused kernel).
fn fma(g: &mut Graph, x: &[ValueId]) -> Result<ValueId, IrError> {
    let ab = g.binary(BinaryOp::Mul, x[0], x[1])?;
    g.binary(BinaryOp::Add, ab, x[2])
}

/// `Where(x > 0, ȳ, 0)`.
fn relu_backward(g: &mut Graph, x: &[ValueId]) -> Result<ValueId, IrError> {
    let ty = g.ty(x[0]).clone();
    let zero = g.constant(rlx_ir::TensorType::of(ty.dtype, &[]), vec![0; ty.dtype.size()])?;
    let pos = g.compare(CmpOp::Gt, x[0], zero)?;
    g.select(pos, x[1], zero)
}

/// A spline's `(num_basis, grid_min, grid_max)`.
type SplineGrid = (u32, f32, f32);

/// `(φ, d)` over `[.., C, G]` for `x [.., C]`: `d = x − μ_g`, `φ = exp(−d²/h²)`, and `h`.
fn spline_basis(g: &mut Graph, (num_basis, lo, hi): SplineGrid, x: ValueId) -> Result<(ValueId, ValueId, f64), IrError> {
    let nb = num_basis as usize;
    let h = if nb > 1 { (f64::from(hi) - f64::from(lo)) / (nb - 1) as f64 } else { 1.0 };
    let ty = g.ty(x).clone();
    let mut dims = ty.shape.dims().to_vec();
    dims.push(Dim::Static(1));
    let column = g.reshape_to(x, &Shape(dims))?;
    let centres: Vec<f64> = (0..nb).map(|i| f64::from(lo) + i as f64 * h).collect();
    let mu = vector(g, ty.dtype, &centres)?;
    let d = g.binary(BinaryOp::Sub, column, mu)?;
    let d2 = g.binary(BinaryOp::Mul, d, d)?;
    let k = scalar(g, ty.dtype, -1.0 / (h * h))?;
    let e = g.binary(BinaryOp::Mul, d2, k)?;
    Ok((g.activation(ActivationKind::Exp, e)?, d, h))
}

/// `Σ_g coeff[c, g]·φ_g(x)`: the basis over `[.., C, G]`, times `coeff`, summed over `G`.
fn spline(g: &mut Graph, grid: SplineGrid, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (phi, _, _) = spline_basis(g, grid, x[0])?;
    let t = g.binary(BinaryOp::Mul, phi, x[1])?;
    let last = g.ty(t).rank() - 1;
    g.reduce(ReduceOp::Sum, t, &[last], false)
}

/// `ȳ·Σ_g coeff[c, g]·φ_g(x)·(−2(x − μ_g)/h²)`.
fn spline_backward_x(g: &mut Graph, grid: SplineGrid, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (phi, d, h) = spline_basis(g, grid, x[0])?;
    let t = g.binary(BinaryOp::Mul, phi, x[1])?;
    let t = g.binary(BinaryOp::Mul, t, d)?;
    let last = g.ty(t).rank() - 1;
    let s = g.reduce(ReduceOp::Sum, t, &[last], false)?;
    let k = scalar(g, g.ty(s).dtype, -2.0 / (h * h))?;
    let s = g.binary(BinaryOp::Mul, s, k)?;
    g.binary(BinaryOp::Mul, s, x[2])
}

/// `Σ_leading ȳ[.., c]·φ_g(x[.., c])` as `[C, G]`.
fn spline_backward_coeff(g: &mut Graph, grid: SplineGrid, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (phi, _, _) = spline_basis(g, grid, x[0])?;
    let mut dims = g.ty(x[1]).shape.dims().to_vec();
    dims.push(Dim::Static(1));
    let dy = g.reshape_to(x[1], &Shape(dims))?;
    let t = g.binary(BinaryOp::Mul, phi, dy)?;
    let leading: Vec<usize> = (0..g.ty(t).rank() - 2).collect();
    if leading.is_empty() {
        return Ok(t);
    }
    g.reduce(ReduceOp::Sum, t, &leading, false)
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn splines_lower_to_exp_and_sums() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3]))()
            %1 = Param(name:"c",ty:(dtype:F32,shape:[3,5]))()
            %2 = Input(name:"dy",ty:(dtype:F32,shape:["B",3]))()
            %3 = SplineActivation(num_basis:5,grid_min:-1,grid_max:1)(%0, %1)
            %4 = SplineActivationBackwardX(num_basis:5,grid_min:-1,grid_max:1)(%0, %1, %2)
            %5 = SplineActivationBackwardCoeff(num_basis:5,grid_min:-1,grid_max:1)(%0, %2)
            return %3, %4, %5"#,
            OpKind::SplineActivation,
            &[],
        );
        assert_eq!(count(&out, OpKind::SplineActivationBackwardX), 0);
        assert_eq!(count(&out, OpKind::SplineActivationBackwardCoeff), 0);
        assert_eq!(count(&out, OpKind::Reduce), 3);
    }
}
