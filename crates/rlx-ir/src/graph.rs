//! Graphs: an append-only list of nodes (so always acyclic and topologically ordered),
//! each an [`Op`] with its input values and inferred output types.

use crate::error::{IrError, Result};
use crate::ops::{source, Op, OpKind};
use crate::{DType, TensorType};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a node in its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One output of one node: printed `%3` for output 0, `%3.1` for output 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ValueId {
    pub node: NodeId,
    pub output: u32,
}

impl ValueId {
    /// Output `output` of `node`.
    pub fn new(node: NodeId, output: u32) -> ValueId {
        ValueId { node, output }
    }
}

impl From<NodeId> for ValueId {
    fn from(node: NodeId) -> ValueId {
        ValueId { node, output: 0 }
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.output == 0 {
            write!(f, "%{}", self.node.0)
        } else {
            write!(f, "%{}.{}", self.node.0, self.output)
        }
    }
}

/// An op applied to earlier values, with its output types.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<TensorType>,
}

/// A tensor graph. Nodes only refer to earlier nodes; `outputs` are the results.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    nodes: Vec<Node>,
    outputs: Vec<ValueId>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Ids of all nodes, in order.
    pub fn node_ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// The type of a value. Panics on a value from another graph; use
    /// [`Graph::try_ty`] for values that came from a user.
    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.nodes[v.node.index()].outputs[v.output as usize]
    }

    /// The type of a value, or `None` if the graph has no such value.
    pub fn try_ty(&self, v: ValueId) -> Option<&TensorType> {
        self.nodes.get(v.node.index())?.outputs.get(v.output as usize)
    }

    /// Appends `op` applied to `inputs`, inferring its output types.
    pub fn add(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> Result<NodeId> {
        let op = op.into();
        let outputs = self.infer(&op, inputs)?;
        Ok(self.push(Node {
            op,
            inputs: inputs.to_vec(),
            outputs,
        }))
    }

    /// Appends a single-output op and returns its value.
    pub fn add1(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> Result<ValueId> {
        let op = op.into();
        let kind = op.kind();
        let id = self.add(op, inputs)?;
        match self.node(id).outputs.len() {
            1 => Ok(id.into()),
            n => Err(IrError::Invalid(format!(
                "{kind} has {n} outputs; use Graph::add and pick one"
            ))),
        }
    }

    /// Output types of `op` applied to `inputs` in this graph, without adding a node.
    pub fn infer(&self, op: &Op, inputs: &[ValueId]) -> Result<Vec<TensorType>> {
        let kind = op.kind();
        let def = op.def();
        if !def.arity().accepts(inputs.len()) {
            return Err(IrError::Arity {
                op: kind,
                expected: def.arity(),
                got: inputs.len(),
            });
        }
        let types = inputs
            .iter()
            .map(|&v| {
                self.try_ty(v).cloned().ok_or_else(|| IrError::UnknownValue {
                    op: kind,
                    value: v.to_string(),
                    nodes: self.nodes.len(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        def.infer(&types).map_err(|reason| IrError::Infer {
            op: kind,
            inputs: describe_inputs(inputs, &types),
            reason,
        })
    }

    /// Appends a node whose outputs the caller already knows (passes that rebuild graphs
    /// node by node); [`crate::verify`] re-derives them.
    pub fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        NodeId(self.nodes.len() as u32 - 1)
    }

    /// Drops the nodes from `len` on (what a rewrite that gave up had added); nothing may
    /// refer to them.
    pub fn truncate(&mut self, len: usize) {
        self.nodes.truncate(len);
    }

    /// A runtime input bound by name.
    pub fn input(&mut self, name: &str, ty: TensorType) -> ValueId {
        self.add_source(source::Input { name: name.into(), ty })
    }

    /// A named parameter (weight) supplied with the model.
    pub fn param(&mut self, name: &str, ty: TensorType) -> ValueId {
        self.add_source(source::Param { name: name.into(), ty })
    }

    /// A constant from f32 values.
    pub fn constant_f32(&mut self, dims: &[usize], values: &[f32]) -> Result<ValueId> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add1(source::Constant { ty: TensorType::of(DType::F32, dims), data }, &[])
    }

    /// A constant from raw little-endian bytes of `ty`.
    pub fn constant(&mut self, ty: TensorType, data: Vec<u8>) -> Result<ValueId> {
        self.add1(source::Constant { ty, data }, &[])
    }

    fn add_source(&mut self, op: impl Into<Op>) -> ValueId {
        let op = op.into();
        let ty = match &op {
            Op::Input(i) => i.ty.clone(),
            Op::Param(p) => p.ty.clone(),
            _ => unreachable!("add_source takes Input or Param"),
        };
        self.push(Node {
            op,
            inputs: Vec::new(),
            outputs: vec![ty],
        })
        .into()
    }

    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// Sets the graph's results.
    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) -> Result<()> {
        if let Some(bad) = outputs.iter().find(|v| self.try_ty(**v).is_none()) {
            return Err(IrError::UnknownOutput(bad.to_string()));
        }
        self.outputs = outputs;
        Ok(())
    }

    /// The graph's `Input` nodes as `(name, value)`, in creation order.
    pub fn inputs(&self) -> Vec<(&str, ValueId)> {
        self.sources(OpKind::Input)
    }

    /// The graph's `Param` nodes as `(name, value)`, in creation order.
    pub fn params(&self) -> Vec<(&str, ValueId)> {
        self.sources(OpKind::Param)
    }

    fn sources(&self, kind: OpKind) -> Vec<(&str, ValueId)> {
        self.node_ids()
            .filter_map(|id| match &self.node(id).op {
                Op::Input(i) if kind == OpKind::Input => Some((i.name.as_str(), id.into())),
                Op::Param(p) if kind == OpKind::Param => Some((p.name.as_str(), id.into())),
                _ => None,
            })
            .collect()
    }

    /// How many times each node's outputs are used (by nodes or as graph outputs).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for v in &n.inputs {
                uses[v.node.index()] += 1;
            }
        }
        for v in &self.outputs {
            uses[v.node.index()] += 1;
        }
        uses
    }
}

/// `%0: f32[2, 3], %1: f32[3]` — the inputs as error messages show them.
pub(crate) fn describe_inputs(values: &[ValueId], types: &[TensorType]) -> String {
    values
        .iter()
        .zip(types)
        .map(|(v, t)| format!("{v}: {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}
