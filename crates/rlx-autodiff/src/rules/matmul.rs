//! VJPs of the matmul family (OPS.md §4).

use super::elementwise::back_to;
use super::Vjp;
use crate::Result;
use rlx_ir::ops::matmul::DotGeneral;
use rlx_ir::{Graph, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::MatMul];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::MatMul(_) => matmul(v),
        _ => return None,
    })
}

/// `y = a·b`: `ā = ȳ·bᵀ`, `b̄ = aᵀ·ȳ`, each summed over the batch dims it was broadcast along.
/// Where no batch dim broadcasts — a shared rank-2 weight, or equal batch dims — both are one
/// `DotGeneral` that contracts the transposed axes in place (a backend reads the operand
/// transposed instead of copying it), and a shared weight's gradient contracts every row of
/// every batch item at once instead of summing per-item products.
fn matmul(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (a, b, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    if let Some(layout) = Contraction::of(v.g, a, b) {
        let da = if v.wants(0) { Some(v.g.dot_general(dy, b, layout.da())?) } else { None };
        let db = if v.wants(1) { Some(v.g.dot_general(a, dy, layout.db())?) } else { None };
        return Ok(vec![da, db]);
    }
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

/// How the gradients of `a [.., M, K] · b [.., K, N]` contract when no batch dim broadcasts.
enum Contraction {
    /// `b` is a `[K, N]` matrix shared by `a`'s `rank − 2` batch dims (none broadcast).
    SharedRhs { rank: usize },
    /// `a` and `b` have the same `rank` and equal batch dims.
    Batched { rank: usize },
}

impl Contraction {
    fn of(g: &Graph, a: ValueId, b: ValueId) -> Option<Contraction> {
        let (sa, sb) = (g.ty(a).shape.dims(), g.ty(b).shape.dims());
        let rank = sa.len();
        if sb.len() == 2 && rank >= 2 {
            Some(Contraction::SharedRhs { rank })
        } else if sb.len() == rank && rank > 2 && sa[..rank - 2] == sb[..rank - 2] {
            Some(Contraction::Batched { rank })
        } else {
            None
        }
    }

    /// `ā [.., M, K] = ȳ [.., M, N] · bᵀ`: `ȳ`'s last axis with `b`'s last.
    fn da(&self) -> DotGeneral {
        match *self {
            Contraction::SharedRhs { rank } => DotGeneral { lhs_contracting: vec![rank - 1], rhs_contracting: vec![1], ..Default::default() },
            Contraction::Batched { rank } => DotGeneral {
                lhs_contracting: vec![rank - 1],
                rhs_contracting: vec![rank - 1],
                lhs_batch: (0..rank - 2).collect(),
                rhs_batch: (0..rank - 2).collect(),
            },
        }
    }

    /// `b̄ [.., K, N] = aᵀ · ȳ`: for a shared `b`, every axis of `a` but `K` with the same of
    /// `ȳ`; else the `M` axes, per batch item.
    fn db(&self) -> DotGeneral {
        match *self {
            Contraction::SharedRhs { rank } => DotGeneral { lhs_contracting: (0..rank - 1).collect(), rhs_contracting: (0..rank - 1).collect(), ..Default::default() },
            Contraction::Batched { rank } => DotGeneral {
                lhs_contracting: vec![rank - 2],
                rhs_contracting: vec![rank - 2],
                lhs_batch: (0..rank - 2).collect(),
                rhs_batch: (0..rank - 2).collect(),
            },
        }
    }
}

/// `x` with its last two axes swapped.
pub(crate) fn swap_last(g: &mut Graph, x: ValueId) -> Result<ValueId> {
    let r = g.ty(x).rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    Ok(g.transpose(x, &perm)?)
}
