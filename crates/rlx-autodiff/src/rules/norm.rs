//! VJPs of the normalizations (OPS.md §6) through their dedicated backward ops (§22).
//! `LayerNorm2d` and the backward ops themselves (second order) go through their
//! decompositions.

use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::norm::*;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{norm_axis, Graph, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::LayerNorm, OpKind::RmsNorm, OpKind::GroupNorm, OpKind::BatchNormInference];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::LayerNorm(a) => layer_norm(a, v),
        Op::RmsNorm(a) => rms_norm(a, v),
        Op::GroupNorm(a) => group_norm(a, v),
        Op::BatchNormInference(a) => batch_norm(a, v),
        _ => return None,
    })
}

/// `f(g)` when operand `i` needs a cotangent.
fn want(v: &mut Vjp, i: usize, f: impl FnOnce(&mut Graph) -> Result<ValueId>) -> Result<Option<ValueId>> {
    if v.wants(i) {
        f(v.g).map(Some)
    } else {
        Ok(None)
    }
}

/// The feature axis `axis` of `x`, normalized.
fn feature_axis(g: &Graph, x: ValueId, axis: i32, op: &'static str) -> Result<usize> {
    norm_axis(axis as i64, g.ty(x).rank()).map_err(|msg| AdError::Rule { op, msg })
}

/// `Σ` of `dy` over every axis but `keep`: the `[D]` gradient of a per-feature shift.
fn sum_but(g: &mut Graph, dy: ValueId, keep: usize) -> Result<ValueId> {
    let axes: Vec<usize> = (0..g.ty(dy).rank()).filter(|&a| a != keep).collect();
    if axes.is_empty() {
        return Ok(dy);
    }
    Ok(g.reduce(ReduceOp::Sum, dy, &axes, false)?)
}

/// `LayerNormBackwardInput`, `LayerNormBackwardGamma`, and `Σ_leading ȳ` for β.
fn layer_norm(a: &LayerNorm, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, gamma, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let (axis, eps) = (a.axis, a.eps);
    let dx = want(v, 0, |g| Ok(g.layer_norm_backward_input(LayerNormBackwardInput { axis, eps }, x, gamma, dy)?))?;
    let dg = want(v, 1, |g| Ok(g.layer_norm_backward_gamma(LayerNormBackwardGamma { axis, eps }, x, dy)?))?;
    let db = want(v, 2, |g| {
        let keep = feature_axis(g, x, axis, "LayerNorm")?;
        sum_but(g, dy, keep)
    })?;
    Ok(vec![dx, dg, db])
}

/// `RmsNormBackwardInput/Gamma/Beta`; a `flatten_leading` cotangent is first reshaped back
/// to the shape of `x`.
fn rms_norm(a: &RmsNorm, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, gamma, beta, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let dy = if a.flatten_leading {
        let shape = v.g.ty(x).shape.clone();
        v.g.reshape_to(dy, &shape)?
    } else {
        dy
    };
    let (axis, eps) = (a.axis, a.eps);
    let ins = [x, gamma, beta, dy];
    let dx = want(v, 0, |g| Ok(g.add1(RmsNormBackwardInput { axis, eps }, &ins)?))?;
    let dg = want(v, 1, |g| Ok(g.add1(RmsNormBackwardGamma { axis, eps }, &ins)?))?;
    let db = want(v, 2, |g| Ok(g.add1(RmsNormBackwardBeta { axis, eps }, &ins)?))?;
    Ok(vec![dx, dg, db])
}

/// `GroupNormBackwardInput/Gamma/Beta`.
fn group_norm(a: &GroupNorm, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, gamma, beta, dy) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let (num_groups, eps) = (a.num_groups, a.eps);
    let dx = want(v, 0, |g| Ok(g.add1(GroupNormBackwardInput { num_groups, eps }, &[x, gamma, beta, dy])?))?;
    let dg = want(v, 1, |g| Ok(g.add1(GroupNormBackwardGamma { num_groups, eps }, &[x, dy])?))?;
    let db = want(v, 2, |g| Ok(g.add1(GroupNormBackwardBeta { num_groups, eps }, &[x, dy])?))?;
    Ok(vec![dx, dg, db])
}

/// `BatchNormInferenceBackwardInput/Gamma/Beta`; the frozen statistics get none (OPS.md §6,
/// as PyTorch's eval-mode batch norm and Flax's `batch_stats`).
fn batch_norm(a: &BatchNormInference, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, gamma, mean, var, dy) = (v.inputs[0], v.inputs[1], v.inputs[3], v.inputs[4], v.ct(0)?);
    let (axis, eps) = (a.axis, a.eps);
    let dx = want(v, 0, |g| {
        Ok(g.batch_norm_inference_backward_input(BatchNormInferenceBackwardInput { eps, axis }, x, gamma, mean, var, dy)?)
    })?;
    let dg = want(v, 1, |g| {
        Ok(g.batch_norm_inference_backward_gamma(BatchNormInferenceBackwardGamma { eps, axis }, x, mean, var, dy)?)
    })?;
    let db = want(v, 2, |g| Ok(g.batch_norm_inference_backward_beta(axis, dy)?))?;
    Ok(vec![dx, dg, db, None, None])
}
