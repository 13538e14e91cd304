//! Reductions, scans and sorts: their axis shifts past the batch axis.

use super::{shifted, Batch};
use crate::Result;
use rlx_ir::ops::reduce::{ArgMax, ArgMin, CumMax, CumProd, Cumsum, CumsumBackward, Reduce, Sort, ArgSort};
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Reduce,
    OpKind::Cumsum,
    OpKind::CumProd,
    OpKind::CumMax,
    OpKind::CumsumBackward,
    OpKind::ArgMax,
    OpKind::ArgMin,
    OpKind::TopK,
    OpKind::Sort,
    OpKind::ArgSort,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let x = [b.x[0]];
    Some(match op {
        Op::Reduce(r) => b.apply(Reduce { axes: r.axes.iter().map(|a| a + 1).collect(), ..r.clone() }, &x),
        Op::Cumsum(c) => b.apply(Cumsum { axis: shifted(c.axis), ..c.clone() }, &x),
        Op::CumProd(c) => b.apply(CumProd { axis: shifted(c.axis), ..c.clone() }, &x),
        Op::CumMax(c) => b.apply(CumMax { axis: shifted(c.axis), ..c.clone() }, &x),
        Op::CumsumBackward(c) => b.apply(CumsumBackward { axis: shifted(c.axis), ..c.clone() }, &x),
        Op::ArgMax(a) => b.apply(ArgMax { axis: a.axis + 1, ..a.clone() }, &x),
        Op::ArgMin(a) => b.apply(ArgMin { axis: a.axis + 1, ..a.clone() }, &x),
        // Along the last axis: the batch axis is one more leading axis.
        Op::TopK(_) => b.apply(op.clone(), &x),
        Op::Sort(s) => b.apply(Sort { axis: s.axis + 1, ..s.clone() }, &x),
        Op::ArgSort(s) => b.apply(ArgSort { axis: s.axis + 1, ..s.clone() }, &x),
        _ => return None,
    })
}
