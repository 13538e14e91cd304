//! Decompositions of the elementwise family.

use rlx_ir::ops::elementwise::{BinaryOp, CmpOp};
use rlx_ir::{Graph, IrError, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::Fma, OpKind::ReluBackward, OpKind::StopGradient];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::Fma(_) => fma(g, x),
        Op::ReluBackward(_) => relu_backward(g, x),
        Op::StopGradient(_) => Ok(x[0]),
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
