//! AVX2 + FMA products of F32 activations with GGUF `Q4_0`, `Q4_1` and `Q8_0` weights (the
//! common llama.cpp weight types): each block's 32 codes are widened to f32 in registers and
//! multiplied there, never written out, and a decoded block serves a tile of activation rows.
//! The offsets `Q4_0`'s −8 and `Q4_1`'s `m` contribute `offset·Σx` per block, with `Σx`
//! summed once per row (`Q8_0` has no offset and sums nothing). Results equal the scalar path's ([`super::rows`]) up to the order of
//! the f32 additions.

use rayon::prelude::*;
use rlx_ir::ops::quant::GgufType;

/// Weights per block of every type here.
const QK: usize = 32;
/// Activation rows sharing each decoded block.
const ROW_TILE: usize = 4;
/// Multiply-adds below which a product runs on one thread.
const PAR_FLOPS: usize = 1 << 18;

/// Whether this CPU has the instructions the kernels use.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether `t` has a kernel here.
pub(super) fn supports(t: GgufType) -> bool {
    matches!(t, GgufType::Q4_0 | GgufType::Q4_1 | GgufType::Q8_0)
}

fn block_bytes(t: GgufType) -> usize {
    match t {
        GgufType::Q4_0 => 18,
        GgufType::Q4_1 => 20,
        _ => 34,
    }
}

/// `out [rows, n] = x [rows, k] · wᵀ` for `n` rows of `k / 32` blocks of type `t` in `w`.
/// The caller checked [`available`], [`supports`], `k % 32 == 0` and every length.
pub(super) fn matmul(t: GgufType, x: &[f32], w: &[u8], n: usize, k: usize, out: &mut [f32]) {
    if n == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / n;
    let blocks = k / QK;
    let xsum: Vec<f32> = match t {
        GgufType::Q8_0 => vec![0.0; x.len() / QK],
        _ => x.chunks_exact(QK).map(|c| c.iter().sum()).collect(),
    };
    let row_bytes = blocks * block_bytes(t);
    let per_task = if rows * n * k < PAR_FLOPS { n } else { n.div_ceil(8 * rayon::current_num_threads()) };
    let task = |j0: usize, dst: &mut [f32]| {
        let cols = dst.len() / rows;
        for c in 0..cols {
            let wr = &w[(j0 + c) * row_bytes..(j0 + c + 1) * row_bytes];
            for m0 in (0..rows).step_by(ROW_TILE) {
                let tile = ROW_TILE.min(rows - m0);
                let mut acc = [0f32; ROW_TILE];
                // Safety: `available()` was checked by the caller; slices hold whole blocks.
                unsafe { columns(t, wr, &x[m0 * k..(m0 + tile) * k], &xsum[m0 * blocks..(m0 + tile) * blocks], k, &mut acc[..tile]) };
                for (r, &v) in acc[..tile].iter().enumerate() {
                    dst[c * rows + r + m0] = v;
                }
            }
        }
    };
    if rows == 1 {
        if per_task >= n {
            task(0, out);
        } else {
            out.par_chunks_mut(per_task).enumerate().for_each(|(i, d)| task(i * per_task, d));
        }
        return;
    }
    let mut cm = vec![0f32; rows * n];
    cm.par_chunks_mut(per_task * rows).enumerate().for_each(|(i, d)| task(i * per_task, d));
    for (j, col) in cm.chunks_exact(rows).enumerate() {
        for (m, &v) in col.iter().enumerate() {
            out[m * n + j] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// `acc[r] = Σ_k x[r, k]·w[k]` for one weight row `w` and `acc.len()` activation rows.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w` holds `k / 32` blocks of `t`, `x` holds
/// `acc.len()` rows of `k`, `xsum` their per-block sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn columns(t: GgufType, w: &[u8], x: &[f32], xsum: &[f32], k: usize, acc: &mut [f32]) {
    let blocks = k / QK;
    let bb = block_bytes(t);
    let mut vacc = [_mm256_setzero_ps(); ROW_TILE];
    let mut offset = [0f32; ROW_TILE];
    let tile = acc.len();
    for b in 0..blocks {
        let blk = w.as_ptr().add(b * bb);
        let d = f16(blk);
        let (q, off) = match t {
            GgufType::Q8_0 => (q8_codes(blk.add(2)), 0.0),
            GgufType::Q4_1 => (q4_codes(blk.add(4)), f16(blk.add(2))),
            _ => (q4_codes(blk.add(2)), -8.0 * d),
        };
        let dv = _mm256_set1_ps(d);
        for r in 0..tile {
            let xp = x.as_ptr().add(r * k + b * QK);
            let mut s = _mm256_mul_ps(q[0], _mm256_loadu_ps(xp));
            s = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xp.add(8)), s);
            s = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xp.add(16)), s);
            s = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xp.add(24)), s);
            vacc[r] = _mm256_fmadd_ps(dv, s, vacc[r]);
            offset[r] += off * xsum[r * blocks + b];
        }
    }
    for r in 0..tile {
        acc[r] = hsum(vacc[r]) + offset[r];
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn columns(_: GgufType, _: &[u8], _: &[f32], _: &[f32], _: usize, _: &mut [f32]) {
    unreachable!("available() is false off x86-64")
}

/// An IEEE half at `p` as f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16(p: *const u8) -> f32 {
    let h = u16::from_le_bytes([*p, *p.add(1)]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// The 32 unsigned nibble codes at `p` (elements 0–15 low nibbles, 16–31 high) as f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_codes(p: *const u8) -> [__m256; 4] {
    let qs = _mm_loadu_si128(p.cast());
    let mask = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(qs, mask);
    let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
    let wide = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    [wide(lo), wide(_mm_srli_si128(lo, 8)), wide(hi), wide(_mm_srli_si128(hi, 8))]
}

/// The 32 signed byte codes at `p` as f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_codes(p: *const u8) -> [__m256; 4] {
    let wide = |o: usize| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(o).cast())));
    [wide(0), wide(8), wide(16), wide(24)]
}

/// The sum of the 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

#[cfg(test)]
mod tests {
    use super::super::q8::tests::weight_blocks as blocks;
    use super::super::rows::matmul_rows;
    use super::super::weights::Gguf;
    use super::*;

    #[test]
    fn matches_the_scalar_blockwise_product() {
        if !available() {
            eprintln!("skipped: no AVX2/FMA/F16C");
            return;
        }
        for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0] {
            for (rows, n, k) in [(1, 7, 64), (3, 5, 96), (6, 40, 256), (9, 300, 128)] {
                let w = blocks(t, n * k / QK, (rows * n + k) as u32);
                let x: Vec<f32> = (0..rows * k).map(|i| ((i * 7919) % 201) as f32 / 50.0 - 2.0).collect();
                let mut want = vec![0f32; rows * n];
                matmul_rows(&x, &Gguf::new(t, &w, n, k).unwrap(), &mut want);
                let mut got = vec![f32::NAN; rows * n];
                matmul(t, &x, &w, n, k, &mut got);
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{t:?} {rows}×{n}×{k} [{i}]: {g} vs {e}");
                }
            }
        }
    }
}
