//! `DequantMatMul` under `Activations::Q8Blocks` (llama.cpp's CPU arithmetic) for GGUF
//! `Q4_0`, `Q4_1` and `Q8_0` weights: each activation row is rounded once to 8-bit blocks of
//! 32 ([`quantize`]), and each weight block meets its activation block in an exact integer
//! dot product, scaled by the product of the two blocks' f16 scales (plus `Q4_1`'s minimum
//! times the activation block's sum). The weights are read in the panel layout of
//! [`super::panels`], by the kernels there and in [`super::q8_simd`].

/// Values per block, of the weights and of the rounded activations.
pub(super) const QK: usize = 32;
/// Activation rows a kernel call takes: the rows sharing each load of weight codes in the
/// 512-bit kernels ([`super::q8_zmm`]); the 256-bit ones take them four at a time.
pub(super) const ROW_TILE: usize = 8;

/// Rows of activations rounded to 8-bit blocks of 32, block `i` covering values `32·i ..`.
pub(super) struct Q8Rows {
    /// The codes, `[rows, k]`.
    pub q: Vec<i8>,
    /// The codes plus 128 as unsigned bytes, `[rows, k]`: the unsigned operand of `vpdpbusd`
    /// against signed `Q8_0` weights.
    pub u: Vec<u8>,
    /// Per block: the scale `max|x|/127` rounded to f16 (ggml stores it as f16).
    pub d: Vec<f32>,
    /// Per block: `Σq` times the unrounded scale, rounded to f16 (ggml's Q8_1 `s`).
    pub s: Vec<f32>,
    /// Per block: `Σq` (for `Q4_0`'s offset of −8 in the integer sum).
    pub sum: Vec<i32>,
    /// Per pair of rows `(2i, 2i + 1)` and block `b`, at `i·blocks + b`: `[d, d', s, s']`, the
    /// two rows' `d` and `s` side by side (one 64-bit broadcast each in the 512-bit kernels,
    /// which finish two rows in one register).
    pub pairs: Vec<[f32; 4]>,
}

/// Rounds `x` (rows of `blocks` 32-blocks) as ggml's x86 `quantize_row_q8_0`/`_q8_1` do:
/// `q = round_half_even(x·(127/max|x|))`, all-zero codes for an all-zero block.
pub(super) fn quantize(x: &[f32], blocks: usize) -> Q8Rows {
    let n = x.len() / QK;
    let mut rows = Q8Rows { q: vec![0; n * QK], u: Vec::new(), d: vec![0.0; n], s: vec![0.0; n], sum: vec![0; n], pairs: Vec::new() };
    round(x, &mut rows);
    rows.u = rows.q.iter().map(|&q| (q as u8) ^ 0x80).collect();
    let blocks = blocks.max(1);
    rows.pairs = (0..n / blocks / 2 * blocks)
        .map(|i| {
            let first = (i / blocks * 2) * blocks + i % blocks;
            let second = first + blocks;
            [rows.d[first], rows.d[second], rows.s[first], rows.s[second]]
        })
        .collect();
    rows
}

/// [`quantize_into`], or [`quantize_avx512`] (the same bits) where the CPU has AVX-512 BW,
/// with SSE4.1 where it has that.
fn round(x: &[f32], rows: &mut Q8Rows) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
        // Safety: AVX-512 F and BW were just detected.
        unsafe { quantize_avx512(x, rows) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("sse4.1") {
        // Safety: SSE4.1 was just detected.
        unsafe { quantize_sse41(x, rows) };
        return;
    }
    quantize_into(x, rows)
}

/// [`quantize_into`] compiled with SSE4.1, whose `roundps` rounds half to even in one
/// instruction (baseline x86-64 calls libm's `rintf` per value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn quantize_sse41(x: &[f32], rows: &mut Q8Rows) {
    quantize_into(x, rows)
}

/// [`quantize_into`] a block in two 512-bit registers: `|x|`'s maximum (a NaN left out, as
/// `f32::max` does), the product by `127/max`, converted rounding half to even (the default
/// rounding mode) with NaN products made 0 (as Rust's `as` does), and the codes' sum; the
/// scales are computed as there.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_avx512(x: &[f32], rows: &mut Q8Rows) {
    use std::arch::x86_64::*;
    let blocks = x.chunks_exact(QK).zip(rows.q.chunks_exact_mut(QK)).zip(&mut rows.d).zip(&mut rows.s).zip(&mut rows.sum);
    for ((((xb, qb), d_out), s_out), sum_out) in blocks {
        let halves = [_mm512_loadu_ps(xb.as_ptr()), _mm512_loadu_ps(xb.as_ptr().add(16))];
        let m = halves.iter().fold(_mm512_setzero_ps(), |m, &h| _mm512_max_ps(_mm512_abs_ps(h), m));
        let amax = _mm512_reduce_max_ps(m);
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if amax == 0.0 { 0.0 } else { 127.0 / amax });
        let mut sum = _mm512_setzero_si512();
        for (i, &h) in halves.iter().enumerate() {
            let v = _mm512_mul_ps(h, id);
            let q = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), v);
            sum = _mm512_add_epi32(sum, q);
            _mm_storeu_si128(qb.as_mut_ptr().add(16 * i).cast(), _mm512_cvtsepi32_epi8(q));
        }
        let sum = _mm512_reduce_add_epi32(sum);
        *d_out = half::f16::from_f32(d).to_f32();
        *s_out = half::f16::from_f32(d * sum as f32).to_f32();
        *sum_out = sum;
    }
}

