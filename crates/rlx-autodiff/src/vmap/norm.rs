//! Norms: the one-axis norms take the batch axis as one more leading axis (their axis
//! shifted); the `[N, C, ..]` norms fold it into `N`. Per-example affine parameters, the
//! flattening `RmsNorm` and the backward kinds lower through their decompositions.

use super::{folding, leading, shifted, Batch};
use crate::Result;
use rlx_ir::ops::norm::{BatchNormInference, LayerNorm, RmsNorm};
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] =
    &[OpKind::LayerNorm, OpKind::RmsNorm, OpKind::BatchNormInference, OpKind::LayerNorm2d, OpKind::GroupNorm];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    match op {
        Op::LayerNorm(n) => leading(b, LayerNorm { axis: shifted(n.axis), ..n.clone() }, &[0]),
        Op::RmsNorm(n) if !n.flatten_leading => leading(b, RmsNorm { axis: shifted(n.axis), ..n.clone() }, &[0]),
        Op::BatchNormInference(n) => leading(b, BatchNormInference { axis: shifted(n.axis), ..n.clone() }, &[0]),
        Op::LayerNorm2d(_) | Op::GroupNorm(_) => folding(b, op.clone(), &[0]),
        _ => None,
    }
}
