//! Attribute enums of the quant family: weight storage schemes (`QuantScheme`, with the
//! ggml block types of `GgufType`), low-precision element formats (`ScaledFormat`) and the
//! layouts of their scales (`ScaleLayout`).

use serde::{Deserialize, Serialize};

/// A ggml/GGUF block type: rows of `k` weights are `k / block_size()` consecutive blocks of
/// `block_bytes()` bytes each, decoded bit-exactly as ggml's `dequantize_row_*` (OPS.md §5).
/// Variant names are ggml's, so they can be grepped against llama.cpp.
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GgufType {
    /// `d:f16, qs[16]`; `y = (q − 8)·d`.
    Q4_0,
    /// `d:f16, m:f16, qs[16]`; `y = q·d + m`.
    Q4_1,
    /// `d:f16, qh:u32, qs[16]`; `y = (q − 16)·d`.
    Q5_0,
    /// `d:f16, m:f16, qh:u32, qs[16]`; `y = q·d + m`.
    Q5_1,
    /// `d:f16, qs:i8[32]`; `y = qs·d`.
    Q8_0,
    /// `d:f16, s:f16, qs:i8[32]`: an activation-side format (`s = d·Σqs`).
    Q8_1,
    /// 16 sub-blocks of 16 with 4-bit scales and mins; `d, dmin: f16`.
    Q2_K,
    /// 2-bit codes plus a high-bit mask, 6-bit signed sub-block scales.
    Q3_K,
    /// 8 sub-blocks of 32 with 6-bit scales and mins.
    Q4_K,
    /// As `Q4_K` plus a fifth bit per weight.
    Q5_K,
    /// 4 + 2-bit codes, i8 sub-block scales.
    Q6_K,
    /// `d:f32, qs:i8[256], bsums:i16[16]`: an activation-side format.
    Q8_K,
    /// 2.06-bpw i-quant: 8-weight grid indices and packed signs in `u16` words.
    IQ2_XXS,
    /// 2.31-bpw i-quant with 4-bit sub-block scales.
    IQ2_XS,
    /// 2.56-bpw i-quant with separate high index bits.
    IQ2_S,
    /// 3.06-bpw i-quant (4-weight grid).
    IQ3_XXS,
    /// 3.44-bpw i-quant with explicit signs and 4-bit scales.
    IQ3_S,
    /// 1.56-bpw i-quant (ternary grid).
    IQ1_S,
    /// 1.75-bpw i-quant; the super-block scale is spread over the `scales` bytes.
    IQ1_M,
    /// Non-linear 4-bit codes through a fixed 16-entry table, blocks of 32.
    IQ4_NL,
    /// 4.25-bpw super-block variant of `IQ4_NL` with 6-bit scales.
    IQ4_XS,
    /// Ternary, 5 codes per byte (3⁵ = 243 < 256).
    TQ1_0,
    /// Ternary, 2 bits per code.
    TQ2_0,
    /// `e:u8 (E8M0), qs[16]`: E2M1 codes times `2^(e − 127)`.
    MXFP4,
    /// `d:u8[4] (UE4M3 per 16), qs[32]`: E2M1 codes.
    NVFP4,
    /// `d:f16, qs[16]`: one sign bit per weight, `±d`.
    Q1_0,
    /// `d:f16, qs[16]`: 2-bit codes, `(q − 1)·d`.
    Q2_0,
}

impl GgufType {
    /// Every type, in declaration order.
    pub const ALL: [GgufType; 27] = {
        use GgufType::*;
        [
            Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS, IQ2_XS,
            IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0,
            Q2_0,
        ]
    };

    /// Weights per block (ggml's `QK`): 256 for the k-quants, IQ (but `IQ4_NL`) and TQ types.
    pub const fn block_size(self) -> usize {
        use GgufType::*;
        match self {
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            NVFP4 | Q2_0 => 64,
            Q1_0 => 128,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S
            | IQ1_S | IQ1_M | IQ4_XS | TQ1_0 | TQ2_0 => 256,
        }
    }

    /// Bytes per block (`sizeof(block_*)` in ggml, no padding).
    pub const fn block_bytes(self) -> usize {
        use GgufType::*;
        match self {
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ2_S => 82,
            IQ3_XXS => 98,
            IQ3_S => 110,
            IQ1_S => 50,
            IQ1_M => 56,
            IQ4_NL => 18,
            IQ4_XS => 136,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
            NVFP4 => 36,
            Q1_0 => 18,
            Q2_0 => 18,
        }
    }

