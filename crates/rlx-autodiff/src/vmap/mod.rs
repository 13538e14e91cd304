//! `vmap`: a graph mapped over a new batch axis by per-op batching rules (never a loop over
//! the examples), one module per op family.
//!
//! Every value of the mapped graph is either unbatched (the same for every example: the
//! original value) or batched, with the batch axis first. A node whose operands are all
//! unbatched is copied unchanged. Otherwise its family's rule builds the op (or a few ops) on
//! batched values. A rule may decline an operand pattern it cannot batch directly (a
//! per-example conv weight, say); the node is then lowered through its rlx-opt decomposition
//! (the lowering `legalize` and `grad`'s pre-pass use) and the lowered nodes are batched one by
//! one. Lowering per node, rather than over the whole graph first, keeps the unbatched fused
//! ops intact and lets rules take the patterns they batch well. Kinds with neither a rule nor
//! a decomposition are listed in [`UNBATCHED`] with their reason.

mod attention;
mod conv;
mod elementwise;
mod index;
mod linalg;
mod matmul;
mod norm;
mod quant;
mod random;
mod reduce;
mod shape;
mod signal;
mod softmax;
mod spd;

use crate::{AdError, Result};
use rlx_ir::ops::shape::{Expand, Reshape, TargetDim, Transpose};
use rlx_ir::{Dim, Graph, NodeId, Op, OpKind, Shape, TensorType, ValueId};

/// Kinds with no batching rule and no decomposition, each with the reason. A node of one of
/// these kinds still maps when none of its operands is batched.
pub const UNBATCHED: &[(OpKind, &str)] = &[
    (OpKind::Custom, "an opaque registered kernel: nothing says how its operands batch"),
    (OpKind::Sample, "draws one stream across rows, so batched rows would not draw what each example draws alone"),
    (OpKind::Cholesky, NO_BATCHED_KIND),
    (OpKind::TriangularSolve, NO_BATCHED_KIND),
    (OpKind::Det, NO_BATCHED_KIND),
    (OpKind::LogDet, NO_BATCHED_KIND),
    (OpKind::Svd, NO_BATCHED_KIND),
    (OpKind::Qr, NO_BATCHED_KIND),
    (OpKind::ReEig, NO_BATCHED_KIND),
    (OpKind::LogEig, NO_BATCHED_KIND),
    (OpKind::ReEigBackward, NO_BATCHED_KIND),
    (OpKind::LogEigBackward, NO_BATCHED_KIND),
    (OpKind::SpdLogMap, NO_BATCHED_KIND),
    (OpKind::SpdExpMap, NO_BATCHED_KIND),
    (OpKind::SpdParallelTransport, NO_BATCHED_KIND),
    (OpKind::SpdLogMapBackward, NO_BATCHED_KIND),
    (OpKind::SpdExpMapBackward, NO_BATCHED_KIND),
    (OpKind::SpdParallelTransportBackward, NO_BATCHED_KIND),
    (OpKind::SpdKarcherMean, "a statistic over its own batch axis, which a per-example batch would have to keep apart"),
    (OpKind::SpdKarcherMeanWeighted, "a statistic over its own batch axis, which a per-example batch would have to keep apart"),
    (OpKind::SpdBatchNormBackwardG, "a sum over its own batch axis, which a per-example batch would have to keep apart"),
    (OpKind::WelchPeaks, "its rows are segments of clips whose count the op derives; no per-example form"),
    (OpKind::FftButterflyStage, "per-stage gates and twiddles address one flat state; no batched form"),
    (OpKind::ScaledQuantScale, "the per-tensor scale is an amax over the whole tensor, which a batch would share"),
    (OpKind::ScaledQuantize, "reads the per-tensor scale of ScaledQuantScale"),
    (OpKind::DequantMoEWeights, "materializes frozen quantized weights, shared by construction"),
    (OpKind::GaussianSplatRender, SPLAT),
    (OpKind::GaussianSplatRenderBackward, SPLAT),
    (OpKind::GaussianSplatPrepare, SPLAT),
    (OpKind::GaussianSplatRasterize, SPLAT),
];

/// Why the single-matrix factorizations are in [`UNBATCHED`].
const NO_BATCHED_KIND: &str = "factors one matrix and has no batched kind (as EighBatch is to Eigh) for a rule to emit";

