//! Attention and rotary embeddings: the batch axis folds into their `B` (rank 3 and 4
//! layouts) or becomes it (the rank-2 `[S, H·D]` layout, whose `B` is 1). A mask is first
//! broadcast to its full `[B, S_k]` or `[B, H, S_q, S_k]` batch extent so that it folds along.

use super::{leading, Batch};
use crate::Result;
use rlx_ir::ops::attention::MaskKind;
use rlx_ir::ops::shape::{Expand, Reshape, TargetDim};
use rlx_ir::{Dim, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Attention,
    OpKind::AttentionBackward,
    OpKind::AttentionBackwardAll,
    OpKind::Rope,
    OpKind::RopeBackward,
    OpKind::AxialRope2d,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let (tensors, mask) = match op {
        // K and V read at rows: through the decomposition, whose gathers batch.
        Op::Attention(a) if a.kv_rows_input(b.x.len()).is_some() => return None,
        Op::Attention(a) => (3, a.mask_kind),
        Op::AttentionBackward(a) => (4, a.mask_kind),
        Op::AttentionBackwardAll(a) => (4, a.mask_kind),
        // `(x, cos, sin)` and `x`: per-example tables lower.
        Op::Rope(_) | Op::RopeBackward(_) | Op::AxialRope2d(_) if b.ty(0).rank() == 2 => return leading(b, op.clone(), &[0]),
        Op::Rope(_) | Op::RopeBackward(_) | Op::AxialRope2d(_) => return super::folding(b, op.clone(), &[0]),
        _ => return None,
    };
    let rank = b.ty(0).rank();
    let n = if rank >= 3 { b.ty(0).shape.dim(0).clone() } else { Dim::Static(1) };
    Some((|| {
        let mut x = b.x.to_vec();
        for (i, xi) in x.iter_mut().enumerate().take(tensors) {
            let v = b.lifted(i)?;
            *xi = if rank >= 3 { b.folded(v)? } else { v };
        }
        if mask.takes_input() {
            let full = if mask == MaskKind::Custom { 2 } else { 4 };
            let m = mask_rows(b, tensors, full, &n)?;
            x[tensors] = b.folded(m)?;
        }
        let ys = b.apply(op.clone(), &x)?;
        if rank < 3 {
            return Ok(ys);
        }
        let rows: Vec<Dim> = (0..ys.len()).map(|o| b.out(o).shape.dim(0).clone()).collect();
        ys.into_iter().zip(&rows).map(|(y, r)| b.unfolded(y, r)).collect()
    })())
}

/// Mask operand `i` as `[B, N, ..]` of rank `full + 1`: unit axes added after the batch
/// axis, then its own batch axis broadcast to `n`.
fn mask_rows(b: &mut Batch, i: usize, full: usize, n: &Dim) -> Result<ValueId> {
    let m = b.lifted(i)?;
    let dims = b.ty(i).shape.0.clone();
    let mut target = vec![TargetDim::from(b.size())];
    target.extend((dims.len()..full).map(|_| TargetDim::Size(1)));
    target.extend(dims.iter().map(TargetDim::from));
    let m = b.g.add1(Reshape { new_shape: target }, &[m])?;
    let mut target = vec![TargetDim::Size(-1), TargetDim::from(n)];
    target.extend((1..full).map(|_| TargetDim::Size(-1)));
    Ok(b.g.add1(Expand { target_shape: target }, &[m])?)
}
