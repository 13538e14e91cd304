//! Every `QuantScheme`'s weight as [`Rows`]: the GGUF and MLX layouts store one row of K per
//! output feature; the integer, FP8, NVFP4-block and two-plane FP4 schemes store `W [k, n]`
//! and are read down a column.

use super::rows::Rows;
use super::{need_len, widen_f32};
use crate::view::In;
use rlx_ir::ops::quant::gguf::{self, BlockDecoder};
use rlx_ir::ops::quant::{minifloat, GgufType, QuantScheme, ScaledFormat};
use rlx_ir::DType;

/// Packed ggml blocks: `n` rows of `k / QK` blocks each.
pub(super) struct Gguf<'a> {
    bytes: &'a [u8],
    decode: BlockDecoder,
    n: usize,
    k: usize,
    qk: usize,
    block_bytes: usize,
    row_bytes: usize,
}

impl<'a> Gguf<'a> {
    /// `n` rows of `k` weights of type `t`; `bytes` must hold exactly them.
    pub(super) fn new(t: GgufType, bytes: &'a [u8], n: usize, k: usize) -> Result<Gguf<'a>, String> {
        let decode = gguf::decoder(t)?;
        let row_bytes = t.row_bytes(k)?;
        need_len(&format!("the packed {t:?} weight ({n} rows of k = {k})"), bytes.len(), n * row_bytes)?;
        Ok(Gguf { bytes, decode, n, k, qk: t.block_size(), block_bytes: t.block_bytes(), row_bytes })
    }
}

impl Rows for Gguf<'_> {
    fn n(&self) -> usize {
        self.n
    }
    fn k(&self) -> usize {
        self.k
    }
    fn block(&self) -> usize {
        self.qk
    }
    fn decode(&self, j: usize, b: usize, out: &mut [f32]) {
        let at = j * self.row_bytes + b * self.block_bytes;
        (self.decode)(&self.bytes[at..at + self.block_bytes], out);
    }
}

/// The `bits`-wide code at bit `pos` of a little-endian bit stream (MLX packing; `bits ≤ 8`).
fn bits_at(stream: &[u8], pos: usize, bits: usize) -> u32 {
    let byte = pos / 8;
    let lo = u32::from(stream[byte]);
    let hi = stream.get(byte + 1).map_or(0, |&b| u32::from(b));
    ((lo | (hi << 8)) >> (pos % 8)) & ((1u32 << bits) - 1)
}

/// MLX affine (`mlx.core.quantize`, `transpose=True` layout): row `j` is a bit stream of `k`
/// codes, `w = scale·q + bias` per group of `group` along K (`scales`/`biases [n, k/group]`).
pub(super) struct MlxAffine<'a> {
    codes: &'a [u8],
    scales: Vec<f32>,
    biases: Vec<f32>,
    bits: usize,
    group: usize,
    n: usize,
    k: usize,
}

impl<'a> MlxAffine<'a> {
    /// `n` rows of `k` codes of `bits` bits; checks every operand's size.
    pub(super) fn new(
        codes: &'a [u8],
        scales: Vec<f32>,
        biases: Vec<f32>,
        bits: usize,
        group: usize,
        (n, k): (usize, usize),
    ) -> Result<MlxAffine<'a>, String> {
        check_groups(k, group)?;
        if !(k * bits).is_multiple_of(8) {
            return Err(format!("k = {k} codes of {bits} bits do not fill whole bytes"));
        }
        need_len("the packed codes (bytes)", codes.len(), n * k * bits / 8)?;
        need_len("scales", scales.len(), n * k / group)?;
        need_len("biases", biases.len(), n * k / group)?;
        Ok(MlxAffine { codes, scales, biases, bits, group, n, k })
    }
}

/// Checks that `k` splits into whole groups.
fn check_groups(k: usize, group: usize) -> Result<(), String> {
    if group == 0 || !k.is_multiple_of(group) {
        return Err(format!("k = {k} is not a multiple of the group size {group}"));
    }
    Ok(())
}

impl Rows for MlxAffine<'_> {
    fn n(&self) -> usize {
        self.n
    }
    fn k(&self) -> usize {
        self.k
    }
    fn block(&self) -> usize {
        self.group
    }
    fn decode(&self, j: usize, b: usize, out: &mut [f32]) {
        let row = &self.codes[j * self.k * self.bits / 8..(j + 1) * self.k * self.bits / 8];
        let g = j * (self.k / self.group) + b;
        let (s, z) = (self.scales[g], self.biases[g]);
        for (i, y) in out.iter_mut().enumerate() {
            let q = bits_at(row, (b * self.group + i) * self.bits, self.bits);
            *y = s * q as f32 + z;
        }
    }
}

