//! Reductions (`Reduce*`, with axes as an attribute or, from opset 13 for `ReduceSum` and 18
//! for the rest, as an input), `ArgMax`/`ArgMin`, `TopK` and the running `CumSum`/`CumProd`.

use super::elementwise::{act, bin};
use super::shape::{reshape_dims, transpose_to};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::reduce::{ArgMax, ArgMin, CumProd, Cumsum, Reduce, ReduceOp, TopK};
use rlx_ir::ops::shape::Reverse;
use rlx_ir::{Dim, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("ReduceSum", |cx, n| reduce(cx, n, Kind::Plain(ReduceOp::Sum))),
    ("ReduceMean", |cx, n| reduce(cx, n, Kind::Plain(ReduceOp::Mean))),
    ("ReduceMax", |cx, n| reduce(cx, n, Kind::Plain(ReduceOp::Max))),
    ("ReduceMin", |cx, n| reduce(cx, n, Kind::Plain(ReduceOp::Min))),
    ("ReduceProd", |cx, n| reduce(cx, n, Kind::Plain(ReduceOp::Prod))),
    ("ReduceL1", |cx, n| reduce(cx, n, Kind::L1)),
    ("ReduceL2", |cx, n| reduce(cx, n, Kind::L2)),
    ("ReduceSumSquare", |cx, n| reduce(cx, n, Kind::SumSquare)),
    ("ReduceLogSum", |cx, n| reduce(cx, n, Kind::LogSum)),
    ("ReduceLogSumExp", |cx, n| reduce(cx, n, Kind::LogSumExp)),
    ("ArgMax", |cx, n| arg(cx, n, true)),
    ("ArgMin", |cx, n| arg(cx, n, false)),
    ("TopK", top_k),
    ("CumSum", |cx, n| cumulative(cx, n, true)),
    ("CumProd", |cx, n| cumulative(cx, n, false)),
];

/// The ONNX reductions, as an rlx `Reduce` with work before or after it.
#[derive(Clone, Copy)]
enum Kind {
    Plain(ReduceOp),
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

/// The normalized axes to reduce, or `None` for the identity (`noop_with_empty_axes`).
fn reduce_axes(cx: &Cx<'_>, n: &OnnxNode<'_, '_>, rank: usize) -> OpResult<Option<Vec<usize>>> {
    let since = if n.proto.op_type == "ReduceSum" { 13 } else { 18 };
    let axes = super::shape::axes_arg(cx, n, since, 1)?.unwrap_or_default();
    if axes.is_empty() {
        return Ok(if n.int("noop_with_empty_axes", 0) != 0 { None } else { Some((0..rank).collect()) });
    }
    let mut out: Vec<usize> = axes.iter().map(|&a| n.axis(a, rank)).collect::<OpResult<_>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
}

fn sum(cx: &mut Cx<'_>, op: ReduceOp, x: ValueId, axes: &[usize]) -> OpResult<ValueId> {
    cx.add1(Reduce { op, axes: axes.to_vec(), keep_dim: true }, &[x])
}

fn reduce(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, kind: Kind) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let Some(axes) = reduce_axes(cx, n, rank)? else {
        return Ok(vec![match kind {
            Kind::L1 => act(cx, ActivationKind::Abs, x)?,
            Kind::SumSquare => bin(cx, BinaryOp::Mul, x, x)?,
            _ => x,
        }]);
    };
    let y = match kind {
        Kind::Plain(op) => sum(cx, op, x, &axes)?,
        Kind::L1 => {
            let a = act(cx, ActivationKind::Abs, x)?;
            sum(cx, ReduceOp::Sum, a, &axes)?
        }
        Kind::L2 | Kind::SumSquare => {
            let sq = bin(cx, BinaryOp::Mul, x, x)?;
            let s = sum(cx, ReduceOp::Sum, sq, &axes)?;
            if matches!(kind, Kind::L2) {
                act(cx, ActivationKind::Sqrt, s)?
            } else {
                s
            }
        }
        Kind::LogSum => {
            let s = sum(cx, ReduceOp::Sum, x, &axes)?;
            act(cx, ActivationKind::Log, s)?
        }
        Kind::LogSumExp => {
            let m = sum(cx, ReduceOp::Max, x, &axes)?;
            let zero = cx.scalar(cx.dtype(x), 0.0)?;
            let finite = cx.add1(rlx_ir::ops::elementwise::Compare { op: rlx_ir::ops::elementwise::CmpOp::Eq }, &[m, m])?;
            let m = super::elementwise::select(cx, finite, m, zero)?;
            let shifted = bin(cx, BinaryOp::Sub, x, m)?;
            let e = act(cx, ActivationKind::Exp, shifted)?;
            let s = sum(cx, ReduceOp::Sum, e, &axes)?;
            let l = act(cx, ActivationKind::Log, s)?;
            bin(cx, BinaryOp::Add, l, m)?
        }
    };
    Ok(vec![keep_or_drop(cx, n, y, &axes)?])
}

