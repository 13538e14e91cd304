//! f32 products computed in 8-bit integers, by choice ([`crate::Products::Int8`]): dynamic
//! quantisation as onnxruntime's `quantize_dynamic` does it (unsigned activations with a zero
//! point, signed symmetric weights), with a scale per activation row and per weight column.
//! The weight `b [k, n]` is rounded once: `qw = rte(b / sw)`, `sw[j] = max|b[.., j]| / 127`.
//! Each row `x` of `a` is rounded as the product runs: `sa = (max(x, 0) − min(x, 0)) / 255`,
//! `zp = rte(−min(x, 0) / sa)`, `qa = clamp(rte(x / sa) + zp, 0, 255)` (`rte`: to nearest, ties
//! to even; the divisions are products with the reciprocal). The integer sums are exact, and
//! `c[i, j] = (Σ_k (qa − zp)·qw) · (sa[i]·sw[j])`. A zero row or column has scale 0; a row of
//! `a` or column of `b` holding a value that is not finite gives NaN across its outputs.
//! (Symmetric activation codes lost a third of the accuracy on MiniLM's post-GELU rows.)
//!
//! On AVX-512 VNNI a tile of [`MR`] × [`NR`] outputs is 24 registers of i32 sums: one
//! `vpdpbusd` adds four products to each of 16 columns — the weight codes plus 128 as unsigned
//! bytes against four codes of one activation row less 128, broadcast as signed bytes — and
//! the offsets (128·Σ(qa − 128), (128 − zp)·Σ qw) are settled at the end. Elsewhere the
//! portable loop computes the same integers and the same f32 steps, so the two give the same
//! bits.

use super::narrow::{self, Narrow, MR, NR};
use super::sgemm::Epilogue;
use super::{Mat, MatMut};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Codes of one row or column per 32-bit unit of the packed layouts.
const UNIT: usize = 4;

/// The weight `b [k, n]` rounded to codes per column and laid out for the tile: per panel of
/// [`NR`] columns, per group of [`UNIT`] rows of `b`, each column's four codes plus 128 side by
/// side (a panel's group is one 128-byte row of two registers). Padding columns hold code 0
/// and scale 0, and rows past `k` code 0.
pub struct PackedI8 {
    k: usize,
    n: usize,
    /// `k` rounded up to [`UNIT`], in units.
    groups: usize,
    codes: Vec<u8>,
    /// `sw` per column, padded to whole panels with 0.
    scales: Vec<f32>,
    /// `Σ_k qw` per column, padded likewise.
    sums: Vec<i32>,
}

impl PackedI8 {
    /// Rounds `b [k, n]` (read through its strides) to codes, a scale per column.
    pub fn new(b: Mat<f32>) -> PackedI8 {
        let (k, n) = (b.rows, b.cols);
        let groups = k.div_ceil(UNIT);
        let panels = n.div_ceil(NR);
        let at = |i: usize, j: usize| b.data[i * b.strides[0] + j * b.strides[1]];
        let mut scales = vec![0f32; panels * NR];
        let mut sums = vec![0i32; panels * NR];
        let mut codes = vec![128u8; panels * groups * NR * UNIT];
        for j in 0..n {
            let amax = abs_max((0..k).map(|i| at(i, j)));
            let (scale, inv) = if !amax.is_finite() { (f32::NAN, 0.0) } else if amax == 0.0 { (0.0, 0.0) } else { (amax / 127.0, 127.0 / amax) };
            scales[j] = scale;
            let (p, col) = (j / NR, j % NR);
            for i in 0..k {
                let q = if inv == 0.0 { 0 } else { ((at(i, j) * inv).round_ties_even() as i32).clamp(-127, 127) };
                sums[j] += q;
                codes[((p * groups + i / UNIT) * NR + col) * UNIT + i % UNIT] = (q + 128) as u8;
            }
        }
        PackedI8 { k, n, groups, codes, scales, sums }
    }

    /// `[k, n]`, the weight's shape.
    pub fn dims(&self) -> [usize; 2] {
        [self.k, self.n]
    }

    /// The weight the codes stand for, `qw·sw`, row-major `[k, n]`: what a reader of the
    /// weight as given gets back once it has been rounded.
    pub fn unpack(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.k * self.n];
        for (i, row) in out.chunks_exact_mut(self.n.max(1)).enumerate().take(self.k) {
            for (j, v) in row.iter_mut().enumerate() {
                let (p, col) = (j / NR, j % NR);
                let q = self.codes[((p * self.groups + i / UNIT) * NR + col) * UNIT + i % UNIT] as i32 - 128;
                *v = q as f32 * self.scales[j];
            }
        }
        out
    }

    fn panel(&self, p: usize) -> &[u8] {
        let len = self.groups * NR * UNIT;
        &self.codes[p * len..(p + 1) * len]
    }
}

