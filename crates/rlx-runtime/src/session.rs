//! Sessions: the compile pipeline (verify → optimize → legalize → fuse → backend compile).

use crate::backend::Backend;
use crate::compiled::CompiledGraph;
use crate::error::Result;
use crate::fallback::Partitioned;
use rlx_ir::Graph;
use rlx_opt::claims::{input_dtypes, Claim};
use rlx_opt::partition::{partition, Place};
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

/// Compiles graphs for one backend, with the host's backend to run what it does not claim.
#[derive(Clone)]
pub struct Session {
    backend: Arc<dyn Backend>,
    host: Option<Arc<dyn Backend>>,
    options: CompileOptions,
}

impl Session {
    pub fn new(backend: Arc<dyn Backend>) -> Session {
        Session { backend, host: None, options: CompileOptions::default() }
    }

    /// Runs the kinds that the backend neither claims nor can have lowered on `host` (the
    /// CPU), in segments of their own ([`rlx_opt::partition`]); `host` also folds constants
    /// when the backend lends no evaluator.
    pub fn with_host(mut self, host: Arc<dyn Backend>) -> Session {
        self.host = Some(host);
        self
    }

    pub fn with_options(mut self, options: CompileOptions) -> Session {
        self.options = options;
        self
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// Verifies, optimizes, legalizes and fuses `graph`, then compiles it on the backend
    /// (and, with a host, what the backend does not claim on the host).
    pub fn compile(&self, graph: &Graph) -> Result<CompiledGraph> {
        rlx_ir::verify(graph)?;
        let eval = self.backend.const_eval().or_else(|| self.host.as_ref().and_then(|h| h.const_eval()));
        let optimized = if self.options.optimize { rlx_opt::optimize(graph, eval)? } else { graph.clone() };
        let device = self.backend.claims();
        let host = self.host.as_ref().filter(|h| h.name() != self.backend.name());
        let (legal, mut report) = rlx_opt::legalize::legalize_with_host(&optimized, self.backend.name(), device, host.map(|h| h.claims()))?;
        let legal = if self.options.fuse {
            let fused = rlx_opt::fuse(&legal, device)?;
            report.add_fused(&legal, &fused);
            fused
        } else {
            legal
        };
        let split = match host {
            Some(_) => Some(partition(&legal, &|id| {
                let node = legal.node(id);
                match device.claim(&node.op, &input_dtypes(&legal, node)) {
                    Claim::Native => Place::Device,
                    _ => Place::Host,
                }
            })?),
            None => None,
        };
        if self.options.dispatch_report {
            eprint!("{report}");
            if let Some(p) = &split {
                eprint!("{p}");
            }
        }
        tracing::debug!(nodes = legal.len(), backend = self.backend.name(), "compiling");
        match (split, host) {
            (Some(split), Some(host)) if split.segments.iter().any(|s| s.place == Place::Host) => {
                let exec = Partitioned::new(legal.clone(), split.clone(), |s| match s.place {
                    Place::Device => self.backend.compile(&s.graph),
                    Place::Host => host.compile(&s.graph),
                })?;
                Ok(CompiledGraph::new(legal, report, Box::new(exec)).with_partition(split))
            }
            _ => {
                let exec = self.backend.compile(&legal)?;
                Ok(CompiledGraph::new(legal, report, exec))
            }
        }
    }
}
