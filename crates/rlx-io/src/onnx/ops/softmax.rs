//! `Softmax`, `LogSoftmax` and `Hardmax` (before opset 13 on the input flattened to 2-D at
//! `axis`, default 1; from 13 on along one axis, default −1), and the losses built on them,
//! `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`.

use super::elementwise::{act, bin, cast_to};
use super::shape::reshape_static;
use super::elementwise::select;
use super::shape::reshape_dims;
use super::{invalid, Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::index::{Gather, GatherElements};
use rlx_ir::Dim;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ops::reduce::{ArgMax, Reduce, ReduceOp};
use rlx_ir::ops::softmax::Softmax;
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("Softmax", |cx, n| along(cx, n, softmax)),
    ("LogSoftmax", |cx, n| along(cx, n, log_softmax)),
    ("Hardmax", |cx, n| along(cx, n, hardmax)),
    ("NegativeLogLikelihoodLoss", |cx, n| Ok(vec![nll(cx, n, n.input(0)?)?])),
    ("SoftmaxCrossEntropyLoss", softmax_cross_entropy),
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

/// `NegativeLogLikelihoodLoss` of log-probabilities `input [N, C, d…]` against class ids
/// `target [N, d…]`: `−input[n, target, d…]·weight[target]`, zero where the target is
/// `ignore_index`; `reduction` none, sum, or mean (the weighted mean).
fn nll(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, input: ValueId) -> OpResult<ValueId> {
    let target = n.input(1)?;
    let dt = cx.dtype(input);
    let tdt = cx.dtype(target);
    let mut t = target;
    let mut keep = None;
    if let Some(ii) = n.attr("ignore_index").map(|a| a.i) {
        let ii = cx.scalar(tdt, ii as f64)?;
        let ignored = cx.add1(Compare { op: CmpOp::Eq }, &[target, ii])?;
        let zero = cx.scalar(tdt, 0.0)?;
        t = select(cx, ignored, zero, target)?;
        let kept = cx.add1(Compare { op: CmpOp::Ne }, &[target, ii])?;
        keep = Some(cast_to(cx, kept, dt)?);
    }
    let mut t_dims = cx.ty(t).shape.0;
    t_dims.insert(1, Dim::Static(1));
    let t1 = reshape_dims(cx, t, &t_dims)?;
    let picked = cx.add1(GatherElements { axis: 1 }, &[input, t1])?;
    let picked = reshape_dims(cx, picked, &cx.ty(t).shape.0)?;
    let mut w = match n.opt_input(2) {
        Some(weight) => Some(cx.add1(Gather { axis: 0 }, &[weight, t])?),
        None => None,
    };
    if let Some(k) = keep {
        w = Some(match w {
            Some(w) => bin(cx, BinaryOp::Mul, w, k)?,
            None => k,
        });
    }
    let neg = act(cx, ActivationKind::Neg, picked)?;
    let loss = match w {
        Some(w) => bin(cx, BinaryOp::Mul, neg, w)?,
        None => neg,
    };
    let all: Vec<usize> = (0..cx.rank(loss)).collect();
    let total = |cx: &mut Cx<'_>, v: ValueId| cx.add1(Reduce { op: ReduceOp::Sum, axes: all.clone(), keep_dim: false }, &[v]);
    match n.string("reduction", "mean").as_str() {
        "none" => Ok(loss),
        "sum" => total(cx, loss),
        "mean" => {
            let s = total(cx, loss)?;
            match w {
                Some(w) => {
                    let ws = total(cx, w)?;
                    bin(cx, BinaryOp::Div, s, ws)
                }
                None => {
                    let count: usize = cx.dims(loss)?.iter().product();
                    let c = cx.scalar(dt, count as f64)?;
                    bin(cx, BinaryOp::Div, s, c)
                }
            }
        }
        r => invalid(format!("reduction `{r}`")),
    }
}

/// `SoftmaxCrossEntropyLoss`: the NLL loss of `log_softmax(scores)` over axis 1; the second
/// output is the log-probabilities.
fn softmax_cross_entropy(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let scores = n.input(0)?;
    let log_prob = log_softmax(cx, scores, 1)?;
    let loss = nll(cx, n, log_prob)?;
    Ok(vec![loss, log_prob])
}
