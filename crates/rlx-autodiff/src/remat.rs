//! Rematerialisation (activation checkpointing): the backward sweep keeps only some forward
//! values alive and recomputes the others from them just before their first backward use.
//!
//! A recomputed op reads the kept values it starts from through `StopGradient`, the IR's
//! identity that every pass keeps: without it CSE would see the copy as equal to the original
//! and merge them, keeping the original alive again (JAX puts `optimization_barrier` there).
//! Backends run it as a copy. The barrier also blocks gradients, so a checkpointed gradient
//! graph is for first-order use: differentiating it again (as `hvp` does with plain `grad`)
//! would treat the recomputed values as constants.

use crate::Result;
use rlx_ir::{Graph, Node, NodeId, Op, ValueId};
use std::collections::{BTreeSet, HashMap};

/// Which forward values the backward sweep keeps alive; it recomputes the rest.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Remat {
    /// Keep every forward value the backward sweep reads (no recomputation; the default).
    #[default]
    KeepAll,
    /// Keep about `√n` of the `n` forward ops' values, each the only value that carries the
    /// computation past it (a layer boundary), and recompute the segments between them
    /// (Chen et al. 2016, "Training deep nets with sublinear memory cost").
    Sqrt,
    /// Keep these values of the differentiated graph (e.g. each block's output) and recompute
    /// every other activation from them.
    Keep(Vec<ValueId>),
}

/// Where the backward sweep reads the forward values of one prepared graph.
pub(crate) struct Recompute {
    /// Per forward node: its outputs stay alive for the backward sweep.
    kept: Vec<bool>,
    /// Per forward node: it depends on a graph input (else it is fixed by parameters and
    /// constants, cheap to keep and read without a barrier).
    varying: Vec<bool>,
    copies: HashMap<ValueId, ValueId>,
    barriers: HashMap<ValueId, ValueId>,
}

impl Recompute {
    /// The plan for the nodes of `g` up to `loss`: kept are sources, values that do not
    /// depend on an input, ops that update a buffer in place, `outputs`, and what `remat`
    /// selects (`marked`: the values of `Remat::Keep`, as ids of `g`).
    pub(crate) fn new(g: &Graph, loss: ValueId, remat: &Remat, marked: &[ValueId], outputs: &[ValueId]) -> Recompute {
        let forward_len = loss.node.index() + 1;
        let nodes = &g.nodes()[..forward_len];
        let mut varying = vec![false; forward_len];
        let mut kept = vec![false; forward_len];
        for (i, node) in nodes.iter().enumerate() {
            varying[i] = matches!(node.op, Op::Input(_)) || node.inputs.iter().any(|v| varying[v.node.index()]);
            kept[i] = !varying[i]
                || node.inputs.is_empty()
                || !node.op.def().mutated_inputs().is_empty()
                || matches!(remat, Remat::KeepAll);
        }
        for v in outputs.iter().chain(marked) {
            if let Some(k) = kept.get_mut(v.node.index()) {
                *k = true;
            }
        }
        if matches!(remat, Remat::Sqrt) {
            for id in sqrt_boundaries(nodes, &kept) {
                kept[id.index()] = true;
            }
        }
        Recompute { kept, varying, copies: HashMap::new(), barriers: HashMap::new() }
    }

    fn is_kept(&self, v: ValueId) -> bool {
        self.kept.get(v.node.index()).copied().unwrap_or(true)
    }

    /// The value the backward sweep reads for `v`: `v` itself when kept, else its recomputed
    /// copy, built into `g` (with whatever it needs that is not built yet) on first use.
    pub(crate) fn value(&mut self, g: &mut Graph, v: ValueId) -> Result<ValueId> {
        if self.is_kept(v) {
            return Ok(v);
        }
        let mut missing: BTreeSet<NodeId> = BTreeSet::new();
        let mut stack = vec![v.node];
        while let Some(id) = stack.pop() {
            if self.copies.contains_key(&ValueId::new(id, 0)) || !missing.insert(id) {
                continue;
            }
            stack.extend(g.node(id).inputs.iter().filter(|x| !self.is_kept(**x)).map(|x| x.node));
        }
        for id in missing {
            let node = g.node(id).clone();
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for &x in &node.inputs {
                inputs.push(match self.copies.get(&x) {
                    Some(&c) => c,
                    None => self.barrier(g, x)?,
                });
            }
            let n = node.outputs.len() as u32;
            let copy = g.push(Node { op: node.op, inputs, outputs: node.outputs });
            for o in 0..n {
                self.copies.insert(ValueId::new(id, o), ValueId::new(copy, o));
            }
        }
        Ok(self.copies[&v])
    }

    /// How a recomputed op reads the kept value `x`: through one shared `StopGradient` when
    /// `x` depends on an input (so the copy differs from the original), else as it is.
    fn barrier(&mut self, g: &mut Graph, x: ValueId) -> Result<ValueId> {
        if !self.varying[x.node.index()] {
            return Ok(x);
        }
        if let Some(&b) = self.barriers.get(&x) {
            return Ok(b);
        }
        let b = g.stop_gradient(x)?;
        self.barriers.insert(x, b);
        Ok(b)
    }
}

/// The nodes `Remat::Sqrt` keeps: walking the forward nodes in order, a node is a boundary
/// when its outputs are the only recomputable values still needed by later nodes; one is
/// taken once at least `⌈√n⌉` recomputable nodes (of `n`) have passed since the last.
fn sqrt_boundaries(nodes: &[Node], kept: &[bool]) -> Vec<NodeId> {
    let mut last_use = vec![0usize; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for v in &node.inputs {
            last_use[v.node.index()] = i;
        }
    }
    let n = kept.iter().filter(|k| !**k).count();
    let every = (n as f64).sqrt().ceil() as usize;
    let mut live = 0usize;
    let mut since = 0usize;
    let mut taken = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let mut ends: Vec<usize> = node.inputs.iter().map(|v| v.node.index()).filter(|&j| !kept[j] && last_use[j] == i).collect();
        ends.sort_unstable();
        ends.dedup();
        live -= ends.len();
        if kept[i] {
            continue;
        }
        since += 1;
        if last_use[i] > i {
            live += 1;
            if live == 1 && since >= every {
                taken.push(NodeId(i as u32));
                since = 0;
            }
        }
    }
    taken
}
