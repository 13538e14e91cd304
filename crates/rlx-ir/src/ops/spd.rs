//! spd ops (OPS.md).

super::unspecified_ops!(
    BiMap,
    ReEig,
    LogEig,
    SpdBatchNorm,
    SpdKarcherMean,
    SpdKarcherMeanWeighted,
    SpdLogMap,
    SpdExpMap,
    SpdParallelTransport,
    SpdMatrixFnBatch,
    ReEigBackward,
    LogEigBackward,
    SpdBatchNormBackwardX,
    SpdBatchNormBackwardG,
    SpdLogMapBackward,
    SpdExpMapBackward,
    SpdParallelTransportBackward,
    SpdMatrixFnBatchBackward,
);
