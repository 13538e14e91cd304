//! x86-64 [`Tile`]s of the `Q8Blocks` product: each weight block's 32 codes are unpacked to
//! bytes once per tile and each activation block loaded once per tile; they meet in
//! `maddubs`/`madd` (AVX2) or one `vpdpbusd` (AVX-512 VNNI), unsigned weight magnitudes times
//! sign-adjusted activation codes. A tile of `COL_TILE` weight rows × up to `ROW_TILE`
//! activation rows keeps its accumulators in registers (one instantiation per row count).
//! The integer sums equal the portable kernel's exactly.

use super::q8::{block_bytes, tile_portable, Acc, Operands, Tile, COL_TILE, QK, ROW_TILE};
use rlx_ir::ops::quant::GgufType;

/// The fastest kernel this CPU runs: AVX-512 VNNI, AVX2, or the portable one.
pub(super) fn best() -> Tile {
    #[cfg(target_arch = "x86_64")]
    {
        let has_avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
        if has_avx2 && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
            return vnni as Tile;
        }
        if has_avx2 {
            return avx2 as Tile;
        }
    }
    tile_portable
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// A kernel instantiation: `C` weight rows from `j0` × `R` activation rows from `m0`, into
/// `acc[..C]`.
#[cfg(target_arch = "x86_64")]
type Fixed = unsafe fn(&Operands, usize, usize, &mut [[f32; ROW_TILE]]);

/// Runs a tile through the instantiations `full[rows − 1]` (all `COL_TILE` columns) or, for
/// a narrower edge tile, `one[rows − 1]` per column.
///
/// # Safety
/// The instantiations' features must be present; `cols ≤ COL_TILE`, `1 ≤ rows ≤ ROW_TILE`.
#[cfg(target_arch = "x86_64")]
unsafe fn run(o: &Operands, j0: usize, cols: usize, m0: usize, rows: usize, acc: &mut Acc, full: [Fixed; ROW_TILE], one: [Fixed; ROW_TILE]) {
    if cols == COL_TILE {
        full[rows - 1](o, j0, m0, acc);
    } else {
        for c in 0..cols {
            one[rows - 1](o, j0 + c, m0, &mut acc[c..]);
        }
    }
}

/// The AVX2 kernel; only [`best`] hands it out.
#[cfg(target_arch = "x86_64")]
fn avx2(o: &Operands, j0: usize, cols: usize, m0: usize, rows: usize, acc: &mut Acc) {
    let full: [Fixed; ROW_TILE] = [tile_avx2::<COL_TILE, 1>, tile_avx2::<COL_TILE, 2>, tile_avx2::<COL_TILE, 3>, tile_avx2::<COL_TILE, 4>];
    let one: [Fixed; ROW_TILE] = [tile_avx2::<1, 1>, tile_avx2::<1, 2>, tile_avx2::<1, 3>, tile_avx2::<1, 4>];
    // Safety: `best` checked AVX2, FMA and F16C; `matmul` passes whole blocks and rows.
    unsafe { run(o, j0, cols, m0, rows, acc, full, one) }
}

/// The AVX-512 VNNI kernel; only [`best`] hands it out.
#[cfg(target_arch = "x86_64")]
fn vnni(o: &Operands, j0: usize, cols: usize, m0: usize, rows: usize, acc: &mut Acc) {
    let full: [Fixed; ROW_TILE] = [tile_vnni::<COL_TILE, 1>, tile_vnni::<COL_TILE, 2>, tile_vnni::<COL_TILE, 3>, tile_vnni::<COL_TILE, 4>];
    let one: [Fixed; ROW_TILE] = [tile_vnni::<1, 1>, tile_vnni::<1, 2>, tile_vnni::<1, 3>, tile_vnni::<1, 4>];
    // Safety: `best` checked AVX2, FMA, F16C, AVX512-VNNI and AVX512-VL; whole blocks and rows.
    unsafe { run(o, j0, cols, m0, rows, acc, full, one) }
}

