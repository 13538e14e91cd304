//! shape ops (OPS.md).

super::unspecified_ops!(
    Reshape,
    Transpose,
    Narrow,
    Slice,
    Concat,
    Expand,
    Reverse,
    Pad,
    KvAppend,
);