    /// Bytes of one row of `k` weights, or an error naming `k` when it is not a whole number
    /// of blocks.
    pub fn row_bytes(self, k: usize) -> Result<usize, String> {
        let qk = self.block_size();
        if k % qk != 0 {
            return Err(format!("k = {k} is not a multiple of the {self:?} block size {qk}"));
        }
        Ok(k / qk * self.block_bytes())
    }

    /// Bytes before the 32 codes of a `Q4_0` / `Q8_0` block (its f16 scale) or a `Q4_1` block
    /// (scale and minimum): the types the device kernels read straight from the file; `None`
    /// for the others.
    pub const fn plain_header(self) -> Option<usize> {
        match self {
            GgufType::Q4_0 | GgufType::Q8_0 => Some(2),
            GgufType::Q4_1 => Some(4),
            _ => None,
        }
    }

    /// Activation-side formats (`Q8_1`, `Q8_K`) that weight files normally do not use.
    pub const fn is_activation_format(self) -> bool {
        matches!(self, GgufType::Q8_1 | GgufType::Q8_K)
    }
}

/// How a `DequantMatMul` (and MoE variants) weight is stored; fixes the operand list
/// (OPS.md §5 table). Non-GGUF schemes group along K.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QuantScheme {
    /// Symmetric int8: `w_q [k, n]` I8, `scale`/`zp [k/bs, n]` F32 (zp an all-zero tensor).
    Int8Block { block_size: usize },
    /// Asymmetric int8: as `Int8Block` with a real zero point; `(q − zp)·scale`.
    Int8BlockAsym { block_size: usize },
    /// Unsigned 4-bit codes, two per byte along N (low nibble = even column):
    /// `w_q [k, n/2]`, `scale`/`zp [k/bs, n]` F32.
    Int4Block { block_size: usize },
    /// NVFP4: E2M1 nibbles `w_q [k, n/2]`, E4M3 scale bytes `[k/16, n]`, f32 `global_scale [1]`.
    Nvfp4Block,
    /// MLX affine (`mlx.core.quantize`): `scale·q + bias` per group of `group_size` along K,
    /// `bits ∈ {2, 3, 4, 5, 6, 8}`.
    MlxAffine { bits: u8, group_size: usize },
    /// MLX `mxfp4`: E2M1 codes with an E8M0 scale byte per `group` along K.
    MlxMxfp4 { group: usize },
    /// MLX `mxfp8`: FP8 E4M3 codes with a scale byte per `group` along K.
    MlxMxfp8 { group: usize },
    /// Two-level residual FP4: `s0·q0 + s1·q1` from two E2M1 planes and two scale sets.
    MxFp4x2Block { group: usize },
    /// Per-tensor FP8 E4M3 codes, no scale (two inputs, like GGUF).
    Fp8E4m3,
    /// Per-tensor FP8 E5M2 codes, no scale.
    Fp8E5m2,
    /// Raw ggml blocks; scales and mins live inside the bytes. Weights are `[n, k]`.
    Gguf(GgufType),
}

impl QuantScheme {
    /// Weights per scale block along K; `None` for the unscaled FP8 schemes.
    pub fn block_size(&self) -> Option<usize> {
        match self {
            QuantScheme::Int8Block { block_size }
            | QuantScheme::Int8BlockAsym { block_size }
            | QuantScheme::Int4Block { block_size } => Some(*block_size),
            QuantScheme::Nvfp4Block => Some(16),
            QuantScheme::MlxAffine { group_size, .. } => Some(*group_size),
            QuantScheme::MlxMxfp4 { group } | QuantScheme::MlxMxfp8 { group } | QuantScheme::MxFp4x2Block { group } => {
                Some(*group)
            }
            QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => None,
            QuantScheme::Gguf(t) => Some(t.block_size()),
        }
    }

    /// Bytes per block for GGUF schemes (the others keep codes and scales in separate tensors).
    pub fn block_bytes(&self) -> Option<usize> {
        self.gguf().map(GgufType::block_bytes)
    }

    /// The ggml block type, for GGUF schemes.
    pub fn gguf(&self) -> Option<GgufType> {
        match self {
            QuantScheme::Gguf(t) => Some(*t),
            _ => None,
        }
    }