/// One tile kernel per instruction set, differing only in the 32-code dot product `$dot`
/// (eight i32 partial sums of unsigned × signed bytes).
macro_rules! tile_kernel {
    ($name:ident, $features:literal, $dot:expr) => {
        /// # Safety
        /// The CPU must have the enabled features; `o.w` holds weight rows `j0 .. j0 + C`,
        /// `o.a` activation rows `m0 .. m0 + R`, and `acc` at least `C` entries.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<const C: usize, const R: usize>(o: &Operands, j0: usize, m0: usize, acc: &mut [[f32; ROW_TILE]]) {
            let (t, bb) = (o.t, block_bytes(o.t));
            let mut vacc = [[_mm256_setzero_ps(); R]; C];
            let mut mins = [[0f32; R]; C];
            for b in 0..o.blocks {
                let mut y = [_mm256_setzero_si256(); R];
                let (mut dx, mut sx) = ([0f32; R], [0f32; R]);
                for r in 0..R {
                    let xi = (m0 + r) * o.blocks + b;
                    y[r] = _mm256_loadu_si256(o.a.q.as_ptr().add(xi * QK).cast());
                    dx[r] = *o.a.d.get_unchecked(xi);
                    sx[r] = *o.a.s.get_unchecked(xi);
                }
                for c in 0..C {
                    let blk = o.w.as_ptr().add((j0 + c) * o.row_bytes + b * bb);
                    let dw = super::simd::f16(blk);
                    let (codes, signed, min) = match t {
                        GgufType::Q8_0 => (_mm256_loadu_si256(blk.add(2).cast()), true, 0.0),
                        GgufType::Q4_1 => (nibbles(blk.add(4)), false, super::simd::f16(blk.add(2))),
                        _ => (_mm256_sub_epi8(nibbles(blk.add(2)), _mm256_set1_epi8(8)), true, 0.0),
                    };
                    let mags = if signed { _mm256_sign_epi8(codes, codes) } else { codes };
                    for r in 0..R {
                        let x = if signed { _mm256_sign_epi8(y[r], codes) } else { y[r] };
                        let dot: __m256i = $dot(mags, x);
                        vacc[c][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[r]), _mm256_cvtepi32_ps(dot), vacc[c][r]);
                        mins[c][r] += min * sx[r];
                    }
                }
            }
            for c in 0..C {
                for r in 0..R {
                    acc[c][r] = super::simd::hsum(vacc[c][r]) + mins[c][r];
                }
            }
        }
    };
}

tile_kernel!(tile_avx2, "avx2,fma,f16c", |u, s| _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
tile_kernel!(tile_vnni, "avx2,fma,f16c,avx512vnni,avx512vl", |u, s| _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s));

/// The 32 nibble codes at `p` (elements 0–15 low nibbles, 16–31 high) as bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let qs = _mm_loadu_si128(p.cast());
    let mask = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), mask), _mm_and_si128(qs, mask))
}

#[cfg(test)]
mod tests {
    use super::super::q8::tests::{activations, close, reference, weight_blocks};
    use super::super::q8::{matmul, tile_portable};
    use super::*;

    #[test]
    fn every_kernel_this_cpu_has_matches_the_f64_reference_and_the_portable_one() {
        #[cfg(target_arch = "x86_64")]
        let kernels: Vec<(&str, Tile)> = [
            ("avx2", is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"), avx2 as Tile),
            ("vnni", is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl"), vnni as Tile),
        ]
        .into_iter()
        .filter(|k| k.1 && is_x86_feature_detected!("f16c"))
        .map(|(n, _, k)| (n, k))
        .collect();
        #[cfg(not(target_arch = "x86_64"))]
        let kernels: Vec<(&str, Tile)> = Vec::new();
        if kernels.is_empty() {
            eprintln!("skipped: no SIMD kernel on this CPU");
        }
        for (name, kernel) in kernels {
            for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0] {
                for (rows, n, k) in [(1, 7, 64), (1, 8, 32), (2, 4, 32), (6, 8, 64), (7, 5, 96), (63, 3, 32), (129, 9, 128), (5, 300, 256)] {
                    let w = weight_blocks(t, n * k / QK, (rows + 5 * n + k) as u32);
                    let x = activations(rows * k, (7 * rows + n) as u32);
                    let (mut got, mut portable) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
                    matmul(t, &x, &w, n, k, &mut got, kernel);
                    matmul(t, &x, &w, n, k, &mut portable, tile_portable);
                    let what = format!("{name} {t:?} {rows}×{n}×{k}");
                    close(&got, &reference(t, &x, &w, n, k), &what);
                    close(&got, &portable.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), &what);
                }
            }
        }
    }
}
