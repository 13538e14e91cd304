//! What the CPU backend claims (source of truth for `rlx ops` and `docs/op-coverage.md`): the
//! kinds in [`SUPPORTED_OPS`], each of which has an arm in [`crate::dispatch::run`] or is
//! handled by the executor itself (sources), and [`CpuClaims`], the dtypes its kernels take.

use rlx_ir::ops::elementwise::ActivationKind;
use rlx_ir::ops::fused::{chain_dtypes, ChainStep, ElementwiseRegion, Operand};
use rlx_ir::ops::index::ScatterReduction;
use rlx_ir::{DType, Op, OpKind};
use rlx_opt::{Claim, Claims};

pub const SUPPORTED_OPS: &[OpKind] = {
    use OpKind::*;
    &[
        Input,
        Param,
        Constant,
        Activation,
        Cast,
        StopGradient,
        Binary,
        Compare,
        Where,
        Fma,
        ReluBackward,
        ActivationBackward,
        SplineActivation,
        SplineActivationBackwardX,
        SplineActivationBackwardCoeff,
        // matmul
        MatMul,
        DotGeneral,
        // shape
        Reshape,
        Transpose,
        Narrow,
        Slice,
        Concat,
        Expand,
        Reverse,
        Pad,
        KvAppend,
        // index
        Gather,
        GatherBackward,
        GatherNd,
        GatherElements,
        ScatterAdd,
        ScatterNd,
        ScatterElements,
        // reduce
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
        // softmax
        Softmax,
        SoftmaxCrossEntropy,
        SoftmaxCrossEntropyWithLogits,
        SoftmaxCrossEntropyBackward,
        // random
        RngNormal,
        RngUniform,
        Sample,
        // norm
        LayerNorm,
        LayerNorm2d,
        GroupNorm,
        RmsNorm,
        BatchNormInference,
        LayerNormBackwardInput,
        LayerNormBackwardGamma,
        RmsNormBackwardInput,
        RmsNormBackwardGamma,
        RmsNormBackwardBeta,
        GroupNormBackwardInput,
        GroupNormBackwardGamma,
        GroupNormBackwardBeta,
        BatchNormInferenceBackwardInput,
        BatchNormInferenceBackwardGamma,
        BatchNormInferenceBackwardBeta,
        // attention
        Attention,
        AttentionBackward,
        AttentionBackwardAll,
        Rope,
        RopeBackward,
        AxialRope2d,
        // conv
        Conv,
        Conv3d,
        ConvTranspose2d,
        ConvTranspose3d,
        Im2Col,
        Pool,
        ResizeNearest2x,
        Interpolate3d,
        Conv2dBackwardInput,
        Conv2dBackwardWeight,
        Conv3dBackwardInput,
        Conv3dBackwardWeight,
        MaxPool2dBackward,
        MaxPool3dBackward,
        // rnn
        Lstm,
        Gru,
        Rnn,
        // ssm
        SelectiveScan,
        Mamba2,
        GatedDeltaNet,
        // fused (rlx_opt::fuse emits them)
        FusedMatMulBiasAct,
        FusedSwiGLU,
        FusedConvBiasAct,
        FusedResidualLN,
        FusedResidualRmsNorm,
        ElementwiseRegion,
        // custom
        Custom,
        // signal
        Fft,
        FftButterflyStage,
        LogMel,
        LogMelBackward,
        WelchPeaks,
        PartitionedConv,
        ComplexNormSq,
        ComplexNormSqBackward,
        Conjugate,
        // linalg
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
        // spd
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
        // quant
        DequantMatMul,
        DequantGroupedMatMul,
        DequantGroupedMatMulMlx,
        DequantMoEWeights,
        ScaledQuantScale,
        ScaledQuantize,
        // splat
        GaussianSplatRender,
        GaussianSplatPrepare,
        GaussianSplatRasterize,
        GaussianSplatRenderBackward,
    ]
};

/// The CPU's claims: every kind of [`SUPPORTED_OPS`], natively for each dtype its inference
/// accepts except where the kernels take fewer; there legalization casts to a dtype they take
/// (exact, or rounded once where the op itself rounds) or, where no cast is exact, decomposes.
pub struct CpuClaims;

impl Claims for CpuClaims {
    fn kinds(&self) -> &[OpKind] {
        SUPPORTED_OPS
    }

    fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
        use DType::*;
        match op {
            _ if !SUPPORTED_OPS.contains(&op.kind()) => Claim::No,
            Op::Activation(a) => activation(a.kind, inputs[0]),
            Op::ReluBackward(_)
            | Op::ActivationBackward(_)
            | Op::SplineActivation(_)
            | Op::SplineActivationBackwardX(_)
            | Op::SplineActivationBackwardCoeff(_) => cast_where(inputs, |_, d| matches!(d, F16 | BF16).then_some(F32)),
            Op::ElementwiseRegion(r) => region(r, inputs),
            Op::MatMul(_) | Op::DotGeneral(_) => cast_where(inputs, |_, d| match d {
                U16 => Some(U32),
                U64 => Some(I64),
                d => carrier(d),
            }),
            Op::Reduce(_)
            | Op::Cumsum(_)
            | Op::CumProd(_)
            | Op::CumMax(_)
            | Op::ArgMax(_)
            | Op::ArgMin(_)
            | Op::TopK(_)
            | Op::Sort(_)
            | Op::ArgSort(_) => cast_where(inputs, |_, d| carrier(d)),
            Op::ScatterAdd(_) => cast_where(inputs, |i, d| if i == 0 { carrier(d) } else { None }),
            Op::ScatterNd(s) => scatter(s.reduction, inputs),
            Op::ScatterElements(s) => scatter(s.reduction, inputs),
            Op::Pool(_) => match inputs[0] {
                U16 => Claim::Cast(vec![U32]),
                U64 => Claim::No,
                _ => Claim::Native,
            },
            _ => Claim::Native,
        }
    }

    fn limits(&self, kind: OpKind) -> Option<&'static str> {
        use OpKind::*;
        Some(match kind {
            Activation => "u8, u16, u32 via the next wider signed int; u64 Neg via i64, others not",
            ReluBackward | ActivationBackward | SplineActivation | SplineActivationBackwardX | SplineActivationBackwardCoeff => {
                "f32, f64; f16, bf16 via f32"
            }
            ElementwiseRegion => "no activation step on unsigned ints",
            MatMul | DotGeneral => "8/4-bit floats via f32, 4/2-bit ints via i8/u8, u16 via u32, u64 via i64",
            Reduce | Cumsum | CumProd | CumMax | ArgMax | ArgMin | TopK | Sort | ArgSort | ScatterAdd => {
                "8/4-bit floats via f32, 4/2-bit ints via i8/u8"
            }
            ScatterNd | ScatterElements => "reductions: 8/4-bit floats via f32, 4/2-bit ints via i8/u8, bool max/min via u8",
            Pool => "u16 via u32; u64 not",
            _ => return None,
        })
    }
}

/// `Cast` of each input `i` of dtype `d` to `to(i, d)` where that gives a dtype; native when
/// it gives none.
fn cast_where(inputs: &[DType], to: impl Fn(usize, DType) -> Option<DType>) -> Claim {
    let cast: Vec<DType> = inputs.iter().enumerate().map(|(i, &d)| to(i, d).unwrap_or(d)).collect();
    if cast == inputs {
        Claim::Native
    } else {
        Claim::Cast(cast)
    }
}

/// The dtype the arithmetic kernels compute a storage dtype in: the 8- and 4-bit floats in f32
/// (which holds them exactly), the 4- and 2-bit integers in the byte type that holds them
/// (wrapping arithmetic there agrees with theirs once cast back).
fn carrier(d: DType) -> Option<DType> {
    match d {
        _ if d.is_minifloat() => Some(DType::F32),
        DType::I4 | DType::I2 => Some(DType::I8),
        DType::U4 | DType::U2 => Some(DType::U8),
        _ => None,
    }
}

/// `Activation` on unsigned integers, which inference lets through for `Abs`, `Neg`, `Sign`
/// and `Relu` but the kernel takes only signed: in the next wider signed type, exact for all
/// four (`Neg` wraps back as the unsigned type would); u64 has none, but its `Neg` wraps the
/// same in i64.
fn activation(kind: ActivationKind, x: DType) -> Claim {
    let wider = match x {
        DType::U8 => DType::I16,
        DType::U16 => DType::I32,
        DType::U32 => DType::I64,
        DType::U64 if kind == ActivationKind::Neg => DType::I64,
        DType::U64 => return Claim::No,
        _ => return Claim::Native,
    };
    Claim::Cast(vec![wider])
}

/// An `ElementwiseRegion` runs its steps through the elementwise kernels, so it is native when
/// each of its activation steps would be; otherwise it is unfused (no cast of its inputs helps
/// a step in the middle).
fn region(r: &ElementwiseRegion, inputs: &[DType]) -> Claim {
    let Ok(steps) = chain_dtypes(&r.chain, inputs) else { return Claim::No };
    let operand = |o: Operand| match o {
        Operand::Input(i) => inputs[i as usize],
        Operand::Step(j) => steps[j as usize],
    };
    let native = r.chain.iter().all(|s| match *s {
        ChainStep::Activation(kind, x) => activation(kind, operand(x)) == Claim::Native,
        _ => true,
    });
    if native {
        Claim::Native
    } else {
        Claim::No
    }
}

/// `ScatterNd` / `ScatterElements` (data, indices, updates): a reduction other than `None` on
/// data and updates in their carriers, and `Max`/`Min` of bools in u8.
fn scatter(reduction: ScatterReduction, inputs: &[DType]) -> Claim {
    if reduction == ScatterReduction::None {
        return Claim::Native;
    }
    let bool_order = matches!(reduction, ScatterReduction::Max | ScatterReduction::Min);
    cast_where(inputs, |i, d| match d {
        _ if i == 1 => None,
        DType::Bool if bool_order => Some(DType::U8),
        d => carrier(d),
    })
}
