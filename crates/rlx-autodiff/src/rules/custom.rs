//! VJPs of the extension ops (OPS.md §21).
//!
//! A `CustomFn` with a `vjp_body` differentiates through that body; one without is inlined
//! before the sweep ([`inline_plain_custom_fns`]), so its `fwd_body` is differentiated like
//! any other ops, `Param`s inside it included. A registry `Custom` op uses the rule registered
//! under its name ([`register_custom_vjp`]) and passes no gradient without one (OPS.md §21:
//! "the registered rule, else none").

use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::custom::CustomFn;
use rlx_ir::{Graph, Op, OpKind, ValueId};
use rlx_opt::decompose::inline;
use rlx_opt::rewrite::Rewriter;
use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

pub const KINDS: &[OpKind] = &[OpKind::Custom, OpKind::CustomFn];

/// The VJP of a `Custom` op: given its opaque `attrs` blob and the node, one cotangent per
/// operand (`None`: no gradient).
pub type CustomVjp = dyn Fn(&[u8], &mut Vjp<'_>) -> Result<Vec<Option<ValueId>>> + Send + Sync;

static REGISTRY: RwLock<BTreeMap<String, Arc<CustomVjp>>> = RwLock::new(BTreeMap::new());

/// Registers `rule` as the VJP of every `Custom` op named `name`; returns the rule it replaces.
pub fn register_custom_vjp(
    name: &str,
    rule: impl Fn(&[u8], &mut Vjp<'_>) -> Result<Vec<Option<ValueId>>> + Send + Sync + 'static,
) -> Option<Arc<CustomVjp>> {
    REGISTRY.write().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), Arc::new(rule))
}

fn registered(name: &str) -> Option<Arc<CustomVjp>> {
    REGISTRY.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
}

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Custom(c) => match registered(&c.name) {
            Some(rule) => rule(&c.attrs, v),
            None => Ok(vec![None; v.inputs.len()]),
        },
        Op::CustomFn(f) => custom_fn(f, v),
        _ => return None,
    })
}

/// `vjp_body` inlined with its primal inputs bound to the operands, `"primal_output"` to `y`
/// and `"d_output"` to `ȳ`; its outputs are the operands' cotangents.
fn custom_fn(f: &CustomFn, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let body = f.vjp_body.as_ref().ok_or_else(|| AdError::Rule {
        op: "CustomFn",
        msg: "a CustomFn without vjp_body is inlined before the sweep".into(),
    })?;
    let dy = v.ct(0)?;
    let mut primals = v.inputs.iter().copied();
    let mut args = Vec::new();
    for (name, _) in body.inputs() {
        args.push(match name {
            "d_output" => dy,
            "primal_output" => v.outputs[0],
            _ => primals.next().ok_or_else(|| AdError::Rule {
                op: "CustomFn",
                msg: format!("vjp_body has more primal inputs than the op's {} operands", v.inputs.len()),
            })?,
        });
    }
    let grads = inline(v.g, body, &args)?;
    Ok(grads.into_iter().enumerate().map(|(i, d)| v.wants(i).then_some(d)).collect())
}

/// `g` with every `CustomFn` that has no `vjp_body` replaced by its inlined `fwd_body`
/// (repeated for bodies that hold more of them).
pub(crate) fn inline_plain_custom_fns(g: &Graph) -> Result<Graph> {
    let plain = |g: &Graph| g.nodes().iter().any(|n| matches!(&n.op, Op::CustomFn(f) if f.vjp_body.is_none()));
    let mut cur = g.clone();
    while plain(&cur) {
        let mut rw = Rewriter::new(&cur);
        for id in cur.node_ids() {
            match &cur.node(id).op {
                Op::CustomFn(f) if f.vjp_body.is_none() => {
                    let inputs = rw.inputs(id);
                    let values = inline(rw.graph(), &f.fwd_body, &inputs)?;
                    rw.replace(id, values)?;
                }
                _ => {
                    rw.keep(id);
                }
            }
        }
        cur = rw.finish();
    }
    Ok(cur)
}
