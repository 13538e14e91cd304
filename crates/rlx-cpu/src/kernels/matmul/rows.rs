//! Products with few rows of `a` (decode: one token at a time) without packing `b`, which for
//! `[m ≤ FEW_ROWS, k] × [k, n]` would copy all of `b` to use it once: a row-major `b` is
//! summed row by row, scaled by `a`, into register accumulators (axpy); a transposed `b`
//! (contiguous columns) is dotted column by column with `a`'s rows.
//!
//! Contract of a [`Rows`] kernel `f(m, k, a, lda, b, ldb, w, c, ldc, add)`, `1 ≤ m ≤ 4`:
//! `c[i, j] (+)= Σ_p a[i·lda + p]·B(p, j)` for `i < m`, `j < w`, where `B(p, j)` is
//! `b[p·ldb + j]` for the axpy kernel and `b[j·ldb + p]` for the dot kernel; `c[i, j]` is
//! `c[i·ldc + j]`. With `add` the product is added to `c`, else it overwrites it. Callers
//! guarantee that every addressed element lies in its buffer and that `c` overlaps neither
//! operand. (The kernels take raw pointers and strides, hence their many arguments.)
#![allow(clippy::too_many_arguments)]

use super::sgemm::{Element, Epilogue, Mat, MatMut, OutPtr, PAR_FLOPS};
use super::tile::Tile;
use rayon::prelude::*;

/// Most rows of `a` taken without packing: up to 8 rows this path was 2–7× the packed one
/// on the transformer shapes on Zen 4, and level with it at 2048² (memory-bound) for 5–8.
pub const FEW_ROWS: usize = 8;
/// Most rows one kernel call takes.
const MAX_M: usize = 4;
/// Output columns per piece: the kernel's work between two epilogue calls.
const PIECE: usize = 256;

/// A few-rows kernel (see the module docs).
pub type Rows = unsafe fn(usize, usize, *const f32, usize, *const f32, usize, usize, *mut f32, usize, bool);

/// `c (+)= a·b` for `a` of at most [`FEW_ROWS`] rows and an f32 `b` with contiguous rows or
/// columns, on `tile`'s few-rows kernels; `None` when the product does not fit this path.
/// The shapes were checked by the caller, and `k > 0`.
pub fn few_rows<A: Element, B: Element>(
    tile: Tile,
    a: &Mat<A>,
    b: &Mat<B>,
    c: &mut MatMut,
    accumulate: bool,
    parallel: bool,
    epilogue: Option<Epilogue>,
) -> Option<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let data = B::as_f32(b.data)?;
    if m > FEW_ROWS {
        return None;
    }
    let (kernel, ldb) = match b.strides {
        [ld, 1] => (tile.axpy, ld),
        [1, ld] => (tile.dot, ld),
        _ => return None,
    };
    let owned: Vec<f32>;
    let (a_ptr, lda) = match A::as_f32(a.data) {
        Some(x) if a.strides[1] == 1 => (x.as_ptr(), a.strides[0]),
        _ => {
            owned = (0..m * k).map(|i| a.data[(i / k) * a.strides[0] + (i % k) * a.strides[1]].f32()).collect();
            (owned.as_ptr(), k)
        }
    };
    let (a_ptr, b_ptr) = (SendPtr(a_ptr), SendPtr(data.as_ptr()));
    let (ldc, out) = (c.ld, OutPtr(c.data.as_mut_ptr()));
    let out = &out;
    let piece = |j0: usize| {
        let w = PIECE.min(n - j0);
        let b_at = if b.strides[1] == 1 { j0 } else { j0 * ldb };
        for i0 in (0..m).step_by(MAX_M) {
            // Safety: the caller checked that `a`, `b` and `c` hold every element of their
            // geometry; pieces cover disjoint columns of `c`, which overlaps neither operand.
            unsafe {
                let c = out.get().add(i0 * ldc + j0);
                kernel(MAX_M.min(m - i0), k, a_ptr.get().add(i0 * lda), lda, b_ptr.get().add(b_at), ldb, w, c, ldc, accumulate);
                if let Some(f) = epilogue {
                    for r in 0..MAX_M.min(m - i0) {
                        f(i0 + r, j0, std::slice::from_raw_parts_mut(c.add(r * ldc), w));
                    }
                }
            }
        }
    };
    if parallel && m * n * k >= PAR_FLOPS && rayon::current_num_threads() > 1 {
        (0..n).into_par_iter().step_by(PIECE).for_each(piece);
    } else {
        (0..n).step_by(PIECE).for_each(piece);
    }
    Some(())
}

