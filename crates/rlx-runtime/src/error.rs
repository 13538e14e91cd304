//! Runtime errors: each names the tensor, op or backend it concerns.

use rlx_ir::{DType, IrError, TensorType};
use rlx_opt::legalize::LegalizeError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error(transparent)]
    Legalize(#[from] LegalizeError),
    #[error("no input named `{name}`; the graph's inputs are: {known}")]
    UnknownInput { name: String, known: String },
    #[error("input `{name}` was not given")]
    MissingInput { name: String },
    #[error("input `{name}` was given twice")]
    DuplicateInput { name: String },
    #[error("no parameter named `{name}`; the graph's parameters are: {known}")]
    UnknownParam { name: String, known: String },
    #[error("no output {index}; the graph has {count}")]
    UnknownOutput { index: usize, count: usize },
    #[error("parameter `{name}` has not been set")]
    MissingParam { name: String },
    #[error("{what} `{name}`: expected {expected}, got {got}")]
    TypeMismatch {
        what: &'static str,
        name: String,
        expected: TensorType,
        got: String,
    },
    #[error("symbolic dim `{symbol}` is {first} from input `{first_from}` but {second} from input `{second_from}`")]
    SymbolConflict {
        symbol: String,
        first: usize,
        first_from: String,
        second: usize,
        second_from: String,
    },
    #[error("{what} is a value in {got}, but this graph's values live in {expected}")]
    ForeignValue { what: String, expected: String, got: String },
    #[error("tensor of dtype {actual} read as {requested}")]
    DTypeMismatch { requested: DType, actual: DType },
    #[error("shape {shape:?} holds {expected} elements, but {got} were given")]
    DataLength { shape: Vec<usize>, expected: usize, got: usize },
    #[error("{op} (node %{node}): {msg}")]
    Kernel { op: String, node: u32, msg: String },
    #[error("backend `{backend}`: {msg}")]
    Backend { backend: String, msg: String },
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory { what: String, bytes: usize },
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
