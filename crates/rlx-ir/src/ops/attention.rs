//! attention ops (OPS.md).

super::unspecified_ops!(
    Attention,
    AttentionBackward,
    AttentionBackwardAll,
    Rope,
    RopeBackward,
    AxialRope2d,
);
