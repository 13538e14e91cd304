//! Decoding of ggml/GGUF weight blocks (OPS.md §5 block-layout table): the semantics of the
//! `Gguf` quant schemes, shared by every backend and by model loaders.
//!
//! Each decoder turns one block of `block_bytes()` bytes into `block_size()` f32 values with
//! the arithmetic of ggml's reference `dequantize_row_*` (f16 fields widened exactly, one f32
//! rounding per operation, no fused multiply-add), so results are bit-identical to ggml and to
//! `gguf-py`'s `gguf.quants.dequantize`. The IQ* and TQ* types decode through ggml's grid and
//! sign tables, which rlx does not carry: [`decoder`] reports them as unsupported.

use super::GgufType;

/// Decodes one block: `block` holds exactly `block_bytes()` bytes, `out` takes exactly
/// `block_size()` values (callers check both; the decoders index within them).
pub type BlockDecoder = fn(block: &[u8], out: &mut [f32]);

/// The decoder of `t`, or an error naming it when rlx cannot decode it.
pub fn decoder(t: GgufType) -> Result<BlockDecoder, String> {
    use GgufType::*;
    Ok(match t {
        Q4_0 => q4_0,
        Q4_1 => q4_1,
        Q5_0 => q5_0,
        Q5_1 => q5_1,
        Q8_0 => q8_0,
        Q8_1 => q8_1,
        Q2_K => q2_k,
        Q3_K => q3_k,
        Q4_K => q4_k,
        Q5_K => q5_k,
        Q6_K => q6_k,
        Q8_K => q8_k,
        MXFP4 => mxfp4,
        NVFP4 => nvfp4,
        Q1_0 => q1_0,
        Q2_0 => q2_0,
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M | IQ4_NL | IQ4_XS | TQ1_0 | TQ2_0 => {
            return Err(format!(
                "unsupported scheme Gguf({t:?}): its blocks decode through ggml's grid/sign tables, which rlx does not carry"
            ))
        }
    })
}

/// Decodes a row of `out.len()` weights stored as consecutive `t` blocks in `bytes`.
pub fn dequantize_row(t: GgufType, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
    let decode = decoder(t)?;
    let need = t.row_bytes(out.len())?;
    if bytes.len() != need {
        return Err(format!("a {t:?} row of {} weights takes {need} bytes, got {}", out.len(), bytes.len()));
    }
    for (block, y) in bytes.chunks_exact(t.block_bytes()).zip(out.chunks_exact_mut(t.block_size())) {
        decode(block, y);
    }
    Ok(())
}

/// The IEEE binary16 at `b[at..at + 2]` (little-endian), widened exactly.
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// E2M1 code `q` (low 4 bits; bit 3 = sign) times two: ggml's `kvalues_mxfp4`, which keeps
/// the table integral and moves the factor ½ into the scale.
const E2M1_X2: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The value of the E2M1 (OCP MX FP4) code in the low 4 bits of `q`.
pub fn e2m1(q: u8) -> f32 {
    f32::from(E2M1_X2[usize::from(q & 15)]) * 0.5
}

/// `2^(e − 128)`, half an E8M0 scale (ggml's `GGML_E8M0_TO_FP32_HALF`), exact for every byte.
fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits((u32::from(e) - 1) << 23)
    }
}

