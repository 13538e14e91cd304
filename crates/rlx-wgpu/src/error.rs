//! The backend's errors: each names the adapter and, for a limit, the limit and its value.

use rlx_runtime::RuntimeError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum WgpuError {
    #[error("wgpu:{index} was asked for, but this machine has {found}")]
    NoAdapter { index: usize, found: String },
    #[error("adapter `{adapter}` lacks {feature}, which the kernels need")]
    MissingFeature { adapter: String, feature: String },
    #[error("adapter `{adapter}`: {what} of {bytes} bytes is beyond its limit `{limit}` = {max} bytes")]
    Limit { adapter: String, what: String, bytes: u64, limit: &'static str, max: u64 },
    #[error("adapter `{adapter}`: {msg}")]
    Device { adapter: String, msg: String },
}

impl From<WgpuError> for RuntimeError {
    fn from(e: WgpuError) -> RuntimeError {
        RuntimeError::Backend { backend: crate::gpu::NAME.into(), msg: e.to_string() }
    }
}