/// A read-only pointer shared by the tasks of one product.
#[derive(Clone, Copy)]
struct SendPtr(*const f32);
// Safety: only read, while the borrow it came from lives (the span of `few_rows`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *const f32 {
        self.0
    }
}

/// The portable axpy kernel (the reference the SIMD kernels are tested against).
pub unsafe fn portable_axpy(m: usize, k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, w: usize, c: *mut f32, ldc: usize, add: bool) {
    for i in 0..m {
        let row = std::slice::from_raw_parts_mut(c.add(i * ldc), w);
        if !add {
            row.fill(0.0);
        }
        for p in 0..k {
            let x = *a.add(i * lda + p);
            let bp = std::slice::from_raw_parts(b.add(p * ldb), w);
            row.iter_mut().zip(bp).for_each(|(r, &y)| *r += x * y);
        }
    }
}

/// The portable dot kernel.
pub unsafe fn portable_dot(m: usize, k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, w: usize, c: *mut f32, ldc: usize, add: bool) {
    for i in 0..m {
        let ai = std::slice::from_raw_parts(a.add(i * lda), k);
        for j in 0..w {
            let bj = std::slice::from_raw_parts(b.add(j * ldb), k);
            let s: f32 = ai.iter().zip(bj).map(|(&x, &y)| x * y).sum();
            let o = c.add(i * ldc + j);
            *o = if add { *o + s } else { s };
        }
    }
}

