//! The op kinds the CPU backend claims (source of truth for `rlx ops` and
//! `docs/op-coverage.md`). Every kind here has an arm in [`crate::dispatch::run`] or is
//! handled by the executor itself (sources).

use rlx_ir::OpKind;

pub const SUPPORTED_OPS: &[OpKind] = {
    use OpKind::*;
    &[
        Input,
        Param,
        Constant,
        Activation,
        Cast,
        StopGradient,
        Binary,
        Compare,
        Where,
        Fma,
        ReluBackward,
        ActivationBackward,
        // matmul
        MatMul,
        DotGeneral,
        // shape
        Reshape,
        Transpose,
        Narrow,
        Slice,
        Concat,
        Expand,
        Reverse,
        Pad,
        // index
        Gather,
        GatherBackward,
        GatherNd,
        GatherElements,
        ScatterAdd,
        ScatterNd,
        ScatterElements,
        // reduce
        Reduce,
        Cumsum,
        CumProd,
        CumMax,
        CumsumBackward,
        ArgMax,
        ArgMin,
        TopK,
        Sort,
        ArgSort,
        // softmax
        Softmax,
        SoftmaxCrossEntropy,
        SoftmaxCrossEntropyWithLogits,
        SoftmaxCrossEntropyBackward,
        // random
        RngNormal,
        RngUniform,
        Sample,
        // norm
        LayerNorm,
        LayerNorm2d,
        GroupNorm,
        RmsNorm,
        BatchNormInference,
        LayerNormBackwardInput,
        LayerNormBackwardGamma,
        RmsNormBackwardInput,
        RmsNormBackwardGamma,
        RmsNormBackwardBeta,
        GroupNormBackwardInput,
        GroupNormBackwardGamma,
        GroupNormBackwardBeta,
        BatchNormInferenceBackwardInput,
        BatchNormInferenceBackwardGamma,
        BatchNormInferenceBackwardBeta,
        // attention
        Attention,
        AttentionBackward,
        AttentionBackwardAll,
        Rope,
        RopeBackward,
        AxialRope2d,
        // conv
        Conv,
        Conv3d,
        ConvTranspose2d,
        ConvTranspose3d,
        Im2Col,
        Pool,
        ResizeNearest2x,
        Interpolate3d,
        Conv2dBackwardInput,
        Conv2dBackwardWeight,
        Conv3dBackwardInput,
        Conv3dBackwardWeight,
        MaxPool2dBackward,
        MaxPool3dBackward,
        // rnn
        Lstm,
        Gru,
        Rnn,
        // ssm
        SelectiveScan,
        Mamba2,
        GatedDeltaNet,
        // splat
        GaussianSplatRender,
        GaussianSplatPrepare,
        GaussianSplatRasterize,
        GaussianSplatRenderBackward,
    ]
};
