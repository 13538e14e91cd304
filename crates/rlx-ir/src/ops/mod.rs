//! The op set: one `Op` variant per op kind, each wrapping the attribute struct that its
//! family module defines together with the op's arity and inference rule.
//!
//! Families follow OPS.md's sections; every crate with a concern for a family has a module of
//! the same name. `OpKind` is derived from the list below, never maintained by hand.

use crate::TensorType;
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod attention;
pub mod control;
pub mod conv;
pub mod custom;
pub mod elementwise;
pub mod fused;
pub mod index;
pub mod linalg;
pub mod matmul;
pub mod norm;
pub mod quant;
pub mod random;
pub mod reduce;
pub mod rnn;
pub mod shape;
pub mod signal;
pub mod softmax;
pub mod source;
pub mod splat;
pub mod spd;
pub mod ssm;

/// How many inputs an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exact(usize),
    /// Inclusive range.
    Between(usize, usize),
    AtLeast(usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exact(k) => n == k,
            Arity::Between(lo, hi) => (lo..=hi).contains(&n),
            Arity::AtLeast(k) => n >= k,
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exact(k) => write!(f, "{k}"),
            Arity::Between(lo, hi) => write!(f, "{lo} to {hi}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
        }
    }
}

/// What every op declares about itself: its inputs and how output types follow from them.
pub trait OpDef {
    /// Accepted input counts (may depend on attributes).
    fn arity(&self) -> Arity;

    /// Output types for these input types, or a reason naming the offending shapes.
    ///
    /// Called only with an input count that [`OpDef::arity`] accepts.
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String>;

    /// Inputs this op overwrites in place (KV caches, recurrent carries, EMA state).
    /// Passes must not merge, drop or reuse the buffers of such nodes.
    fn mutated_inputs(&self) -> Vec<usize> {
        Vec::new()
    }

    /// `(output, input)` pairs, given `inputs` operands: the output is that mutated input
    /// itself after the update (no copy of its own; `KvAppend` with a run-time position).
    fn aliased_outputs(&self, _inputs: usize) -> Vec<(usize, usize)> {
        Vec::new()
    }

    /// `(output, input)` pairs: after the op, the output's value becomes that mutated
    /// input's new value (the final states of recurrent layers carried across runs); the
    /// kernel itself only reads the input.
    fn written_back(&self) -> Vec<(usize, usize)> {
        Vec::new()
    }

    /// Whether the op gives new values on every run from the same operands (random draws,
    /// user kernels that may keep state): never folded, merged or run once for many runs.
    fn fresh(&self) -> bool {
        false
    }

    /// Replaces symbolic dims held in attributes (reshape targets, declared shapes) by the
    /// sizes `sizes` knows, so a specialized graph is fully static.
    fn bind_symbols(&mut self, _sizes: &dyn Fn(&str) -> Option<usize>) {}

    /// Sub-graphs carried as attributes (control flow, `CustomFn`).
    fn subgraphs(&self) -> Vec<&crate::Graph> {
        Vec::new()
    }
}

/// Expands to the `Op` enum, `OpKind`, and the per-kind dispatch, from one list of
/// `family::Kind` entries whose attribute struct is `family::Kind`.
macro_rules! op_set {
    ($($family:ident :: $kind:ident),* $(,)?) => {
        /// One graph operation with its attributes.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub enum Op {
            $($kind($family::$kind),)*
        }

        /// The kind of an [`Op`], without attributes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind {
            $($kind,)*
        }

        impl OpKind {
            /// Every op kind, grouped by family.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind,)*];

            /// The kind's name as written in the text format.
            pub fn name(self) -> &'static str {
                match self {
                    $(OpKind::$kind => stringify!($kind),)*
                }
            }

            /// The family module that holds the kind, in every crate.
            pub fn family(self) -> &'static str {
                match self {
                    $(OpKind::$kind => stringify!($family),)*
                }
            }

            /// Looks a kind up by its name.
            pub fn from_name(name: &str) -> Option<OpKind> {
                match name {
                    $(stringify!($kind) => Some(OpKind::$kind),)*
                    _ => None,
                }
            }
        }

        impl Op {
            pub fn kind(&self) -> OpKind {
                match self {
                    $(Op::$kind(_) => OpKind::$kind,)*
                }
            }

            /// The op's definition: arity, inference and effects.
            pub fn def(&self) -> &dyn OpDef {
                match self {
                    $(Op::$kind(a) => a,)*
                }
            }

            /// The op's definition, mutably (for [`OpDef::bind_symbols`]).
            pub fn def_mut(&mut self) -> &mut dyn OpDef {
                match self {
                    $(Op::$kind(a) => a,)*
                }
            }
        }

        $(
            impl From<$family::$kind> for Op {
                fn from(a: $family::$kind) -> Op {
                    Op::$kind(a)
                }
            }
        )*
    };
}