/// The SIMD kernels of one instruction set, over its vector helpers (`zero`, `load`,
/// `load_n`, `store_n`, `splat`, `plus`, `fma`, `sum`; `*_n` touch only the first `n` lanes) and
/// vector width `LANES`. `V` vectors of columns per axpy block and `J` columns per dot block
/// keep `m·V` (`m·J`) accumulators in registers.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_kernels {
    ($feature:literal, $v:literal, $j:literal) => {
        const V: usize = $v;
        const J: usize = $j;

        #[target_feature(enable = $feature)]
        pub unsafe fn axpy(m: usize, k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, w: usize, c: *mut f32, ldc: usize, add: bool) {
            match m {
                1 => axpy_m::<1>(k, a, lda, b, ldb, w, c, ldc, add),
                2 => axpy_m::<2>(k, a, lda, b, ldb, w, c, ldc, add),
                3 => axpy_m::<3>(k, a, lda, b, ldb, w, c, ldc, add),
                _ => axpy_m::<4>(k, a, lda, b, ldb, w, c, ldc, add),
            }
        }

        #[target_feature(enable = $feature)]
        unsafe fn axpy_m<const M: usize>(k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, w: usize, c: *mut f32, ldc: usize, add: bool) {
            let mut j = 0;
            while j + V * LANES <= w {
                axpy_block::<M, true>(k, a, lda, b.add(j), ldb, [LANES; V], c.add(j), ldc, add);
                j += V * LANES;
            }
            if j < w {
                let counts = std::array::from_fn(|v| (w - j).saturating_sub(v * LANES).min(LANES));
                axpy_block::<M, false>(k, a, lda, b.add(j), ldb, counts, c.add(j), ldc, add);
            }
        }

        /// `M` rows × `V` vectors of columns, vector `v` holding `counts[v]` columns (all
        /// `LANES` when `FULL`).
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn axpy_block<const M: usize, const FULL: bool>(k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, counts: [usize; V], c: *mut f32, ldc: usize, add: bool) {
            let mut acc = [[zero(); V]; M];
            for p in 0..k {
                let row = b.add(p * ldb);
                let mut y = [zero(); V];
                for (v, y) in y.iter_mut().enumerate() {
                    *y = if FULL { load(row.add(v * LANES)) } else { load_n(row.add(v * LANES), counts[v]) };
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let x = splat(*a.add(i * lda + p));
                    for (s, &y) in acc.iter_mut().zip(&y) {
                        *s = fma(x, y, *s);
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                for (v, &s) in acc.iter().enumerate() {
                    let o = c.add(i * ldc + v * LANES);
                    let s = if add { plus(load_n(o, counts[v]), s) } else { s };
                    store_n(o, counts[v], s);
                }
            }
        }

        #[target_feature(enable = $feature)]
        pub unsafe fn dot(m: usize, k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, w: usize, c: *mut f32, ldc: usize, add: bool) {
            match m {
                1 => dot_m::<1>(k, a, lda, b, ldb, w, c, ldc, add),
                2 => dot_m::<2>(k, a, lda, b, ldb, w, c, ldc, add),
                3 => dot_m::<3>(k, a, lda, b, ldb, w, c, ldc, add),
                _ => dot_m::<4>(k, a, lda, b, ldb, w, c, ldc, add),
            }
        }

        /// `M` rows × blocks of `J` columns; a block past the last column repeats the last
        /// one and drops its sums.
        #[target_feature(enable = $feature)]
        unsafe fn dot_m<const M: usize>(k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, w: usize, c: *mut f32, ldc: usize, add: bool) {
            for j0 in (0..w).step_by(J) {
                let mut cols = [b; J];
                for (j, col) in cols.iter_mut().enumerate() {
                    *col = b.add((j0 + j).min(w - 1) * ldb);
                }
                let mut acc = [[zero(); J]; M];
                let mut p = 0;
                while p < k {
                    let n = LANES.min(k - p);
                    let mut y = [zero(); J];
                    for (y, col) in y.iter_mut().zip(&cols) {
                        *y = if n == LANES { load(col.add(p)) } else { load_n(col.add(p), n) };
                    }
                    for (i, acc) in acc.iter_mut().enumerate() {
                        let x = if n == LANES { load(a.add(i * lda + p)) } else { load_n(a.add(i * lda + p), n) };
                        for (s, &y) in acc.iter_mut().zip(&y) {
                            *s = fma(x, y, *s);
                        }
                    }
                    p += LANES;
                }
                for (i, acc) in acc.iter().enumerate() {
                    for (j, &s) in acc.iter().enumerate().take(w - j0) {
                        let o = c.add(i * ldc + j0 + j);
                        *o = if add { *o + sum(s) } else { sum(s) };
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::*;

    const LANES: usize = 16;

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_n(p: *const f32, n: usize) -> __m512 {
        _mm512_maskz_loadu_ps(((1u32 << n) - 1) as u16, p)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_n(p: *mut f32, n: usize, v: __m512) {
        _mm512_mask_storeu_ps(p, ((1u32 << n) - 1) as u16, v)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn plus(x: __m512, y: __m512) -> __m512 {
        _mm512_add_ps(x, y)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn fma(x: __m512, y: __m512, s: __m512) -> __m512 {
        _mm512_fmadd_ps(x, y, s)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }

    rows_kernels!("avx512f", 4, 4);
}

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use std::arch::x86_64::*;

    const LANES: usize = 8;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    /// Lanes below `n` set.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn mask(n: usize) -> __m256i {
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_n(p: *const f32, n: usize) -> __m256 {
        _mm256_maskload_ps(p, mask(n))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_n(p: *mut f32, n: usize, v: __m256) {
        _mm256_maskstore_ps(p, mask(n), v)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn plus(x: __m256, y: __m256) -> __m256 {
        _mm256_add_ps(x, y)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma(x: __m256, y: __m256, s: __m256) -> __m256 {
        _mm256_fmadd_ps(x, y, s)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum(v: __m256) -> f32 {
        let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
    }

    rows_kernels!("avx2,fma", 2, 2);
}
