//! f32 products with both operands rounded to bfloat16, by choice ([`crate::Products::Bf16`]):
//! the weight once, each row of `a` as the product runs (to nearest, ties to even), the
//! products summed in f32 — what `torch.autocast(dtype=torch.bfloat16)` makes of a linear
//! layer on a CPU with AVX512-BF16. There a tile of [`MR`] × [`NR`] outputs is 24 registers
//! of f32 sums, one `vdpbf16ps` adding two products to each of 16 columns. Elsewhere a
//! portable loop takes the same products one at a time (the instruction adds each pair its
//! own way, so the two agree to f32 rounding, not bit for bit).

use super::narrow::{self, Narrow, MR, NR};
use super::sgemm::Epilogue;
use super::{Mat, MatMut};
use half::bf16;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The weight `b [k, n]` rounded to bf16 and laid out for the tile: per panel of [`NR`]
/// columns, per pair of rows of `b`, each column's two values side by side (a panel's pair is
/// one 128-byte row of two registers). Padding columns, and a row past an odd `k`, hold 0.
pub struct PackedBf16 {
    k: usize,
    n: usize,
    /// `k` rounded up to 2, in pairs.
    pairs: usize,
    values: Vec<bf16>,
}

impl PackedBf16 {
    /// Rounds `b [k, n]` (read through its strides) to bf16.
    pub fn new(b: Mat<f32>) -> PackedBf16 {
        let (k, n) = (b.rows, b.cols);
        let pairs = k.div_ceil(2);
        let mut values = vec![bf16::ZERO; n.div_ceil(NR) * pairs * NR * 2];
        for i in 0..k {
            for j in 0..n {
                values[((j / NR * pairs + i / 2) * NR + j % NR) * 2 + i % 2] = bf16::from_f32(b.data[i * b.strides[0] + j * b.strides[1]]);
            }
        }
        PackedBf16 { k, n, pairs, values }
    }

    /// `[k, n]`, the weight's shape.
    pub fn dims(&self) -> [usize; 2] {
        [self.k, self.n]
    }

    /// The rounded weight as f32, row-major `[k, n]`.
    pub fn unpack(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.k * self.n];
        for (x, v) in out.iter_mut().enumerate() {
            let (i, j) = (x / self.n, x % self.n);
            *v = self.values[((j / NR * self.pairs + i / 2) * NR + j % NR) * 2 + i % 2].to_f32();
        }
        out
    }

    fn panel(&self, p: usize) -> &[bf16] {
        let len = self.pairs * NR * 2;
        &self.values[p * len..(p + 1) * len]
    }
}

/// Whether this CPU runs the AVX512-BF16 tile.
pub fn avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The tile this CPU runs (`rlx info`).
pub fn kernel() -> &'static str {
    if avx512_bf16() { "avx512-bf16 12×32" } else { "portable (no AVX512-BF16: slower than f32)" }
}

/// `c = a·b` with both rounded to bf16 (module docs), `b` packed by [`PackedBf16::new`], then
/// `epilogue` over each finished piece of `c`; on several threads with `parallel` when large.
pub fn product(a: Mat<f32>, b: &PackedBf16, c: MatMut, parallel: bool, epilogue: Option<Epilogue>) -> Result<(), String> {
    narrow::product(&Bf16 { b, simd: avx512_bf16() }, a, c, parallel, epilogue)
}

/// A [`PackedBf16`] on the AVX512-BF16 tile or the portable loop (tests run both).
struct Bf16<'a> {
    b: &'a PackedBf16,
    simd: bool,
}

impl Narrow for Bf16<'_> {
    /// Per pair of columns of `a`, each row's two values side by side.
    type Rows = Vec<bf16>;
    const NAME: &'static str = "bf16";

    fn dims(&self) -> [usize; 2] {
        self.b.dims()
    }

    fn rows(&self) -> Vec<bf16> {
        vec![bf16::ZERO; self.b.pairs * MR * 2]
    }

    fn fill(&self, rows: &mut Vec<bf16>, a: &Mat<f32>, i0: usize, count: usize) {
        rows.fill(bf16::ZERO);
        for r in 0..count {
            let row = &a.data[(i0 + r) * a.strides[0]..];
            if self.simd && a.strides[1] == 1 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `simd` is set only where the CPU has AVX-512 F and BF16; the row
                // holds `a.cols` elements (the matrix is checked).
                unsafe {
                    round_row(&row[..a.cols], r, rows);
                }
                continue;
            }
            for c in 0..a.cols {
                rows[((c / 2) * MR + r) * 2 + c % 2] = bf16::from_f32(row[c * a.strides[1]]);
            }
        }
    }

    fn tile(&self, rows: &Vec<bf16>, p: usize, out: &mut [[f32; NR]; MR]) {
        #[cfg(target_arch = "x86_64")]
        if self.simd {
            // SAFETY: `simd` is set only where the CPU has AVX-512 F and BF16; the panels hold
            // `pairs` pairs each.
            unsafe { tile_avx512(rows, self.b, p, out) };
            return;
        }
        let w = self.b.panel(p);
        for (r, row) in out.iter_mut().enumerate() {
            for (j, value) in row.iter_mut().enumerate() {
                let mut sum = 0f32;
                for g in 0..self.b.pairs {
                    for u in 0..2 {
                        sum += rows[(g * MR + r) * 2 + u].to_f32() * w[(g * NR + j) * 2 + u].to_f32();
                    }
                }
                *value = sum;
            }
        }
    }
}

