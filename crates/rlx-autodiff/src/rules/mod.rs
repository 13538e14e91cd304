//! VJP rules, one module per op family (the same families as rlx-ir's ops).
//!
//! A rule receives the forward node's operands, its outputs and their cotangents, and returns
//! one cotangent per operand (`None`: no gradient flows there). Kinds listed in
//! [`NON_DIFFERENTIABLE`] pass no gradient by definition, those in [`NOT_DIFFERENTIATED`] refuse
//! with their reason; kinds with none of these are lowered through their decomposition before
//! the sweep.

mod attention;
mod conv;
pub(crate) mod custom;
mod elementwise;
mod index;
mod linalg;
mod matmul;
mod norm;
mod quant;
mod reduce;
mod shape;
mod signal;
mod softmax;
mod spd;
mod splat;

pub use custom::{register_custom_vjp, CustomVjp};

use crate::{reverse, AdError, Result};
use rlx_ir::{Graph, Op, OpKind, ValueId};

/// What a rule sees of one forward node while the backward graph is built into `g`.
pub struct Vjp<'a> {
    pub g: &'a mut Graph,
    pub inputs: &'a [ValueId],
    pub outputs: &'a [ValueId],
    /// Cotangent of each output; `None` where nothing downstream used it.
    pub cts: &'a [Option<ValueId>],
    /// Whether each operand needs a cotangent (rules may skip building the others).
    pub wanted: &'a [bool],
}

impl Vjp<'_> {
    /// The cotangent of output `i`, zeros where none arrived.
    pub fn ct(&mut self, i: usize) -> Result<ValueId> {
        match self.cts[i] {
            Some(v) => Ok(v),
            None => reverse::zeros_like(self.g, self.outputs[i]),
        }
    }

    /// Whether operand `i` needs a cotangent.
    pub fn wants(&self, i: usize) -> bool {
        self.wanted.get(i).copied().unwrap_or(false)
    }
}

/// A family's rule: `None` when the op is not one of its kinds.
type Rule = fn(&Op, &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>>;

/// Every family's differentiable kinds and its rule.
const FAMILIES: &[(&[OpKind], Rule)] = &[
    (attention::KINDS, attention::vjp),
    (conv::KINDS, conv::vjp),
    (custom::KINDS, custom::vjp),
    (elementwise::KINDS, elementwise::vjp),
    (index::KINDS, index::vjp),
    (linalg::KINDS, linalg::vjp),
    (matmul::KINDS, matmul::vjp),
    (norm::KINDS, norm::vjp),
    (quant::KINDS, quant::vjp),
    (reduce::KINDS, reduce::vjp),
    (shape::KINDS, shape::vjp),
    (softmax::KINDS, softmax::vjp),
    (signal::KINDS, signal::vjp),
    (spd::KINDS, spd::vjp),
    (splat::KINDS, splat::vjp),
];

/// Kinds through which no gradient flows, each with the reason (OPS.md §23.1 "none").
pub const NON_DIFFERENTIABLE: &[(OpKind, &str)] = &[
    (OpKind::Input, "a source"),
    (OpKind::Param, "a source"),
    (OpKind::Constant, "a source"),
    (OpKind::Compare, "a Bool result"),
    (OpKind::ArgMax, "an index result"),
    (OpKind::ArgMin, "an index result"),
    (OpKind::ArgSort, "an index result"),
    (OpKind::StopGradient, "blocks the gradient by definition"),
    (OpKind::RngNormal, "random draws do not depend on operands"),
    (OpKind::RngUniform, "random draws do not depend on operands"),
    (OpKind::Sample, "a discrete draw"),
    (OpKind::SpdKarcherMean, "a detached batch statistic (OPS.md §16)"),
    (OpKind::SpdKarcherMeanWeighted, "a detached batch statistic (OPS.md §16)"),
    (OpKind::WelchPeaks, "a top-k selection of PSD bins (OPS.md §17)"),
    (OpKind::DequantMoEWeights, "materializes frozen quantized weights (OPS.md §5)"),
    (OpKind::KvAppend, "a state update, the in-place cache write (OPS.md §9)"),
    (OpKind::GaussianSplatPrepare, "a packed intermediate of the render pipeline (OPS.md §23.1)"),
    (OpKind::GaussianSplatRasterize, "consumes the packed prepare buffer; differentiate GaussianSplatRender instead"),
];

/// Whether a cotangent flows into `v`: float and C64 values, and the integer outputs of the
/// straight-through quantizers (an F32 cotangent).
pub fn has_cotangent(g: &Graph, v: ValueId) -> bool {
    reverse::has_tangent(g.ty(v).dtype) || quant::STRAIGHT_THROUGH.contains(&g.node(v.node).op.kind())
}

/// Kinds whose derivative is not built: differentiating through them (a cotangent reaching
/// one) is an error naming the kind, never a silent zero. Each with the reason.
pub const NOT_DIFFERENTIATED: &[(OpKind, &str)] = &[(
    OpKind::GaussianSplatRenderBackward,
    "second order of the splat rasterizer: the VJP with respect to d_rgba is the render's JVP and the one \
     with respect to the scene its second derivative; neither has a kernel or a primitive decomposition",
)];

/// Whether the sweep can pass `kind` as it stands: it has a rule, is non-differentiable, or
/// refuses with its reason.
pub fn has_rule(kind: OpKind) -> bool {
    [NON_DIFFERENTIABLE, NOT_DIFFERENTIATED].iter().any(|list| list.iter().any(|(k, _)| *k == kind))
        || FAMILIES.iter().any(|(kinds, _)| kinds.contains(&kind))
}

/// The cotangents of `v.inputs` (`None` where the op has no rule).
pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    let kind = op.kind();
    if NON_DIFFERENTIABLE.iter().any(|(k, _)| *k == kind) {
        return Some(Ok(vec![None; v.inputs.len()]));
    }
    if let Some((_, why)) = NOT_DIFFERENTIATED.iter().find(|(k, _)| *k == kind) {
        return Some(Err(AdError::Rule { op: kind.name(), msg: (*why).to_string() }));
    }
    FAMILIES.iter().find(|(kinds, _)| kinds.contains(&kind)).and_then(|(_, rule)| rule(op, v))
}
