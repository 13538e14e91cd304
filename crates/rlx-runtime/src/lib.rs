//! rlx's runtime: the [`Backend`] interface, [`Session`] and [`CompiledGraph`] (the compile
//! pipeline and the checked `run` entry point), the shared [`Executor`] that backends run on
//! through their [`Engine`], and the host [`Tensor`].

mod backend;
mod compiled;
mod engine;
mod error;
mod exec;
mod fallback;
mod profile;
mod session;
pub mod specialize;
mod tensor;

pub use backend::{Backend, Device, Executable};
pub use compiled::{Bindings, CompiledGraph};
pub use engine::{Arg, Engine};
pub use exec::Executor;
pub use error::{Result, RuntimeError};
pub use profile::{NodeTime, Profile};
pub use num_complex::Complex32;
pub use session::{CompileOptions, Session};
pub use tensor::{Element, HostBuffer, Tensor};
