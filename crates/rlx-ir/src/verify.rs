//! The verifier: every input refers to an earlier value, every arity holds, every stored
//! type is what inference re-derives, and the outputs exist — recursively into sub-graphs.

use crate::error::{IrError, Result};
use crate::{Graph, ValueId};

/// Checks `g` and every sub-graph it carries.
pub fn verify(g: &Graph) -> Result<()> {
    for id in g.node_ids() {
        let node = g.node(id);
        let kind = node.op.kind();
        if let Some(bad) = node.inputs.iter().find(|v| v.node >= id) {
            return Err(IrError::UnknownValue {
                op: kind,
                value: bad.to_string(),
                nodes: id.index(),
            });
        }
        let inferred = g.infer(&node.op, &node.inputs)?;
        if inferred != node.outputs {
            return Err(IrError::TypeMismatch {
                node: ValueId::from(id).to_string(),
                op: kind,
                stored: format!("{:?}", node.outputs),
                inferred: format!("{inferred:?}"),
            });
        }
        for sub in node.op.def().subgraphs() {
            verify(sub)?;
        }
    }
    for v in g.outputs() {
        if g.try_ty(*v).is_none() {
            return Err(IrError::UnknownOutput(v.to_string()));
        }
    }
    Ok(())
}