#[inline(always)]
fn quantize_into(x: &[f32], rows: &mut Q8Rows) {
    let blocks = x.chunks_exact(QK).zip(rows.q.chunks_exact_mut(QK)).zip(&mut rows.d).zip(&mut rows.s).zip(&mut rows.sum);
    for ((((xb, qb), d_out), s_out), sum_out) in blocks {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax == 0.0 { 0.0 } else { 127.0 / amax };
        let mut sum = 0i32;
        for (q, &v) in qb.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
            sum += i32::from(*q);
        }
        *d_out = half::f16::from_f32(d).to_f32();
        *s_out = half::f16::from_f32(d * sum as f32).to_f32();
        *sum_out = sum;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use half::f16;
    use rlx_ir::ops::quant::GgufType;

    /// A xorshift stream of u32s.
    pub(in super::super) fn stream(seed: u32) -> impl FnMut() -> u32 {
        let mut s = seed.wrapping_mul(2_654_435_761) | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s
        }
    }

    /// Random blocks of `t`: arbitrary code bytes, scales and minimums of either sign.
    pub(in super::super) fn weight_blocks(t: GgufType, count: usize, seed: u32) -> Vec<u8> {
        let mut next = stream(seed);
        let mut out = Vec::new();
        for _ in 0..count {
            let mut scale = || f16::from_f32((next() % 2000) as f32 / 1000.0 - 1.0).to_le_bytes();
            out.extend(scale());
            if matches!(t, GgufType::Q4_1 | GgufType::Q5_1) {
                out.extend(scale());
            }
            let codes = match t {
                GgufType::Q8_0 => 32,
                GgufType::Q5_0 | GgufType::Q5_1 => 4 + 16,
                _ => 16,
            };
            out.extend((0..codes).map(|_| next() as u8));
        }
        out
    }

    /// Activations with an occasional large outlier (as real residual streams have), some
    /// exact ties of the rounding and an all-zero block.
    pub(in super::super) fn activations(len: usize, seed: u32) -> Vec<f32> {
        let mut next = stream(seed);
        let mut x: Vec<f32> = (0..len)
            .map(|_| {
                let v = (next() % 20001) as f32 / 10000.0 - 1.0;
                if next().is_multiple_of(97) { v * 40.0 } else { v }
            })
            .collect();
        if len >= 2 * QK {
            x[QK..2 * QK].fill(0.0);
        }
        x
    }

    /// The f64 reference: ggml's rounding of each activation block written out per value,
    /// the weight's own integer codes, and the block sums in f64.
    pub(in super::super) fn reference(t: GgufType, x: &[f32], w: &[u8], n: usize, k: usize) -> Vec<f64> {
        let (bb, blocks, rows) = (t.block_bytes(), k / QK, x.len() / k);
        let mut out = vec![0f64; rows * n];
        for m in 0..rows {
            for j in 0..n {
                let mut acc = 0f64;
                for b in 0..blocks {
                    let xb = &x[m * k + b * QK..m * k + (b + 1) * QK];
                    let amax = xb.iter().map(|v| v.abs()).fold(0f32, f32::max);
                    let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
                    let xq: Vec<f64> = xb.iter().map(|&v| f64::from((v * inv).round_ties_even())).collect();
                    let d = f64::from(f16::from_f32(amax / 127.0).to_f32());
                    let s = f64::from(f16::from_f32(amax / 127.0 * xq.iter().sum::<f64>() as f32).to_f32());
                    let (wq, wd, wm) = decode(t, &w[(j * blocks + b) * bb..(j * blocks + b + 1) * bb]);
                    let dot: f64 = wq.iter().zip(&xq).map(|(a, b)| a * b).sum();
                    acc += wd * d * dot + wm * s;
                }
                out[m * n + j] = acc;
            }
        }
        out
    }

    /// A GGUF block of a 32-block type `t` as `(q, d, m)`, its values `d·q + m`: the codes
    /// with their offset (`Q4_0` −8, `Q5_0` −16), the f16 scale and minimum (0 where there is
    /// none), written from ggml's block tables.
    pub(in super::super) fn decode(t: GgufType, blk: &[u8]) -> (Vec<f64>, f64, f64) {
        let h = |o: usize| f64::from(f16::from_le_bytes([blk[o], blk[o + 1]]).to_f32());
        let nibble = |qs: usize, e: usize| f64::from((blk[qs + e % 16] >> (4 * (e / 16))) & 15);
        let fifth = |qh: usize, e: usize| f64::from((blk[qh + e / 8] >> (e % 8)) & 1) * 16.0;
        let q = (0..QK).map(|e| match t {
            GgufType::Q8_0 => f64::from(blk[2 + e] as i8),
            GgufType::Q4_0 => nibble(2, e) - 8.0,
            GgufType::Q4_1 => nibble(4, e),
            GgufType::Q5_0 => nibble(6, e) + fifth(2, e) - 16.0,
            _ => nibble(8, e) + fifth(4, e),
        });
        let m = if matches!(t, GgufType::Q4_1 | GgufType::Q5_1) { h(2) } else { 0.0 };
        (q.collect(), h(0), m)
    }

    /// Blocks decoded by gguf-py (`gguf.quants.dequantize`) against [`decode`]; made by
    /// `tools/fixtures/kquant_blocks.py`.
    #[test]
    fn blocks_decode_as_gguf_py_does() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/ir/gguf_kquant_blocks.json");
        let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for t in [GgufType::Q5_0, GgufType::Q5_1] {
            let cases = fixture["types"][format!("{t:?}")].as_array().unwrap();
            assert!(cases.len() >= 4, "{t:?}");
            for (i, case) in cases.iter().enumerate() {
                let bytes: Vec<u8> = case["bytes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
                let (q, d, m) = decode(t, &bytes);
                for (e, (want, q)) in case["values"].as_array().unwrap().iter().zip(q).enumerate() {
                    let want = want.as_f64().unwrap();
                    assert!((d * q + m - want).abs() <= 1e-6 * (1.0 + want.abs()), "{t:?} block {i} [{e}]: {} vs gguf-py {want}", d * q + m);
                }
            }
        }
    }

    /// Checks `got` against the f64 `want`, relative to the size of the terms summed.
    pub(in super::super) fn close(got: &[f32], want: &[f64], what: &str) {
        let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
        for (i, (g, e)) in got.iter().zip(want).enumerate() {
            assert!((f64::from(*g) - e).abs() <= 2e-6 * scale, "{what} [{i}]: {g} vs {e}");
        }
    }

    /// Every path of [`round`] this CPU has gives [`quantize_into`]'s bits, on random rows
    /// with outliers, ties, an all-zero block, infinities and NaNs.
    #[test]
    fn every_rounding_path_gives_the_portable_bits() {
        for (len, seed) in [(QK, 1), (4 * QK, 2), (48 * QK, 3)] {
            let mut x = activations(len, seed);
            x[3] = 2.5 * x[5];
            x[QK - 1] = -x[QK - 2];
            if len > 2 * QK {
                x[2 * QK + 7] = f32::NAN;
                x[3 * QK + 1] = f32::INFINITY;
            }
            let blocks = len / QK;
            let fresh = || Q8Rows { q: vec![0; len], u: Vec::new(), d: vec![0.0; blocks], s: vec![0.0; blocks], sum: vec![0; blocks], pairs: Vec::new() };
            let (mut want, mut got) = (fresh(), fresh());
            quantize_into(&x, &mut want);
            round(&x, &mut got);
            assert_eq!(got.q, want.q, "codes, {len} values");
            assert_eq!(got.sum, want.sum, "sums, {len} values");
            assert_eq!(got.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "scales");
            assert_eq!(got.s.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.s.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "s");
        }
    }

    #[test]
    fn rounding_follows_ggml() {
        let mut x = vec![0f32; QK];
        x[..6].copy_from_slice(&[127.0, 2.5, -3.5, 0.5, -0.5, 1.4999]);
        x[31] = -127.0;
        let r = quantize(&x, 1);
        assert_eq!(&r.q[..6], &[127, 2, -4, 0, 0, 1]);
        assert_eq!(r.q[31], -127);
        assert_eq!((r.d[0], r.s[0], r.sum[0]), (1.0, -1.0, -1));
        // 1/3 is not an f16: the stored scale is rounded, the codes use the exact one.
        let third: Vec<f32> = (0..QK).map(|i| if i == 0 { 127.0 / 3.0 } else { 10.0 / 3.0 }).collect();
        let r = quantize(&third, 1);
        assert_eq!((r.q[0], r.q[1]), (127, 10));
        assert_eq!(r.d[0], f16::from_f32(1.0 / 3.0).to_f32());
        assert_eq!(r.s[0], f16::from_f32((127.0 + 31.0 * 10.0) / 3.0).to_f32());
        let zero = quantize(&[0.0; QK], 1);
        assert!(zero.q.iter().all(|&q| q == 0) && zero.d[0] == 0.0 && zero.s[0] == 0.0);
    }
}
