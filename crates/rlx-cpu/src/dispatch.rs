//! The one place that maps each claimed op onto its kernel.

use crate::kernels::{elementwise, matmul, rnn, ssm};
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
        // rnn (outputs y, h_n[, c_n]; carried states are read, not written back: see kernels::rnn)
        Op::Lstm(a) => rnn::lstm(a, ins, outs),
        Op::Gru(a) => rnn::gru(a, ins, outs),
        Op::Rnn(a) => rnn::rnn(a, ins, outs),
        // ssm (GatedDeltaNet's carried state is read, not written back: see kernels::ssm)
        Op::SelectiveScan(a) => ssm::selective_scan(a, ins, out),
        Op::Mamba2(a) => ssm::mamba2(a, ins, out),
        Op::GatedDeltaNet(a) => ssm::gated_delta_net(a, ins, out, None),
        other => Err(format!("{} has no CPU kernel", other.kind())),
    }
}
