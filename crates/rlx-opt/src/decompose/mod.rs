//! The common IR: how each non-primitive op lowers into primitive ops.
//!
//! A backend that does not claim an op gets its decomposition from [`crate::legalize`].
//! Each family module lists the kinds it can lower (`KINDS`) and lowers one node
//! (`decompose`), building the replacement with the graph builder; `build` holds the helpers
//! they share.

use rlx_ir::{Graph, IrError, Op, OpKind, ValueId};

pub mod build;
mod attention;
mod control;
mod conv;
mod custom;
mod elementwise;
mod fused;
mod index;
mod matmul;
mod norm;
mod quant;
mod reduce;
mod rnn;
mod shape;
mod softmax;
mod ssm;

pub use control::inline;
// spd
mod spd;

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

/// Lowers one node into a graph, given its rebuilt inputs; `None` when it has no rule.
type Lower = fn(&Op, &mut Graph, &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>>;

/// Every family's decomposable kinds and its lowering.
const FAMILIES: &[(&[OpKind], Lower)] = &[
    (attention::KINDS, attention::decompose),
    (control::KINDS, control::decompose),
    (conv::KINDS, conv::decompose),
    (custom::KINDS, custom::decompose),
    (elementwise::KINDS, elementwise::decompose),
    (fused::KINDS, fused::decompose),
    (index::KINDS, index::decompose),
    (matmul::KINDS, matmul::decompose),
    (norm::KINDS, norm::decompose),
    (quant::KINDS, quant::decompose),
    (reduce::KINDS, reduce::decompose),
    (rnn::KINDS, rnn::decompose),
    (shape::KINDS, shape::decompose),
    (softmax::KINDS, softmax::decompose),
    (ssm::KINDS, ssm::decompose),
    (spd::KINDS, spd::decompose),
];

/// Whether the common IR can lower `kind`.
pub fn has_rule(kind: OpKind) -> bool {
    FAMILIES.iter().any(|(kinds, _)| kinds.contains(&kind))
}

/// Lowers one node whose (already rebuilt) inputs are `inputs` into `g`, returning the values
/// that replace its outputs; `None` when `op` has no decomposition.
pub fn decompose(op: &Op, g: &mut Graph, inputs: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let kind = op.kind();
    let (_, lower) = FAMILIES.iter().find(|(kinds, _)| kinds.contains(&kind))?;
    lower(op, g, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_one_family_and_primitives_have_none() {
        for &kind in OpKind::ALL {
            let owners = FAMILIES.iter().filter(|(kinds, _)| kinds.contains(&kind)).count();
            assert!(owners <= 1, "{kind} is decomposed by {owners} families");
            if is_primitive(kind) {
                assert_eq!(owners, 0, "primitive {kind} has a decomposition");
            }
        }
    }
}
