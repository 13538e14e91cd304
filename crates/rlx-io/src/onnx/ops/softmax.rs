//! `Softmax`, `LogSoftmax` and `Hardmax`; before opset 13 they act on the input flattened to
//! 2-D at `axis` (default 1), from 13 on along one axis (default −1).

use super::elementwise::{act, bin, cast_to};
use super::shape::reshape_static;
use super::{Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ops::reduce::{ArgMax, Reduce, ReduceOp};
use rlx_ir::ops::softmax::Softmax;
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("Softmax", |cx, n| along(cx, n, softmax)),
    ("LogSoftmax", |cx, n| along(cx, n, log_softmax)),
    ("Hardmax", |cx, n| along(cx, n, hardmax)),
];

/// Applies `f` along the node's axis, flattening first for opsets before 13.
fn along(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, f: fn(&mut Cx<'_>, ValueId, usize) -> OpResult<ValueId>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    if n.opset >= 13 {
        let axis = n.axis(n.int("axis", -1), rank)?;
        return Ok(vec![f(cx, x, axis)?]);
    }
    let axis = if rank == 0 { 0 } else { n.axis(n.int("axis", 1), rank)? };
    let dims = cx.dims(x)?;
    let (lead, rest) = dims.split_at(axis);
    let flat = reshape_static(cx, x, &[lead.iter().product(), rest.iter().product()])?;
    let y = f(cx, flat, 1)?;
    Ok(vec![reshape_static(cx, y, &dims)?])
}

fn softmax(cx: &mut Cx<'_>, x: ValueId, axis: usize) -> OpResult<ValueId> {
    cx.add1(Softmax { axis: axis as i32 }, &[x])
}

/// `x − max − log Σ exp(x − max)`.
fn log_softmax(cx: &mut Cx<'_>, x: ValueId, axis: usize) -> OpResult<ValueId> {
    let m = cx.add1(Reduce { op: ReduceOp::Max, axes: vec![axis], keep_dim: true }, &[x])?;
    let s = bin(cx, BinaryOp::Sub, x, m)?;
    let e = act(cx, ActivationKind::Exp, s)?;
    let sum = cx.add1(Reduce { op: ReduceOp::Sum, axes: vec![axis], keep_dim: true }, &[e])?;
    let lse = act(cx, ActivationKind::Log, sum)?;
    bin(cx, BinaryOp::Sub, s, lse)
}

/// One-hot of the first maximum along `axis`: its index compared with each position.
fn hardmax(cx: &mut Cx<'_>, x: ValueId, axis: usize) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let idx = cx.add1(ArgMax { axis, keep_dim: true }, &[x])?;
    let mut iota_dims = vec![1; dims.len()];
    iota_dims[axis] = dims[axis];
    let positions: Vec<f64> = (0..dims[axis]).map(|i| i as f64).collect();
    let iota = cx.values(rlx_ir::DType::I64, &iota_dims, &positions)?;
    let hit = cx.add1(Compare { op: CmpOp::Eq }, &[idx, iota])?;
    let dt = cx.dtype(x);
    cast_to(cx, hit, dt)
}