op_set! {
    // source
    source::Input,
    source::Param,
    source::Constant,
    // elementwise
    elementwise::Activation,
    elementwise::Cast,
    elementwise::StopGradient,
    elementwise::Binary,
    elementwise::Compare,
    elementwise::Where,
    elementwise::Fma,
    elementwise::SplineActivation,
    elementwise::ReluBackward,
    elementwise::ActivationBackward,
    elementwise::SplineActivationBackwardX,
    elementwise::SplineActivationBackwardCoeff,
    // fused
    fused::ElementwiseRegion,
    fused::TransformRegion,
    fused::BatchElementwiseRegion,
    fused::FusedSwiGLU,
    fused::FusedMatMulBiasAct,
    fused::FusedResidualLN,
    fused::FusedResidualRmsNorm,
    fused::FusedAttentionBlock,
    fused::FusedTransformerLayer,
    fused::FusedConvBiasAct,
    fused::AdaLayerNorm,
    fused::GatedResidual,
    fused::AdaLayerNormBackward,
    fused::GatedResidualBackward,
    // matmul
    matmul::MatMul,
    matmul::DotGeneral,
    matmul::GroupedMatMul,
    matmul::LoraMatMul,
    matmul::SynthMatMul,
    matmul::SynthReconstruct,
    // quant
    quant::ScaledMatMul,
    quant::ScaledQuantize,
    quant::ScaledQuantScale,
    quant::ScaledDequantize,
    quant::DequantMatMul,
    quant::DequantGroupedMatMul,
    quant::DequantGroupedMatMulMlx,
    quant::DequantMoEWeights,
    quant::Quantize,
    quant::Dequantize,
    quant::FakeQuantize,
    quant::FakeQuantizeLSQ,
    quant::FakeQuantizeLSQBackwardX,
    quant::FakeQuantizeLSQBackwardScale,
    quant::FakeQuantizeBackward,
    quant::QMatMul,
    quant::QConv2d,
    // norm
    norm::LayerNorm,
    norm::LayerNorm2d,
    norm::GroupNorm,
    norm::RmsNorm,
    norm::BatchNormInference,
    norm::RmsNormBackwardInput,
    norm::RmsNormBackwardGamma,
    norm::RmsNormBackwardBeta,
    norm::LayerNormBackwardInput,
    norm::LayerNormBackwardGamma,
    norm::GroupNormBackwardInput,
    norm::GroupNormBackwardGamma,
    norm::GroupNormBackwardBeta,
    norm::BatchNormInferenceBackwardInput,
    norm::BatchNormInferenceBackwardGamma,
    norm::BatchNormInferenceBackwardBeta,
    // attention
    attention::Attention,
    attention::AttentionBackward,
    attention::AttentionBackwardAll,
    attention::Rope,
    attention::RopeBackward,
    attention::AxialRope2d,
    // reduce
    reduce::Reduce,
    reduce::Cumsum,
    reduce::CumProd,
    reduce::CumMax,
    reduce::CumsumBackward,
    reduce::ArgMax,
    reduce::ArgMin,
    reduce::TopK,
    reduce::Sort,
    reduce::ArgSort,
    // shape
    shape::Reshape,
    shape::Transpose,
    shape::Narrow,
    shape::Slice,
    shape::Concat,
    shape::Expand,
    shape::Reverse,
    shape::Pad,
    shape::KvAppend,
    // index
    index::Gather,
    index::GatherBackward,
    index::GatherNd,
    index::GatherElements,
    index::ScatterAdd,
    index::ScatterNd,
    index::ScatterElements,
    // conv
    conv::Conv,
    conv::Conv3d,
    conv::ConvTranspose2d,
    conv::ConvTranspose3d,
    conv::Im2Col,
    conv::Pool,
    conv::ResizeNearest2x,
    conv::Interpolate3d,
    conv::Conv2dBackwardInput,
    conv::Conv2dBackwardWeight,
    conv::Conv3dBackwardInput,
    conv::Conv3dBackwardWeight,
    conv::MaxPool2dBackward,
    conv::MaxPool3dBackward,
    // softmax
    softmax::Softmax,
    softmax::SoftmaxCrossEntropy,
    softmax::SoftmaxCrossEntropyWithLogits,
    softmax::SoftmaxCrossEntropyBackward,
    // random
    random::RngNormal,
    random::RngUniform,
    random::Sample,
    // rnn
    rnn::Lstm,
    rnn::Gru,
    rnn::Rnn,
    // ssm
    ssm::SelectiveScan,
    ssm::Mamba2,
    ssm::GatedDeltaNet,
    // linalg
    linalg::DenseSolve,
    linalg::BatchedDenseSolve,
    linalg::Cholesky,
    linalg::TriangularSolve,
    linalg::Det,
    linalg::LogDet,
    linalg::Svd,
    linalg::Qr,
    linalg::Eigh,
    linalg::EighBackward,
    linalg::EighBatch,
    linalg::EighBatchBackward,
    // spd
    spd::BiMap,
    spd::ReEig,
    spd::LogEig,
    spd::SpdBatchNorm,
    spd::SpdKarcherMean,
    spd::SpdKarcherMeanWeighted,
    spd::SpdLogMap,
    spd::SpdExpMap,
    spd::SpdParallelTransport,
    spd::SpdMatrixFnBatch,
    spd::ReEigBackward,
    spd::LogEigBackward,
    spd::SpdBatchNormBackwardX,
    spd::SpdBatchNormBackwardG,
    spd::SpdLogMapBackward,
    spd::SpdExpMapBackward,
    spd::SpdParallelTransportBackward,
    spd::SpdMatrixFnBatchBackward,
    // signal
    signal::Fft,
    signal::FftButterflyStage,
    signal::LogMel,
    signal::LogMelBackward,
    signal::WelchPeaks,
    signal::PartitionedConv,
    signal::ComplexNormSq,
    signal::ComplexNormSqBackward,
    signal::Conjugate,
    // splat
    splat::GaussianSplatRender,
    splat::GaussianSplatRenderBackward,
    splat::GaussianSplatPrepare,
    splat::GaussianSplatRasterize,
    // control
    control::If,
    control::While,
    control::Scan,
    control::ScanBackward,
    control::ScanBackwardXs,
    // custom
    custom::Custom,
    custom::CustomFn,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_177_kinds_are_listed_once() {
        assert_eq!(OpKind::ALL.len(), 177);
        let mut names: Vec<_> = OpKind::ALL.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 177);
        for k in OpKind::ALL {
            assert_eq!(OpKind::from_name(k.name()), Some(*k));
        }
    }
}
