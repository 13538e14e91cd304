//! conv ops (OPS.md).

super::unspecified_ops!(
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
);
