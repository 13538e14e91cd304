//! rlx's runtime: the [`Backend`] interface, [`Session`] and [`CompiledGraph`] (the compile
//! pipeline and the checked `run` entry point), and the host [`Tensor`].

mod backend;
mod compiled;
mod error;
mod profile;
mod session;
pub mod specialize;
mod tensor;

pub use backend::{Backend, Device, Executable};
pub use compiled::{Bindings, CompiledGraph};
pub use error::{Result, RuntimeError};
pub use profile::{NodeTime, Profile};
pub use num_complex::Complex32;
pub use session::{CompileOptions, Session};
pub use tensor::{Element, Tensor};
