//! The verifier: every input refers to an earlier value, every arity holds, every stored
//! type is what inference re-derives, input and parameter names are unique, and the outputs
//! exist — recursively into sub-graphs.

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
    for kind in [crate::OpKind::Input, crate::OpKind::Param] {
        let mut names: Vec<&str> = if kind == crate::OpKind::Input { g.inputs() } else { g.params() }
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(IrError::Invalid(format!("two {kind} nodes are named `{}`", w[0])));
        }
    }
    for v in g.outputs() {
        if g.try_ty(*v).is_none() {
            return Err(IrError::UnknownOutput(v.to_string()));
        }
    }
    Ok(())
}
