//! Forward mode by transposing reverse mode: the VJP `u ↦ Jᵀu` is linear in `u`, so the
//! reverse-mode gradient of `⟨Jᵀu, t⟩` with respect to `u` is `J·t`. This needs only the VJP
//! rules (including those of the backward ops), and gives `hvp` as `jvp` of `grad`.

use crate::reverse::{filled, grad};
use rlx_opt::decompose::build::inner_sum;
use crate::{AdError, Result};
use rlx_ir::{Graph, Op, ValueId};
use rlx_opt::rewrite::Rewriter;

/// The prefix of the tangent input added for each differentiated input or parameter.
pub const TANGENT: &str = "tangent.";

/// Reserved names of the internal cotangent seeds.
const SEED: &str = "__jvp_seed";

/// A graph computing `g`'s outputs followed by the tangent of each float output along the
/// direction given, for each name in `wrt`, by a new input `tangent.<name>` of that value's
/// type (non-float outputs get no tangent).
pub fn jvp(g: &Graph, wrt: &[&str]) -> Result<Graph> {
    let outputs = g.outputs().to_vec();
    let floats: Vec<usize> = (0..outputs.len()).filter(|&i| g.ty(outputs[i]).dtype.is_float()).collect();
    let mut seeded = g.clone();
    let seeds: Vec<String> = floats.iter().map(|i| format!("{SEED}{i}")).collect();
    let mut pairs = Vec::new();
    for (&i, name) in floats.iter().zip(&seeds) {
        let ty = seeded.ty(outputs[i]).clone();
        pairs.push((outputs[i], seeded.input(name, ty)));
    }
    let pairing = inner_sum(&mut seeded, &pairs)?.ok_or_else(|| AdError::Rule { op: "jvp", msg: "the graph has no float output".into() })?;
    let mut vjp = grad(&seeded, pairing, wrt)?;
    let n = outputs.len();
    let cotangents = vjp.outputs()[n..].to_vec();
    let mut pairs = Vec::new();
    for (name, &xbar) in wrt.iter().zip(&cotangents) {
        let ty = vjp.ty(xbar).clone();
        pairs.push((xbar, vjp.input(&format!("{TANGENT}{name}"), ty)));
    }
    let second = inner_sum(&mut vjp, &pairs)?
        .ok_or_else(|| AdError::Rule { op: "jvp", msg: "no input to differentiate with respect to".into() })?;
    let primal = vjp.outputs()[..n].to_vec();
    vjp.set_outputs(primal)?;
    let seed_names: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let tangents = grad(&vjp, second, &seed_names)?;
    zero_seeds(&tangents, &seeds)
}

/// `hvp`: the Hessian of the scalar `loss` times the direction given by the inputs
/// `tangent.<name>`; outputs the gradient for each `wrt`, then `H·t` for each.
pub fn hvp(g: &Graph, loss: ValueId, wrt: &[&str]) -> Result<Graph> {
    let mut scored = g.clone();
    scored.set_outputs(vec![loss])?;
    let gradient = grad(&scored, loss, wrt)?;
    let mut only_grads = gradient.clone();
    only_grads.set_outputs(gradient.outputs()[1..].to_vec())?;
    jvp(&only_grads, wrt)
}


/// `g` with the seed inputs replaced by zeros: the tangents are linear in the seeds' duals and
/// do not depend on their values, so the caller never passes them.
fn zero_seeds(g: &Graph, seeds: &[String]) -> Result<Graph> {
    let mut rw = Rewriter::new(g);
    for id in g.node_ids() {
        match &g.node(id).op {
            Op::Input(i) if seeds.contains(&i.name) => {
                let ty = g.ty(ValueId::from(id)).clone();
                let zero = filled(rw.graph(), &ty, 0.0)?;
                rw.replace(id, vec![zero])?;
            }
            _ => {
                rw.keep(id);
            }
        }
    }
    let out = rw.finish();
    Ok(rlx_opt::Pass::run(&rlx_opt::dce::Dce, &out)?)
}
