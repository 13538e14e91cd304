//! linalg ops (OPS.md).

super::unspecified_ops!(
    DenseSolve,
    BatchedDenseSolve,
    Cholesky,
    TriangularSolve,
    Det,
    LogDet,
    Svd,
    Qr,
    Eigh,
    EighBackward,
    EighBatch,
    EighBatchBackward,
);
