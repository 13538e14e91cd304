//! The pass interface and the standard simplification pipeline.

use rlx_ir::{Graph, IrError};

/// A graph-to-graph transformation that keeps the graph's meaning.
pub trait Pass {
    fn name(&self) -> &'static str;
    fn run(&self, g: &Graph) -> Result<Graph, IrError>;
}

/// The standard pipeline: canonicalize, fold constants, merge duplicates, drop dead nodes,
/// repeated until the graph stops changing (at most a few rounds).
pub fn optimize(g: &Graph) -> Result<Graph, IrError> {
    let passes: [&dyn Pass; 4] = [
        &crate::simplify::Simplify,
        &crate::fold::FoldConstants,
        &crate::cse::Cse,
        &crate::dce::Dce,
    ];
    let mut cur = g.clone();
    for _ in 0..4 {
        let before = cur.clone();
        for p in passes {
            cur = p.run(&cur)?;
        }
        if cur == before {
            break;
        }
    }
    Ok(cur)
}
