//! rlx's tensor-graph IR.
//!
//! A [`Graph`] is an append-only list of nodes; each applies an [`Op`] (one variant per op
//! kind of OPS.md, with its attributes) to earlier values and carries its inferred output
//! [`TensorType`]s. Graphs print to and parse from a line-oriented text format ([`text`]),
//! and [`verify`] re-derives every type.

pub mod dtype;
pub mod error;
pub mod graph;
pub mod ops;
pub mod shape;
pub mod text;
mod verify;

pub use dtype::DType;
pub use error::{IrError, Result};
pub use graph::{Graph, Node, NodeId, ValueId};
pub use ops::{Arity, Op, OpDef, OpKind};
pub use shape::{broadcast, norm_axis, Dim, Shape, TensorType};
pub use verify::verify;
