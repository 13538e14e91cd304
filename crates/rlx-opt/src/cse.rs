//! Common-subexpression elimination: nodes with equal ops and equal inputs become one.

use crate::pass::Pass;
use crate::rewrite::Rewriter;
use rlx_ir::{text, Graph, IrError, Op, ValueId};
use std::collections::HashMap;

pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &Graph) -> Result<Graph, IrError> {
        let mut rw = Rewriter::new(g);
        let mut seen: HashMap<(String, Vec<ValueId>), Vec<ValueId>> = HashMap::new();
        for id in g.node_ids() {
            let node = g.node(id);
            let mergeable = !matches!(node.op, Op::Input(_) | Op::Param(_))
                && node.op.def().mutated_inputs().is_empty()
                && !node.op.def().fresh();
            if !mergeable {
                rw.keep(id);
                continue;
            }
            let key = (text::op_to_string(&node.op), rw.inputs(id));
            match seen.get(&key) {
                Some(values) => rw.replace(id, values.clone())?,
                None => {
                    let new = rw.keep(id);
                    let values = (0..node.outputs.len() as u32).map(|i| ValueId::new(new, i)).collect();
                    seen.insert(key, values);
                }
            }
        }
        crate::dce::Dce.run(&rw.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::text::parse;

    #[test]
    fn merges_equal_nodes() {
        let g = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))()
             %1 = Activation(kind:Exp)(%0)
             %2 = Activation(kind:Exp)(%0)
             %3 = Binary(op:Add)(%1, %2)
             return %3",
        )
        .unwrap();
        let out = Cse.run(&g).unwrap().to_string();
        assert_eq!(out.matches("Exp").count(), 1, "{out}");
        assert!(out.contains("Binary(op:Add)(%1, %1)"), "{out}");
    }

    #[test]
    fn keeps_distinct_attributes_apart() {
        let g = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))()
             %1 = Activation(kind:Exp)(%0)
             %2 = Activation(kind:Tanh)(%0)
             %3 = Binary(op:Add)(%1, %2)
             return %3",
        )
        .unwrap();
        assert_eq!(Cse.run(&g).unwrap(), g);
    }
}
