//! rlx's CPU backend.
//!
//! [`CpuBackend`] claims the kinds in [`SUPPORTED_OPS`]; each compiled graph becomes a
//! [`exec::CpuExecutable`] that plans one arena per concrete input shape and runs a flat list
//! of kernel calls ([`dispatch::run`] → `kernels::<family>`).

pub mod awake;
mod custom;
pub mod dispatch;
pub mod exec;
mod fold;
pub mod kernels;
mod supported;
pub mod view;

pub use custom::{custom_kernel, register_custom_kernel, CustomKernel};
pub use fold::CpuConstEval;
pub use supported::SUPPORTED_OPS;

use rlx_ir::Graph;
use rlx_opt::Claims;
use rlx_runtime::{Backend, Device, Executable, Result, RuntimeError};

/// The CPU backend. Creating one also lends its kernels to rlx-opt's constant folding.
#[derive(Clone, Copy, Debug)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn new() -> CpuBackend {
        rlx_opt::fold::with_evaluator(&fold::CpuConstEval);
        CpuBackend
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn claims(&self) -> &dyn Claims {
        &supported::CpuClaims
    }

    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        custom::check_registered(graph).map_err(|msg| RuntimeError::Backend { backend: "cpu".into(), msg })?;
        Ok(Box::new(exec::CpuExecutable::new(graph.clone())))
    }
}