/// The largest magnitude of `values`, NaN where one is NaN (`f32::max` would skip it).
fn abs_max(values: impl Iterator<Item = f32>) -> f32 {
    values.fold(0f32, |m, x| if x.abs() > m || x.is_nan() { x.abs() } else { m })
}

/// A row's scale, reciprocal and zero point from its least and greatest values (each taken
/// with 0): `(0, 0, 0)` for a zero row, `(NaN, 0, 0)` where one is not finite or NaN.
fn row_scale(lo: f32, hi: f32) -> (f32, f32, i32) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    if !(lo.is_finite() && hi.is_finite()) {
        return (f32::NAN, 0.0, 0);
    }
    let scale = (hi - lo) / 255.0;
    if scale == 0.0 {
        return (0.0, 0.0, 0);
    }
    let inv = 1.0 / scale;
    (scale, inv, ((-lo * inv).round_ties_even() as i32).clamp(0, 255))
}

/// `x`'s code at reciprocal `inv` and zero point `zp`, less 128 (the signed byte the tile
/// reads): `clamp(rte(x·inv) + zp, 0, 255) − 128`.
fn row_code(x: f32, inv: f32, zp: i32) -> i32 {
    ((x * inv).round_ties_even() as i32 + zp).clamp(0, 255) - 128
}

/// Up to [`MR`] rows of `a` rounded to codes less 128, laid out as the tile reads them: per
/// group of [`UNIT`] columns of `a`, each row's four codes side by side; with each row's
/// scale, zero point and the sum of its codes less 128.
struct RowPanel {
    codes: Vec<i8>,
    scales: [f32; MR],
    zero_points: [i32; MR],
    sums: [i32; MR],
}

impl RowPanel {
    fn new(groups: usize) -> RowPanel {
        RowPanel { codes: vec![0; groups * MR * UNIT], scales: [0.0; MR], zero_points: [0; MR], sums: [0; MR] }
    }

    /// Rounds rows `i0 .. i0 + rows` of `a` into the panel (the rest of it code 128, a zero
    /// row).
    fn fill(&mut self, a: &Mat<f32>, i0: usize, rows: usize, vnni: bool) {
        self.codes.fill(0);
        self.scales = [0.0; MR];
        self.zero_points = [0; MR];
        self.sums = [0; MR];
        for r in 0..rows {
            let row = &a.data[(i0 + r) * a.strides[0]..];
            let k = a.cols;
            if vnni && a.strides[1] == 1 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `vnni` is set only where the CPU has AVX-512 F and BW; the row holds
                // `k` elements (its slice starts at the row and the matrix is checked).
                unsafe {
                    self.row_avx512(r, &row[..k]);
                }
                continue;
            }
            let (lo, hi) = extremes((0..k).map(|c| row[c * a.strides[1]]));
            self.put(r, (0..k).map(|c| row[c * a.strides[1]]), lo, hi);
        }
    }

    /// Row `r`'s codes of `values`, whose least and greatest are `lo`, `hi`.
    fn put(&mut self, r: usize, values: impl Iterator<Item = f32>, lo: f32, hi: f32) {
        let (scale, inv, zp) = row_scale(lo, hi);
        (self.scales[r], self.zero_points[r]) = (scale, zp);
        if inv == 0.0 {
            return;
        }
        let mut sum = 0;
        for (c, x) in values.enumerate() {
            let q = row_code(x, inv, zp);
            sum += q;
            self.codes[((c / UNIT) * MR + r) * UNIT + c % UNIT] = q as i8;
        }
        self.sums[r] = sum;
    }

    /// [`RowPanel::fill`] of one contiguous row in 512-bit steps (the same codes: the
    /// conversion rounds to nearest even, as [`row_code`] does).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn row_avx512(&mut self, r: usize, row: &[f32]) {
        let k = row.len();
        let whole = k / 16 * 16;
        let (mut lo, mut hi, mut nan) = (_mm512_setzero_ps(), _mm512_setzero_ps(), 0);
        for c in (0..whole).step_by(16) {
            let v = _mm512_loadu_ps(row.as_ptr().add(c));
            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            lo = _mm512_min_ps(lo, v);
            hi = _mm512_max_ps(hi, v);
        }
        let (tail_lo, tail_hi) = extremes(row[whole..].iter().copied());
        let (lo, hi) = if nan != 0 { (f32::NAN, f32::NAN) } else { (_mm512_reduce_min_ps(lo).min(tail_lo), _mm512_reduce_max_ps(hi).max(tail_hi)) };
        let (scale, inv, zp) = row_scale(lo, hi);
        (self.scales[r], self.zero_points[r]) = (scale, zp);
        if inv == 0.0 {
            return;
        }
        let (f, z) = (_mm512_set1_ps(inv), _mm512_set1_epi32(zp));
        let (top, off) = (_mm512_set1_epi32(255), _mm512_set1_epi32(128));
        let mut sums = _mm512_setzero_si512();
        let mut bytes = [0i8; 16];
        for c in (0..whole).step_by(16) {
            let q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row.as_ptr().add(c)), f)), z);
            let q = _mm512_sub_epi32(_mm512_max_epi32(_mm512_min_epi32(q, top), _mm512_setzero_si512()), off);
            sums = _mm512_add_epi32(sums, q);
            _mm_storeu_si128(bytes.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(q));
            for (u, four) in bytes.chunks_exact(UNIT).enumerate() {
                let at = (((c / UNIT) + u) * MR + r) * UNIT;
                self.codes[at..at + UNIT].copy_from_slice(four);
            }
        }
        let mut sum = _mm512_reduce_add_epi32(sums);
        for (c, &x) in row.iter().enumerate().skip(whole) {
            let q = row_code(x, inv, zp);
            sum += q;
            self.codes[((c / UNIT) * MR + r) * UNIT + c % UNIT] = q as i8;
        }
        self.sums[r] = sum;
    }
}