    /// Bits per stored code (the packed width of `w_q`); `None` for GGUF, whose codes are
    /// interleaved with their scales.
    pub fn code_bits(&self) -> Option<u32> {
        match self {
            QuantScheme::Int8Block { .. } | QuantScheme::Int8BlockAsym { .. } => Some(8),
            QuantScheme::MlxMxfp8 { .. } | QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => Some(8),
            QuantScheme::Int4Block { .. } | QuantScheme::Nvfp4Block | QuantScheme::MlxMxfp4 { .. } => Some(4),
            QuantScheme::MxFp4x2Block { .. } => Some(4),
            QuantScheme::MlxAffine { bits, .. } => Some(u32::from(*bits)),
            QuantScheme::Gguf(_) => None,
        }
    }

    /// How many inputs `DequantMatMul` takes under this scheme (x included).
    pub fn dequant_matmul_arity(&self) -> usize {
        match self {
            QuantScheme::Int8Block { .. }
            | QuantScheme::Int8BlockAsym { .. }
            | QuantScheme::Int4Block { .. }
            | QuantScheme::Nvfp4Block
            | QuantScheme::MlxAffine { .. }
            | QuantScheme::MlxMxfp4 { .. }
            | QuantScheme::MlxMxfp8 { .. } => 4,
            QuantScheme::MxFp4x2Block { .. } => 3,
            QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 | QuantScheme::Gguf(_) => 2,
        }
    }

    /// Rejects zero block sizes and MLX bit widths that MLX does not define.
    pub fn validate(&self) -> Result<(), String> {
        if let QuantScheme::MlxAffine { bits, .. } = self {
            if ![2, 3, 4, 5, 6, 8].contains(bits) {
                return Err(format!("MlxAffine bits must be 2, 3, 4, 5, 6 or 8, got {bits}"));
            }
        }
        if self.block_size() == Some(0) {
            return Err(format!("{self:?}: the block size must be at least 1"));
        }
        Ok(())
    }
}

/// A low-precision element format of `ScaledMatMul` and its operand prep (one code per byte).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScaledFormat {
    /// OCP FP8 E4M3 (bias 7, no inf, one NaN pattern), max 448.
    F8E4M3,
    /// OCP FP8 E5M2 (bias 15, IEEE inf/NaN), max 57344.
    F8E5M2,
    /// AMD FNUZ E4M3 (bias 8, NaN = 0x80, no inf or −0), max 240.
    F8E4M3Fnuz,
    /// AMD FNUZ E5M2 (bias 16), max 57344.
    F8E5M2Fnuz,
    /// OCP MX FP6 E2M3, max 7.5.
    F6E2M3,
    /// OCP MX FP6 E3M2, max 28.
    F6E3M2,
    /// OCP MX FP4 E2M1, max 6.
    F4E2M1,
    /// An all-finite minifloat with subnormals: sign + `exp_bits` + `mant_bits` ≤ 8 bits;
    /// `bias` defaults to `2^(exp_bits−1) − 1`.
    Custom { exp_bits: u8, mant_bits: u8, bias: Option<i32> },
}

impl ScaledFormat {
    /// Rejects custom formats that do not fit a byte or have no exponent.
    pub fn validate(&self) -> Result<(), String> {
        if let ScaledFormat::Custom { exp_bits, mant_bits, .. } = *self {
            if exp_bits == 0 || 1 + u32::from(exp_bits) + u32::from(mant_bits) > 8 {
                return Err(format!(
                    "custom format needs 1 <= exp_bits and 1 + exp_bits + mant_bits <= 8, got e{exp_bits}m{mant_bits}"
                ));
            }
        }
        Ok(())
    }

    /// Bits per code, sign included.
    pub fn bits(&self) -> u32 {
        match *self {
            ScaledFormat::F8E4M3 | ScaledFormat::F8E5M2 | ScaledFormat::F8E4M3Fnuz | ScaledFormat::F8E5M2Fnuz => 8,
            ScaledFormat::F6E2M3 | ScaledFormat::F6E3M2 => 6,
            ScaledFormat::F4E2M1 => 4,
            ScaledFormat::Custom { exp_bits, mant_bits, .. } => 1 + u32::from(exp_bits) + u32::from(mant_bits),
        }
    }

