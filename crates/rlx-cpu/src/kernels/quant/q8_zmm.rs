//! AVX-512 VNNI kernels of the `Q8Blocks` product over `Q4_0`, `Q4_1` and `Q8_0` [`Panels`] in
//! 512-bit registers, up to [`ROW_TILE`] activation rows per weight load: one 64-byte load of a
//! panel holds two 4-byte units of each of its 8 rows, permuted so that row `j`'s pair sits in
//! lanes `2j`, `2j + 1`; against eight activation codes broadcast as one 64-bit word, one
//! `vpdpbusd` adds 8 products of each row into its two lanes, half the instructions of the
//! 256-bit kernels of [`super::q8_simd`]. `Q8_0`'s signed weights meet the activation codes
//! plus 128 as unsigned bytes, and 128 times the weights' sum is taken off. The two lanes of
//! each row are added before the f32 steps, which are the portable kernel's, so the bits are
//! the same; with 4-bit codes two activation rows share those steps, one row in the even lanes
//! and the other in the odd ones (a permute each gathers the rows' lanes, and one add sums
//! them). `Q8_0`'s rows finish one by one: paired, they measured slower.

use super::panels::{Panels, Sums};
use super::q8::{Q8Rows, QK, ROW_TILE};
use rlx_ir::ops::quant::GgufType;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether these kernels take `t`.
pub(super) fn supports(t: GgufType) -> bool {
    matches!(t, GgufType::Q4_0 | GgufType::Q4_1 | GgufType::Q8_0)
}

/// One instantiation: panel `p` × `R` activation rows from `m0`.
#[cfg(target_arch = "x86_64")]
type Fixed = unsafe fn(&Panels, usize, &Q8Rows, usize, &mut Sums);

/// The instantiations of `panel` for a code form, by row count.
macro_rules! by_rows {
    ($nibbles:literal, $min:literal) => {
        [
            panel::<$nibbles, $min, 1>,
            panel::<$nibbles, $min, 2>,
            panel::<$nibbles, $min, 3>,
            panel::<$nibbles, $min, 4>,
            panel::<$nibbles, $min, 5>,
            panel::<$nibbles, $min, 6>,
            panel::<$nibbles, $min, 7>,
            panel::<$nibbles, $min, 8>,
        ]
    };
}

/// Panel `p` of a `Q4_0`, `Q4_1` or `Q8_0` weight × activation rows `m0 .. m0 + rows`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C; `w.t` is one [`supports`]
/// takes, `1 ≤ rows ≤ ROW_TILE`, `p` a panel of `w`, `m0` even and rows `m0 .. m0 + rows` in
/// `a`, which has `w.blocks` blocks per row.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn run(w: &Panels, p: usize, a: &Q8Rows, m0: usize, rows: usize, out: &mut Sums) {
    const TABLE: [[Fixed; ROW_TILE]; 3] = [by_rows!(true, false), by_rows!(true, true), by_rows!(false, false)];
    let form = match w.t {
        GgufType::Q4_0 => 0,
        GgufType::Q4_1 => 1,
        _ => 2,
    };
    TABLE[form][rows - 1](w, p, a, m0, out)
}

/// The panel's 8 f16 values at `at` as f32 in the even lanes, 0 in the odd ones.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn evens(at: *const u8) -> __m512 {
    _mm512_cvtph_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(at.cast())))
}

/// The panel's 8 f16 values at `at` as f32, each in two adjacent lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
#[inline]
unsafe fn twice(at: *const u8) -> __m512 {
    let x = _mm256_cvtepu16_epi32(_mm_loadu_si128(at.cast()));
    _mm512_cvtph_ps(_mm256_or_si256(x, _mm256_slli_epi32(x, 16)))
}

/// Two f32 at `at`, repeated over the lanes (even lanes the first).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn pair(at: *const f32) -> __m512 {
    _mm512_castsi512_ps(_mm512_set1_epi64(at.cast::<i64>().read_unaligned()))
}

