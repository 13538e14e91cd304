//! The one place that maps each claimed op onto its kernel.

use crate::kernels::{elementwise, index, matmul, shape};
use crate::view::{In, Out};
use rlx_ir::Op;

/// Runs `op` on `ins`, writing `outs`. Shapes and dtypes were checked by inference; the
/// kernel checks only what depends on data (indices, labels, matrix conditions).
pub fn run(op: &Op, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let out = &mut outs[0];
    match op {
        Op::Activation(a) => elementwise::activation(a.kind, ins[0], out),
        Op::Cast(_) => elementwise::cast(ins[0], out),
        Op::StopGradient(_) => elementwise::copy(ins[0], out),
        Op::Binary(a) => elementwise::binary(a.op, ins[0], ins[1], out),
        Op::Compare(a) => elementwise::compare(a.op, ins[0], ins[1], out),
        Op::Where(_) => elementwise::select(ins[0], ins[1], ins[2], out),
        Op::Fma(_) => elementwise::fma(ins[0], ins[1], ins[2], out),
        Op::ReluBackward(_) => elementwise::relu_backward(ins[0], ins[1], out),
        Op::ActivationBackward(a) => elementwise::activation_backward(a.kind, ins[0], ins[1], out),
        // matmul
        Op::MatMul(_) => matmul::matmul(ins[0], ins[1], out),
        Op::DotGeneral(d) => matmul::dot_general(d, ins[0], ins[1], out),
        // shape
        Op::Reshape(_) => shape::reshape(ins[0], out),
        Op::Transpose(a) => shape::transpose(&a.perm, ins[0], out),
        Op::Narrow(a) => shape::slice(a.axis, a.start, 1, ins[0], out),
        Op::Slice(a) => shape::slice(a.axis, a.start, a.step, ins[0], out),
        Op::Concat(a) => shape::concat(a.axis, ins, out),
        Op::Expand(_) => shape::expand(ins[0], out),
        Op::Reverse(a) => shape::reverse(&a.axes, ins[0], out),
        Op::Pad(a) => shape::pad(&a.pads, &a.mode, ins[0], out),
        // index
        Op::Gather(a) => index::gather(a.axis, ins[0], ins[1], out),
        Op::GatherBackward(a) => index::gather_backward(a.axis, ins[0], ins[1], out),
        Op::GatherNd(a) => index::gather_nd(a.batch_dims, ins[0], ins[1], out),
        Op::GatherElements(a) => index::gather_elements(a.axis, ins[0], ins[1], out),
        Op::ScatterAdd(_) => index::scatter_add(ins[0], ins[1], out),
        Op::ScatterNd(a) => index::scatter_nd(a.reduction, ins[0], ins[1], ins[2], out),
        Op::ScatterElements(a) => index::scatter_elements(a.axis, a.reduction, ins[0], ins[1], ins[2], out),
        other => Err(format!("{} has no CPU kernel", other.kind())),
    }
}
