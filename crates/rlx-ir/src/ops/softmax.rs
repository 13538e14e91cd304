//! softmax ops (OPS.md).

super::unspecified_ops!(
    Softmax,
    SoftmaxCrossEntropy,
    SoftmaxCrossEntropyWithLogits,
    SoftmaxCrossEntropyBackward,
);