/// Why the splat renderer is in [`UNBATCHED`].
const SPLAT: &str = "renders one scene into one image through a packed tile buffer; no per-scene batch form";

/// Kinds whose rule batches only some operands: the listed operands must be shared by every
/// example (a batched one is an error), each entry with the reason.
pub const SHARED_OPERANDS: &[(OpKind, &[usize], &str)] = &[
    (OpKind::LogMel, &[1], "a per-example mel filter bank has no batched kernel"),
    (OpKind::LogMelBackward, &[1], "a per-example mel filter bank has no batched kernel"),
    (OpKind::PartitionedConv, &[1], "a per-example impulse response has no batched kernel"),
    (OpKind::DequantMatMul, &[1, 2, 3, 4, 5], "frozen quantized weights"),
    (OpKind::DequantGroupedMatMul, &[1], "frozen quantized expert weights"),
    (OpKind::DequantGroupedMatMulMlx, &[1, 2, 3], "frozen quantized expert weights"),
    (OpKind::SpdBatchNorm, &[1, 2], "the batch mean and bias are statistics of the op's own batch"),
    (OpKind::SpdBatchNormBackwardX, &[0, 1], "the batch mean and bias are statistics of the op's own batch"),
];

/// Maps `g` over a new batch axis of extent `size`: each input or parameter named in
/// `batched` gains that axis at the given position (a parameter named there becomes
/// per-example); the others are shared by every example. Every output carries the batch axis
/// first; outputs that depend on no batched value are broadcast along it, so each output is
/// the stack of what `g` computes per example.
pub fn vmap(g: &Graph, batched: &[(&str, usize)], size: Dim) -> Result<Graph> {
    let sources: Vec<(&str, ValueId)> = g.inputs().into_iter().chain(g.params()).collect();
    for &(name, axis) in batched {
        let Some(&(_, v)) = sources.iter().find(|(n, _)| *n == name) else {
            return Err(AdError::UnknownName {
                name: name.to_string(),
                known: sources.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            });
        };
        let rank = g.ty(v).rank();
        if axis > rank {
            return Err(AdError::BatchAxis { name: name.to_string(), axis, rank });
        }
    }
    let mut out = Graph::new();
    let mut mapper = Mapper { g: &mut out, size: &size };
    let env = mapper.walk(g, 0, &mut |m, id| {
        let (name, ty) = match &g.node(id).op {
            Op::Input(i) => (&i.name, &i.ty),
            Op::Param(p) => (&p.name, &p.ty),
            _ => return Ok(None),
        };
        let Some(&(_, axis)) = batched.iter().find(|(n, _)| *n == name) else {
            return Ok(Some(Bv { v: m.g.push(g.node(id).clone()).into(), batched: false }));
        };
        let mut dims = ty.shape.0.clone();
        dims.insert(axis, size.clone());
        let ty = TensorType::new(ty.dtype, Shape(dims));
        let v = match g.node(id).op {
            Op::Input(_) => m.g.input(name, ty),
            _ => m.g.param(name, ty),
        };
        let mut perm: Vec<usize> = (0..=g.ty(id.into()).rank()).filter(|&a| a != axis).collect();
        perm.insert(0, axis);
        let v = if axis == 0 { v } else { m.g.add1(Transpose { perm }, &[v])? };
        Ok(Some(Bv { v, batched: true }))
    })?;
    let outputs = g
        .outputs()
        .iter()
        .map(|v| {
            let bv = env[v.node.index()][v.output as usize];
            if bv.batched {
                Ok(bv.v)
            } else {
                broadcast(&mut out, &size, bv.v)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    out.set_outputs(outputs)?;
    Ok(out)
}

/// Whether `kind` maps when its operands are batched: it has a rule, or a decomposition
/// into kinds that do, or is a source (no operands; `vmap` gives the named ones the axis).
pub fn has_rule(kind: OpKind) -> bool {
    kind.family() == "source" || FAMILIES.iter().any(|(kinds, _)| kinds.contains(&kind)) || rlx_opt::decompose::has_rule(kind)
}

/// A family's rule: the node's outputs built on batched values (each with the batch axis
/// first), or `None` when the op is not one of its kinds or the operand pattern is declined.
type Rule = fn(&Op, &mut Batch) -> Option<Result<Vec<ValueId>>>;

/// Every family's kinds and its rule.
const FAMILIES: &[(&[OpKind], Rule)] = &[
    (attention::KINDS, attention::rule),
    (conv::KINDS, conv::rule),
    (elementwise::KINDS, elementwise::rule),
    (index::KINDS, index::rule),
    (linalg::KINDS, linalg::rule),
    (matmul::KINDS, matmul::rule),
    (norm::KINDS, norm::rule),
    (quant::KINDS, quant::rule),
    (random::KINDS, random::rule),
    (reduce::KINDS, reduce::rule),
    (shape::KINDS, shape::rule),
    (signal::KINDS, signal::rule),
    (softmax::KINDS, softmax::rule),
    (spd::KINDS, spd::rule),
];

/// Deepest chain of decompositions batched in turn (as `legalize` bounds its rounds).
const MAX_DEPTH: usize = 16;

/// A value of the mapped graph and whether it carries the batch axis (first).
#[derive(Clone, Copy, Debug)]
struct Bv {
    v: ValueId,
    batched: bool,
}

/// Builds the mapped graph.
struct Mapper<'a> {
    g: &'a mut Graph,
    size: &'a Dim,
}

/// Maps a source node to its value in the mapped graph, or `None` for a node to batch.
type Sources<'s> = dyn FnMut(&mut Mapper, NodeId) -> Result<Option<Bv>> + 's;

impl Mapper<'_> {
    /// Maps every node of `src` in order; returns the mapped outputs of each node.
    fn walk(&mut self, src: &Graph, depth: usize, sources: &mut Sources) -> Result<Vec<Vec<Bv>>> {
        let mut env: Vec<Vec<Bv>> = Vec::with_capacity(src.len());
        for id in src.node_ids() {
            if let Some(bv) = sources(self, id)? {
                env.push(vec![bv]);
                continue;
            }
            let node = src.node(id);
            let ins: Vec<Bv> = node.inputs.iter().map(|v| env[v.node.index()][v.output as usize]).collect();
            let types: Vec<TensorType> = node.inputs.iter().map(|&v| src.ty(v).clone()).collect();
            env.push(self.node(&node.op, &ins, &types, &node.outputs, depth)?);
        }
        Ok(env)
    }

    /// Maps one node with operands `ins` (per-example types `types`, outputs `outs`).
    fn node(&mut self, op: &Op, ins: &[Bv], types: &[TensorType], outs: &[TensorType], depth: usize) -> Result<Vec<Bv>> {
        let x: Vec<ValueId> = ins.iter().map(|b| b.v).collect();
        if ins.iter().all(|b| !b.batched) {
            let id = self.g.add(op.clone(), &x)?;
            return Ok((0..outs.len() as u32).map(|o| Bv { v: ValueId::new(id, o), batched: false }).collect());
        }
        let batched: Vec<bool> = ins.iter().map(|b| b.batched).collect();
        let kind = op.kind();
        let mut b = Batch { g: &mut *self.g, size: self.size, x: &x, batched: &batched, types, outs };
        let ruled = FAMILIES.iter().find(|(kinds, _)| kinds.contains(&kind)).and_then(|(_, rule)| rule(op, &mut b));
        match ruled {
            Some(values) => {
                let values = values?;
                for (&v, ty) in values.iter().zip(outs) {
                    let want = batched_type(ty, self.size);
                    if *self.g.ty(v) != want {
                        return Err(AdError::Rule {
                            op: kind.name(),
                            msg: format!("the batching rule built {} where {want} was due", self.g.ty(v)),
                        });
                    }
                }
                Ok(values.into_iter().map(|v| Bv { v, batched: true }).collect())
            }
            None => self.lowered(op, ins, types, depth),
        }
    }

    /// Maps a node through its decomposition, built over inputs of the per-example types.
    fn lowered(&mut self, op: &Op, ins: &[Bv], types: &[TensorType], depth: usize) -> Result<Vec<Bv>> {
        let kind = op.kind();
        if depth >= MAX_DEPTH || !rlx_opt::decompose::has_rule(kind) {
            return Err(AdError::NoBatchingRule(kind));
        }
        let mut part = Graph::new();
        let params: Vec<ValueId> = types.iter().enumerate().map(|(i, t)| part.input(&format!("x{i}"), t.clone())).collect();
        let outs = rlx_opt::decompose::decompose(op, &mut part, &params).ok_or(AdError::NoBatchingRule(kind))??;
        let env = self.walk(&part, depth + 1, &mut |_, id| Ok(params.iter().position(|p| p.node == id).map(|i| ins[i])))?;
        Ok(outs.iter().map(|v| env[v.node.index()][v.output as usize]).collect())
    }
}

/// `ty` with the batch axis of extent `size` in front.
fn batched_type(ty: &TensorType, size: &Dim) -> TensorType {
    let mut dims = vec![size.clone()];
    dims.extend(ty.shape.0.iter().cloned());
    TensorType::new(ty.dtype, Shape(dims))
}

/// `v` repeated along a new leading axis of extent `size`.
pub(crate) fn broadcast(g: &mut Graph, size: &Dim, v: ValueId) -> Result<ValueId> {
    let mut target = vec![TargetDim::from(size)];
    target.extend((0..g.ty(v).rank()).map(|_| TargetDim::Size(-1)));
    Ok(g.add1(Expand { target_shape: target }, &[v])?)
}

/// A per-example axis (Python-style, negative from the end) as an axis of the batched value.
pub(crate) fn shifted(axis: i32) -> i32 {
    if axis >= 0 {
        axis + 1
    } else {
        axis
    }
}

/// What a rule sees of one node whose operands include batched values.
pub(crate) struct Batch<'a> {
    pub g: &'a mut Graph,
    size: &'a Dim,
    /// The operands in the mapped graph (batched ones with the batch axis first).
    pub x: &'a [ValueId],
    batched: &'a [bool],
    /// The operands' per-example types.
    types: &'a [TensorType],
    /// The outputs' per-example types.
    outs: &'a [TensorType],
}

