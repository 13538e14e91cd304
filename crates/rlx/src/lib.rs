//! rlx: an ML compiler and runtime.
//!
//! Build a [`Graph`] (or import one), compile it for a [`Device`] with a [`Session`], and run
//! it on host [`Tensor`]s (or submit it on [`DeviceTensor`]s, which stay in the device's
//! memory between runs):
//!
//! ```
//! use rlx::prelude::*;
//!
//! let mut g = Graph::new();
//! let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("B"), Dim::Static(3)])));
//! let y = g.activation(ActivationKind::Relu, x)?;
//! g.set_outputs(vec![y])?;
//!
//! let mut compiled = Session::new(Device::Cpu)?.compile(&g)?;
//! let x = Tensor::from_vec(vec![-1.0f32, 2.0, -3.0, 4.0, 5.0, -6.0], &[2, 3])?;
//! let out = compiled.run(&[("x", &x)])?;
//! assert_eq!(out[0].to_vec::<f32>()?, vec![0.0, 2.0, 0.0, 4.0, 5.0, 0.0]);
//!
//! // The same on device values: runs queue without waiting; `download` waits for them.
//! let on_device = compiled.upload(&x)?;
//! let y = compiled.submit(&[("x", &on_device)])?;
//! let z = compiled.submit(&[("x", &y[0])])?;
//! assert_eq!(compiled.download(&z[0])?, out[0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod coverage;

pub use rlx_autodiff as autodiff;
pub use rlx_cpu as cpu;
#[cfg(feature = "cuda")]
pub use rlx_cuda as cuda;
#[cfg(feature = "wgpu")]
pub use rlx_wgpu as wgpu;
pub use rlx_ir as ir;
pub use rlx_models as models;
pub use rlx_opt as opt;
pub use rlx_runtime as runtime;
pub use rlx_train as train;

pub use rlx_ir::{DType, Dim, Graph, Op, OpKind, Shape, TensorType, ValueId};
pub use rlx_runtime::{CompileOptions, CompiledGraph, Device, DeviceTensor, RuntimeError, Tensor};

use rlx_runtime::Backend;
use std::sync::Arc;

/// Everything a typical program needs.
pub mod prelude {
    pub use crate::{CompileOptions, CompiledGraph, DType, Device, DeviceTensor, Dim, Graph, Session, Shape, Tensor, TensorType, ValueId};
    pub use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
}

/// The backend that serves `device` (a typed error where the machine has no such device).
pub fn backend(device: Device) -> Result<Arc<dyn Backend>, RuntimeError> {
    match device {
        Device::Cpu => Ok(Arc::new(rlx_cpu::CpuBackend::new())),
        #[cfg(feature = "cuda")]
        Device::Cuda(ordinal) => Ok(Arc::new(rlx_cuda::CudaBackend::new(ordinal)?)),
        #[cfg(feature = "wgpu")]
        Device::Wgpu(index) => Ok(Arc::new(rlx_wgpu::WgpuBackend::new(index)?)),
        // Reached in builds without the `cuda` or `wgpu` feature.
        #[allow(unreachable_patterns)]
        other => Err(RuntimeError::Backend {
            backend: other.to_string(),
            msg: "this build of rlx has no backend for the device".into(),
        }),
    }
}

/// Compiles graphs for one device (a [`rlx_runtime::Session`] on that device's backend).
#[derive(Clone)]
pub struct Session(rlx_runtime::Session);

impl Session {
    /// A session on `device`; on a GPU, what its backend does not run goes to the CPU.
    pub fn new(device: Device) -> Result<Session, RuntimeError> {
        let session = rlx_runtime::Session::new(backend(device)?);
        Ok(Session(match device {
            Device::Cpu => session,
            _ => session.with_host(backend(Device::Cpu)?),
        }))
    }

    /// A session on `device` whose products of weights run as `products` says
    /// ([`cpu::Products::Int8`]: dynamic int8 quantisation; [`cpu::Products::Bf16`]: operands
    /// rounded to bf16). Only the CPU has such products; any other device asked for them is a
    /// typed error.
    pub fn with_products(device: Device, products: rlx_cpu::Products) -> Result<Session, RuntimeError> {
        match (device, products) {
            (_, rlx_cpu::Products::F32) => Session::new(device),
            (Device::Cpu, p) => Ok(Session(rlx_runtime::Session::new(Arc::new(rlx_cpu::CpuBackend::with_products(p))))),
            (other, p) => Err(RuntimeError::Backend { backend: other.to_string(), msg: format!("{p} products run on the CPU only") }),
        }
    }

    pub fn with_options(self, options: CompileOptions) -> Session {
        Session(self.0.with_options(options))
    }
}

impl std::ops::Deref for Session {
    type Target = rlx_runtime::Session;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
