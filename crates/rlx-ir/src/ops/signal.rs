//! signal ops (OPS.md).

super::unspecified_ops!(
    Fft,
    FftButterflyStage,
    LogMel,
    LogMelBackward,
    WelchPeaks,
    PartitionedConv,
    ComplexNormSq,
    ComplexNormSqBackward,
    Conjugate,
);
