//! x86-64 [`Kernels`] of the `Q8Blocks` product over [`Panels`]: per block, each 32-byte load
//! of a panel holds four codes of each of its 8 rows; against four activation codes broadcast
//! to every lane, `maddubs` + `madd` (AVX2) or one `vpdpbusd` (AVX-512 VNNI) adds each row's
//! products into its own i32 lane — unsigned nibble codes (with `Q5_0`/`Q5_1`'s fifth bits,
//! spread from each row's 32-bit mask to its bytes by a multiply, or by a byte test and a
//! masked add on AVX-512BW) times signed activation codes, or
//! `Q8_0`'s magnitudes times sign-adjusted activation codes. The integer sums are exact and
//! the f32 steps are the portable kernel's, so every kernel gives the same bits.

use super::panels::{Kernels, Panels, Sums, PORTABLE};
use super::q8::{Q8Rows, QK};
use rlx_ir::ops::quant::GgufType;

/// The fastest kernels this CPU runs: AVX-512 VNNI, AVX2, or the portable ones.
pub(super) fn best() -> Kernels {
    available().first().map_or(PORTABLE, |k| k.1)
}

/// The SIMD kernels this CPU runs, fastest first, each with the K-quants' kernels of the same
/// instruction set ([`super::q8k_simd`]).
pub(super) fn available() -> Vec<(&'static str, Kernels)> {
    let mut out = Vec::new();
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
        if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("avx512bw") {
            if is_x86_feature_detected!("avx512f") {
                out.push(("vnni512", Kernels { blocks: vnni512, super_blocks: super::q8k_simd::vnni }));
            }
            out.push(("vnni", Kernels { blocks: vnni, super_blocks: super::q8k_simd::vnni }));
        }
        out.push(("avx2", Kernels { blocks: avx2, super_blocks: super::q8k_simd::avx2 }));
    }
    out
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// One instantiation: panel `p` × `R` activation rows from `m0`.
#[cfg(target_arch = "x86_64")]
type Fixed = unsafe fn(&Panels, usize, &Q8Rows, usize, &mut Sums);

/// The most activation rows of one instantiation of the 256-bit kernels.
pub(super) const TILE: usize = 4;

/// The instantiations of a kernel `$k` for a code form, by row count.
macro_rules! by_rows {
    ($k:ident, $nibbles:literal, $min:literal, $fifth:literal) => {
        [
            $k::<$nibbles, $min, $fifth, 1>,
            $k::<$nibbles, $min, $fifth, 2>,
            $k::<$nibbles, $min, $fifth, 3>,
            $k::<$nibbles, $min, $fifth, 4>,
        ]
    };
}

/// The instantiations of a kernel `$k` for every type, in the order [`pick`] reads them.
macro_rules! forms {
    ($k:ident) => {
        [
            by_rows!($k, true, false, false),
            by_rows!($k, true, true, false),
            by_rows!($k, true, false, true),
            by_rows!($k, true, true, true),
            by_rows!($k, false, false, false),
        ]
    };
}

/// Runs the instantiations for `w`'s type over `rows`, [`TILE`] at a time.
///
/// # Safety
/// The instantiations' features must be present; `1 ≤ rows ≤ out.len()`, and `p`, `m0 + rows`
/// inside `w` and `a`.
#[cfg(target_arch = "x86_64")]
unsafe fn pick(w: &Panels, p: usize, a: &Q8Rows, m0: usize, rows: usize, out: &mut Sums, table: [[Fixed; TILE]; 5]) {
    let form = match w.t {
        GgufType::Q4_0 => 0,
        GgufType::Q4_1 => 1,
        GgufType::Q5_0 => 2,
        GgufType::Q5_1 => 3,
        _ => 4,
    };
    for c in (0..rows).step_by(TILE) {
        table[form][TILE.min(rows - c) - 1](w, p, a, m0 + c, &mut out[c..])
    }
}

/// The AVX2 kernel; only [`available`] hands it out.
#[cfg(target_arch = "x86_64")]
fn avx2(w: &Panels, p: usize, a: &Q8Rows, m0: usize, rows: usize, out: &mut Sums) {
    // Safety: `available` checked AVX2, FMA and F16C; `Panels::matmul` passes rows inside.
    unsafe { pick(w, p, a, m0, rows, out, forms!(panel_avx2)) }
}

/// The 512-bit AVX-512 VNNI kernel of [`super::q8_zmm`] for the types it takes, else [`vnni`];
/// only [`available`] hands it out.
#[cfg(target_arch = "x86_64")]
fn vnni512(w: &Panels, p: usize, a: &Q8Rows, m0: usize, rows: usize, out: &mut Sums) {
    if super::q8_zmm::supports(w.t) {
        // Safety: `available` checked AVX2, FMA, F16C and AVX-512 F, VNNI, VL and BW; rows inside.
        unsafe { super::q8_zmm::run(w, p, a, m0, rows, out) }
    } else {
        vnni(w, p, a, m0, rows, out)
    }
}

/// The AVX-512 VNNI kernel; only [`available`] hands it out.
#[cfg(target_arch = "x86_64")]
fn vnni(w: &Panels, p: usize, a: &Q8Rows, m0: usize, rows: usize, out: &mut Sums) {
    // Safety: `available` checked AVX2, FMA, F16C, AVX512-VNNI, -VL and -BW; rows inside.
    unsafe { pick(w, p, a, m0, rows, out, forms!(panel_vnni)) }
}

