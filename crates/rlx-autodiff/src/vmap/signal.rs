//! Signal ops: the complex elementwise kinds broadcast, `Fft` and `LogMel` act on their last
//! axes (one more leading axis costs nothing), `PartitionedConv` filters rows `[.., L]`.

use super::{broadcasting, leading, Batch};
use crate::Result;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Conjugate,
    OpKind::ComplexNormSq,
    OpKind::ComplexNormSqBackward,
    OpKind::Fft,
    OpKind::LogMel,
    OpKind::LogMelBackward,
    OpKind::PartitionedConv,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    match op {
        Op::Conjugate(_) | Op::ComplexNormSq(_) | Op::Fft(_) => Some(broadcasting(b, op.clone())),
        Op::ComplexNormSqBackward(_) => leading(b, op.clone(), &[0, 1]),
        Op::LogMel(_) | Op::PartitionedConv(_) => leading(b, op.clone(), &[0]),
        Op::LogMelBackward(_) => leading(b, op.clone(), &[0, 2]),
        _ => None,
    }
}
