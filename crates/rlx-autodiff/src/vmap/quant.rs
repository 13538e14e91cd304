//! Dequantizing products against frozen quantized weights: rows of `x` take the batch axis
//! (as a leading axis, or folded into the expert GEMM's `M` with the expert ids).

use super::{folding, leading, Batch};
use crate::Result;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::DequantMatMul, OpKind::DequantGroupedMatMul, OpKind::DequantGroupedMatMulMlx];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let last = b.x.len() - 1;
    match op {
        Op::DequantMatMul(_) => leading(b, op.clone(), &[0]),
        Op::DequantGroupedMatMul(_) | Op::DequantGroupedMatMulMlx(_) => folding(b, op.clone(), &[0, last]),
        _ => None,
    }
}
