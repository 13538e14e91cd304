//! The common IR: how each non-primitive op lowers into primitive ops.
//!
//! A backend that does not claim an op gets its decomposition from [`crate::legalize`].
//! Each family module lists the kinds it can lower (`KINDS`) and lowers one node
//! (`decompose`), building the replacement with the graph builder.

use rlx_ir::{Graph, IrError, Op, OpKind, ValueId};

mod elementwise;
// reduce
mod reduce;
// softmax
mod softmax;

// kshape: shape, index
mod index;
mod shape;
// norm, attention
mod attention;
mod norm;
// conv
mod conv;
// rnn, ssm
mod rnn;
mod ssm;

// kdecomp: fused, matmul, quant, control, custom
mod build;
mod control;
mod custom;
mod fused;
mod matmul;
mod quant;

/// The primitive ops every decomposition bottoms out in (OPS.md §0), plus the sources.
pub const PRIMITIVES: &[OpKind] = &[
    OpKind::Input,
    OpKind::Param,
    OpKind::Constant,
    OpKind::MatMul,
    OpKind::Binary,
    OpKind::Activation,
    OpKind::Compare,
    OpKind::Where,
    OpKind::Cast,
    OpKind::Reduce,
    OpKind::Reshape,
    OpKind::Transpose,
    OpKind::Narrow,
    OpKind::Concat,
    OpKind::Expand,
    OpKind::Gather,
    OpKind::ScatterAdd,
];

/// Whether `kind` is one of the [`PRIMITIVES`].
pub fn is_primitive(kind: OpKind) -> bool {
    PRIMITIVES.contains(&kind)
}

/// Whether the common IR can lower `kind`.
pub fn has_rule(kind: OpKind) -> bool {
    elementwise::KINDS.contains(&kind)
        // kshape
        || shape::KINDS.contains(&kind)
        || index::KINDS.contains(&kind)
        // reduce
        || reduce::KINDS.contains(&kind)
        // softmax
        || softmax::KINDS.contains(&kind)
        // norm, attention
        || norm::KINDS.contains(&kind)
        || attention::KINDS.contains(&kind)
        // conv
        || conv::KINDS.contains(&kind)
        // rnn, ssm
        || rnn::KINDS.contains(&kind)
        || ssm::KINDS.contains(&kind)
        // kdecomp
        || fused::KINDS.contains(&kind)
        || matmul::KINDS.contains(&kind)
        || quant::KINDS.contains(&kind)
        || control::KINDS.contains(&kind)
        || custom::KINDS.contains(&kind)
}

/// Lowers one node whose (already rebuilt) inputs are `inputs` into `g`, returning the values
/// that replace its outputs; `None` when `op` has no decomposition.
pub fn decompose(op: &Op, g: &mut Graph, inputs: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    elementwise::decompose(op, g, inputs)
        // kshape
        .or_else(|| shape::decompose(op, g, inputs))
        .or_else(|| index::decompose(op, g, inputs))
        // reduce
        .or_else(|| reduce::decompose(op, g, inputs))
        // softmax
        .or_else(|| softmax::decompose(op, g, inputs))
        // norm, attention
        .or_else(|| norm::decompose(op, g, inputs))
        .or_else(|| attention::decompose(op, g, inputs))
        // conv
        .or_else(|| conv::decompose(op, g, inputs))
        // rnn, ssm
        .or_else(|| rnn::decompose(op, g, inputs))
        .or_else(|| ssm::decompose(op, g, inputs))
        // kdecomp
        .or_else(|| fused::decompose(op, g, inputs))
        .or_else(|| matmul::decompose(op, g, inputs))
        .or_else(|| quant::decompose(op, g, inputs))
        .or_else(|| control::decompose(op, g, inputs))
        .or_else(|| custom::decompose(op, g, inputs))
}