/// Unsigned E4M3 (bias 7, subnormals `m·2^−9`; the top bit is ignored) as ggml decodes NVFP4
/// sub-block scales: codes `0x00` and `0x7F` are 0.
pub fn ue4m3(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let (exp, man) = (i32::from((x >> 3) & 15), f32::from(x & 7));
    if exp == 0 {
        man * 2f32.powi(-9)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// The 4-bit code of element `e` of a 32-weight legacy block: elements 0..15 in the low
/// nibbles of `qs[0..16]`, 16..31 in the high nibbles.
fn nibble(qs: &[u8], e: usize) -> u8 {
    if e < 16 {
        qs[e] & 15
    } else {
        qs[e - 16] >> 4
    }
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (e, y) in y.iter_mut().enumerate() {
        *y = f32::from(nibble(&b[2..18], e) as i8 - 8) * d;
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (e, y) in y.iter_mut().enumerate() {
        *y = f32::from(nibble(&b[4..20], e)) * d + m;
    }
}

/// The 5-bit code of element `e`: its nibble plus bit `e` of `qh` as bit 4.
fn five_bit(qh: u32, qs: &[u8], e: usize) -> u8 {
    nibble(qs, e) | ((((qh >> e) & 1) as u8) << 4)
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for (e, y) in y.iter_mut().enumerate() {
        *y = f32::from(five_bit(qh, &b[6..22], e) as i8 - 16) * d;
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for (e, y) in y.iter_mut().enumerate() {
        *y = f32::from(five_bit(qh, &b[8..24], e)) * d + m;
    }
}

/// `qs[e]·d` over signed bytes starting at `at`.
fn scaled_i8(b: &[u8], at: usize, d: f32, y: &mut [f32]) {
    for (y, &q) in y.iter_mut().zip(&b[at..]) {
        *y = f32::from(q as i8) * d;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    scaled_i8(b, 2, f16_at(b, 0), y);
}

/// `d:f16, s:f16, qs:i8[32]`: `s` (= d·Σqs) serves dot products only.
fn q8_1(b: &[u8], y: &mut [f32]) {
    scaled_i8(b, 4, f16_at(b, 0), y);
}

fn q8_k(b: &[u8], y: &mut [f32]) {
    scaled_i8(b, 4, f32::from_le_bytes([b[0], b[1], b[2], b[3]]), y);
}

/// The 2-bit code of element `e` of a 256-weight block (Q2_K, and Q3_K's low bits): byte
/// `32⌊e/128⌋ + e%32` of `qs`, bit pair `⌊(e%128)/32⌋`.
fn two_bit(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3
}

fn q2_k(b: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (j, y) in y.chunks_exact_mut(16).enumerate() {
        let sc = scales[j];
        let (dl, ml) = (d * f32::from(sc & 15), dmin * f32::from(sc >> 4));
        for (l, y) in y.iter_mut().enumerate() {
            *y = dl * f32::from(two_bit(qs, 16 * j + l)) - ml;
        }
    }
}

fn q3_k(b: &[u8], y: &mut [f32]) {
    let (hmask, qs, scales) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    for (j, y) in y.chunks_exact_mut(16).enumerate() {
        let lo = if j < 8 { scales[j] & 15 } else { scales[j - 8] >> 4 };
        let hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        let dl = d * f32::from((lo | (hi << 4)) as i8 - 32);
        for (l, y) in y.iter_mut().enumerate() {
            let e = 16 * j + l;
            let offset = if (hmask[e % 32] >> (e / 32)) & 1 == 1 { 0 } else { 4 };
            *y = dl * f32::from(two_bit(qs, e) as i8 - offset);
        }
    }
}

/// Scale and min of sub-block `j` (of 8) from the 12 packed 6-bit fields of Q4_K/Q5_K.
fn scale_min_k4(s: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Q4_K and Q5_K: 8 sub-blocks of 32, `y = d·sc·q − dmin·mn`; `qh` adds Q5_K's fifth bit.
fn k4_like(b: &[u8], qh: Option<&[u8]>, qs: &[u8], y: &mut [f32]) {
    let (d, dmin, scales) = (f16_at(b, 0), f16_at(b, 2), &b[4..16]);
    for (j, y) in y.chunks_exact_mut(32).enumerate() {
        let (sc, mn) = scale_min_k4(scales, j);
        let (dl, ml) = (d * f32::from(sc), dmin * f32::from(mn));
        let bytes = &qs[32 * (j / 2)..];
        for (l, y) in y.iter_mut().enumerate() {
            let mut q = (bytes[l] >> (4 * (j % 2))) & 15;
            if let Some(qh) = qh {
                q |= ((qh[l] >> j) & 1) << 4;
            }
            *y = dl * f32::from(q) - ml;
        }
    }
}

fn q4_k(b: &[u8], y: &mut [f32]) {
    k4_like(b, None, &b[16..144], y);
}

fn q5_k(b: &[u8], y: &mut [f32]) {
    k4_like(b, Some(&b[16..48]), &b[48..176], y);
}

fn q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for (e, y) in y.iter_mut().enumerate() {
        let (n, l, t) = (e / 128, e % 32, (e % 128) / 32);
        let lo = (ql[64 * n + l + 32 * (t % 2)] >> (4 * (t / 2))) & 15;
        let hi = (qh[32 * n + l] >> (2 * t)) & 3;
        let q = (lo | (hi << 4)) as i8 - 32;
        *y = d * f32::from(scales[e / 16] as i8) * f32::from(q);
    }
}

fn mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for (e, y) in y.iter_mut().enumerate() {
        *y = f32::from(E2M1_X2[usize::from(nibble(&b[1..17], e))]) * d;
    }
}

fn nvfp4(b: &[u8], y: &mut [f32]) {
    for (s, y) in y.chunks_exact_mut(16).enumerate() {
        let d = ue4m3(b[s]) * 0.5;
        let qs = &b[4 + 8 * s..12 + 8 * s];
        for (r, y) in y.iter_mut().enumerate() {
            let q = if r < 8 { qs[r] & 15 } else { qs[r - 8] >> 4 };
            *y = f32::from(E2M1_X2[usize::from(q)]) * d;
        }
    }
}

fn q1_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (e, y) in y.iter_mut().enumerate() {
        *y = if (b[2 + e / 8] >> (e % 8)) & 1 == 1 { d } else { -d };
    }
}

fn q2_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (e, y) in y.iter_mut().enumerate() {
        let q = (b[2 + e / 4] >> (2 * (e % 4))) & 3;
        *y = f32::from(q as i8 - 1) * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(t: GgufType, block: &[u8]) -> Vec<f32> {
        let mut y = vec![f32::NAN; t.block_size()];
        dequantize_row(t, block, &mut y).unwrap();
        y
    }

    /// `d = 0.5` as f16 bytes.
    const HALF: [u8; 2] = [0x00, 0x38];

    #[test]
    fn legacy_blocks_split_low_and_high_nibbles() {
        let mut b = [0u8; 18];
        b[..2].copy_from_slice(&HALF);
        b[2] = 0x9F; // element 0: 15, element 16: 9
        let y = decode(GgufType::Q4_0, &b);
        assert_eq!((y[0], y[16], y[1], y[17]), (3.5, 0.5, -4.0, -4.0));

        let mut b = [0u8; 22];
        b[..2].copy_from_slice(&HALF);
        b[2..6].copy_from_slice(&(1u32 << 16 | 1).to_le_bytes());
        b[6] = 0x21; // element 0: 1 | 16, element 16: 2 | 16
        let y = decode(GgufType::Q5_0, &b);
        assert_eq!((y[0], y[16], y[1]), (0.5, 1.0, -8.0));
    }

    #[test]
    fn k_quant_scales_unpack_six_bits() {
        // Q4_K sub-block 5 takes its scale from the low nibble of byte 9 plus the top bits of
        // byte 1, its min from the high nibble of byte 9 plus the top bits of byte 5.
        let mut b = [0u8; 144];
        b[..2].copy_from_slice(&HALF); // d
        b[2..4].copy_from_slice(&[0x00, 0x3C]); // dmin = 1
        b[4 + 1] = 0b1100_0000;
        b[4 + 5] = 0b0100_0000;
        b[4 + 9] = 0x27;
        b[16 + 64 + 3] = 0x50; // element 5·32 + 3 has code 5
        let y = decode(GgufType::Q4_K, &b);
        let (sc, mn) = (0x37, 0x12);
        assert_eq!(y[5 * 32 + 3], 0.5 * sc as f32 * 5.0 - mn as f32);
        assert_eq!(y[5 * 32 + 4], -(mn as f32));
    }

    #[test]
    fn fp4_types_scale_e2m1_codes() {
        let mut b = [0u8; 17];
        b[0] = 127; // 2^0
        b[1] = 0xF7; // element 0: 6, element 16: −6
        let y = decode(GgufType::MXFP4, &b);
        assert_eq!((y[0], y[16], y[1]), (6.0, -6.0, 0.0));
        assert_eq!(decode(GgufType::MXFP4, &[0; 17])[0], 0.0);

        let mut b = [0u8; 36];
        b[1] = 0x38; // sub-block 1 scale 1.0
        b[4 + 8] = 0x32; // sub-block 1: element 0 = 1.0, element 8 = 1.5
        let y = decode(GgufType::NVFP4, &b);
        assert_eq!((y[16], y[24], y[0]), (1.0, 1.5, 0.0));
        assert_eq!((ue4m3(0x7F), ue4m3(0x01), ue4m3(0x7E)), (0.0, 2f32.powi(-9), 448.0));
        assert_eq!(e2m1(0xF), -6.0);
    }

    #[test]
    fn rows_check_their_length_and_iq_types_are_unsupported() {
        let mut y = vec![0.0; 64];
        let e = dequantize_row(GgufType::Q8_0, &[0; 34], &mut y).unwrap_err();
        assert!(e.contains("takes 68 bytes, got 34"), "{e}");
        let e = dequantize_row(GgufType::Q4_K, &[0; 144], &mut y).unwrap_err();
        assert!(e.contains("not a multiple of the Q4_K block size 256"), "{e}");
        let e = decoder(GgufType::IQ2_XXS).unwrap_err();
        assert!(e.contains("unsupported scheme Gguf(IQ2_XXS)"), "{e}");
        for t in GgufType::ALL {
            let ok = decoder(t).is_ok();
            assert_eq!(ok, !format!("{t:?}").starts_with('I') && !format!("{t:?}").starts_with('T'), "{t:?}");
        }
    }
}
