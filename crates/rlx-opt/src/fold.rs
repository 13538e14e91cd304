//! Constant folding: a node whose inputs are all constants becomes a constant, computed by
//! the evaluator a backend lends (so folding runs the same kernels as execution).

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

/// Folds with the evaluator installed by [`with_evaluator`]; without one it changes nothing.
pub struct FoldConstants;

static EVALUATOR: std::sync::OnceLock<&'static dyn ConstEval> = std::sync::OnceLock::new();

/// Installs the process-wide constant evaluator (the CPU backend's kernels). Later calls
/// keep the first evaluator.
pub fn with_evaluator(e: &'static dyn ConstEval) {
    let _ = EVALUATOR.set(e);
}

impl Pass for FoldConstants {
    fn name(&self) -> &'static str {
        "fold-constants"
    }

    fn run(&self, g: &Graph) -> Result<Graph, IrError> {
        let Some(eval) = EVALUATOR.get() else {
            return Ok(g.clone());
        };
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
