//! The one place that maps each claimed op onto its kernel.

use crate::kernels::{conv, elementwise, matmul};
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
        // conv
        Op::Conv(a) => conv::conv(a, ins[0], ins[1], out),
        Op::Conv3d(a) => conv::conv3d(a, ins[0], ins[1], out),
        Op::ConvTranspose2d(a) => conv::conv_transpose2d(a, ins[0], ins[1], out),
        Op::ConvTranspose3d(a) => conv::conv_transpose3d(a, ins[0], ins[1], out),
        Op::Im2Col(a) => conv::im2col_op(a, ins[0], out),
        Op::Pool(a) => conv::pool(a, ins[0], out),
        Op::ResizeNearest2x(_) | Op::Interpolate3d(_) => conv::resize_nearest(ins[0], out),
        Op::Conv2dBackwardInput(a) => conv::conv2d_backward_input(a, ins[0], ins[1], out),
        Op::Conv2dBackwardWeight(a) => conv::conv2d_backward_weight(a, ins[0], ins[1], out),
        Op::Conv3dBackwardInput(a) => conv::conv3d_backward_input(a, ins[0], ins[1], out),
        Op::Conv3dBackwardWeight(a) => conv::conv3d_backward_weight(a, ins[0], ins[1], out),
        Op::MaxPool2dBackward(a) => conv::max_pool_backward(a, ins[0], ins[1], out),
        Op::MaxPool3dBackward(a) => conv::max_pool3d_backward(a, ins[0], ins[1], out),
        other => Err(format!("{} has no CPU kernel", other.kind())),
    }
}
