//! x86-64 kernels of the `Q8Blocks` product over K-quant [`Panels`] ([`super::q8k`]): per
//! super-block, each 32-byte load of a panel holds four code bytes of each of its 8 rows, and
//! against four activation codes broadcast to every lane `maddubs` + `madd` (AVX2) or one
//! `vpdpbusd` (AVX-512 VNNI) add each row's products into its own i32 lane, one accumulator per
//! sub-block. The sub-blocks' integer scales (the 6-bit fields of `Q4_K`/`Q5_K` unpacked for the
//! 8 rows at once, `Q6_K`'s i8 bytes) multiply those lanes, the minimums the activation sums;
//! the integer sums are exact and the f32 steps are the portable kernel's, so every kernel
//! gives the same bits.

use super::panels::{Panels, Sums};
use super::q8_simd::TILE;
use super::q8k::{Q8KRows, GROUP, QK_K};
use rlx_ir::ops::quant::GgufType;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// One instantiation: panel `p` × `R` activation rows from `m0`.
#[cfg(target_arch = "x86_64")]
type Fixed = unsafe fn(&Panels, usize, &Q8KRows, usize, &mut Sums);

/// The instantiations of a kernel for each weight type (`Q4_K`, `Q5_K`, `Q6_K`) by row count.
macro_rules! table {
    ($k4:ident, $k6:ident) => {
        [
            [$k4::<false, 1>, $k4::<false, 2>, $k4::<false, 3>, $k4::<false, 4>],
            [$k4::<true, 1>, $k4::<true, 2>, $k4::<true, 3>, $k4::<true, 4>],
            [$k6::<1>, $k6::<2>, $k6::<3>, $k6::<4>],
        ]
    };
}

/// Runs the instantiations for `w`'s type over `rows`, [`TILE`] at a time.
///
/// # Safety
/// The instantiations' features must be present; `1 ≤ rows ≤ out.len()`, and `p`, `m0 + rows`
/// inside `w` and `a`.
#[cfg(target_arch = "x86_64")]
unsafe fn pick(w: &Panels, p: usize, a: &Q8KRows, m0: usize, rows: usize, out: &mut Sums, table: [[Fixed; TILE]; 3]) {
    let form = match w.t {
        GgufType::Q4_K => 0,
        GgufType::Q5_K => 1,
        _ => 2,
    };
    for c in (0..rows).step_by(TILE) {
        table[form][TILE.min(rows - c) - 1](w, p, a, m0 + c, &mut out[c..])
    }
}

/// The AVX2 kernel; only `q8_simd::available` hands it out.
#[cfg(target_arch = "x86_64")]
pub(super) fn avx2(w: &Panels, p: usize, a: &Q8KRows, m0: usize, rows: usize, out: &mut Sums) {
    // Safety: `available` checked AVX2, FMA and F16C; `Panels::matmul` passes rows inside.
    unsafe { pick(w, p, a, m0, rows, out, table!(k4_avx2, k6_avx2)) }
}

/// The AVX-512 VNNI kernel; only `q8_simd::available` hands it out.
#[cfg(target_arch = "x86_64")]
pub(super) fn vnni(w: &Panels, p: usize, a: &Q8KRows, m0: usize, rows: usize, out: &mut Sums) {
    // Safety: `available` checked AVX2, FMA, F16C, AVX512-VNNI and AVX512-VL; rows inside.
    unsafe { pick(w, p, a, m0, rows, out, table!(k4_vnni, k6_vnni)) }
}

/// Panel byte offsets of a `Q4_K`/`Q5_K` super-block: the 8 rows' f16 `d`, their f16 `dmin`,
/// the 12 packed scale bytes (byte `s` of the rows at `K4_SCALES + 8·s`), `Q5_K`'s fifth bits,
/// and the codes after them.
const K4_DMIN: usize = 16;
const K4_SCALES: usize = 32;
const K4_CODES: usize = 128;
/// Where `Q5_K`'s codes start, after its 32 bytes of fifth bits per row.
const K5_CODES: usize = K4_CODES + 8 * 32;
/// Panel byte offsets of a `Q6_K` super-block: low nibbles, high bit pairs, the 16 i8 scales
/// (scale `g` of the rows at `K6_SCALES + 8·g`), and the rows' f16 `d`.
const K6_HIGH: usize = 8 * 128;
const K6_SCALES: usize = K6_HIGH + 8 * 64;
const K6_D: usize = K6_SCALES + 8 * 16;

