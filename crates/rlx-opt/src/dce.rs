//! Dead-code elimination: drops nodes no output depends on, keeping inputs, params and
//! nodes that update a buffer in place.

use crate::pass::Pass;
use crate::rewrite::Rewriter;
use rlx_ir::{Graph, IrError, Op};

pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &Graph) -> Result<Graph, IrError> {
        let mut live = vec![false; g.len()];
        for v in g.outputs() {
            live[v.node.index()] = true;
        }
        for id in g.node_ids().rev() {
            let node = g.node(id);
            let pinned = matches!(node.op, Op::Input(_) | Op::Param(_)) || !node.op.def().mutated_inputs().is_empty();
            if pinned {
                live[id.index()] = true;
            }
            if live[id.index()] {
                for v in &node.inputs {
                    live[v.node.index()] = true;
                }
            }
        }
        let mut rw = Rewriter::new(g);
        for id in g.node_ids() {
            if live[id.index()] {
                rw.keep(id);
            } else {
                rw.skip(id);
            }
        }
        Ok(rw.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::text::parse;

    #[test]
    fn drops_unused_nodes_but_keeps_inputs() {
        let g = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))()
             %1 = Input(name:\"unused\",ty:(dtype:F32,shape:[2]))()
             %2 = Activation(kind:Exp)(%0)
             %3 = Activation(kind:Tanh)(%0)
             return %3",
        )
        .unwrap();
        let out = Dce.run(&g).unwrap().to_string();
        assert!(!out.contains("Exp"), "{out}");
        assert!(out.contains("unused"), "{out}");
        assert!(out.contains("%2 = Activation(kind:Tanh)(%0)"), "{out}");
    }
}
