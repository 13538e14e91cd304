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
    ]
};
