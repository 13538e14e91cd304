//! quant ops (OPS.md).

super::unspecified_ops!(
    ScaledMatMul,
    ScaledQuantize,
    ScaledQuantScale,
    ScaledDequantize,
    DequantMatMul,
    DequantGroupedMatMul,
    DequantGroupedMatMulMlx,
    DequantMoEWeights,
    Quantize,
    Dequantize,
    FakeQuantize,
    FakeQuantizeLSQ,
    FakeQuantizeLSQBackwardX,
    FakeQuantizeLSQBackwardScale,
    FakeQuantizeBackward,
    QMatMul,
    QConv2d,
);
