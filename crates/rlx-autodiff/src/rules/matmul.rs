//! VJPs of the matmul family (OPS.md §4).

use super::elementwise::back_to;
use super::Vjp;
use crate::Result;
use rlx_ir::{Graph, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::MatMul];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::MatMul(_) => matmul(v),
        _ => return None,
    })
}

/// `y = a·b`: `ā = ȳ·bᵀ`, `b̄ = aᵀ·ȳ`, each summed over the batch dims it was broadcast along.
fn matmul(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (a, b, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let da = if v.wants(0) {
        let bt = swap_last(v.g, b)?;
        let p = v.g.matmul(dy, bt)?;
        Some(back_to(v.g, p, a)?)
    } else {
        None
    };
    let db = if v.wants(1) {
        let at = swap_last(v.g, a)?;
        let p = v.g.matmul(at, dy)?;
        Some(back_to(v.g, p, b)?)
    } else {
        None
    };
    Ok(vec![da, db])
}

/// `x` with its last two axes swapped.
pub(crate) fn swap_last(g: &mut Graph, x: ValueId) -> Result<ValueId> {
    let r = g.ty(x).rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    Ok(g.transpose(x, &perm)?)
}
