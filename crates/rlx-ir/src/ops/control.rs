//! control ops (OPS.md).

super::unspecified_ops!(
    If,
    While,
    Scan,
    ScanBackward,
    ScanBackwardXs,
);
