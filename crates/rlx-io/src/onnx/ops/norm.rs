//! Normalizations: `BatchNormalization` (inference and training mode), `InstanceNormalization` and
//! `GroupNormalization` (rlx `GroupNorm`), `LayerNormalization`, `RMSNormalization`,
//! `LpNormalization` and `MeanVarianceNormalization` (lowered to reductions where ONNX
//! normalizes over several axes or returns the statistics).

use super::elementwise::{act, bin, bin_scalar, cast_to};
use super::shape::{expand_to, reshape_static};
use super::{unsupported, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::norm::{BatchNormInference, GroupNorm};
use rlx_ir::ops::reduce::{Reduce, ReduceOp};
use rlx_ir::{DType, Shape, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("BatchNormalization", batch_norm),
    ("InstanceNormalization", instance_norm),
    ("GroupNormalization", group_norm),
    ("LayerNormalization", layer_norm),
    ("RMSNormalization", rms_norm),
    ("LpNormalization", lp_norm),
    ("MeanVarianceNormalization", mean_variance),
];

fn batch_norm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    if n.opset >= 14 && n.int("training_mode", 0) != 0 {
        return batch_norm_training(cx, n);
    }
    if n.proto.output.iter().skip(1).any(|o| !o.is_empty()) {
        return unsupported("the running statistics outputs of opsets before 14 (training_mode from opset 14 is supported)");
    }
    let x = n.input(0)?;
    let dt = cx.dtype(x);
    let mut ins = vec![x];
    for i in 1..5 {
        ins.push(cast_to(cx, n.input(i)?, dt)?);
    }
    let eps = n.float("epsilon", 1e-5);
    Ok(vec![cx.add1(BatchNormInference { eps, axis: 1 }, &ins)?])
}

/// `BatchNormalization` with `training_mode = 1` (opsets 14/15): normalizes with the batch's
/// mean and (biased) variance over every axis but the channels, and returns the running
/// statistics `momentum·running + (1 − momentum)·batch`.
fn batch_norm_training(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x0 = n.input(0)?;
    let dims = cx.dims(x0)?;
    let [_, c, ..] = dims[..] else { return Err(OpError::Invalid(format!("input {dims:?} needs a channel axis"))) };
    let dt = cx.dtype(x0);
    let axes: Vec<usize> = (0..dims.len()).filter(|&a| a != 1).collect();
    let (normed, mean, var, _) = standardize(cx, n, x0, &axes)?;
    let mut per_channel = vec![1; dims.len()];
    per_channel[1] = c;
    let scale = reshape_static(cx, n.input(1)?, &per_channel)?;
    let bias = reshape_static(cx, n.input(2)?, &per_channel)?;
    let scale = cast_to(cx, scale, dt)?;
    let bias = cast_to(cx, bias, dt)?;
    let y = bin(cx, BinaryOp::Mul, normed, scale)?;
    let y = bin(cx, BinaryOp::Add, y, bias)?;
    let momentum = n.float("momentum", 0.9) as f64;
    let running = |cx: &mut Cx<'_>, old: ValueId, batch: ValueId| -> OpResult<ValueId> {
        let batch = reshape_static(cx, batch, &[c])?;
        let old_dt = cx.dtype(old);
        let batch = cast_to(cx, batch, old_dt)?;
        let kept = bin_scalar(cx, BinaryOp::Mul, old, momentum)?;
        let new = bin_scalar(cx, BinaryOp::Mul, batch, 1.0 - momentum)?;
        bin(cx, BinaryOp::Add, kept, new)
    };
    let running_mean = running(cx, n.input(3)?, mean)?;
    let running_var = running(cx, n.input(4)?, var)?;
    Ok(vec![y, running_mean, running_var])
}

fn instance_norm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let channels = cx.ty(x).static_dim(1).map_err(OpError::Unsupported)?;
    let eps = n.float("epsilon", 1e-5);
    Ok(vec![cx.add1(GroupNorm { num_groups: channels, eps }, &[x, n.input(1)?, n.input(2)?])?])
}

/// `GroupNormalization`: opset 18 gives scale and bias per group, 21 per channel.
fn group_norm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let channels = cx.ty(x).static_dim(1).map_err(OpError::Unsupported)?;
    let groups = n.int("num_groups", 0) as usize;
    if groups == 0 || channels % groups != 0 {
        return Err(OpError::Invalid(format!("num_groups {groups} must divide the {channels} channels")));
    }
    let eps = n.float("epsilon", 1e-5);
    let per_channel = |cx: &mut Cx<'_>, v: ValueId| -> OpResult<ValueId> {
        if cx.dims(v)? == [channels] {
            return Ok(v);
        }
        let g = reshape_static(cx, v, &[groups, 1])?;
        let g = expand_to(cx, g, &Shape::of(&[groups, channels / groups]))?;
        reshape_static(cx, g, &[channels])
    };
    let scale = per_channel(cx, n.input(1)?)?;
    let bias = per_channel(cx, n.input(2)?)?;
    Ok(vec![cx.add1(GroupNorm { num_groups: groups, eps }, &[x, scale, bias])?])
}

