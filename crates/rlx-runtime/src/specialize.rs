//! Specialization: a graph with symbolic dims re-inferred for concrete input types.

use crate::Bindings;
use rlx_ir::ops::source::Input;
use rlx_ir::{Graph, IrError, Node, Op, TensorType};

/// Rebuilds `g` with its `Input` nodes (in `Graph::inputs()` order) typed as `inputs`, the
/// symbols in op attributes replaced by their `bindings`, and every other type inferred again,
/// so static inputs give static shapes throughout.
pub fn specialize(g: &Graph, inputs: &[TensorType], bindings: &Bindings) -> Result<Graph, IrError> {
    let sizes = |s: &str| bindings.get(s).copied();
    let mut out = Graph::new();
    let mut next_input = inputs.iter();
    for node in g.nodes() {
        match &node.op {
            Op::Input(i) => {
                let ty = next_input
                    .next()
                    .ok_or_else(|| IrError::Invalid(format!("no concrete type given for input `{}`", i.name)))?;
                out.push(Node {
                    op: Op::Input(Input { name: i.name.clone(), ty: ty.clone() }),
                    inputs: Vec::new(),
                    outputs: vec![ty.clone()],
                });
            }
            op => {
                let mut op = op.clone();
                op.def_mut().bind_symbols(&sizes);
                out.add(op, &node.inputs)?;
            }
        }
    }
    out.set_outputs(g.outputs().to_vec())?;
    Ok(out)
}