/// One panel kernel per instruction set, differing only in `$dot(acc, u, s)`: `acc` plus,
/// per i32 lane, the four products of unsigned bytes `u` and signed bytes `s`; and in
/// `$fifth(v, high, e)`: the nibble codes `v` of values `e .. e + 4` of each lane with the
/// fifth bits of the lane's 32-bit mask in `high` set on bit 4.
macro_rules! panel_kernel {
    ($name:ident, $features:literal, $dot:expr, $fifth:ident) => {
        /// Panel `p` × activation rows `m0 .. m0 + R`; `NIBBLES`: 4-bit codes (`Q4_0`, `Q4_1`,
        /// and with `FIFTH` the fifth bits of `Q5_0`, `Q5_1`), else `Q8_0`'s signed bytes;
        /// `MIN`: `Q4_1`/`Q5_1`'s minimums follow the scales.
        ///
        /// # Safety
        /// The CPU must have the enabled features; `p` is a panel of `w`, and rows
        /// `m0 .. m0 + R` are in `a`, which has `w.blocks` blocks per row.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<const NIBBLES: bool, const MIN: bool, const FIFTH: bool, const R: usize>(
            w: &Panels,
            p: usize,
            a: &Q8Rows,
            m0: usize,
            out: &mut Sums,
        ) {
            let (blocks, len) = (w.blocks, w.block_len);
            let high_at = if MIN { 32 } else { 16 };
            let codes_at = if FIFTH { high_at + 32 } else { high_at };
            let offset = if FIFTH { 16 } else { 8 };
            let mask = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); R];
            let panel = w.data().as_ptr().add(p * blocks * len);
            for b in 0..blocks {
                let blk = panel.add(b * len);
                let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.cast()));
                let codes = blk.add(codes_at);
                let x: [*const u8; R] = std::array::from_fn(|r| a.q.as_ptr().add(((m0 + r) * blocks + b) * QK).cast());
                let four = |r: usize, at: usize| _mm256_set1_epi32(x[r].add(at).cast::<i32>().read_unaligned());
                let mut sum = [[_mm256_setzero_si256(); 2]; R];
                if NIBBLES {
                    let high = if FIFTH { _mm256_loadu_si256(blk.add(high_at).cast()) } else { _mm256_setzero_si256() };
                    for i in 0..4 {
                        let v = _mm256_loadu_si256(codes.add(32 * i).cast());
                        let (mut lo, mut hi) = (_mm256_and_si256(v, mask), _mm256_and_si256(_mm256_srli_epi16(v, 4), mask));
                        if FIFTH {
                            lo = $fifth(lo, high, 4 * i);
                            hi = $fifth(hi, high, 16 + 4 * i);
                        }
                        for r in 0..R {
                            sum[r][0] = $dot(sum[r][0], lo, four(r, 4 * i));
                            sum[r][1] = $dot(sum[r][1], hi, four(r, 16 + 4 * i));
                        }
                    }
                } else {
                    for g in 0..8 {
                        let v = _mm256_loadu_si256(codes.add(32 * g).cast());
                        let mag = _mm256_sign_epi8(v, v);
                        for r in 0..R {
                            sum[r][g % 2] = $dot(sum[r][g % 2], mag, _mm256_sign_epi8(four(r, 4 * g), v));
                        }
                    }
                }
                for r in 0..R {
                    let xi = (m0 + r) * blocks + b;
                    let mut s = _mm256_add_epi32(sum[r][0], sum[r][1]);
                    if NIBBLES && !MIN {
                        s = _mm256_sub_epi32(s, _mm256_set1_epi32(offset * *a.sum.get_unchecked(xi)));
                    }
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(*a.d.get_unchecked(xi)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[r]);
                    if MIN {
                        let m = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(16).cast()));
                        acc[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(*a.s.get_unchecked(xi)), acc[r]);
                    }
                }
            }
            for r in 0..R {
                _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
            }
        }
    };
}

panel_kernel!(
    panel_avx2,
    "avx2,fma,f16c",
    |acc, u, s| _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))),
    fifth_avx2
);
panel_kernel!(panel_vnni, "avx2,fma,f16c,avx512vnni,avx512vl,avx512bw", |acc, u, s| _mm256_dpbusd_epi32(acc, u, s), fifth_bw);

/// `$fifth` of the AVX2 kernel: the lane's 4-bit field of bits `e ..` times 0x02040810 is the
/// field shifted by 4, 11, 18 and 25 (no carries), so its bit `b` lands on bit 4 of byte `b`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn fifth_avx2(v: __m256i, high: __m256i, e: usize) -> __m256i {
    let field = _mm256_and_si256(_mm256_srl_epi32(high, _mm_cvtsi32_si128(e as i32)), _mm256_set1_epi32(0xF));
    _mm256_or_si256(v, _mm256_and_si256(_mm256_mullo_epi32(field, _mm256_set1_epi32(0x0204_0810)), _mm256_set1_epi8(0x10)))
}

/// `$fifth` with AVX-512BW: every byte of a lane picks the lane's byte holding bit `e`, byte
/// `b` is tested against bit `e + b`, and the set ones get 0x10 added (their bit 4 is clear).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512bw,avx512vl")]
#[inline]
unsafe fn fifth_bw(v: __m256i, high: __m256i, e: usize) -> __m256i {
    let first = _mm256_set_epi8(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0, 12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);
    let bytes = _mm256_shuffle_epi8(high, _mm256_add_epi8(first, _mm256_set1_epi8((e / 8) as i8)));
    let set = _mm256_test_epi8_mask(bytes, _mm256_set1_epi32((0x0804_0201u32 << (e % 8)) as i32));
    _mm256_mask_add_epi8(v, set, v, _mm256_set1_epi8(0x10))
}
