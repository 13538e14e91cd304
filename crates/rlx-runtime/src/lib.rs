//! rlx's runtime: the [`Backend`] interface, [`Session`] and [`CompiledGraph`] (the compile
//! pipeline and the checked `run` and `submit` entry points), the shared [`Executor`] that
//! backends run on through their [`Engine`], the host [`Tensor`] and the [`DeviceTensor`] in a
//! backend's memory.

mod backend;
mod compiled;
mod device_tensor;
mod engine;
mod error;
mod exec;
mod fallback;
pub mod layout;
mod profile;
mod session;
pub mod specialize;
mod tensor;
mod usage;

pub use backend::{Backend, Device, Executable};
pub use compiled::{Bindings, CompiledGraph};
pub use device_tensor::{DeviceTensor, Memory};
pub use engine::{Arg, Engine};
pub use exec::Executor;
pub use error::{Result, RuntimeError};
pub use profile::{NodeTime, Profile};
pub use num_complex::Complex32;
pub use session::{CompileOptions, Session};
pub use tensor::{Element, HostBuffer, Tensor};
pub use usage::Usage;