/// The least and greatest of `values`, both NaN where one is NaN.
fn extremes(values: impl Iterator<Item = f32>) -> (f32, f32) {
    values.fold((0f32, 0f32), |(lo, hi), x| if x.is_nan() || lo.is_nan() { (f32::NAN, f32::NAN) } else { (lo.min(x), hi.max(x)) })
}

/// Whether this CPU runs the VNNI tile.
pub fn vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The tile this CPU runs (`rlx info`): the portable loop is correct but far slower than the
/// f32 GEMM.
pub fn kernel() -> &'static str {
    if vnni() { "avx512-vnni 12×32" } else { "portable (no AVX-512 VNNI: slower than f32)" }
}

/// `c = a·b` in int8 (module docs) with `b` packed by [`PackedI8::new`], then `epilogue` over
/// each finished piece of `c`; on several threads with `parallel` when large. Errors name the
/// mismatch when the shapes disagree or a slice is too short.
pub fn product(a: Mat<f32>, b: &PackedI8, c: MatMut, parallel: bool, epilogue: Option<Epilogue>) -> Result<(), String> {
    narrow::product(&Int8 { b, vnni: vnni() }, a, c, parallel, epilogue)
}

/// A [`PackedI8`] on the VNNI tile or the portable loop (tests run both).
struct Int8<'a> {
    b: &'a PackedI8,
    vnni: bool,
}

impl Narrow for Int8<'_> {
    type Rows = RowPanel;
    const NAME: &'static str = "int8";

    fn dims(&self) -> [usize; 2] {
        self.b.dims()
    }

    fn rows(&self) -> RowPanel {
        RowPanel::new(self.b.groups)
    }

    fn fill(&self, rows: &mut RowPanel, a: &Mat<f32>, i0: usize, count: usize) {
        rows.fill(a, i0, count, self.vnni);
    }

    fn tile(&self, rows: &RowPanel, p: usize, out: &mut [[f32; NR]; MR]) {
        tile_on(self.vnni, rows, self.b, p, out);
    }
}

/// One tile: the panel's rows against column panel `p` of `b`, as f32 outputs.
fn tile_on(vnni: bool, a: &RowPanel, b: &PackedI8, p: usize, out: &mut [[f32; NR]; MR]) {
    #[cfg(target_arch = "x86_64")]
    if vnni {
        // SAFETY: `vnni` is set only where the CPU has AVX-512 F, BW and VNNI; the panels
        // hold `b.groups` groups each.
        unsafe { tile_vnni(a, b, p, out) };
        return;
    }
    let _ = vnni;
    tile_portable(a, b, p, out);
}

