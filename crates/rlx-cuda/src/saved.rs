//! Attention whose backward reads what its forward kept. `AttentionBackwardAll` takes only Q,
//! K, V and dO, so on its own it must run the forward again for O and the rows' log-sum-exp.
//! Where a graph runs `Attention` and `AttentionBackwardAll` over the same Q, K and V (a
//! training step) and cuDNN takes both, compiling rewrites the pair into two of this
//! backend's own ops: [`FORWARD`] also returns the log-sum-exp (f32 `[B, H, S_q]`), and
//! [`BACKWARD`] takes O and it. The plan keeps both alive between the two, as PyTorch keeps
//! its saved tensors.

use crate::attention::saved_shapes;
use crate::cudnn;
use crate::engine::CudaEngine;
use rlx_ir::ops::attention::{Attention, AttentionBackwardAll, MaskKind};
use rlx_ir::ops::custom::Custom;
use rlx_ir::{Dim, Graph, Node, NodeId, Op, Shape, TensorType, ValueId};
use rlx_opt::rewrite::Rewriter;
use std::collections::HashMap;

/// The forward that also returns its rows' log-sum-exp: inputs `(q, k, v)`, outputs
/// `(out, lse)`.
pub const FORWARD: &str = "rlx-cuda.attention_saving";
/// The backward from the kept values: inputs `(q, k, v, dy, out, lse)`, outputs `(dq, dk, dv)`.
pub const BACKWARD: &str = "rlx-cuda.attention_backward_saved";

/// Both ops' attributes: heads and channels per head (u32, little-endian) and 1 for causal.
fn attrs(heads: usize, head_dim: usize, mask: MaskKind) -> Vec<u8> {
    let mut a = Vec::with_capacity(9);
    a.extend((heads as u32).to_le_bytes());
    a.extend((head_dim as u32).to_le_bytes());
    a.push((mask == MaskKind::Causal) as u8);
    a
}

/// Heads, channels per head and mask of a saved pair's op, from [`attrs`].
pub(crate) fn parse(c: &Custom) -> Result<(usize, usize, MaskKind), String> {
    let a = &c.attrs;
    if a.len() != 9 || a[8] > 1 {
        return Err(format!("{}: attributes of 9 bytes (heads, head width, causal) expected, got {:?}", c.name, a));
    }
    let word = |i: usize| u32::from_le_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]) as usize;
    Ok((word(0), word(4), if a[8] == 1 { MaskKind::Causal } else { MaskKind::None }))
}

/// Whether `a` (forward) and `b` (backward) compute one attention: the same heads and mask,
/// the default scale, no softcap, V as wide as Q.
fn same(a: &Attention, b: &AttentionBackwardAll) -> bool {
    a.num_heads == b.num_heads
        && a.head_dim == b.head_dim
        && a.mask_kind == b.mask_kind
        && matches!(a.mask_kind, MaskKind::None | MaskKind::Causal)
        && a.v_head_dim.is_none_or(|v| v == a.head_dim)
        && a.score_scale.is_none()
        && a.attn_logit_softcap.is_none()
}

/// The log-sum-exp's type for queries of type `q` (`[B, H, S, D]`, `[B, S, H·D]` or `[S, H·D]`).
fn lse_type(q: &TensorType, heads: usize) -> TensorType {
    let d = q.shape.dims();
    let dims = match d.len() {
        4 => vec![d[0].clone(), d[1].clone(), d[2].clone()],
        3 => vec![d[0].clone(), Dim::Static(heads), d[1].clone()],
        _ => vec![Dim::Static(1), Dim::Static(heads), d[0].clone()],
    };
    TensorType::new(rlx_ir::DType::F32, Shape::new(dims))
}

/// `graph` with each attention pair cuDNN takes rewritten (shapes static; the plans are built
/// now, outside any CUDA-graph capture); `None` where there is none. cuDNN opens only for a
/// graph that has a pair to ask about.
pub(crate) fn rewrite_for(graph: &Graph, engine: &CudaEngine) -> Option<Graph> {
    rewrite(graph, |fwd, bwd| engine.cudnn().is_some_and(|dnn| dnn.takes(fwd) && dnn.takes(bwd)))
}

