//! Sessions: the compile pipeline (verify → optimize → legalize → fuse → backend compile).

use crate::backend::Backend;
use crate::compiled::CompiledGraph;
use crate::error::Result;
use rlx_ir::Graph;
use std::sync::Arc;

/// Knobs of the compile pipeline.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Run the simplification pipeline before legalization.
    pub optimize: bool,
    /// Fold op chains into the fused kinds the backend claims, after legalization.
    pub fuse: bool,
    /// Print the dispatch report to stderr (also enabled by `RLX_DISPATCH_REPORT=1`).
    pub dispatch_report: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            optimize: true,
            fuse: true,
            dispatch_report: std::env::var("RLX_DISPATCH_REPORT").is_ok_and(|v| v == "1"),
        }
    }
}

/// Compiles graphs for one backend.
#[derive(Clone)]
pub struct Session {
    backend: Arc<dyn Backend>,
    options: CompileOptions,
}

impl Session {
    pub fn new(backend: Arc<dyn Backend>) -> Session {
        Session { backend, options: CompileOptions::default() }
    }

    pub fn with_options(mut self, options: CompileOptions) -> Session {
        self.options = options;
        self
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// Verifies, optimizes, legalizes and fuses `graph`, then compiles it on the backend.
    pub fn compile(&self, graph: &Graph) -> Result<CompiledGraph> {
        rlx_ir::verify(graph)?;
        let optimized = if self.options.optimize { rlx_opt::optimize(graph, self.backend.const_eval())? } else { graph.clone() };
        let claims = self.backend.claims();
        let (legal, report) = rlx_opt::legalize(&optimized, self.backend.name(), claims)?;
        let legal = if self.options.fuse { rlx_opt::fuse(&legal, claims)? } else { legal };
        if self.options.dispatch_report {
            eprint!("{report}");
        }
        tracing::debug!(nodes = legal.len(), backend = self.backend.name(), "compiling");
        let exec = self.backend.compile(&legal)?;
        Ok(CompiledGraph::new(legal, report, exec))
    }
}
