//! VJPs of softmax and the cross-entropy losses (OPS.md §11).

use super::Vjp;
use crate::Result;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::ops::softmax::SoftmaxCrossEntropyBackward;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::Softmax, OpKind::SoftmaxCrossEntropyWithLogits];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Softmax(s) => softmax(s.axis, v),
        Op::SoftmaxCrossEntropyWithLogits(s) => cross_entropy(s.ignore_index, v),
        _ => return None,
    })
}

/// `x̄ = y·(ȳ − Σ_axis ȳ·y)`.
fn softmax(axis: i32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (y, dy) = (v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let rank = g.ty(y).rank() as i32;
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    let p = g.binary(BinaryOp::Mul, dy, y)?;
    let s = g.reduce(ReduceOp::Sum, p, &[axis], true)?;
    let d = g.binary(BinaryOp::Sub, dy, s)?;
    Ok(vec![Some(g.binary(BinaryOp::Mul, y, d)?)])
}

/// `SoftmaxCrossEntropyBackward(logits, labels, ȳ)`; labels get none.
fn cross_entropy(ignore_index: Option<i64>, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (logits, labels, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let d = v.g.add1(SoftmaxCrossEntropyBackward { ignore_index }, &[logits, labels, dy])?;
    Ok(vec![Some(d), None])
}
