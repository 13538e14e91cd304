//! `MatMul` (with NumPy's promotion of 1-D operands) and `Gemm`.

use super::elementwise::{bin, bin_scalar};
use super::shape::{reshape_dims, transpose_to};
use super::{invalid, Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::matmul::MatMul;
use rlx_ir::{Dim, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[("MatMul", matmul), ("Gemm", gemm)];

/// `a · b` as `np.matmul`: a 1-D `a` is a row, a 1-D `b` a column, removed again afterwards.
pub(super) fn matmul_nd(cx: &mut Cx<'_>, a: ValueId, b: ValueId) -> OpResult<ValueId> {
    let (ra, rb) = (cx.rank(a), cx.rank(b));
    if ra == 0 || rb == 0 {
        return invalid("MatMul operands must have at least one axis");
    }
    let a2 = if ra == 1 { reshape_dims(cx, a, &[Dim::Static(1), cx.ty(a).shape.dim(0).clone()])? } else { a };
    let b2 = if rb == 1 { reshape_dims(cx, b, &[cx.ty(b).shape.dim(0).clone(), Dim::Static(1)])? } else { b };
    let y = cx.add1(MatMul {}, &[a2, b2])?;
    if ra > 1 && rb > 1 {
        return Ok(y);
    }
    let mut out = cx.ty(y).shape.0;
    if rb == 1 {
        out.pop();
    }
    if ra == 1 {
        let m_axis = out.len() - if rb == 1 { 1 } else { 2 };
        out.remove(m_axis);
    }
    reshape_dims(cx, y, &out)
}

fn matmul(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    Ok(vec![matmul_nd(cx, n.input(0)?, n.input(1)?)?])
}

/// `Gemm`: `α·op(A)·op(B) + β·C`, `op` transposing when `transA`/`transB` is set.
fn gemm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (mut a, mut b) = (n.input(0)?, n.input(1)?);
    if n.int("transA", 0) != 0 {
        a = transpose_to(cx, a, &[1, 0])?;
    }
    if n.int("transB", 0) != 0 {
        b = transpose_to(cx, b, &[1, 0])?;
    }
    let mut y = matmul_nd(cx, a, b)?;
    let alpha = n.float("alpha", 1.0) as f64;
    if alpha != 1.0 {
        y = bin_scalar(cx, BinaryOp::Mul, y, alpha)?;
    }
    if let Some(c) = n.opt_input(2) {
        let beta = n.float("beta", 1.0) as f64;
        let c = if beta != 1.0 { bin_scalar(cx, BinaryOp::Mul, c, beta)? } else { c };
        y = bin(cx, BinaryOp::Add, y, c)?;
    }
    Ok(vec![y])
}