/// MLX `mxfp4`/`mxfp8`: E2M1 nibbles (low nibble first) or E4M3 bytes per row, times one scale
/// byte per group — E4M3 for groups of 16 (NVFP4-style), E8M0 otherwise, as MLX reads them.
pub(super) struct MlxFp<'a> {
    codes: &'a [u8],
    scales: &'a [u8],
    bits: usize,
    group: usize,
    n: usize,
    k: usize,
}

impl<'a> MlxFp<'a> {
    fn new(codes: &'a [u8], scales: &'a [u8], bits: usize, group: usize, n: usize, k: usize) -> Result<MlxFp<'a>, String> {
        check_groups(k, group)?;
        need_len("the packed codes (bytes)", codes.len(), n * k * bits / 8)?;
        need_len("scales", scales.len(), n * k / group)?;
        Ok(MlxFp { codes, scales, bits, group, n, k })
    }

    fn scale(&self, byte: u8) -> f32 {
        if self.group == 16 {
            minifloat::decode(&ScaledFormat::F8E4M3, byte)
        } else {
            mlx_e8m0(byte)
        }
    }
}

/// MLX's E8M0 scale: `2^(s − 127)` through bfloat16 bits (`0` → 2^−127, `0xFF` → +inf).
fn mlx_e8m0(s: u8) -> f32 {
    if s == 0 {
        f32::from_bits(0x0040_0000)
    } else {
        f32::from_bits(u32::from(s) << 23)
    }
}

impl Rows for MlxFp<'_> {
    fn n(&self) -> usize {
        self.n
    }
    fn k(&self) -> usize {
        self.k
    }
    fn block(&self) -> usize {
        self.group
    }
    fn decode(&self, j: usize, b: usize, out: &mut [f32]) {
        let s = self.scale(self.scales[j * (self.k / self.group) + b]);
        let row = &self.codes[j * self.k * self.bits / 8..];
        for (i, y) in out.iter_mut().enumerate() {
            let e = b * self.group + i;
            let v = if self.bits == 4 {
                gguf::e2m1(row[e / 2] >> (4 * (e % 2)))
            } else {
                minifloat::decode(&ScaledFormat::F8E4M3, row[e])
            };
            *y = v * s;
        }
    }
}

/// How a `W [k, n]` scheme stores its values.
enum ColCodes<'a> {
    /// `(q − zp)·scale` with I8 codes `[k, n]` or unsigned nibbles `[k, n/2]` (low = even
    /// column); `scale`/`zp [k/block, n]`.
    Int { codes: &'a [u8], nibbles: bool, scale: Vec<f32>, zp: Vec<f32>, block: usize },
    /// One FP8 code per weight, decoded by `table`.
    Fp8 { codes: &'a [u8], table: Vec<f32> },
    /// `e2m1(q)·e4m3(scale)·global`, nibbles `[k, n/2]`, scale bytes `[k/16, n]`.
    Nvfp4 { codes: &'a [u8], scale: &'a [u8], global: f32 },
    /// `s0·q0 + s1·q1` from two E2M1 planes `[2, k, n/2]` and scales `[2, k/group, n]`.
    MxFp4x2 { codes: &'a [u8], scale: Vec<f32>, group: usize },
}

/// A `W [k, n]` weight read down its columns.
pub(super) struct Cols<'a> {
    codes: ColCodes<'a>,
    n: usize,
    k: usize,
}

/// Weights decoded per call along a column.
const COL_BLOCK: usize = 32;

/// The 4-bit code of column `j` in the packed byte row `row` (low nibble = even column).
fn col_nibble(row: &[u8], j: usize) -> u8 {
    (row[j / 2] >> (4 * (j % 2))) & 15
}

impl Rows for Cols<'_> {
    fn n(&self) -> usize {
        self.n
    }
    fn k(&self) -> usize {
        self.k
    }
    fn block(&self) -> usize {
        COL_BLOCK
    }
    fn decode(&self, j: usize, b: usize, out: &mut [f32]) {
        let (n, half) = (self.n, self.n / 2);
        let rows = (b * COL_BLOCK..).zip(out.iter_mut());
        match &self.codes {
            ColCodes::Int { codes, nibbles, scale, zp, block } => {
                for (kk, y) in rows {
                    let q = if *nibbles {
                        f32::from(col_nibble(&codes[kk * half..], j))
                    } else {
                        f32::from(codes[kk * n + j] as i8)
                    };
                    let p = (kk / block) * n + j;
                    *y = (q - zp[p]) * scale[p];
                }
            }
            ColCodes::Fp8 { codes, table } => {
                for (kk, y) in rows {
                    *y = table[usize::from(codes[kk * n + j])];
                }
            }
            ColCodes::Nvfp4 { codes, scale, global } => {
                for (kk, y) in rows {
                    let s = minifloat::decode(&ScaledFormat::F8E4M3, scale[(kk / 16) * n + j]);
                    *y = gguf::e2m1(col_nibble(&codes[kk * half..], j)) * s * global;
                }
            }
            ColCodes::MxFp4x2 { codes, scale, group } => {
                let (plane, splane) = (self.k * half, (self.k / group) * n);
                for (kk, y) in rows {
                    let s = (kk / group) * n + j;
                    let q0 = gguf::e2m1(col_nibble(&codes[kk * half..], j));
                    let q1 = gguf::e2m1(col_nibble(&codes[plane + kk * half..], j));
                    *y = scale[s] * q0 + scale[splane + s] * q1;
                }
            }
        }
    }
}

