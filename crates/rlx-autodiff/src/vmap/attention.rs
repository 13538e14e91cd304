//! Attention and rotary embeddings: the batch axis folds into their `B` (rank 3 and 4
//! layouts) or becomes it (the rank-2 `[S, H·D]` layout). A mask joins the fold when it has
//! the query's rank and batch; other batched masks and per-example rope tables lower.

use super::{folding, leading, Batch};
use crate::Result;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Attention,
    OpKind::AttentionBackward,
    OpKind::AttentionBackwardAll,
    OpKind::Rope,
    OpKind::RopeBackward,
    OpKind::AxialRope2d,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let tensors = match op {
        Op::Attention(_) => 3,
        Op::AttentionBackward(_) | Op::AttentionBackwardAll(_) => 4,
        Op::Rope(_) | Op::RopeBackward(_) | Op::AxialRope2d(_) => 1,
        _ => return None,
    };
    let rank = b.ty(0).rank();
    let mut lead: Vec<usize> = (0..tensors).collect();
    if rank == 2 {
        return leading(b, op.clone(), &lead);
    }
    if b.x.len() > tensors && b.ty(tensors).rank() == rank {
        lead.push(tensors);
    }
    folding(b, op.clone(), &lead)
}
