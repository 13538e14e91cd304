//! SPD-manifold ops over batches `X [B, n, n]`: the batch axis folds into `B`, with the
//! batch statistics (`M`, `G`) shared.

use super::{folding, Batch};
use crate::Result;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] =
    &[OpKind::SpdMatrixFnBatch, OpKind::SpdMatrixFnBatchBackward, OpKind::SpdBatchNorm, OpKind::SpdBatchNormBackwardX];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let lead: &[usize] = match op {
        Op::SpdMatrixFnBatch(_) | Op::SpdBatchNorm(_) => &[0],
        Op::SpdMatrixFnBatchBackward(_) => &[0, 1],
        Op::SpdBatchNormBackwardX(_) => &[2],
        _ => return None,
    };
    folding(b, op.clone(), lead)
}
