//! Constant folding: a node whose inputs are all constants becomes a constant, computed by
//! the evaluator the caller passes (the host's kernels, so folding runs the same kernels as
//! execution on the CPU, whatever device the graph is compiled for).

use crate::pass::Pass;
use crate::rewrite::Rewriter;
use rlx_ir::ops::source::Constant;
use rlx_ir::{Graph, IrError, Op, TensorType};

/// Evaluates one op on constant inputs; `None` when it cannot (or should not).
pub trait ConstEval: Sync {
    fn eval(&self, op: &Op, inputs: &[&Constant], outputs: &[TensorType]) -> Option<Vec<Vec<u8>>>;
}

/// Largest folded result, in bytes: folding must not bloat the graph with big literals.
pub const MAX_FOLD_BYTES: usize = 1 << 16;

/// Folds with `eval`.
pub struct FoldConstants<'e> {
    pub eval: &'e dyn ConstEval,
}

impl Pass for FoldConstants<'_> {
    fn name(&self) -> &'static str {
        "fold-constants"
    }

    fn run(&self, g: &Graph) -> Result<Graph, IrError> {
        let eval = self.eval;
        let mut rw = Rewriter::new(g);
        for id in g.node_ids() {
            let node = g.node(id);
            let consts: Option<Vec<Constant>> = node
                .inputs
                .iter()
                .map(|v| match &rw.built().node(rw.map(*v).node).op {
                    Op::Constant(c) => Some(c.clone()),
                    _ => None,
                })
                .collect();
            let foldable = !node.inputs.is_empty()
                && node.op.def().mutated_inputs().is_empty()
                && !node.op.def().fresh()
                && node.outputs.iter().all(|t| t.shape.numel().is_some_and(|n| n * t.dtype.size() <= MAX_FOLD_BYTES));
            let folded = match consts {
                Some(c) if foldable => {
                    let refs: Vec<&Constant> = c.iter().collect();
                    eval.eval(&node.op, &refs, &node.outputs)
                }
                _ => None,
            };
            match folded {
                Some(datas) => {
                    let mut values = Vec::new();
                    for (ty, data) in node.outputs.iter().zip(datas) {
                        values.push(rw.graph().constant(ty.clone(), data)?);
                    }
                    rw.replace(id, values)?;
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
    use super::*;
    use rlx_ir::text::parse;

    /// Adds f32 constants, in f64 and rounded once; nothing else.
    struct AddOnly;

    impl ConstEval for AddOnly {
        fn eval(&self, op: &Op, inputs: &[&Constant], _: &[TensorType]) -> Option<Vec<Vec<u8>>> {
            let Op::Binary(b) = op else { return None };
            if b.op != rlx_ir::ops::elementwise::BinaryOp::Add {
                return None;
            }
            let f = |c: &Constant| c.data.chunks_exact(4).map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect::<Vec<_>>();
            let sum: Vec<u8> = f(inputs[0]).iter().zip(f(inputs[1])).flat_map(|(a, b)| ((*a as f64 + b as f64) as f32).to_le_bytes()).collect();
            Some(vec![sum])
        }
    }

    #[test]
    fn folds_with_the_evaluator_it_is_given_and_only_then() {
        let src = "%0 = Constant(ty:(dtype:F32,shape:[2]),data:[0,0,128,63,0,0,0,64])()
%1 = Binary(op:Add)(%0, %0)
%2 = Binary(op:Mul)(%1, %0)
return %2";
        let g = parse(src).unwrap();
        let folded = FoldConstants { eval: &AddOnly }.run(&g).unwrap();
        let text = folded.to_string();
        assert!(!text.contains("Add"), "{text}");
        assert!(text.contains("data:[0,0,0,64,0,0,128,64]"), "1+1 = 2, 2+2 = 4: {text}");
        assert!(text.contains("Mul"), "the evaluator declines Mul: {text}");
        assert_eq!(crate::optimize(&g, None).unwrap().to_string().matches("Binary").count(), 2);
    }
}