/// Mean and variance over `axes` (kept as extent 1), computed in F32 for half inputs.
fn moments(cx: &mut Cx<'_>, x: ValueId, axes: &[usize]) -> OpResult<(ValueId, ValueId)> {
    let mean = cx.add1(Reduce { op: ReduceOp::Mean, axes: axes.to_vec(), keep_dim: true }, &[x])?;
    let d = bin(cx, BinaryOp::Sub, x, mean)?;
    let sq = bin(cx, BinaryOp::Mul, d, d)?;
    let var = cx.add1(Reduce { op: ReduceOp::Mean, axes: axes.to_vec(), keep_dim: true }, &[sq])?;
    Ok((mean, var))
}

/// The computation dtype for `x`: F32 for half floats (ONNX's `stash_type` default).
fn stash(cx: &Cx<'_>, x: ValueId) -> DType {
    match cx.dtype(x) {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// `(x − mean)/√(var + ε)` over `axes`, computed in F32 for half inputs and returned in
/// `x`'s dtype, with the mean, the (biased) variance and the inverse deviation it used.
fn standardize(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, x0: ValueId, axes: &[usize]) -> OpResult<(ValueId, ValueId, ValueId, ValueId)> {
    let dt = cx.dtype(x0);
    let x = cast_to(cx, x0, stash(cx, x0))?;
    let (mean, var) = moments(cx, x, axes)?;
    let ve = bin_scalar(cx, BinaryOp::Add, var, n.float("epsilon", 1e-5) as f64)?;
    let inv = act(cx, ActivationKind::Rsqrt, ve)?;
    let d = bin(cx, BinaryOp::Sub, x, mean)?;
    let normed = bin(cx, BinaryOp::Mul, d, inv)?;
    Ok((cast_to(cx, normed, dt)?, mean, var, inv))
}

/// `LayerNormalization`: normalizes over axes `axis..`; outputs `Y`, and `Mean`, `InvStdDev`
/// when asked.
fn layer_norm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x0 = n.input(0)?;
    let rank = cx.rank(x0);
    let axis = n.axis(n.int("axis", -1), rank)?;
    let axes: Vec<usize> = (axis..rank).collect();
    let (normed, mean, _, inv) = standardize(cx, n, x0, &axes)?;
    let mut y = bin(cx, BinaryOp::Mul, normed, n.input(1)?)?;
    if let Some(b) = n.opt_input(2) {
        y = bin(cx, BinaryOp::Add, y, b)?;
    }
    Ok(vec![y, mean, inv])
}

/// `RMSNormalization` (opset 23): `x / √(mean(x²) + ε) · scale` over axes `axis..`.
fn rms_norm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x0 = n.input(0)?;
    let rank = cx.rank(x0);
    let axis = n.axis(n.int("axis", -1), rank)?;
    let dt = cx.dtype(x0);
    let x = cast_to(cx, x0, stash(cx, x0))?;
    let sq = bin(cx, BinaryOp::Mul, x, x)?;
    let ms = cx.add1(Reduce { op: ReduceOp::Mean, axes: (axis..rank).collect(), keep_dim: true }, &[sq])?;
    let ve = bin_scalar(cx, BinaryOp::Add, ms, n.float("epsilon", 1e-5) as f64)?;
    let inv = act(cx, ActivationKind::Rsqrt, ve)?;
    let normed = bin(cx, BinaryOp::Mul, x, inv)?;
    let normed = cast_to(cx, normed, dt)?;
    Ok(vec![bin(cx, BinaryOp::Mul, normed, n.input(1)?)?])
}

fn lp_norm(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let axis = n.axis(n.int("axis", -1), cx.rank(x))?;
    let norm = match n.int("p", 2) {
        1 => {
            let a = act(cx, ActivationKind::Abs, x)?;
            cx.add1(Reduce { op: ReduceOp::Sum, axes: vec![axis], keep_dim: true }, &[a])?
        }
        2 => {
            let sq = bin(cx, BinaryOp::Mul, x, x)?;
            let s = cx.add1(Reduce { op: ReduceOp::Sum, axes: vec![axis], keep_dim: true }, &[sq])?;
            act(cx, ActivationKind::Sqrt, s)?
        }
        p => return Err(OpError::Invalid(format!("p = {p} (1 or 2)"))),
    };
    let zero = cx.scalar(cx.dtype(x), 0.0)?;
    let is_zero = cx.add1(rlx_ir::ops::elementwise::Compare { op: rlx_ir::ops::elementwise::CmpOp::Eq }, &[norm, zero])?;
    let q = bin(cx, BinaryOp::Div, x, norm)?;
    Ok(vec![super::elementwise::select(cx, is_zero, zero, q)?])
}

fn mean_variance(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let axes = n.ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    let axes: Vec<usize> = axes.iter().map(|&a| n.axis(a, rank)).collect::<OpResult<_>>()?;
    let (mean, var) = moments(cx, x, &axes)?;
    let d = bin(cx, BinaryOp::Sub, x, mean)?;
    let sd = act(cx, ActivationKind::Sqrt, var)?;
    let sd = bin_scalar(cx, BinaryOp::Add, sd, 1e-9)?;
    Ok(vec![bin(cx, BinaryOp::Div, d, sd)?])
}
