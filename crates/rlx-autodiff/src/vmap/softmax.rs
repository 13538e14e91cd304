//! Softmax and the cross-entropies: rows `[.., C]`, so the batch axis is one more row axis.

use super::{leading, shifted, Batch};
use crate::Result;
use rlx_ir::ops::softmax::Softmax;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Softmax,
    OpKind::SoftmaxCrossEntropy,
    OpKind::SoftmaxCrossEntropyWithLogits,
    OpKind::SoftmaxCrossEntropyBackward,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let all: Vec<usize> = (0..b.x.len()).collect();
    match op {
        Op::Softmax(s) => leading(b, Softmax { axis: shifted(s.axis) }, &[0]),
        Op::SoftmaxCrossEntropy(_) | Op::SoftmaxCrossEntropyWithLogits(_) | Op::SoftmaxCrossEntropyBackward(_) => {
            leading(b, op.clone(), &all)
        }
        _ => None,
    }
}