impl Batch<'_> {
    pub fn is_batched(&self, i: usize) -> bool {
        self.batched[i]
    }

    /// Whether every batched operand is one of `ops`.
    pub fn only(&self, ops: &[usize]) -> bool {
        (0..self.x.len()).all(|i| !self.batched[i] || ops.contains(&i))
    }

    /// The per-example type of operand `i`.
    pub fn ty(&self, i: usize) -> &TensorType {
        &self.types[i]
    }

    /// The per-example type of output `i`.
    pub fn out(&self, i: usize) -> &TensorType {
        &self.outs[i]
    }

    pub fn size(&self) -> &Dim {
        self.size
    }

    /// Operand `i` with the batch axis, broadcast along it when unbatched.
    pub fn lifted(&mut self, i: usize) -> Result<ValueId> {
        if self.batched[i] {
            Ok(self.x[i])
        } else {
            broadcast(self.g, self.size, self.x[i])
        }
    }

    /// Operand `i` ready to broadcast against per-example values of rank `rank`: a batched
    /// operand of lower rank gets unit axes after the batch axis (`[B, s..] → [B, 1.., s..]`)
    /// so that right-aligned broadcasting meets the batch axis with the batch axis.
    pub fn aligned(&mut self, i: usize, rank: usize) -> Result<ValueId> {
        let r = self.types[i].rank();
        if !self.batched[i] || r == rank {
            return Ok(self.x[i]);
        }
        let mut target = vec![TargetDim::from(self.size)];
        target.extend((r..rank).map(|_| TargetDim::Size(1)));
        target.extend(self.types[i].shape.dims().iter().map(TargetDim::from));
        Ok(self.g.add1(Reshape { new_shape: target }, &[self.x[i]])?)
    }

    /// `v [B, N, rest..] → [B·N, rest..]`: the batch axis folded into the op's own first axis.
    pub fn folded(&mut self, v: ValueId) -> Result<ValueId> {
        let dims = self.g.ty(v).shape.0.clone();
        let lead = match (dims[0].as_static(), dims[1].as_static()) {
            (Some(b), Some(n)) => TargetDim::Size((b * n) as i64),
            _ => TargetDim::Size(-1),
        };
        let target: Vec<TargetDim> = std::iter::once(lead).chain(dims[2..].iter().map(TargetDim::from)).collect();
        Ok(self.g.add1(Reshape { new_shape: target }, &[v])?)
    }

    /// `v [B·N, rest..] → [B, N, rest..]`, undoing [`Batch::folded`].
    pub fn unfolded(&mut self, v: ValueId, n: &Dim) -> Result<ValueId> {
        let dims = self.g.ty(v).shape.0.clone();
        let target: Vec<TargetDim> =
            [TargetDim::from(self.size), TargetDim::from(n)].into_iter().chain(dims[1..].iter().map(TargetDim::from)).collect();
        Ok(self.g.add1(Reshape { new_shape: target }, &[v])?)
    }

    /// Axis `from` of `v` moved to position `to`, the others keeping their order.
    pub fn moved(&mut self, v: ValueId, from: usize, to: usize) -> Result<ValueId> {
        if from == to {
            return Ok(v);
        }
        let mut perm: Vec<usize> = (0..self.g.ty(v).rank()).filter(|&a| a != from).collect();
        perm.insert(to, from);
        Ok(self.g.add1(Transpose { perm }, &[v])?)
    }

    /// Every output of `op` applied to `inputs`.
    pub fn apply(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> Result<Vec<ValueId>> {
        let id = self.g.add(op, inputs)?;
        Ok((0..self.g.node(id).outputs.len() as u32).map(|o| ValueId::new(id, o)).collect())
    }
}