/// One pair of panel kernels per instruction set, differing only in `$dot(acc, u, s)`: `acc`
/// plus, per i32 lane, the four products of unsigned bytes `u` and signed bytes `s`.
macro_rules! k_kernels {
    ($k4:ident, $k6:ident, $features:literal, $dot:expr) => {
        /// `Q4_K` (`FIVE`: `Q5_K`) panel `p` × activation rows `m0 .. m0 + R`.
        ///
        /// # Safety
        /// The CPU must have the enabled features; `p` is a panel of `w` (of the type `FIVE`
        /// names), and rows `m0 .. m0 + R` are in `a`, which has `w.blocks` blocks per row.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $k4<const FIVE: bool, const R: usize>(w: &Panels, p: usize, a: &Q8KRows, m0: usize, out: &mut Sums) {
            let (blocks, len) = (w.blocks, w.block_len);
            let (low, bits45, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30), _mm256_set1_epi8(0x10));
            let mut acc = [_mm256_setzero_ps(); R];
            // The unpacked 6-bit fields of the 8 rows: scales of sub-blocks 0–7, then minimums,
            // each as 8 bytes, one per row.
            let mut fields = [0u8; 128];
            let panel = w.data().as_ptr().add(p * blocks * len);
            for b in 0..blocks {
                let blk = panel.add(b * len);
                let s = |i: usize| _mm256_loadu_si256(blk.add(K4_SCALES + 32 * i).cast());
                let (s0, s1, s2) = (s(0), s(1), s(2));
                let six = _mm256_set1_epi8(63);
                let top = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16(v, 2), bits45);
                let dst = fields.as_mut_ptr().cast::<__m256i>();
                _mm256_storeu_si256(dst, _mm256_and_si256(s0, six));
                _mm256_storeu_si256(dst.add(1), _mm256_or_si256(_mm256_and_si256(s2, low), top(s0)));
                _mm256_storeu_si256(dst.add(2), _mm256_and_si256(s1, six));
                _mm256_storeu_si256(dst.add(3), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), low), top(s1)));
                let field = |i: usize| _mm256_cvtepu8_epi32(_mm_loadl_epi64(fields.as_ptr().add(8 * i).cast()));
                let xi: [usize; R] = std::array::from_fn(|r| (m0 + r) * blocks + b);
                let x: [*const u8; R] = std::array::from_fn(|r| a.q.as_ptr().add(xi[r] * QK_K).cast());
                let four = |r: usize, at: usize| _mm256_set1_epi32(x[r].add(at).cast::<i32>().read_unaligned());
                let mut isum = [_mm256_setzero_si256(); R];
                let mut msum = [_mm256_setzero_si256(); R];
                for j in 0..8 {
                    let m = field(8 + j);
                    for r in 0..R {
                        let sums = a.sums.as_ptr().add(xi[r] * (QK_K / GROUP) + 2 * j);
                        msum[r] = _mm256_add_epi32(msum[r], _mm256_mullo_epi32(m, _mm256_set1_epi32(*sums + *sums.add(1))));
                    }
                }
                let codes = blk.add(if FIVE { K5_CODES } else { K4_CODES });
                for pair in 0..4 {
                    let mut sum = [[_mm256_setzero_si256(); 2]; R];
                    let shift = _mm_cvtsi32_si128(2 * pair as i32);
                    for c in 0..8 {
                        let v = _mm256_loadu_si256(codes.add(32 * (8 * pair + c)).cast());
                        let (mut lo, mut hi) = (_mm256_and_si256(v, low), _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
                        if FIVE {
                            let h = _mm256_srl_epi16(_mm256_loadu_si256(blk.add(K4_CODES + 32 * c).cast()), shift);
                            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
                            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
                        }
                        for r in 0..R {
                            sum[r][0] = $dot(sum[r][0], lo, four(r, 64 * pair + 4 * c));
                            sum[r][1] = $dot(sum[r][1], hi, four(r, 64 * pair + 32 + 4 * c));
                        }
                    }
                    let (sc0, sc1) = (field(2 * pair), field(2 * pair + 1));
                    for r in 0..R {
                        let scaled = _mm256_add_epi32(_mm256_mullo_epi32(sum[r][0], sc0), _mm256_mullo_epi32(sum[r][1], sc1));
                        isum[r] = _mm256_add_epi32(isum[r], scaled);
                    }
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.cast()));
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(K4_DMIN).cast()));
                for r in 0..R {
                    let dx = _mm256_set1_ps(*a.d.get_unchecked(xi[r]));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, dx), acc[r]);
                    acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[r]), _mm256_mul_ps(dmin, dx), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }

        /// `Q6_K` panel `p` × activation rows `m0 .. m0 + R`: unsigned 6-bit codes, their
        /// offset of −32 taken off each sub-block's sum as 32 times the activation sum.
        ///
        /// # Safety
        /// As for the `Q4_K` kernel, with `w` of `Q6_K`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $k6<const R: usize>(w: &Panels, p: usize, a: &Q8KRows, m0: usize, out: &mut Sums) {
            let (blocks, len) = (w.blocks, w.block_len);
            let (low, bits45) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
            let mut acc = [_mm256_setzero_ps(); R];
            let panel = w.data().as_ptr().add(p * blocks * len);
            for b in 0..blocks {
                let blk = panel.add(b * len);
                let xi: [usize; R] = std::array::from_fn(|r| (m0 + r) * blocks + b);
                let x: [*const u8; R] = std::array::from_fn(|r| a.q.as_ptr().add(xi[r] * QK_K).cast());
                let four = |r: usize, at: usize| _mm256_set1_epi32(x[r].add(at).cast::<i32>().read_unaligned());
                let mut isum = [_mm256_setzero_si256(); R];
                for half in 0..2 {
                    for part in 0..2 {
                        // Sub-blocks of 32 `4·half + t`, values 16·part .. 16·part + 16 of each.
                        let mut sum = [[_mm256_setzero_si256(); 4]; R];
                        for c in 4 * part..4 * part + 4 {
                            let q0 = _mm256_loadu_si256(blk.add(32 * (16 * half + c)).cast());
                            let q1 = _mm256_loadu_si256(blk.add(32 * (16 * half + 8 + c)).cast());
                            let h = _mm256_loadu_si256(blk.add(K6_HIGH + 32 * (8 * half + c)).cast());
                            let codes = [
                                _mm256_or_si256(_mm256_and_si256(q0, low), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45)),
                                _mm256_or_si256(_mm256_and_si256(q1, low), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45)),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), low), _mm256_and_si256(h, bits45)),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), low), _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45)),
                            ];
                            for r in 0..R {
                                for (t, &code) in codes.iter().enumerate() {
                                    sum[r][t] = $dot(sum[r][t], code, four(r, 128 * half + 32 * t + 4 * c));
                                }
                            }
                        }
                        for t in 0..4 {
                            let g = 8 * half + 2 * t + part;
                            let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(blk.add(K6_SCALES + 8 * g).cast()));
                            for r in 0..R {
                                let offset = _mm256_set1_epi32(32 * *a.sums.get_unchecked(xi[r] * (QK_K / GROUP) + g));
                                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(_mm256_sub_epi32(sum[r][t], offset), sc));
                            }
                        }
                    }
                }
                let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(K6_D).cast()));
                for r in 0..R {
                    let dx = _mm256_set1_ps(*a.d.get_unchecked(xi[r]));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, dx), acc[r]);
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
}

k_kernels!(k4_avx2, k6_avx2, "avx2,fma,f16c", |acc, u, s| _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))));
k_kernels!(k4_vnni, k6_vnni, "avx2,fma,f16c,avx512vnni,avx512vl", |acc, u, s| _mm256_dpbusd_epi32(acc, u, s));
