//! Linear algebra: the kinds with a batched form (`DenseSolve` → `BatchedDenseSolve`,
//! `Eigh` → `EighBatch`) map to it; the batched forms fold the batch axis into theirs.

use super::{folding, leading, Batch};
use crate::Result;
use rlx_ir::ops::linalg::{BatchedDenseSolve, EighBatch, EighBatchBackward};
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] =
    &[OpKind::DenseSolve, OpKind::BatchedDenseSolve, OpKind::Eigh, OpKind::EighBackward, OpKind::EighBatch, OpKind::EighBatchBackward];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let all: Vec<usize> = (0..b.x.len()).collect();
    match op {
        Op::DenseSolve(_) => leading(b, BatchedDenseSolve {}, &all),
        Op::Eigh(_) => leading(b, EighBatch {}, &all),
        Op::EighBackward(_) => leading(b, EighBatchBackward {}, &all),
        Op::BatchedDenseSolve(_) | Op::EighBatch(_) | Op::EighBatchBackward(_) => folding(b, op.clone(), &all),
        _ => None,
    }
}