/// `graph` with each attention pair of static shapes whose cuDNN plans `takes` rewritten.
fn rewrite(graph: &Graph, takes: impl Fn(&cudnn::Shape, &cudnn::Shape) -> bool) -> Option<Graph> {
    let forwards: HashMap<&[ValueId], NodeId> = graph
        .node_ids()
        .filter_map(|id| match &graph.node(id).op {
            Op::Attention(_) => Some((&graph.node(id).inputs[..], id)),
            _ => None,
        })
        .collect();
    let mut pairs: HashMap<NodeId, NodeId> = HashMap::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Op::AttentionBackwardAll(b) = &node.op else { continue };
        let Some(&f) = forwards.get(&node.inputs[..node.inputs.len().min(3)]) else { continue };
        let Op::Attention(a) = &graph.node(f).op else { continue };
        let dims: Vec<Vec<usize>> = node.inputs.iter().filter_map(|&v| graph.ty(v).shape.as_static()).collect();
        let dt = graph.ty(node.inputs[0]).dtype;
        let takes = node.inputs.len() == 4
            && f < id
            && dims.len() == 4
            && same(a, b)
            && !pairs.contains_key(&f)
            && saved_shapes(dt, b.num_heads, b.head_dim, b.mask_kind, [&dims[0], &dims[1], &dims[2]]).is_some_and(|(fwd, bwd)| takes(&fwd, &bwd));
        if takes {
            pairs.insert(f, id);
        }
    }
    if pairs.is_empty() {
        return None;
    }
    let backwards: HashMap<NodeId, NodeId> = pairs.iter().map(|(&f, &b)| (b, f)).collect();
    let mut kept: HashMap<NodeId, ValueId> = HashMap::new();
    let mut rw = Rewriter::new(graph);
    for id in graph.node_ids() {
        let node = graph.node(id);
        let inputs = rw.inputs(id);
        match (&node.op, pairs.contains_key(&id), backwards.get(&id)) {
            (Op::Attention(a), true, _) => {
                let out = node.outputs[0].clone();
                let op = Custom { name: FORWARD.into(), num_inputs: 3, attrs: attrs(a.num_heads, a.head_dim, a.mask_kind), outputs: vec![out.clone(), lse_type(&out, a.num_heads)] };
                let new = rw.graph().push(Node { op: Op::Custom(op.clone()), inputs, outputs: op.outputs });
                kept.insert(id, ValueId::new(new, 1));
                rw.replace(id, vec![ValueId::new(new, 0)]).ok()?;
            }
            (Op::AttentionBackwardAll(b), _, Some(&f)) => {
                let (o, lse) = (rw.map(ValueId::new(f, 0)), kept[&f]);
                let mut inputs = inputs;
                inputs.extend([o, lse]);
                let op = Custom { name: BACKWARD.into(), num_inputs: 6, attrs: attrs(b.num_heads, b.head_dim, b.mask_kind), outputs: node.outputs.clone() };
                let new = rw.graph().push(Node { op: Op::Custom(op.clone()), inputs, outputs: op.outputs });
                rw.replace(id, (0..3).map(|i| ValueId::new(new, i)).collect()).ok()?;
            }
            _ => {
                rw.keep(id);
            }
        }
    }
    Some(rw.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    /// A causal bf16 attention, its gradients, and a product reading the output, over `[2, 64,
    /// 4·32]` values; the rewrite sees every plan taken.
    #[test]
    fn a_forward_and_its_backward_become_the_saving_pair() {
        let mut g = Graph::new();
        let ty = TensorType::new(DType::BF16, Shape::of(&[2, 64, 128]));
        let x: Vec<ValueId> = ["q", "k", "v", "dy"].iter().map(|n| g.input(n, ty.clone())).collect();
        let y = g.attention(Attention::new(4, 32, MaskKind::Causal), x[0], x[1], x[2], None).expect("attention");
        let grads = g.attention_backward_all(AttentionBackwardAll { num_heads: 4, head_dim: 32, mask_kind: MaskKind::Causal }, x[0], x[1], x[2], x[3], None).expect("gradients");
        g.set_outputs([vec![y], grads].concat()).expect("outputs");
        let out = rewrite(&g, |_, _| true).expect("the pair is rewritten");
        rlx_ir::verify(&out).expect("the rewritten graph verifies");
        let customs: Vec<&Custom> = out.nodes().iter().filter_map(|n| if let Op::Custom(c) = &n.op { Some(c) } else { None }).collect();
        assert_eq!(customs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), [FORWARD, BACKWARD]);
        assert_eq!(customs[0].outputs[1], TensorType::new(DType::F32, Shape::of(&[2, 4, 64])));
        assert_eq!(parse(customs[1]), Ok((4, 32, MaskKind::Causal)));
        let backward = out.nodes().iter().find(|n| matches!(&n.op, Op::Custom(c) if c.name == BACKWARD)).expect("the backward");
        assert_eq!(backward.inputs.len(), 6);
        assert_eq!(out.ty(backward.inputs[5]).dtype, DType::F32);
        assert!(!out.nodes().iter().any(|n| matches!(n.op, Op::Attention(_) | Op::AttentionBackwardAll(_))));
        assert!(rewrite(&g, |_, _| false).is_none(), "nothing is rewritten where cuDNN refuses");
    }

    #[test]
    fn pairs_that_differ_or_run_alone_are_left_alone() {
        let mut g = Graph::new();
        let ty = TensorType::new(DType::BF16, Shape::of(&[2, 4, 64, 32]));
        let x: Vec<ValueId> = ["q", "k", "v", "dy"].iter().map(|n| g.input(n, ty.clone())).collect();
        let y = g.attention(Attention::new(4, 32, MaskKind::None), x[0], x[1], x[2], None).expect("attention");
        let grads = g.attention_backward_all(AttentionBackwardAll { num_heads: 4, head_dim: 32, mask_kind: MaskKind::Causal }, x[0], x[1], x[2], x[3], None).expect("gradients");
        g.set_outputs([vec![y], grads].concat()).expect("outputs");
        assert!(rewrite(&g, |_, _| true).is_none(), "masks differ");
        let mut alone = Graph::new();
        let x: Vec<ValueId> = ["q", "k", "v"].iter().map(|n| alone.input(n, ty.clone())).collect();
        let y = alone.attention(Attention::new(4, 32, MaskKind::Causal), x[0], x[1], x[2], None).expect("attention");
        alone.set_outputs(vec![y]).expect("output");
        assert!(rewrite(&alone, |_, _| true).is_none(), "no backward");
        let mut first = Graph::new();
        let x: Vec<ValueId> = ["q", "k", "v", "dy"].iter().map(|n| first.input(n, ty.clone())).collect();
        let grads = first.attention_backward_all(AttentionBackwardAll { num_heads: 4, head_dim: 32, mask_kind: MaskKind::Causal }, x[0], x[1], x[2], x[3], None).expect("gradients");
        let y = first.attention(Attention::new(4, 32, MaskKind::Causal), x[0], x[1], x[2], None).expect("attention");
        first.set_outputs([grads, vec![y]].concat()).expect("outputs");
        assert!(rewrite(&first, |_, _| true).is_none(), "the backward comes first");
    }

    #[test]
    fn malformed_attributes_are_an_error() {
        let c = Custom { name: BACKWARD.into(), num_inputs: 6, attrs: vec![1, 2], outputs: vec![] };
        assert!(parse(&c).is_err());
        let c = Custom { attrs: attrs(12, 64, MaskKind::None), ..c };
        assert_eq!(parse(&c), Ok((12, 64, MaskKind::None)));
    }
}
