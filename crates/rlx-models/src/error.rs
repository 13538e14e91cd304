//! Errors of the model loaders: what file or tensor, and what was expected.

use rlx_io::GgufFile;

/// A failure loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Io(#[from] rlx_io::IoError),
    #[error(transparent)]
    Ir(#[from] rlx_ir::IrError),
    #[error(transparent)]
    Runtime(#[from] rlx_runtime::RuntimeError),
    #[error("{0}")]
    Unsupported(String),
    #[error("{file}: metadata `{key}`: expected {expected}")]
    Metadata { file: String, key: String, expected: String },
    #[error("{file}: tensor `{tensor}`: {reason}")]
    Tensor { file: String, tensor: String, reason: String },
    #[error("{0}")]
    Generate(String),
}

impl ModelError {
    pub(crate) fn metadata(gguf: &GgufFile, key: &str, expected: &str) -> ModelError {
        ModelError::Metadata { file: gguf.path().display().to_string(), key: key.into(), expected: expected.into() }
    }
}

/// Results of the model loaders.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
