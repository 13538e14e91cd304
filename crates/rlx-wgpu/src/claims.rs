//! What the wgpu backend runs natively: the kinds with a kernel here, for the dtypes their
//! kernels take ([`shader::for_node`]); the f32-only kernels take f16 and bf16 after a cast to
//! f32, and legalization decomposes or leaves to the host the rest (f64 and 64-bit integer
//! arithmetic above all: WGSL has neither).

use crate::shader;
use rlx_ir::{DType, Op, OpKind};
use rlx_opt::{Claim, Claims};

/// The kinds with a wgpu kernel (for some dtypes).
pub const KINDS: &[OpKind] = {
    use OpKind::*;
    &[
        Input, Param, Constant, Activation, ActivationBackward, ReluBackward, Binary, Compare, Where, Fma, Cast, Reshape, StopGradient,
        Transpose, Expand, Narrow, Slice, Reverse, Concat, Gather, Reduce, MatMul, FusedMatMulBiasAct, DequantMatMul, Softmax, LayerNorm, LayerNorm2d, RmsNorm,
        FusedResidualLN, FusedResidualRmsNorm, Rope, RopeBackward, Attention, ElementwiseRegion, KvAppend, ArgMax, ArgMin,
    ]
};

/// The wgpu backend's claims.
pub struct WgpuClaims;

/// Whether `op`'s kernel computes in f32 only, so that f16 and bf16 operands are cast to it.
fn f32_only(op: &Op) -> bool {
    matches!(
        op,
        Op::MatMul(_)
            | Op::FusedMatMulBiasAct(_)
            | Op::Softmax(_)
            | Op::LayerNorm(_)
            | Op::LayerNorm2d(_)
            | Op::RmsNorm(_)
            | Op::FusedResidualLN(_)
            | Op::FusedResidualRmsNorm(_)
            | Op::Reduce(_)
            | Op::ArgMax(_)
            | Op::ArgMin(_)
            | Op::Rope(_)
            | Op::RopeBackward(_)
            | Op::Attention(_)
    )
}

impl Claims for WgpuClaims {
    fn kinds(&self) -> &[OpKind] {
        KINDS
    }

    fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
        if matches!(op, Op::Input(_) | Op::Param(_) | Op::Constant(_)) || shader::for_node(op, inputs).is_some() {
            return Claim::Native;
        }
        let half = |d: &DType| matches!(d, DType::F16 | DType::BF16);
        if f32_only(op) && inputs.iter().any(half) {
            let cast: Vec<DType> = inputs.iter().map(|d| if half(d) { DType::F32 } else { *d }).collect();
            if shader::for_node(op, &cast).is_some() {
                return Claim::Cast(cast);
            }
        }
        Claim::No
    }

    fn limits(&self, kind: OpKind) -> Option<&'static str> {
        use OpKind::*;
        Some(match kind {
            Activation | ActivationBackward | ReluBackward | Fma => "f32, f16, bf16 (in f32)",
            Binary => "no 64-bit types; bitwise ops on integers; no Pow, no shifts",
            Compare | Where | Cast => "f32, f16, bf16, 8/16/32-bit integers, Bool",
            Transpose | Expand | Narrow | Slice | Reverse | Gather => "1, 2, 4 and 8-byte elements; i32, u32, i64 indices",
            Concat => "4 and 8-byte elements",
            KvAppend => "4 and 8-byte elements, an i64 position; in place when the cache is graph state",
            Reduce | ArgMax | ArgMin => "f32; f16, bf16 via f32",
            MatMul | FusedMatMulBiasAct | Softmax | LayerNorm | LayerNorm2d | RmsNorm | FusedResidualLN | FusedResidualRmsNorm | Rope | RopeBackward => "f32; f16, bf16 via f32",
            Attention => "f32 heads up to 256 wide (f16, bf16 via f32); masks by position or a key mask; no bias",
            ElementwiseRegion => "up to 6 inputs, no prologue; each step as its standalone kernel takes it",
            DequantMatMul => "GGUF Q4_0, Q4_1, Q8_0 blocks as stored, F32 activations (exact or Q8Blocks)",
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::attention::{Attention, MaskKind};
    use rlx_ir::ops::elementwise::{Binary, BinaryOp};
    use rlx_ir::ops::matmul::MatMul;
    use DType::*;

    #[test]
    fn f64_and_i64_arithmetic_are_not_claimed_and_halves_cast_to_f32() {
        let add = Op::Binary(Binary { op: BinaryOp::Add });
        assert_eq!(WgpuClaims.claim(&add, &[F32, F32]), Claim::Native);
        assert_eq!(WgpuClaims.claim(&add, &[F64, F64]), Claim::No);
        assert_eq!(WgpuClaims.claim(&add, &[I64, I64]), Claim::No);
        assert_eq!(WgpuClaims.claim(&add, &[F16, F16]), Claim::Native, "elementwise f16 is unpacked to f32 in the kernel");
        let mm = Op::MatMul(MatMul {});
        assert_eq!(WgpuClaims.claim(&mm, &[F16, F16]), Claim::Cast(vec![F32, F32]));
        assert_eq!(WgpuClaims.claim(&mm, &[F64, F64]), Claim::No);
        let wide = Op::Attention(Attention::new(2, 512, MaskKind::None));
        assert_eq!(WgpuClaims.claim(&wide, &[F32, F32, F32]), Claim::No, "heads wider than the kernel holds decompose");
        let rows = Op::Attention(Attention::new(2, 64, MaskKind::None));
        assert_eq!(WgpuClaims.claim(&rows, &[F32, F32, F32, I64]), Claim::No, "K and V read at rows decompose to gathers");
    }

    #[test]
    fn every_kind_with_dtype_limits_says_them() {
        for &kind in KINDS {
            let any_dtype = matches!(kind, OpKind::Input | OpKind::Param | OpKind::Constant | OpKind::Reshape | OpKind::StopGradient);
            assert_eq!(WgpuClaims.limits(kind).is_none(), any_dtype, "{kind:?}");
        }
    }
}
