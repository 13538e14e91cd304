//! What the CUDA backend runs natively: the kinds with a kernel here, for the dtypes their
//! kernels take ([`source::for_node`]); legalization casts or decomposes around the rest and
//! the session runs what remains on the host.

use crate::source;
use rlx_ir::{DType, Op, OpKind};
use rlx_opt::{Claim, Claims};

/// The kinds with a CUDA kernel (for some dtypes), sources included.
pub const KINDS: &[OpKind] = {
    use OpKind::*;
    &[
        Input, Param, Constant, Activation, ActivationBackward, ReluBackward, Binary, Compare, Where, Fma, Cast, Reshape,
        StopGradient, Transpose, Expand, Narrow, Slice, Reverse, Concat, Gather, GatherBackward, Reduce, MatMul, DotGeneral, Softmax, LayerNorm, LayerNorm2d,
        RmsNorm, LayerNormBackwardInput, LayerNormBackwardGamma, RmsNormBackwardInput, RmsNormBackwardGamma, RmsNormBackwardBeta,
        FusedResidualLN, FusedResidualRmsNorm, FusedMatMulBiasAct, ArgMax, ArgMin, Cumsum, CumsumBackward, CumProd, CumMax,
        SoftmaxCrossEntropyWithLogits, SoftmaxCrossEntropyBackward, Rope, RopeBackward, Attention, AttentionBackward, AttentionBackwardAll, KvAppend, DequantMatMul,
        ElementwiseRegion,
    ]
};

/// The CUDA backend's claims.
pub struct CudaClaims;

impl Claims for CudaClaims {
    fn kinds(&self) -> &[OpKind] {
        KINDS
    }

    fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
        match op {
            Op::Input(_) | Op::Param(_) | Op::Constant(_) => Claim::Native,
            _ if source::for_node(op, inputs).is_some() => Claim::Native,
            _ => Claim::No,
        }
    }

    fn limits(&self, kind: OpKind) -> Option<&'static str> {
        use OpKind::*;
        Some(match kind {
            Activation | ActivationBackward => "f32, f16, bf16",
            ReluBackward | Fma => "f32, f64, f16, bf16",
            Reduce => "floats",
            MatMul => "f32, f64 (no TF32), f16, bf16 (f32 accumulation)",
            DotGeneral => "as MatMul; operands read in place (transposed where need be) when batch axes lead and contracted axes are one run at either end, else copied first",
            FusedMatMulBiasAct => "f16, bf16 (bias, ReLU and tanh-GELU in cuBLASLt's epilogue)",
            Binary => "bitwise ops on integers; shifts not",
            Cast => "not f64 to f16/bf16",
            Compare | Where | Transpose | Expand | Narrow | Slice | Reverse | Concat | Gather | KvAppend | ArgMax | ArgMin => {
                "no complex, 8/4-bit floats or sub-byte ints"
            }
            Softmax | LayerNorm | LayerNorm2d | RmsNorm | FusedResidualLN | FusedResidualRmsNorm | Rope | RopeBackward => {
                "f32, f64, f16, bf16 (statistics in f32, f64 in f64)"
            }
            LayerNormBackwardInput | LayerNormBackwardGamma | RmsNormBackwardInput | RmsNormBackwardGamma | RmsNormBackwardBeta => {
                "f32, f64, f16, bf16, every operand of one dtype (statistics and sums in f32, f64 in f64)"
            }
            Cumsum | CumsumBackward | CumProd | CumMax => "no Bool, complex, 8/4-bit floats or sub-byte ints",
            SoftmaxCrossEntropyWithLogits => "f32, f64, f16, bf16 logits; integer labels",
            SoftmaxCrossEntropyBackward => "f32, f64, f16, bf16 logits and loss gradient of one dtype; integer labels",
            GatherBackward => "f32 gradients (atomic adds), integer indices",
            ElementwiseRegion => "no prologue; each step as its standalone kernel takes it",
            Attention => {
                "f32, f16, bf16 (scores and softmax in f32); heads up to 512 wide; float or Bool masks, float biases; \
                 f16/bf16 heads of 16 to 128 (a multiple of 16) masked by position or by key on the tensor cores"
            }
            AttentionBackward | AttentionBackwardAll => "f16, bf16 heads of 16 to 128 (a multiple of 16) with masks by position (tensor cores); others decompose",
            DequantMatMul => "GGUF Q4_0, Q4_1, Q8_0 blocks as stored, F32 activations (exact or Q8Blocks)",
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::attention::{Attention, AttentionBackward, AttentionBackwardAll, AttentionBwdWrt, MaskKind};
    use rlx_ir::ops::reduce::Cumsum;
    use rlx_ir::ops::shape::KvAppend;
    use rlx_ir::ops::softmax::{Softmax, SoftmaxCrossEntropyBackward, SoftmaxCrossEntropyWithLogits};
    use DType::*;

    fn claim(op: Op, dtypes: &[DType]) -> Claim {
        CudaClaims.claim(&op, dtypes)
    }

    #[test]
    fn row_and_attention_claims_follow_their_kernels() {
        assert_eq!(claim(Op::Softmax(Softmax { axis: -1 }), &[BF16]), Claim::Native);
        assert_eq!(claim(Op::Softmax(Softmax { axis: -1 }), &[I32]), Claim::No);
        let attention = |head_dim, mask_kind| Op::Attention(Attention::new(4, head_dim, mask_kind));
        assert_eq!(claim(attention(64, MaskKind::Custom), &[F16, F16, F16, Bool]), Claim::Native);
        assert_eq!(claim(attention(64, MaskKind::Causal), &[F64, F64, F64]), Claim::No, "f64 attention decomposes");
        assert_eq!(claim(attention(1024, MaskKind::None), &[F32, F32, F32]), Claim::No, "heads too wide for the tiles decompose");
        assert_eq!(claim(attention(64, MaskKind::Bias), &[F32, F32, F32, F32, I64]), Claim::No, "K and V read at rows decompose to gathers");
        let backward = |head_dim, mask_kind| Op::AttentionBackwardAll(AttentionBackwardAll { num_heads: 4, head_dim, mask_kind });
        assert_eq!(claim(backward(128, MaskKind::Causal), &[BF16; 4]), Claim::Native);
        assert_eq!(claim(backward(64, MaskKind::SlidingWindow(8)), &[F16; 4]), Claim::Native);
        assert_eq!(claim(backward(64, MaskKind::None), &[F32; 4]), Claim::No, "f32 gradients decompose");
        assert_eq!(claim(backward(32, MaskKind::None), &[BF16; 4]), Claim::Native, "MiniLM's heads");
        assert_eq!(claim(backward(72, MaskKind::None), &[BF16; 4]), Claim::No, "heads off the 16-deep steps decompose");
        assert_eq!(claim(backward(256, MaskKind::None), &[BF16; 4]), Claim::No, "heads wider than 128 decompose");
        assert_eq!(claim(backward(64, MaskKind::Custom), &[BF16, BF16, BF16, BF16, Bool]), Claim::No, "key masks decompose");
        let one = AttentionBackward { num_heads: 4, head_dim: 64, mask_kind: MaskKind::None, wrt: AttentionBwdWrt::Key };
        assert_eq!(claim(Op::AttentionBackward(one), &[BF16; 4]), Claim::Native);
        let xent = Op::SoftmaxCrossEntropyWithLogits(SoftmaxCrossEntropyWithLogits { ignore_index: None });
        assert_eq!(claim(xent.clone(), &[F32, I32]), Claim::Native);
        assert_eq!(claim(xent, &[F32, F32]), Claim::No, "f32-encoded labels decompose");
        let grad = Op::SoftmaxCrossEntropyBackward(SoftmaxCrossEntropyBackward { ignore_index: Some(-100) });
        assert_eq!(claim(grad.clone(), &[BF16, I64, BF16]), Claim::Native);
        assert_eq!(claim(grad, &[BF16, I64, F32]), Claim::No, "a loss gradient of another dtype decomposes");
        assert_eq!(claim(Op::Cumsum(Cumsum { axis: 0, exclusive: false }), &[Bool]), Claim::No);
        assert_eq!(claim(Op::KvAppend(KvAppend { axis: 1, pos: 0 }), &[Bool, Bool, I64]), Claim::Native);
        assert_eq!(claim(Op::KvAppend(KvAppend { axis: 1, pos: 0 }), &[C64, C64]), Claim::No);
    }

    #[test]
    fn every_kind_with_dtype_limits_says_them() {
        for &kind in KINDS {
            let any_dtype = matches!(kind, OpKind::Input | OpKind::Param | OpKind::Constant | OpKind::Reshape | OpKind::StopGradient);
            assert_eq!(CudaClaims.limits(kind).is_none(), any_dtype, "{kind:?}");
        }
    }
}
