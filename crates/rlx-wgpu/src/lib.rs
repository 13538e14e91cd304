//! rlx on any GPU wgpu reaches (Vulkan, Metal, DX12): the shared executor
//! ([`rlx_runtime::Executor`]) over a [`WgpuEngine`] — storage buffers planned in one arena
//! per plan, launches and copies recorded in order into the queue's command buffers, WGSL
//! kernels generated from the IR ([`shader`]) and built once per adapter.
//!
//! [`WgpuBackend::new`] opens adapter `wgpu:N` (see [`gpu`] for how adapters are ordered and
//! picked with `RLX_WGPU_ADAPTER` / `WGPU_BACKEND`); no adapter, an adapter without what the
//! kernels need, and a buffer beyond its limits are typed errors naming the adapter.

mod claims;
mod engine;
mod error;
pub mod gpu;
mod launch;
mod memory;
pub mod shader;

pub use claims::{WgpuClaims, KINDS};
pub use engine::WgpuEngine;
pub use error::WgpuError;
pub use gpu::Gpu;
pub use memory::{GpuMem, Usage};

use rlx_ir::Graph;
use rlx_opt::claims::input_dtypes;
use rlx_opt::Claims;
use rlx_runtime::{Backend, Device, Executable, Executor, Result};
use std::sync::Arc;

/// A wgpu adapter as a compilation target.
pub struct WgpuBackend {
    engine: Arc<WgpuEngine>,
}

impl WgpuBackend {
    /// Opens adapter `index` (a typed error where there is none or it cannot run the kernels).
    pub fn new(index: usize) -> Result<WgpuBackend> {
        Ok(WgpuBackend { engine: Arc::new(WgpuEngine::new(Gpu::open(index)?)) })
    }

    /// The adapter's name and API, as in `llvmpipe (LLVM 19.1.7, 256 bits) (Vulkan)`.
    pub fn adapter(&self) -> &str {
        self.engine.gpu.adapter()
    }

    /// The device memory held through this backend (weights, arenas, outputs).
    pub fn usage(&self) -> &Usage {
        &self.engine.gpu.usage
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        gpu::NAME
    }

    fn device(&self) -> Device {
        Device::Wgpu(self.engine.gpu.index())
    }

    fn claims(&self) -> &dyn Claims {
        &WgpuClaims
    }

    fn device_memory(&self) -> Option<(usize, usize)> {
        Some((self.usage().in_use(), self.usage().peak()))
    }

    /// Builds the pipeline of every kernel the graph launches now, so that a kernel the
    /// adapter rejects fails here, then plans what is static.
    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        let gpu = &self.engine.gpu;
        for node in graph.nodes() {
            if let Some(kernels) = shader::for_node(&node.op, &input_dtypes(graph, node)) {
                for k in &kernels {
                    gpu.pipeline(k)?;
                }
            }
        }
        Ok(Box::new(Executor::new(self.engine.clone(), graph.clone())?))
    }
}
