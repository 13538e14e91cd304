//! Training with rlx: the optimizer update is part of the compiled step graph, so weights
//! and optimizer state stay with the [`rlx_runtime::CompiledGraph`] between steps.
//!
//! [`Trainer`] differentiates a model graph's loss with respect to its parameters
//! ([`rlx_autodiff::grad`]), appends the [`Optimizer`]'s update (after optional global-norm
//! clipping), compiles the whole step once, and runs it per batch with the learning rate
//! from a [`Schedule`]; with [`Remat`] the step recomputes activations instead of keeping them
//! (activation checkpointing); with [`Precision::Mixed`] its products compute in bf16 or f16 over
//! f32 master weights (autocast). Checkpoints are safetensors files holding parameters, optimizer state
//! and the step count; resuming continues bit for bit.

mod checkpoint;
pub mod init;
mod optim;
mod precision;
mod schedule;
mod trainer;

pub use init::Init;
pub use optim::Optimizer;
pub use precision::Precision;
pub use rlx_autodiff::Remat;
pub use schedule::Schedule;
pub use trainer::{StepGraph, TrainConfig, Trainer};

/// Errors of training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Autodiff(#[from] rlx_autodiff::AdError),
    #[error(transparent)]
    Runtime(#[from] rlx_runtime::RuntimeError),
    #[error(transparent)]
    Ir(#[from] rlx_ir::IrError),
    #[error("checkpoint {path}: {msg}")]
    Checkpoint { path: String, msg: String },
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = TrainError> = std::result::Result<T, E>;
