//! The one place that maps each claimed op onto its kernel.

use crate::kernels::elementwise;
use crate::kernels::{attention, norm};
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
        // norm
        Op::LayerNorm(a) => norm::layer_norm(a, ins, outs),
        Op::LayerNorm2d(a) => norm::layer_norm_2d(a, ins, outs),
        Op::GroupNorm(a) => norm::group_norm(a, ins, outs),
        Op::RmsNorm(a) => norm::rms_norm(a, ins, outs),
        Op::BatchNormInference(a) => norm::batch_norm_inference(a, ins, outs),
        Op::LayerNormBackwardInput(a) => norm::layer_norm_backward_input(a, ins, outs),
        Op::LayerNormBackwardGamma(a) => norm::layer_norm_backward_gamma(a, ins, outs),
        Op::RmsNormBackwardInput(a) => norm::rms_norm_backward_input(a, ins, outs),
        Op::RmsNormBackwardGamma(a) => norm::rms_norm_backward_gamma(a, ins, outs),
        Op::RmsNormBackwardBeta(a) => norm::rms_norm_backward_beta(a, ins, outs),
        Op::GroupNormBackwardInput(a) => norm::group_norm_backward_input(a, ins, outs),
        Op::GroupNormBackwardGamma(a) => norm::group_norm_backward_gamma(a, ins, outs),
        Op::GroupNormBackwardBeta(a) => norm::group_norm_backward_beta(a, ins, outs),
        Op::BatchNormInferenceBackwardInput(a) => norm::batch_norm_inference_backward_input(a, ins, outs),
        Op::BatchNormInferenceBackwardGamma(a) => norm::batch_norm_inference_backward_gamma(a, ins, outs),
        Op::BatchNormInferenceBackwardBeta(a) => norm::batch_norm_inference_backward_beta(a, ins, outs),
        // attention
        Op::Attention(a) => attention::attention(a, ins, outs),
        Op::AttentionBackward(a) => attention::attention_backward(a, ins, outs),
        Op::AttentionBackwardAll(a) => attention::attention_backward_all(a, ins, outs),
        Op::Rope(a) => attention::rope(a, ins, outs),
        Op::RopeBackward(a) => attention::rope_backward(a, ins, outs),
        Op::AxialRope2d(a) => attention::axial_rope_2d(a, ins, outs),
        other => Err(format!("{} has no CPU kernel", other.kind())),
    }
}
