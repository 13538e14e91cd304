//! matmul ops (OPS.md).

super::unspecified_ops!(
    MatMul,
    DotGeneral,
    GroupedMatMul,
    LoraMatMul,
    SynthMatMul,
    SynthReconstruct,
);
