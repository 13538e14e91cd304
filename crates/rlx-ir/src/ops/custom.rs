//! custom ops (OPS.md).

super::unspecified_ops!(
    Custom,
    CustomFn,
);
