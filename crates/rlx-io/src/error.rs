//! [`IoError`]: every way reading a model file can fail, each naming the file and what was
//! expected there.

use std::path::PathBuf;
use thiserror::Error;

/// Errors of reading safetensors, GGUF and ONNX files. Malformed input of any kind yields one of
/// these, never a panic, and sizes are checked against the file before anything is allocated.
#[derive(Debug, Error)]
pub enum IoError {
    #[error("{}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("{}: truncated: {what} at byte {at} needs {need} bytes, the file has {len}", path.display())]
    Truncated { path: PathBuf, what: String, at: u64, need: u64, len: u64 },
    #[error("{}: not a GGUF file: magic {found:02x?}, expected \"GGUF\"", path.display())]
    BadMagic { path: PathBuf, found: Vec<u8> },
    #[error("{}: GGUF version {version} is not supported (2 and 3 are)", path.display())]
    UnsupportedVersion { path: PathBuf, version: u32 },
    #[error("{}: {count} {what} cannot fit: at most {limit} here", path.display())]
    TooMany { path: PathBuf, what: &'static str, count: u64, limit: u64 },
    #[error("{}: {what} overflows", path.display())]
    Overflow { path: PathBuf, what: String },
    #[error("{}: tensor `{tensor}` spans bytes {start}..{end} of the data section, which has {len}", path.display())]
    OffsetPastEnd { path: PathBuf, tensor: String, start: u64, end: u64, len: u64 },
    #[error("{}: tensor `{tensor}` starts at data offset {offset}, not a multiple of {alignment}", path.display())]
    Misaligned { path: PathBuf, tensor: String, offset: u64, alignment: u64 },
    #[error("{}: tensor `{tensor}` has unknown ggml type code {code}", path.display())]
    UnknownType { path: PathBuf, tensor: String, code: u32 },
    #[error("{}: metadata `{key}` has unknown value type code {code}", path.display())]
    UnknownValueType { path: PathBuf, key: String, code: u32 },
    #[error("{}: {what} is not valid UTF-8", path.display())]
    BadUtf8 { path: PathBuf, what: String },
    #[error("{}: {what} `{name}` appears twice", path.display())]
    Duplicate { path: PathBuf, what: &'static str, name: String },
    #[error("{}: metadata `{key}`: expected {expected}", path.display())]
    BadMetadata { path: PathBuf, key: String, expected: String },
    #[error("{}: tensor `{tensor}`: {reason}", path.display())]
    BadShape { path: PathBuf, tensor: String, reason: String },
    #[error("{}: no tensor named `{name}`", path.display())]
    NoTensor { path: PathBuf, name: String },
    #[error("{}: tensor `{tensor}`: {reason}", path.display())]
    Unsupported { path: PathBuf, tensor: String, reason: String },
    #[error("{}: tensor `{tensor}`: cannot release its pages: {source}", path.display())]
    Release { path: PathBuf, tensor: String, source: std::io::Error },
    #[error("{}: tensor `{tensor}` is {stored}, read as {requested}", path.display())]
    DTypeMismatch { path: PathBuf, tensor: String, stored: String, requested: String },
    #[error("{}: {source}", path.display())]
    Safetensors { path: PathBuf, source: ::safetensors::SafeTensorError },
    #[error("{}: malformed ONNX protobuf in {field}: {reason}", path.display())]
    Proto { path: PathBuf, field: String, reason: String },
    #[error("{}: {reason}", path.display())]
    OnnxModel { path: PathBuf, reason: String },
    #[error("{}: node `{node}` ({op}, opset {opset}): {reason}", path.display())]
    OnnxNode { path: PathBuf, node: String, op: String, opset: i64, reason: String },
    #[error("{}: node `{node}` ({op}, opset {opset}) is not supported: {reason}", path.display())]
    OnnxUnsupported { path: PathBuf, node: String, op: String, opset: i64, reason: String },
    #[error(transparent)]
    Runtime(#[from] rlx_runtime::RuntimeError),
}

/// Results of rlx-io.
pub type Result<T, E = IoError> = std::result::Result<T, E>;