/// The weight operands of a `DequantMatMul` (everything after `x`) as rows, for `x`'s inner
/// size `k` and the output's `n`; checks every size the kernel relies on.
pub(super) fn dequant_rows<'a>(scheme: &QuantScheme, ops: &[In<'a>], n: usize, k: usize) -> Result<Box<dyn Rows + 'a>, String> {
    let w = ops[0];
    let need_codes = |len: usize| need_len("w_q", w.bytes.len(), len);
    let cols = |codes| -> Result<Box<dyn Rows + 'a>, String> { Ok(Box::new(Cols { codes, n, k })) };
    match *scheme {
        QuantScheme::Gguf(t) => Ok(Box::new(Gguf::new(t, w.bytes, n, k)?)),
        QuantScheme::MlxAffine { bits, group_size } => {
            let (scales, biases) = (widen_f32(ops[1])?, widen_f32(ops[2])?);
            Ok(Box::new(MlxAffine::new(w.bytes, scales, biases, usize::from(bits), group_size, (n, k))?))
        }
        QuantScheme::MlxMxfp4 { group } => Ok(Box::new(MlxFp::new(w.bytes, ops[1].bytes, 4, group, n, k)?)),
        QuantScheme::MlxMxfp8 { group } => Ok(Box::new(MlxFp::new(w.bytes, ops[1].bytes, 8, group, n, k)?)),
        QuantScheme::Int8Block { block_size } | QuantScheme::Int8BlockAsym { block_size } | QuantScheme::Int4Block { block_size } => {
            check_groups(k, block_size)?;
            let nibbles = matches!(scheme, QuantScheme::Int4Block { .. });
            need_codes(if nibbles { k * n.div_ceil(2) } else { k * n })?;
            let (scale, zp) = (widen_f32(ops[1])?, widen_f32(ops[2])?);
            need_len("scale", scale.len(), k / block_size * n)?;
            need_len("zp", zp.len(), k / block_size * n)?;
            cols(ColCodes::Int { codes: w.bytes, nibbles, scale, zp, block: block_size })
        }
        QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => {
            need_codes(k * n)?;
            let f = if *scheme == QuantScheme::Fp8E4m3 { ScaledFormat::F8E4M3 } else { ScaledFormat::F8E5M2 };
            cols(ColCodes::Fp8 { codes: w.bytes, table: (0..=255).map(|c| minifloat::decode(&f, c)).collect() })
        }
        QuantScheme::Nvfp4Block => {
            check_groups(k, 16)?;
            need_codes(k * n.div_ceil(2))?;
            need_len("scale", ops[1].bytes.len(), k / 16 * n)?;
            let global = widen_f32(ops[2])?;
            need_len("global_scale", global.len(), 1)?;
            cols(ColCodes::Nvfp4 { codes: w.bytes, scale: ops[1].bytes, global: global[0] })
        }
        QuantScheme::MxFp4x2Block { group } => {
            check_groups(k, group)?;
            need_codes(2 * k * n.div_ceil(2))?;
            let scale = if ops[1].dtype == DType::U8 {
                ops[1].bytes.iter().map(|&e| minifloat::e8m0(e)).collect()
            } else {
                widen_f32(ops[1])?
            };
            need_len("scale", scale.len(), 2 * (k / group) * n)?;
            cols(ColCodes::MxFp4x2 { codes: w.bytes, scale, group })
        }
    }
}
