//! ssm ops (OPS.md).

super::unspecified_ops!(
    SelectiveScan,
    Mamba2,
    GatedDeltaNet,
);
