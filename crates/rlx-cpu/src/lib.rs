//! rlx's CPU backend.
//!
//! [`CpuBackend`] claims the kinds in [`SUPPORTED_OPS`]; each compiled graph runs on the
//! shared [`rlx_runtime::Executor`] through [`CpuEngine`] (host buffers, packed weights, and
//! kernel calls [`dispatch::run`] → `kernels::<family>`).

pub mod awake;
mod custom;
pub mod dispatch;
mod engine;
mod fold;
pub mod kernels;
pub mod machine;
mod supported;
pub mod tuned;
pub mod view;

pub use engine::CpuEngine;
pub use custom::{custom_kernel, register_custom_kernel, CustomKernel};
pub use fold::CpuConstEval;
pub use supported::{CpuClaims, SUPPORTED_OPS};

use rlx_ir::Graph;
use rlx_opt::Claims;
use rlx_runtime::{Backend, Device, Executable, Executor, Result, RuntimeError};
use std::sync::Arc;

/// How the CPU computes f32 products whose weight is a parameter or constant (`b` of
/// `MatMul` and `FusedMatMulBiasAct`, 2-D).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// In f32, as the graph says.
    #[default]
    F32,
    /// In 8-bit integers, by choice: each weight rounded once per column, each activation
    /// row as the product runs ([`kernels::matmul::int8`]; dynamic quantisation).
    Int8,
    /// On operands rounded to bfloat16, summed in f32 ([`kernels::matmul::bfloat16`]).
    Bf16,
}

impl std::fmt::Display for Products {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Products::F32 => "f32",
            Products::Int8 => "int8",
            Products::Bf16 => "bf16",
        })
    }
}

/// The CPU backend; its kernels also fold constants ([`CpuConstEval`]).
#[derive(Clone, Copy, Debug)]
pub struct CpuBackend {
    products: Products,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend { products: Products::F32 }
    }

    /// The backend computing products of weights as `products` says.
    pub fn with_products(products: Products) -> CpuBackend {
        CpuBackend { products }
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

    fn const_eval(&self) -> Option<&dyn rlx_opt::fold::ConstEval> {
        Some(&CpuConstEval)
    }

    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        custom::check_registered(graph).map_err(|msg| RuntimeError::Backend { backend: "cpu".into(), msg })?;
        Ok(Box::new(Executor::new(Arc::new(CpuEngine { products: self.products }), graph.clone())?))
    }
}
