//! Shape ops: axis attributes shift past the batch axis, targets gain it in front.

use super::Batch;
use crate::Result;
use rlx_ir::ops::shape::{Concat, Expand, Narrow, Pad, Reshape, Reverse, Slice, TargetDim, Transpose};
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Reshape,
    OpKind::Transpose,
    OpKind::Narrow,
    OpKind::Slice,
    OpKind::Concat,
    OpKind::Expand,
    OpKind::Reverse,
    OpKind::Pad,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    Some(match op {
        Op::Reshape(r) => {
            let new_shape = std::iter::once(TargetDim::from(b.size())).chain(r.new_shape.iter().cloned()).collect();
            b.apply(Reshape { new_shape }, &[b.x[0]])
        }
        Op::Transpose(t) => {
            let perm = std::iter::once(0).chain(t.perm.iter().map(|p| p + 1)).collect();
            b.apply(Transpose { perm }, &[b.x[0]])
        }
        Op::Narrow(n) => b.apply(Narrow { axis: n.axis + 1, ..n.clone() }, &[b.x[0]]),
        Op::Slice(s) => b.apply(Slice { axis: s.axis + 1, ..s.clone() }, &[b.x[0]]),
        Op::Reverse(r) => b.apply(Reverse { axes: r.axes.iter().map(|a| a + 1).collect() }, &[b.x[0]]),
        Op::Pad(p) => {
            let pads = std::iter::once([0, 0]).chain(p.pads.iter().copied()).collect();
            b.apply(Pad { pads, mode: p.mode.clone() }, &[b.x[0]])
        }
        Op::Concat(c) => (|| {
            let x = (0..b.x.len()).map(|i| b.lifted(i)).collect::<Result<Vec<_>>>()?;
            b.apply(Concat { axis: c.axis + 1 }, &x)
        })(),
        Op::Expand(e) => (|| {
            let x = b.aligned(0, e.target_shape.len())?;
            let target_shape = std::iter::once(TargetDim::from(b.size())).chain(e.target_shape.iter().cloned()).collect();
            b.apply(Expand { target_shape }, &[x])
        })(),
        _ => return None,
    })
}
