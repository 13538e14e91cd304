//! reduce ops (OPS.md).

super::unspecified_ops!(
    Reduce,
    Cumsum,
    CumProd,
    CumMax,
    CumsumBackward,
    ArgMax,
    ArgMin,
    TopK,
    Sort,
    ArgSort,
);
