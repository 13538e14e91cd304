//! Algebraic simplification: small local rewrites that remove no-op nodes.
//!
//! Each rule looks at one node (and the constants feeding it) and either forwards one of its
//! inputs or leaves it alone.

use crate::pass::Pass;
use crate::rewrite::Rewriter;
use rlx_ir::{Graph, IrError, Node, Op, ValueId};

pub struct Simplify;

/// The input a no-op node can be replaced by, if any.
fn forward(g: &Graph, node: &Node) -> Option<ValueId> {
    let same_type = |v: ValueId| g.ty(v) == &node.outputs[0];
    match &node.op {
        Op::Cast(_) if same_type(node.inputs[0]) => Some(node.inputs[0]),
        _ => None,
    }
}

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, g: &Graph) -> Result<Graph, IrError> {
        let mut rw = Rewriter::new(g);
        for id in g.node_ids() {
            match forward(g, g.node(id)) {
                Some(v) => {
                    let v = rw.map(v);
                    rw.replace(id, vec![v])?;
                }
                None => {
                    rw.keep(id);
                }
            }
        }
        Ok(rw.finish())
    }
}

#[cfg(test)]
mod tests {
    use rlx_ir::text::parse;

    #[test]
    fn same_dtype_cast_is_dropped() {
        let g = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))()
             %1 = Cast(to:F32)(%0)
             %2 = Activation(kind:Exp)(%1)
             return %2",
        )
        .unwrap();
        let out = crate::optimize(&g, None).unwrap().to_string();
        assert_eq!(out, "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))() : f32[2]\n%1 = Activation(kind:Exp)(%0) : f32[2]\nreturn %1\n");
    }
}
