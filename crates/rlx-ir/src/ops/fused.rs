//! fused ops (OPS.md).

super::unspecified_ops!(
    ElementwiseRegion,
    TransformRegion,
    BatchElementwiseRegion,
    FusedSwiGLU,
    FusedMatMulBiasAct,
    FusedResidualLN,
    FusedResidualRmsNorm,
    FusedAttentionBlock,
    FusedTransformerLayer,
    FusedConvBiasAct,
    AdaLayerNorm,
    GatedResidual,
    AdaLayerNormBackward,
    GatedResidualBackward,
);