/// Panel `p` × activation rows `m0 .. m0 + R`; `NIBBLES`: 4-bit codes (`Q4_0`, `Q4_1`), else
/// `Q8_0`'s signed bytes; `MIN`: `Q4_1`'s minimums follow the scales. With 4-bit codes rows
/// `2i`, `2i + 1` end each block in `acc[i]` (the first in the even lanes) and a last odd row
/// in `acc[R − 1]`; `Q8_0`'s row `r` in `acc[r]`.
///
/// # Safety
/// As [`run`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn panel<const NIBBLES: bool, const MIN: bool, const R: usize>(w: &Panels, p: usize, a: &Q8Rows, m0: usize, out: &mut Sums) {
    let (blocks, len) = (w.blocks, w.block_len);
    let codes_at = if MIN { 32 } else { 16 };
    let pairs = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    // Lane 2j of a row pair's sums: lane 2j of the first row's, then of its second's; lane
    // 2j + 1 of each for `second`. Their sum holds the first row's in the even lanes.
    let first: [i32; 16] = std::array::from_fn(|l| (l / 2 * 2 + l % 2 * 16) as i32);
    let second: [i32; 16] = std::array::from_fn(|l| (l / 2 * 2 + 1 + l % 2 * 16) as i32);
    let (first, second) = (_mm512_loadu_si512(first.as_ptr().cast()), _mm512_loadu_si512(second.as_ptr().cast()));
    let (mask, ones) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(1));
    let mut acc = [_mm512_setzero_ps(); R];
    let paired = if NIBBLES { R / 2 } else { 0 };
    let panel = w.data().as_ptr().add(p * blocks * len);
    let codes: *const u8 = if NIBBLES { a.q.as_ptr().cast() } else { a.u.as_ptr() };
    for b in 0..blocks {
        let blk = panel.add(b * len);
        let x: [*const u8; R] = std::array::from_fn(|r| codes.add(((m0 + r) * blocks + b) * QK));
        let eight = |r: usize, at: usize| _mm512_set1_epi64(x[r].add(at).cast::<i64>().read_unaligned());
        let units = |g: usize| _mm512_permutexvar_epi32(pairs, _mm512_loadu_si512(blk.add(codes_at + 64 * g).cast()));
        let mut sum = [_mm512_setzero_si512(); R];
        // `Q8_0`: 128 times the weights' sum of each lane.
        let mut bias = _mm512_setzero_si512();
        if NIBBLES {
            for g in 0..2 {
                let v = units(g);
                let (lo, hi) = (_mm512_and_si512(v, mask), _mm512_and_si512(_mm512_srli_epi16(v, 4), mask));
                for (r, s) in sum.iter_mut().enumerate() {
                    *s = _mm512_dpbusd_epi32(*s, lo, eight(r, 8 * g));
                    *s = _mm512_dpbusd_epi32(*s, hi, eight(r, 16 + 8 * g));
                }
            }
        } else {
            let mut weights = _mm512_setzero_si512();
            for g in 0..4 {
                let v = units(g);
                weights = _mm512_dpbusd_epi32(weights, ones, v);
                for (r, s) in sum.iter_mut().enumerate() {
                    *s = _mm512_dpbusd_epi32(*s, eight(r, 8 * g), v);
                }
            }
            bias = _mm512_slli_epi32(weights, 7);
        }
        let offset = |xi: usize| _mm512_set1_epi32(8 * *a.sum.get_unchecked(xi));
        let d = twice(blk);
        let m = if MIN { twice(blk.add(16)) } else { _mm512_setzero_ps() };
        for (i, pair_acc) in acc.iter_mut().enumerate().take(paired) {
            let (r, xi) = (2 * i, (m0 + 2 * i) * blocks + b);
            let mut s = _mm512_add_epi32(_mm512_permutex2var_epi32(sum[r], first, sum[r + 1]), _mm512_permutex2var_epi32(sum[r], second, sum[r + 1]));
            if !MIN {
                s = _mm512_sub_epi32(s, _mm512_mask_blend_epi32(0xAAAA, offset(xi), offset(xi + blocks)));
            }
            let ds = a.pairs.as_ptr().add((m0 / 2 + i) * blocks + b).cast::<f32>();
            *pair_acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, pair(ds)), *pair_acc);
            if MIN {
                *pair_acc = _mm512_fmadd_ps(m, pair(ds.add(2)), *pair_acc);
            }
        }
        for (r, row_acc) in acc.iter_mut().enumerate().skip(2 * paired) {
            let xi = (m0 + r) * blocks + b;
            let lanes = if NIBBLES { sum[r] } else { _mm512_sub_epi32(sum[r], bias) };
            let mut s = _mm512_add_epi32(lanes, _mm512_srli_epi64(lanes, 32));
            if NIBBLES && !MIN {
                s = _mm512_sub_epi32(s, offset(xi));
            }
            let scale = _mm512_mul_ps(evens(blk), _mm512_set1_ps(*a.d.get_unchecked(xi)));
            *row_acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, *row_acc);
            if MIN {
                *row_acc = _mm512_fmadd_ps(evens(blk.add(16)), _mm512_set1_ps(*a.s.get_unchecked(xi)), *row_acc);
            }
        }
    }
    let lanes = |v: __m512, odd: bool| {
        let v = _mm512_castps_si512(v);
        _mm512_cvtepi64_epi32(if odd { _mm512_srli_epi64(v, 32) } else { v })
    };
    for (i, &v) in acc.iter().enumerate().take(paired) {
        _mm256_storeu_si256(out[2 * i].as_mut_ptr().cast(), lanes(v, false));
        _mm256_storeu_si256(out[2 * i + 1].as_mut_ptr().cast(), lanes(v, true));
    }
    for (r, &v) in acc.iter().enumerate().skip(2 * paired) {
        _mm256_storeu_si256(out[r].as_mut_ptr().cast(), lanes(v, false));
    }
}

