//! Rebuilding a graph node by node: the shared machinery of every pass.

use rlx_ir::{Graph, IrError, Node, NodeId, ValueId};

/// Copies `src` into a fresh graph while a pass replaces some nodes.
///
/// Each source node maps to the values that now stand for its outputs. Visit nodes in order;
/// call [`Rewriter::keep`] or [`Rewriter::replace`] once per node, then [`Rewriter::finish`].
pub struct Rewriter<'a> {
    src: &'a Graph,
    out: Graph,
    map: Vec<Vec<ValueId>>,
}

impl<'a> Rewriter<'a> {
    pub fn new(src: &'a Graph) -> Rewriter<'a> {
        Rewriter {
            src,
            out: Graph::new(),
            map: Vec::with_capacity(src.len()),
        }
    }

    /// The new value standing for an old one.
    pub fn map(&self, v: ValueId) -> ValueId {
        self.map[v.node.index()][v.output as usize]
    }

    /// The mapped inputs of source node `id`.
    pub fn inputs(&self, id: NodeId) -> Vec<ValueId> {
        self.src.node(id).inputs.iter().map(|&v| self.map(v)).collect()
    }

    /// Copies source node `id` unchanged (inputs remapped).
    pub fn keep(&mut self, id: NodeId) -> NodeId {
        let node = self.src.node(id);
        let inputs = self.inputs(id);
        let new = self.out.push(Node {
            op: node.op.clone(),
            inputs,
            outputs: node.outputs.clone(),
        });
        self.map.push((0..node.outputs.len() as u32).map(|i| ValueId::new(new, i)).collect());
        new
    }

    /// Drops source node `id`; nothing may refer to it afterwards.
    pub fn skip(&mut self, _id: NodeId) {
        self.map.push(Vec::new());
    }

    /// Makes `values` stand for the outputs of source node `id`; they must have its types.
    pub fn replace(&mut self, id: NodeId, values: Vec<ValueId>) -> Result<(), IrError> {
        self.check(id, &values)?;
        self.map.push(values);
        Ok(())
    }

    /// Makes `values` stand for the outputs of source node `id`, skipped earlier because they
    /// did not exist yet (a node replaced together with later ones, none of whose users came
    /// between); they must have its types.
    pub fn fill(&mut self, id: NodeId, values: Vec<ValueId>) -> Result<(), IrError> {
        self.check(id, &values)?;
        match self.map.get_mut(id.index()) {
            Some(slot) if slot.is_empty() => {
                *slot = values;
                Ok(())
            }
            _ => Err(IrError::Invalid(format!("%{} was not skipped before being filled", id.0))),
        }
    }

    /// Whether `values` have the types of source node `id`'s outputs.
    fn check(&self, id: NodeId, values: &[ValueId]) -> Result<(), IrError> {
        let node = self.src.node(id);
        let types: Vec<_> = values.iter().map(|&v| self.out.ty(v).clone()).collect();
        if types != node.outputs {
            return Err(IrError::Invalid(format!(
                "rewrite of %{} ({}) produced {:?}, expected {:?}",
                id.0,
                node.op.kind(),
                types,
                node.outputs
            )));
        }
        Ok(())
    }

    /// The graph under construction, to add replacement nodes to.
    pub fn graph(&mut self) -> &mut Graph {
        &mut self.out
    }

    /// The graph built so far.
    pub fn built(&self) -> &Graph {
        &self.out
    }

    /// The source graph.
    pub fn source(&self) -> &'a Graph {
        self.src
    }

    /// The rebuilt graph, with the source's outputs remapped.
    pub fn finish(mut self) -> Graph {
        let outs = self.src.outputs().iter().map(|&v| self.map(v)).collect();
        self.out
            .set_outputs(outs)
            .expect("mapped outputs exist in the rebuilt graph");
        self.out
    }
}