/// Removes the reduced (extent-1) axes unless `keepdims` (default 1) is set.
fn keep_or_drop(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, y: ValueId, axes: &[usize]) -> OpResult<ValueId> {
    if n.int("keepdims", 1) != 0 {
        return Ok(y);
    }
    let kept: Vec<Dim> = cx.ty(y).shape.0.into_iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d).collect();
    reshape_dims(cx, y, &kept)
}

/// `ArgMax`/`ArgMin`; `select_last_index` searches the reversed axis and maps back.
fn arg(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, max: bool) -> OpResult<Vec<ValueId>> {
    let mut x = n.input(0)?;
    let rank = cx.rank(x);
    let axis = n.axis(n.int("axis", 0), rank)?;
    let keep_dim = n.int("keepdims", 1) != 0;
    let last = n.int("select_last_index", 0) != 0;
    if last {
        x = cx.add1(Reverse { axes: vec![axis] }, &[x])?;
    }
    let mut idx = if max { cx.add1(ArgMax { axis, keep_dim }, &[x])? } else { cx.add1(ArgMin { axis, keep_dim }, &[x])? };
    if last {
        let extent = cx.ty(x).static_dim(axis).map_err(OpError::Unsupported)?;
        let top = cx.scalar(rlx_ir::DType::I64, extent as f64 - 1.0)?;
        idx = bin(cx, BinaryOp::Sub, top, idx)?;
    }
    Ok(vec![idx])
}

/// `TopK` along any axis (moved last for rlx's `TopK`); the smallest `k` come from the
/// negated input.
fn top_k(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let k = if n.opset < 10 { n.int("k", 0) } else { cx.const_ints(n.input(1)?, "k")?.first().copied().unwrap_or(-1) };
    let k = usize::try_from(k).map_err(|_| OpError::Invalid(format!("k = {k}")))?;
    let axis = n.axis(n.int("axis", -1), rank)?;
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let mut inv = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let moved = transpose_to(cx, x, &perm)?;
    let largest = n.int("largest", 1) != 0;
    let keyed = if largest { moved } else { act(cx, ActivationKind::Neg, moved)? };
    let outs = cx.add(TopK { k }, &[keyed])?;
    let (mut values, indices) = (outs[0], outs[1]);
    if !largest {
        values = act(cx, ActivationKind::Neg, values)?;
    }
    Ok(vec![transpose_to(cx, values, &inv)?, transpose_to(cx, indices, &inv)?])
}

fn cumulative(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, add: bool) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let axis = cx.const_ints(n.input(1)?, "axis")?;
    let [axis] = axis[..] else { return invalid("axis must hold one value") };
    let axis = n.axis(axis, rank)?;
    let exclusive = n.int("exclusive", 0) != 0;
    let reverse = n.int("reverse", 0) != 0;
    let flip = |cx: &mut Cx<'_>, v: ValueId| if reverse { cx.add1(Reverse { axes: vec![axis] }, &[v]) } else { Ok(v) };
    let y = flip(cx, x)?;
    let y = if add {
        cx.add1(Cumsum { axis: axis as i32, exclusive }, &[y])?
    } else {
        cx.add1(CumProd { axis: axis as i32, exclusive }, &[y])?
    };
    Ok(vec![flip(cx, y)?])
}
