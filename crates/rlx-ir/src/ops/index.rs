//! index ops (OPS.md).

super::unspecified_ops!(
    Gather,
    GatherBackward,
    GatherNd,
    GatherElements,
    ScatterAdd,
    ScatterNd,
    ScatterElements,
);