    /// The largest finite value: the divisor of the amax scale rule of `ScaledQuantScale`.
    pub fn max_finite(&self) -> f32 {
        match *self {
            ScaledFormat::F8E4M3 => 448.0,
            ScaledFormat::F8E5M2 | ScaledFormat::F8E5M2Fnuz => 57344.0,
            ScaledFormat::F8E4M3Fnuz => 240.0,
            ScaledFormat::F6E2M3 => 7.5,
            ScaledFormat::F6E3M2 => 28.0,
            ScaledFormat::F4E2M1 => 6.0,
            ScaledFormat::Custom { exp_bits, mant_bits, bias } => {
                let e = i32::from(exp_bits.min(8));
                let bias = bias.unwrap_or((1 << (e - 1).max(0)) - 1);
                let top = (1 << e) - 1 - bias;
                2f32.powi(top) * (2.0 - 2f32.powi(-i32::from(mant_bits)))
            }
        }
    }
}

/// Where the scales of a `ScaledFormat` operand live; blocks run along the last (K) axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScaleLayout {
    /// One f32 scale `[1]` for the whole tensor.
    PerTensor,
    /// One power-of-two E8M0 byte (biased exponent, bias 127) per `block` elements (OCP MX: 32).
    BlockMxE8M0 { block: usize },
    /// One FP8-E4M3 byte per `group` elements (NVFP4: 16). An optional per-tensor f32 global
    /// scale is applied outside the op (a `Mul` of the result; it factors out of the sum).
    Nvfp4 { group: usize },
}

impl ScaleLayout {
    /// Elements per scale along K; `None` for `PerTensor`.
    pub fn block(&self) -> Option<usize> {
        match *self {
            ScaleLayout::PerTensor => None,
            ScaleLayout::BlockMxE8M0 { block } => Some(block),
            ScaleLayout::Nvfp4 { group } => Some(group),
        }
    }

    /// Rejects zero block sizes.
    pub fn validate(&self) -> Result<(), String> {
        if self.block() == Some(0) {
            return Err(format!("{self:?}: the block size must be at least 1"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_blocks_match_ggml() {
        // Bits per weight as ggml documents them.
        let bpw = |t: GgufType| 8.0 * t.block_bytes() as f64 / t.block_size() as f64;
        assert_eq!(bpw(GgufType::Q4_0), 4.5);
        assert_eq!(bpw(GgufType::Q4_K), 4.5);
        assert_eq!(bpw(GgufType::Q6_K), 6.5625);
        assert_eq!(bpw(GgufType::Q2_K), 2.625);
        assert_eq!(bpw(GgufType::IQ2_XXS), 2.0625);
        assert_eq!(bpw(GgufType::IQ1_S), 1.5625);
        assert_eq!(bpw(GgufType::TQ1_0), 1.6875);
        assert_eq!(GgufType::Q4_K.row_bytes(4096), Ok(16 * 144));
        assert!(GgufType::Q4_K.row_bytes(100).unwrap_err().contains("block size 256"));
        assert_eq!(QuantScheme::Gguf(GgufType::NVFP4).block_bytes(), Some(36));
        assert_eq!(QuantScheme::Nvfp4Block.block_bytes(), None);
    }

    #[test]
    fn scheme_validation() {
        assert!(QuantScheme::MlxAffine { bits: 7, group_size: 64 }.validate().is_err());
        assert!(QuantScheme::Int8Block { block_size: 0 }.validate().is_err());
        assert!(QuantScheme::MlxAffine { bits: 3, group_size: 64 }.validate().is_ok());
    }

    #[test]
    fn max_finite_of_custom_formats_matches_the_named_ones() {
        let custom = |e, m| ScaledFormat::Custom { exp_bits: e, mant_bits: m, bias: None };
        assert_eq!(custom(2, 1).max_finite(), ScaledFormat::F4E2M1.max_finite());
        assert_eq!(custom(2, 3).max_finite(), ScaledFormat::F6E2M3.max_finite());
        assert_eq!(custom(3, 2).max_finite(), ScaledFormat::F6E3M2.max_finite());
        assert!(custom(4, 4).validate().is_err());
        assert!(custom(0, 3).validate().is_err());
        assert_eq!(custom(4, 3).bits(), 8);
    }
}
