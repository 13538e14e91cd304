//! Convolutions, pooling and resizing over `[N, C, ..]`: the batch axis folds into `N`.
//! Per-example weights, and the weight gradients (a sum over `N`), lower through their
//! decompositions.

use super::{folding, Batch};
use crate::Result;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Conv,
    OpKind::Conv3d,
    OpKind::ConvTranspose2d,
    OpKind::ConvTranspose3d,
    OpKind::Im2Col,
    OpKind::Pool,
    OpKind::ResizeNearest2x,
    OpKind::Interpolate3d,
    OpKind::Conv2dBackwardInput,
    OpKind::Conv3dBackwardInput,
    OpKind::MaxPool2dBackward,
    OpKind::MaxPool3dBackward,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let lead: &[usize] = match op {
        Op::MaxPool2dBackward(_) | Op::MaxPool3dBackward(_) => &[0, 1],
        _ if KINDS.contains(&op.kind()) => &[0],
        _ => return None,
    };
    folding(b, op.clone(), lead)
}
