//! The pass interface and the standard simplification pipeline.

use crate::fold::{ConstEval, FoldConstants};
use rlx_ir::{Graph, IrError};

/// A graph-to-graph transformation that keeps the graph's meaning.
pub trait Pass {
    fn name(&self) -> &'static str;
    fn run(&self, g: &Graph) -> Result<Graph, IrError>;
}

/// The standard pipeline: canonicalize, fold constants (with `eval`, when given), merge
/// duplicates, drop dead nodes, repeated until the graph stops changing (at most a few rounds).
pub fn optimize(g: &Graph, eval: Option<&dyn ConstEval>) -> Result<Graph, IrError> {
    let fold = eval.map(|eval| FoldConstants { eval });
    let mut passes: Vec<&dyn Pass> = vec![&crate::simplify::Simplify];
    passes.extend(fold.as_ref().map(|f| f as &dyn Pass));
    passes.extend([&crate::cse::Cse as &dyn Pass, &crate::dce::Dce]);
    let mut cur = g.clone();
    for _ in 0..4 {
        let before = cur.clone();
        for p in &passes {
            cur = p.run(&cur)?;
        }
        if cur == before {
            break;
        }
    }
    Ok(cur)
}
