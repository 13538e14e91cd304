//! rlx on NVIDIA GPUs: the shared executor ([`rlx_runtime::Executor`]) over a [`CudaEngine`] —
//! device memory planned in one arena per plan, copies and launches ordered on one stream,
//! kernels generated from the IR and compiled with NVRTC, products through cuBLAS.
//!
//! The driver, NVRTC and cuBLAS load at run time: the crate builds everywhere, and
//! [`CudaBackend::new`] says so in a typed error where there is no driver or no such device.

mod attention;
mod claims;
mod cudnn;
mod decode;
mod engine;
mod fuse;
mod gpu;
mod kernels;
mod kv;
mod launch;
mod lt;
mod matmul;
mod memory;
mod products;
mod ptx_cache;
mod quant;
mod reduce;
mod report;
mod rows;
mod saved;
mod stage;
pub mod source;

pub use claims::{CudaClaims, KINDS};
pub use cudnn::version as cudnn_version;
pub use engine::CudaEngine;
pub use gpu::Gpu;
pub use kernels::compile;
pub use memory::{DevMem, Usage};

use rlx_ir::{Graph, Op};
use rlx_opt::claims::input_dtypes;
use rlx_opt::Claims;
use rlx_runtime::{Backend, Device, Executable, Executor, Result};
use std::sync::Arc;

/// A CUDA device as a compilation target.
pub struct CudaBackend {
    engine: Arc<CudaEngine>,
}

impl CudaBackend {
    /// Opens device `ordinal` (a typed error without a driver or with no such device).
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        Ok(CudaBackend { engine: Arc::new(CudaEngine::new(Gpu::open(ordinal)?)?) })
    }

    /// Sets the scratch bytes an f16 / bf16 product over misaligned rows may take for its
    /// padded copies (0 turns that staging off; the default is `RLX_CUDA_STAGE_BUDGET` where
    /// set, else 256 MiB). Products launched afterwards use it; recorded graphs keep theirs.
    pub fn set_stage_budget(&self, bytes: usize) {
        self.engine.gpu.stage_budget.store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The device memory held through this backend (weights, arenas, caches, workspaces).
    pub fn usage(&self) -> &Usage {
        &self.engine.gpu.usage
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        gpu::NAME
    }

    fn device(&self) -> Device {
        Device::Cuda(self.engine.gpu.ordinal())
    }

    fn claims(&self) -> &dyn Claims {
        &CudaClaims
    }

    fn device_memory(&self) -> Option<(usize, usize)> {
        Some((self.usage().in_use(), self.usage().peak()))
    }

    /// Builds every kernel the graph launches now, so that a kernel that does not compile
    /// fails here, then plans what is static; attention pairs cuDNN takes first become the
    /// ops of [`saved`], whose backward reads the forward's output and log-sum-exp.
    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        let gpu = &self.engine.gpu;
        gpu.bind()?;
        let saving = saved::rewrite_for(graph, &self.engine);
        let graph = saving.as_ref().unwrap_or(graph);
        let fused = if std::env::var("RLX_CUDA_PRODUCTS").is_ok_and(|v| v == "0") { None } else { products::rewrite(graph) };
        let graph = fused.as_ref().unwrap_or(graph);
        for node in graph.nodes() {
            let dtypes = input_dtypes(graph, node);
            let sources = match &node.op {
                Op::Custom(c) => products::sources(c, &dtypes),
                op => source::for_node(op, &dtypes),
            };
            if let Some(sources) = sources {
                for s in &sources {
                    gpu.kernels.function(gpu, s)?;
                }
            }
        }
        Ok(Box::new(Executor::new(self.engine.clone(), graph.clone())?))
    }
}