/// `op` (attributes already shifted) on operands aligned for broadcasting against the
/// per-example output rank: for ops whose operands broadcast NumPy-style.
pub(crate) fn broadcasting(b: &mut Batch, op: impl Into<Op>) -> Result<Vec<ValueId>> {
    let rank = b.out(0).rank();
    let x = (0..b.x.len()).map(|i| b.aligned(i, rank)).collect::<Result<Vec<_>>>()?;
    b.apply(op, &x)
}

/// `op` on operands `lead` lifted, for ops that treat the leading axes of those operands as
/// independent rows (`[.., D]` layouts); declines when any other operand is batched.
pub(crate) fn leading(b: &mut Batch, op: impl Into<Op>, lead: &[usize]) -> Option<Result<Vec<ValueId>>> {
    if !b.only(lead) {
        return None;
    }
    Some((|| {
        let x = (0..b.x.len()).map(|i| if lead.contains(&i) { b.lifted(i) } else { Ok(b.x[i]) }).collect::<Result<Vec<_>>>()?;
        b.apply(op, &x)
    })())
}

/// `op` with the batch axis folded into the op's own batch axis (the `N` of `[N, C, ..]`)
/// of operands `lead`, and unfolded from each output's first axis, which must list the rows
/// of one item after another (`N`, or `N·rows` as `Im2Col` has); declines when another operand
/// is batched or the operands in `lead` disagree on that axis.
pub(crate) fn folding(b: &mut Batch, op: impl Into<Op>, lead: &[usize]) -> Option<Result<Vec<ValueId>>> {
    let n = b.ty(lead[0]).shape.0.first()?.clone();
    if !b.only(lead) || lead.iter().any(|&i| b.ty(i).shape.0.first() != Some(&n)) {
        return None;
    }
    Some((|| {
        let mut x = b.x.to_vec();
        for &i in lead {
            let v = b.lifted(i)?;
            x[i] = b.folded(v)?;
        }
        let ys = b.apply(op, &x)?;
        let rows: Vec<Dim> = b.outs.iter().map(|t| t.shape.dim(0).clone()).collect();
        ys.into_iter().zip(&rows).map(|(y, r)| b.unfolded(y, r)).collect()
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_rule_a_decomposition_or_a_reason() {
        let mut wrong = Vec::new();
        for &kind in OpKind::ALL {
            let listed = UNBATCHED.iter().filter(|(k, _)| *k == kind).count();
            if listed > 1 || has_rule(kind) == (listed == 1) {
                wrong.push(kind.name());
            }
            let owners = FAMILIES.iter().filter(|(kinds, _)| kinds.contains(&kind)).count();
            assert!(owners <= 1, "{kind} has {owners} batching families");
        }
        assert!(wrong.is_empty(), "kinds needing exactly one of a rule, a decomposition or an UNBATCHED entry: {wrong:?}");
        for (kind, _, _) in SHARED_OPERANDS {
            assert!(FAMILIES.iter().any(|(kinds, _)| kinds.contains(kind)), "{kind} keeps operands shared but has no rule");
        }
    }
}
