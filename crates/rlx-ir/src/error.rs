//! Errors raised while building, parsing or verifying graphs.

use crate::ops::{Arity, OpKind};
use thiserror::Error;

/// An IR error; every variant names the op or line it concerns.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum IrError {
    /// Shape or dtype inference rejected the inputs, e.g.
    /// `MatMul(%0: f32[4, 384], %1: f32[512, 1536]): inner dims differ (384 vs 512)`.
    #[error("{op}({inputs}): {reason}")]
    Infer {
        op: OpKind,
        inputs: String,
        reason: String,
    },
    #[error("{op}: takes {expected} inputs, got {got}")]
    Arity {
        op: OpKind,
        expected: Arity,
        got: usize,
    },
    #[error("{op}: input {value} does not exist (the graph has {nodes} nodes before it)")]
    UnknownValue {
        op: OpKind,
        value: String,
        nodes: usize,
    },
    #[error("graph output {0} does not exist")]
    UnknownOutput(String),
    #[error("node {node} ({op}): stored output types {stored} differ from the inferred {inferred}")]
    TypeMismatch {
        node: String,
        op: OpKind,
        stored: String,
        inferred: String,
    },
    #[error("line {line}: {msg}")]
    Parse { line: usize, msg: String },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = IrError> = std::result::Result<T, E>;
