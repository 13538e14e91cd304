//! Reverse mode: the backward sweep over a prepared graph.

use crate::remat::{Recompute, Remat};
use crate::rules::{self, Vjp};
use crate::{AdError, Result};
use rlx_ir::{Graph, IrError, NodeId, OpKind, ValueId};
use rlx_opt::decompose::build::scalar;
use rlx_opt::legalize::LegalizeError;
use std::collections::HashMap;

/// Options of [`grad_with`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GradOptions {
    /// Which forward values the backward sweep keeps alive and which it recomputes.
    pub remat: Remat,
}

/// A graph computing `g`'s outputs followed by the gradient of `loss` with respect to each
/// input or parameter named in `wrt`, in order. A non-scalar `loss` is summed (its cotangent
/// seed is all ones). Values `loss` does not depend on get zero gradients.
pub fn grad(g: &Graph, loss: ValueId, wrt: &[&str]) -> Result<Graph> {
    grad_with(g, loss, wrt, &GradOptions::default())
}

/// [`grad`] with options, e.g. rematerialisation to lower the memory the gradient needs.
pub fn grad_with(g: &Graph, loss: ValueId, wrt: &[&str], options: &GradOptions) -> Result<Graph> {
    let marked_in: &[ValueId] = match &options.remat {
        Remat::Keep(values) => values,
        _ => &[],
    };
    let n = g.outputs().len();
    let mut marked = g.clone();
    marked.set_outputs(std::iter::once(loss).chain(g.outputs().iter().copied()).chain(marked_in.iter().copied()).collect())?;
    let mut g = prepare(&marked)?;
    let loss = g.outputs()[0];
    let outputs = g.outputs()[1..=n].to_vec();
    let kept = g.outputs()[n + 1..].to_vec();
    let targets = wrt.iter().map(|name| source(&g, name)).collect::<Result<Vec<_>>>()?;
    let mut reads = Recompute::new(&g, loss, &options.remat, &kept, &g.outputs()[..=n]);
    let seed = ones_like(&mut g, loss)?;
    let cts = sweep(&mut g, loss, seed, &targets, &mut reads)?;
    let mut results = outputs;
    for &t in &targets {
        results.push(match cts.get(&t) {
            Some(&ct) => ct,
            None => zeros_like(&mut g, t)?,
        });
    }
    g.set_outputs(results)?;
    Ok(g)
}

/// `g` with every op that has no VJP rule lowered through its decomposition, and every
/// `CustomFn` without a `vjp_body` inlined.
fn prepare(g: &Graph) -> Result<Graph> {
    let claims: Vec<OpKind> = OpKind::ALL.iter().copied().filter(|&k| rules::has_rule(k)).collect();
    let g = rules::custom::inline_plain_custom_fns(g)?;
    match rlx_opt::legalize(&g, "autodiff", &claims[..]) {
        Ok((out, _)) => Ok(out),
        Err(LegalizeError::Missing { ops, .. }) => {
            let mut kinds: Vec<OpKind> = ops.iter().map(|o| o.kind).collect();
            kinds.dedup();
            Err(AdError::NoRule(kinds))
        }
        Err(LegalizeError::Ir(e)) => Err(e.into()),
        Err(e @ LegalizeError::BadCast { .. }) => Err(IrError::Invalid(e.to_string()).into()),
    }
}

/// The value of the input or parameter `name`, which must be floating point.
fn source(g: &Graph, name: &str) -> Result<ValueId> {
    let all: Vec<(&str, ValueId)> = g.inputs().into_iter().chain(g.params()).collect();
    let (_, v) = all.iter().find(|(n, _)| *n == name).ok_or_else(|| AdError::UnknownName {
        name: name.to_string(),
        known: all.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
    })?;
    let dtype = g.ty(*v).dtype;
    if !dtype.is_float() {
        return Err(AdError::NotFloat { name: name.to_string(), dtype });
    }
    Ok(*v)
}

/// Runs the VJP rules from `loss` (cotangent `seed`) back to `targets`, over the nodes that
/// lie on a path between them, reading forward values through `reads`; returns the
/// accumulated cotangent of every value reached.
fn sweep(g: &mut Graph, loss: ValueId, seed: ValueId, targets: &[ValueId], reads: &mut Recompute) -> Result<HashMap<ValueId, ValueId>> {
    let forward_len = loss.node.index() + 1;
    let mut from_target = vec![false; forward_len];
    for t in targets {
        if t.node.index() < forward_len {
            from_target[t.node.index()] = true;
        }
    }
    for i in 0..forward_len {
        if !from_target[i] {
            from_target[i] = g.nodes()[i].inputs.iter().any(|v| from_target[v.node.index()]);
        }
    }
    let mut cts: HashMap<ValueId, ValueId> = HashMap::from([(loss, seed)]);
    for i in (0..forward_len).rev() {
        let id = NodeId(i as u32);
        let node = g.node(id).clone();
        let outs: Vec<ValueId> = (0..node.outputs.len() as u32).map(|o| ValueId::new(id, o)).collect();
        let out_cts: Vec<Option<ValueId>> = outs.iter().map(|v| cts.get(v).copied()).collect();
        if !from_target[i] || out_cts.iter().all(Option::is_none) || node.inputs.is_empty() {
            continue;
        }
        let wanted: Vec<bool> =
            node.inputs.iter().map(|v| from_target[v.node.index()] && rules::has_cotangent(g, *v)).collect();
        let inputs = node.inputs.iter().map(|&v| reads.value(g, v)).collect::<Result<Vec<_>>>()?;
        let outputs = outs.iter().map(|&v| reads.value(g, v)).collect::<Result<Vec<_>>>()?;
        let mut vjp = Vjp { g: &mut *g, inputs: &inputs, outputs: &outputs, cts: &out_cts, wanted: &wanted };
        let in_cts = rules::vjp(&node.op, &mut vjp).unwrap_or_else(|| Err(AdError::NoRule(vec![node.op.kind()])))?;
        for ((&v, ct), want) in node.inputs.iter().zip(in_cts).zip(&wanted) {
            let Some(ct) = ct.filter(|_| *want) else { continue };
            let total = match cts.get(&v) {
                Some(&acc) => g.binary(rlx_ir::ops::elementwise::BinaryOp::Add, acc, ct)?,
                None => ct,
            };
            cts.insert(v, total);
        }
    }
    Ok(cts)
}

/// Whether values of `dtype` carry cotangents: floats, and C64 as its `(re, im)` pair.
pub(crate) fn has_tangent(dtype: rlx_ir::DType) -> bool {
    dtype.is_float() || dtype == rlx_ir::DType::C64
}

/// A constant `v` of type `ty`.
pub(crate) fn filled(g: &mut Graph, ty: &rlx_ir::TensorType, v: f64) -> Result<ValueId> {
    let s = scalar(g, ty.dtype, v)?;
    if ty.rank() == 0 {
        return Ok(s);
    }
    Ok(g.expand_to(s, &ty.shape)?)
}

/// A constant `v` shaped like `like`.
pub(crate) fn filled_like(g: &mut Graph, like: ValueId, v: f64) -> Result<ValueId> {
    let ty = g.ty(like).clone();
    filled(g, &ty, v)
}

pub(crate) fn ones_like(g: &mut Graph, like: ValueId) -> Result<ValueId> {
    filled_like(g, like, 1.0)
}

pub(crate) fn zeros_like(g: &mut Graph, like: ValueId) -> Result<ValueId> {
    filled_like(g, like, 0.0)
}
