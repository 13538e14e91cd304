//! Elementwise ops: operands broadcast NumPy-style, so batched ones are aligned to the output
//! rank; the backward kinds take operands of one type, so all are lifted.

use super::{broadcasting, leading, Batch};
use crate::Result;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Activation,
    OpKind::Cast,
    OpKind::StopGradient,
    OpKind::Binary,
    OpKind::Compare,
    OpKind::Where,
    OpKind::Fma,
    OpKind::ReluBackward,
    OpKind::ActivationBackward,
    OpKind::SplineActivation,
    OpKind::SplineActivationBackwardX,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    match op {
        Op::Activation(_) | Op::Cast(_) | Op::StopGradient(_) | Op::Binary(_) | Op::Compare(_) | Op::Where(_) | Op::Fma(_) => {
            Some(broadcasting(b, op.clone()))
        }
        Op::ReluBackward(_) | Op::ActivationBackward(_) => leading(b, op.clone(), &[0, 1]),
        // Rows `[.., C]` against a shared `coeff [C, G]`; per-example coefficients lower.
        Op::SplineActivation(_) => leading(b, op.clone(), &[0]),
        Op::SplineActivationBackwardX(_) => leading(b, op.clone(), &[0, 2]),
        _ => None,
    }
}
