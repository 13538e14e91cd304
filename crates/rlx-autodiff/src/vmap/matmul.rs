//! Matrix products: `MatMul` broadcasts its batch dims, `DotGeneral` takes the batch axis as
//! one more batch (or free) dim, and the `[.., m, k]` products treat it as a leading row axis.

use super::{broadcasting, leading, Batch};
use crate::Result;
use rlx_ir::ops::matmul::DotGeneral;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::MatMul, OpKind::DotGeneral, OpKind::LoraMatMul, OpKind::SynthMatMul];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    match op {
        Op::MatMul(_) => Some(broadcasting(b, op.clone())),
        Op::DotGeneral(d) => Some(dot_general(b, d)),
        // `x [.., m, k]` against shared weights; per-example weights lower.
        Op::LoraMatMul(_) | Op::SynthMatMul(_) => leading(b, op.clone(), &[0]),
        _ => None,
    }
}

/// Both batched: the batch axis is a new leading batch dim of both sides. One batched: it is
/// that side's first free dim, moved to the front of the output afterwards.
fn dot_general(b: &mut Batch, d: &DotGeneral) -> Result<Vec<ValueId>> {
    let up = |v: &[usize]| v.iter().map(|a| a + 1).collect::<Vec<usize>>();
    let (lb, rb) = (b.is_batched(0), b.is_batched(1));
    let mut e = d.clone();
    if lb {
        e.lhs_contracting = up(&d.lhs_contracting);
        e.lhs_batch = up(&d.lhs_batch);
    }
    if rb {
        e.rhs_contracting = up(&d.rhs_contracting);
        e.rhs_batch = up(&d.rhs_batch);
    }
    if lb && rb {
        e.lhs_batch.insert(0, 0);
        e.rhs_batch.insert(0, 0);
    }
    let y = b.apply(e, &[b.x[0], b.x[1]])?[0];
    let at = match (lb, rb) {
        (true, true) => 0,
        (true, false) => d.lhs_batch.len(),
        _ => b.ty(0).rank() - d.lhs_contracting.len(),
    };
    Ok(vec![b.moved(y, at, 0)?])
}
