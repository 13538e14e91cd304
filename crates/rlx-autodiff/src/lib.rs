//! Automatic differentiation over rlx graphs.
//!
//! [`grad`] turns a graph and a loss value into a graph of ordinary ops that also computes
//! the gradients: the seed's `*Backward` kinds where OPS.md names them, primitives elsewhere.
//! The result goes through the same optimizer, fusion and backends as any forward graph.
//! Ops without a VJP rule of their own are first lowered through their common-IR
//! decomposition (fused ops, regions, control flow), so a rule exists once per concept.
//! [`jvp`] (forward mode) transposes reverse mode, and [`hvp`] is `jvp` of `grad`.
//! [`grad_with`] can trade compute for memory ([`Remat`]): the backward sweep then keeps only
//! some forward values and recomputes the others just before it needs them.
//! [`vmap`] maps a graph over a new batch axis by per-op batching rules; its result is an
//! ordinary graph, so it composes with `grad` and `jvp` either way round.

mod forward;
mod remat;
mod reverse;
pub mod rules;
pub mod vmap;

pub use forward::{hvp, jvp, TANGENT};
pub use remat::Remat;
pub use reverse::{grad, grad_with, GradOptions};
pub use vmap::{vmap, SHARED_OPERANDS, UNBATCHED};

use rlx_ir::{IrError, OpKind};

/// Errors of differentiation.
#[derive(Debug, thiserror::Error)]
pub enum AdError {
    #[error("cannot differentiate {}: no VJP rule and no decomposition into ops that have one",
        .0.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "))]
    NoRule(Vec<OpKind>),
    #[error("no input or parameter named `{name}` to differentiate with respect to; the graph has: {known}")]
    UnknownName { name: String, known: String },
    #[error("`{name}` is {dtype}: only floating-point values have gradients")]
    NotFloat { name: String, dtype: rlx_ir::DType },
    #[error("cannot vmap {}: no batching rule and no decomposition into ops that have one", .0.name())]
    NoBatchingRule(OpKind),
    #[error("cannot batch `{name}` at axis {axis}: it has rank {rank}")]
    BatchAxis { name: String, axis: usize, rank: usize },
    #[error("{op}: {msg}")]
    Rule { op: &'static str, msg: String },
    #[error(transparent)]
    Ir(#[from] IrError),
}

pub type Result<T, E = AdError> = std::result::Result<T, E>;