/// Row `r` of the panel from `row`, 16 values a conversion (to nearest even, as
/// `bf16::from_f32`, which takes the last odd few).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn round_row(row: &[f32], r: usize, rows: &mut [bf16]) {
    let whole = row.len() / 16 * 16;
    let mut pairs = [0u32; 8];
    for c in (0..whole).step_by(16) {
        let v = _mm512_cvtneps_pbh(_mm512_loadu_ps(row.as_ptr().add(c)));
        std::ptr::write_unaligned(pairs.as_mut_ptr().cast::<__m256bh>(), v);
        for (u, &pair) in pairs.iter().enumerate() {
            rows.as_mut_ptr().add(((c / 2 + u) * MR + r) * 2).cast::<u32>().write_unaligned(pair);
        }
    }
    for (c, &x) in row.iter().enumerate().skip(whole) {
        rows[((c / 2) * MR + r) * 2 + c % 2] = bf16::from_f32(x);
    }
}

/// The tile in 512-bit registers: per pair of rows of `b`, two loads of weights and one
/// broadcast pair of each row of `a`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_avx512(rows: &[bf16], b: &PackedBf16, p: usize, out: &mut [[f32; NR]; MR]) {
    let w = b.panel(p).as_ptr();
    let a = rows.as_ptr().cast::<i32>();
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for g in 0..b.pairs {
        let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(w.add(g * NR * 2).cast()));
        let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(w.add(g * NR * 2 + 32).cast()));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(a.add(g * MR + r).read_unaligned()));
            acc[0] = _mm512_dpbf16_ps(acc[0], w0, x);
            acc[1] = _mm512_dpbf16_ps(acc[1], w1, x);
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        _mm512_storeu_ps(out[r].as_mut_ptr(), acc[0]);
        _mm512_storeu_ps(out[r].as_mut_ptr().add(16), acc[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::tests::random;

    fn run(simd: bool, a: &[f32], b: &PackedBf16, m: usize, parallel: bool) -> Vec<f32> {
        let [k, n] = b.dims();
        let mut c = vec![f32::NAN; m * n];
        narrow::product(&Bf16 { b, simd }, Mat::row_major(a, m, k), MatMut::row_major(&mut c, m, n), parallel, None).unwrap();
        c
    }

    /// Both tiles against the products of the bf16-rounded operands in f64, within f32
    /// summation error, and against the f32 product within bf16's rounding.
    #[test]
    fn products_of_rounded_operands_agree_with_float64() {
        for &(m, k, n) in &[(1, 1, 1), (5, 7, 3), (13, 37, 33), (40, 384, 70), (3, 1536, 40)] {
            let (a, b) = (random(m * k, (m * 13 + k) as u64), random(k * n, (n * 5 + k) as u64));
            let packed = PackedBf16::new(Mat::row_major(&b, k, n));
            let round = |x: f32| bf16::from_f32(x).to_f64();
            for simd in [false, avx512_bf16()] {
                let got = run(simd, &a, &packed, m, true);
                for (x, &g) in got.iter().enumerate() {
                    let (i, j) = (x / n, x % n);
                    let terms = (0..k).map(|t| round(a[i * k + t]) * round(b[t * n + j]));
                    let (want, size) = terms.fold((0f64, 0f64), |(s, z), v| (s + v, z + v.abs()));
                    assert!((g as f64 - want).abs() <= k as f64 * 1.2e-7 * size, "[{m}, {k}, {n}] simd {simd} at {x}: {g} against {want}");
                    let exact: f64 = (0..k).map(|t| a[i * k + t] as f64 * b[t * n + j] as f64).sum();
                    assert!((g as f64 - exact).abs() <= 1e-2 * size, "[{m}, {k}, {n}]: bf16 moved {x} too far");
                }
            }
        }
    }

    #[test]
    fn unpacking_gives_the_rounded_weight() {
        let (k, n) = (5, 35);
        let b = random(k * n, 3);
        let back = PackedBf16::new(Mat::row_major(&b, k, n)).unpack();
        assert!(back.iter().zip(&b).all(|(v, w)| *v == bf16::from_f32(*w).to_f32()));
    }
}
