//! splat ops (OPS.md).

super::unspecified_ops!(
    GaussianSplatRender,
    GaussianSplatRenderBackward,
    GaussianSplatPrepare,
    GaussianSplatRasterize,
);
