//! norm ops (OPS.md).

super::unspecified_ops!(
    LayerNorm,
    LayerNorm2d,
    GroupNorm,
    RmsNorm,
    BatchNormInference,
    RmsNormBackwardInput,
    RmsNormBackwardGamma,
    RmsNormBackwardBeta,
    LayerNormBackwardInput,
    LayerNormBackwardGamma,
    GroupNormBackwardInput,
    GroupNormBackwardGamma,
    GroupNormBackwardBeta,
    BatchNormInferenceBackwardInput,
    BatchNormInferenceBackwardGamma,
    BatchNormInferenceBackwardBeta,
);
