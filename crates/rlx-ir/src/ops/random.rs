//! random ops (OPS.md).

super::unspecified_ops!(
    RngNormal,
    RngUniform,
    Sample,
);