/// The tile's integer sums, `Σ_k (qa − zp)·qw` one multiply-add at a time, then
/// [`finish`].
fn tile_portable(a: &RowPanel, b: &PackedI8, p: usize, out: &mut [[f32; NR]; MR]) {
    let codes = b.panel(p);
    let scales = &b.scales[p * NR..(p + 1) * NR];
    for (r, row) in out.iter_mut().enumerate() {
        for (j, value) in row.iter_mut().enumerate() {
            let mut sum = 0i32;
            for g in 0..b.groups {
                for u in 0..UNIT {
                    let w = codes[(g * NR + j) * UNIT + u] as i32 - 128;
                    let x = a.codes[(g * MR + r) * UNIT + u] as i32 + 128 - a.zero_points[r];
                    sum += w * x;
                }
            }
            *value = finish(sum, a.scales[r], scales[j]);
        }
    }
}

/// An output from its exact integer sum: `sum · (sa·sw)`.
fn finish(sum: i32, sa: f32, sw: f32) -> f32 {
    sum as f32 * (sa * sw)
}

/// [`tile_portable`] in 512-bit registers: `Σ (qw + 128)·(qa − 128)`, less 128·Σ(qa − 128),
/// plus (128 − zp)·Σ qw, is the same integer; then the same two f32 products per output.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni(a: &RowPanel, b: &PackedI8, p: usize, out: &mut [[f32; NR]; MR]) {
    let codes = b.panel(p).as_ptr();
    let rows = a.codes.as_ptr().cast::<i32>();
    let mut acc = [[_mm512_setzero_si512(); 2]; MR];
    for g in 0..b.groups {
        let w0 = _mm512_loadu_si512(codes.add(g * NR * UNIT).cast());
        let w1 = _mm512_loadu_si512(codes.add(g * NR * UNIT + 64).cast());
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_epi32(rows.add(g * MR + r).read_unaligned());
            acc[0] = _mm512_dpbusd_epi32(acc[0], w0, x);
            acc[1] = _mm512_dpbusd_epi32(acc[1], w1, x);
        }
    }
    let (scales, sums) = (b.scales.as_ptr().add(p * NR), b.sums.as_ptr().add(p * NR));
    let sw = [_mm512_loadu_ps(scales), _mm512_loadu_ps(scales.add(16))];
    let wsum = [_mm512_loadu_si512(sums.cast()), _mm512_loadu_si512(sums.add(16).cast())];
    for (r, acc) in acc.iter().enumerate() {
        let offset = _mm512_set1_epi32(128 * a.sums[r]);
        let shift = _mm512_set1_epi32(128 - a.zero_points[r]);
        let sa = _mm512_set1_ps(a.scales[r]);
        for h in 0..2 {
            let exact = _mm512_add_epi32(_mm512_sub_epi32(acc[h], offset), _mm512_mullo_epi32(shift, wsum[h]));
            let sum = _mm512_cvtepi32_ps(exact);
            _mm512_storeu_ps(out[r].as_mut_ptr().add(16 * h), _mm512_mul_ps(sum, _mm512_mul_ps(sa, sw[h])));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::tests::random;

    /// The module's definition, written apart from the kernels: codes from f32 scales and
    /// reciprocals, sums exact, the output's products in f64.
    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let rte = |x: f32| x.round_ties_even() as i64;
        let mut qw = vec![0i64; k * n];
        let mut sw = vec![0f32; n];
        for j in 0..n {
            let amax = (0..k).map(|i| b[i * n + j].abs()).fold(0f32, f32::max);
            if amax > 0.0 {
                sw[j] = amax / 127.0;
                (0..k).for_each(|i| qw[i * n + j] = rte(b[i * n + j] * (127.0 / amax)).clamp(-127, 127));
            }
        }
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            let x = &a[i * k..(i + 1) * k];
            let lo = x.iter().copied().fold(0f32, f32::min);
            let hi = x.iter().copied().fold(0f32, f32::max);
            let sa = (hi - lo) / 255.0;
            let qa: Vec<i64> = if sa == 0.0 {
                vec![0; k]
            } else {
                let zp = rte(-lo * (1.0 / sa)).clamp(0, 255);
                x.iter().map(|&v| (rte(v * (1.0 / sa)) + zp).clamp(0, 255) - zp).collect()
            };
            for j in 0..n {
                let sum: i64 = (0..k).map(|t| qa[t] * qw[t * n + j]).sum();
                c[i * n + j] = sum as f64 * sa as f64 * sw[j] as f64;
            }
        }
        c
    }

    fn run(vnni: bool, a: &[f32], b: &PackedI8, m: usize, parallel: bool) -> Vec<f32> {
        let (k, n) = (b.k, b.n);
        let mut c = vec![f32::NAN; m * n];
        narrow::product(&Int8 { b, vnni }, Mat::row_major(a, m, k), MatMut::row_major(&mut c, m, n), parallel, None).unwrap();
        c
    }

    #[test]
    fn products_follow_the_definition_and_track_the_f32_product() {
        for &(m, k, n) in &[(1, 4, 1), (5, 7, 3), (12, 64, 32), (13, 37, 33), (40, 384, 70)] {
            let (a, b) = (random(m * k, (m * 31 + k) as u64), random(k * n, (n * 7 + k) as u64));
            // Rows of one sign from the third on (a zero point of 0), as after a ReLU.
            let a: Vec<f32> = a.iter().enumerate().map(|(x, v)| if x >= 2 * k { v.abs() + 0.25 } else { *v }).collect();
            let packed = PackedI8::new(Mat::row_major(&b, k, n));
            let got = run(false, &a, &packed, m, true);
            let want = reference(&a, &b, m, k, n);
            for (g, w) in got.iter().zip(&want) {
                // The reference's one rounding against the kernel's two f32 products.
                assert!((*g as f64 - w).abs() <= 1e-6 * w.abs().max(1e-3), "[{m}, {k}, {n}]: {g} against {w}");
            }
            let exact: Vec<f64> = (0..m * n).map(|x| (0..k).map(|t| a[x / n * k + t] as f64 * b[t * n + x % n] as f64).sum()).collect();
            let scale = exact.iter().fold(0f64, |s, v| s.max(v.abs()));
            let worst = got.iter().zip(&exact).fold(0f64, |s, (g, e)| s.max((*g as f64 - e).abs()));
            assert!(worst <= 0.03 * scale, "[{m}, {k}, {n}]: rounding moved a product by {worst} of {scale}");
        }
    }

    #[test]
    fn the_vnni_tile_gives_the_portable_bits_on_any_thread_count() {
        if !vnni() {
            eprintln!("skipped: this CPU has no AVX-512 VNNI");
            return;
        }
        for &(m, k, n) in &[(1, 4, 1), (13, 37, 33), (100, 384, 96), (7, 1536, 40)] {
            let (a, b) = (random(m * k, 3 + k as u64), random(k * n, 5 + n as u64));
            let packed = PackedI8::new(Mat::row_major(&b, k, n));
            let want = run(false, &a, &packed, m, false);
            for parallel in [false, true] {
                let got = run(true, &a, &packed, m, parallel);
                assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits()), "[{m}, {k}, {n}] parallel {parallel}");
            }
        }
    }

    #[test]
    fn zero_rows_give_zeros_and_a_non_finite_row_gives_nan() {
        let (k, n) = (20, 5);
        let b = random(k * n, 9);
        let packed = PackedI8::new(Mat::row_major(&b, k, n));
        let mut a = random(3 * k, 4);
        a[..k].fill(0.0);
        a[2 * k + 3] = f32::INFINITY;
        for vnni in [false, vnni()] {
            let c = run(vnni, &a, &packed, 3, false);
            assert!(c[..n].iter().all(|v| *v == 0.0), "a zero row");
            assert!(c[n..2 * n].iter().all(|v| v.is_finite() && *v != 0.0), "a plain row");
            assert!(c[2 * n..].iter().all(|v| v.is_nan()), "the row holding ∞");
        }
    }

    #[test]
    fn unpacking_gives_the_rounded_weight_and_shapes_are_checked() {
        let (k, n) = (9, 35);
        let b = random(k * n, 11);
        let packed = PackedI8::new(Mat::row_major(&b, k, n));
        let back = packed.unpack();
        let sw: Vec<f32> = (0..n).map(|j| (0..k).fold(0f32, |m, i| m.max(b[i * n + j].abs())) / 127.0).collect();
        for (x, (v, w)) in back.iter().zip(&b).enumerate() {
            assert!((v - w).abs() <= sw[x % n] * 0.5 + 1e-7, "element {x}: {v} for {w}");
        }
        let a = random(2 * (k + 1), 1);
        let mut c = vec![0f32; 2 * n];
        let err = product(Mat::row_major(&a, 2, k + 1), &packed, MatMut::row_major(&mut c, 2, n), false, None).unwrap_err();
        assert!(err.contains("[2, 10] × [9, 35]"), "{err}");
    }
}
