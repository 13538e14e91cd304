//! Window pooling (`Pool`, OPS.md §10) and the max-pool gradients (§22).

use super::{for_chunks, Geom};
use crate::kernels::matmul::{ints, narrow, store_ints, widen};
use crate::kernels::real::Real;
use crate::view::{In, Out};
use rlx_ir::ops::conv::{MaxPool2dBackward, MaxPool3dBackward, Pool};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::DType;

/// What pooling needs of an element type: the identities and the combining operations
/// (floats propagate NaN through Max/Min; integers wrap).
trait PoolElem: Copy + Send + Sync {
    fn zero() -> Self;
    fn one() -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    /// `self / n` (only floats reach it: `Mean` pooling is float-only).
    fn div_count(self, n: usize) -> Self;
}

impl<T: Real> PoolElem for T {
    fn zero() -> Self {
        T::ZERO
    }
    fn one() -> Self {
        T::ONE
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
    fn mul(self, o: Self) -> Self {
        self * o
    }
    fn max(self, o: Self) -> Self {
        self.max_nan(o)
    }
    fn min(self, o: Self) -> Self {
        self.min_nan(o)
    }
    fn div_count(self, n: usize) -> Self {
        self / T::of(n as f64)
    }
}

/// Integers pool as i64 (exact for every integer dtype; sums and products wrap once stored).
#[derive(Clone, Copy)]
struct Int(i64);

impl PoolElem for Int {
    fn zero() -> Self {
        Int(0)
    }
    fn one() -> Self {
        Int(1)
    }
    fn add(self, o: Self) -> Self {
        Int(self.0.wrapping_add(o.0))
    }
    fn mul(self, o: Self) -> Self {
        Int(self.0.wrapping_mul(o.0))
    }
    fn max(self, o: Self) -> Self {
        Int(self.0.max(o.0))
    }
    fn min(self, o: Self) -> Self {
        Int(self.0.min(o.0))
    }
    fn div_count(self, n: usize) -> Self {
        Int(self.0 / n as i64)
    }
}

/// The value range of an integer dtype.
fn int_range(d: DType) -> (i64, i64) {
    match d {
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U32 => (0, u32::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        DType::U64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    }
}

/// Calls `f(small_cell, big_cell)` for every window position and every in-bounds tap; each
/// position sees its taps in row-major order. Runs a line of positions per tap, so the
/// bounds are worked out once per line rather than per cell.
fn windows(g: &Geom, mut f: impl FnMut(usize, usize)) {
    let [_, bh, bw] = g.big;
    let [sd, sh, sw] = g.small;
    let s = g.s[2];
    let lines: Vec<(usize, usize, usize)> = (0..g.k[2]).map(|kw| g.inside(kw)).collect();
    for od in 0..sd {
        for oh in 0..sh {
            let row = (od * sh + oh) * sw;
            for kd in 0..g.k[0] {
                let Some(id) = g.src(0, od, kd) else { continue };
                for kh in 0..g.k[1] {
                    let Some(ih) = g.src(1, oh, kh) else { continue };
                    let base = (id * bh + ih) * bw;
                    for &(lo, hi, first) in &lines {
                        for (i, ow) in (lo..hi).enumerate() {
                            f(row + ow, base + first + i * s);
                        }
                    }
                }
            }
        }
    }
}

/// Pools every `[big]` plane of `x` into the matching `[small]` plane of `out`; `range` is
/// the (lowest, highest) value of the dtype, the identities of `Max` and `Min`.
fn pool_planes<T: PoolElem>(kind: ReduceOp, x: &[T], out: &mut [T], g: &Geom, range: (T, T)) {
    match kind {
        ReduceOp::Sum | ReduceOp::Mean => planes(kind, x, out, g, T::zero(), T::add),
        ReduceOp::Prod => planes(kind, x, out, g, T::one(), T::mul),
        ReduceOp::Max => planes(kind, x, out, g, range.0, T::max),
        ReduceOp::Min => planes(kind, x, out, g, range.1, T::min),
    }
}

/// [`pool_planes`] with its combining step known at compile time, so it inlines.
fn planes<T: PoolElem>(kind: ReduceOp, x: &[T], out: &mut [T], g: &Geom, init: T, step: impl Fn(T, T) -> T + Sync + Send) {
    let (bi, o, taps) = (g.big_cells(), g.small_cells(), g.taps());
    for_chunks(out, o, o * taps, |plane, acc| {
        let x = &x[plane * bi..(plane + 1) * bi];
        acc.fill(init);
        windows(g, |oi, xi| acc[oi] = step(acc[oi], x[xi]));
        if kind == ReduceOp::Mean {
            acc.iter_mut().for_each(|v| *v = v.div_count(taps));
        }
    });
}

/// f32 `Max` pooling of 2-D planes in two passes per output row, as [`planes`] computes it:
/// the maximum of each input column over the window's rows (contiguous), into a row padded
/// with −∞ on both sides, then of those over each window's columns (no bounds to check);
/// on AVX-512 both passes 16 lanes at a time. Among equal values the earlier row, then
/// column, wins (only the sign of a zero can tell; padding's −∞ ties only with an input −∞).
fn max_planes_2d(x: &[f32], out: &mut [f32], g: &Geom) {
    let ([_, h, w], [_, _, ow], [k, s, p]) = (g.big, g.small, [g.k[2], g.s[2], g.p[2]]);
    // Padded column `j` is input column `j − p`; windows read `(ow − 1)·s + k` of them, and
    // vector loads up to 32 past the last.
    let len = (ow.max(1) - 1) * s + k;
    let used = w.min(len.saturating_sub(p));
    for_chunks(out, g.small_cells(), g.small_cells() * g.taps(), |plane, out| {
        let x = &x[plane * h * w..][..h * w];
        let mut padded = vec![f32::NEG_INFINITY; len.max(p + used) + 32];
        for (r, row) in out.chunks_exact_mut(ow).enumerate() {
            let columns = &mut padded[p..p + used];
            columns.fill(f32::NEG_INFINITY);
            for ih in (0..g.k[1]).filter_map(|kh| g.src(1, r, kh)) {
                max_into(columns, &x[ih * w..][..used]);
            }
            window_max(&padded, k, s, row);
        }
    });
}

/// The running maximum `m` after `v`: `v` only when it is greater, or NaN while `m` is not.
fn max_first(m: f32, v: f32) -> f32 {
    if m >= v || m.is_nan() {
        m
    } else {
        v
    }
}

/// `m[i] = max_first(m[i], x[i])`.
fn max_into(m: &mut [f32], x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // Safety: the CPU has AVX-512F.
        return unsafe { avx512::max_into(m, x) };
    }
    m.iter_mut().zip(x).for_each(|(m, &v)| *m = max_first(*m, v));
}

/// `out[c]` = the [`max_first`] fold of `padded[c·s .. c·s + k]`; `padded` holds 32 floats
/// past the last window.
fn window_max(padded: &[f32], k: usize, s: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if s <= 2 && std::arch::is_x86_feature_detected!("avx512f") {
        // Safety: the CPU has AVX-512F; reads stay within the 32 floats of slack.
        return unsafe { avx512::window_max(padded, k, s, out) };
    }
    for (o, window) in out.iter_mut().zip(padded.windows(k).step_by(s)) {
        *o = window.iter().fold(f32::NEG_INFINITY, |m, &v| max_first(m, v));
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// [`super::max_first`] on 16 lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn max_first(m: __m512, v: __m512) -> __m512 {
        let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(m, v) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, m);
        _mm512_mask_blend_ps(keep, v, m)
    }

    /// The lanes of a tail of `n < 16` elements.
    fn tail(n: usize) -> u16 {
        ((1u32 << n) - 1) as u16
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn max_into(m: &mut [f32], x: &[f32]) {
        let n = m.len().min(x.len());
        let (mp, xp) = (m.as_mut_ptr(), x.as_ptr());
        let full = n / 16 * 16;
        for i in (0..full).step_by(16) {
            _mm512_storeu_ps(mp.add(i), max_first(_mm512_loadu_ps(mp.add(i)), _mm512_loadu_ps(xp.add(i))));
        }
        if full < n {
            let t = tail(n - full);
            let v = max_first(_mm512_maskz_loadu_ps(t, mp.add(full)), _mm512_maskz_loadu_ps(t, xp.add(full)));
            _mm512_mask_storeu_ps(mp.add(full), t, v);
        }
    }

    /// [`super::window_max`] for strides 1 and 2: tap `j` of 16 windows is one load (stride
    /// 1) or the even lanes of two (stride 2).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn window_max(padded: &[f32], k: usize, s: usize, out: &mut [f32]) {
        let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        let n = out.len();
        debug_assert!(n == 0 || (n - 1) / 16 * 16 * s + k - 1 + 16 * s <= padded.len());
        for c0 in (0..n).step_by(16) {
            let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
            for j in 0..k {
                let p = padded.as_ptr().add(c0 * s + j);
                let v = if s == 1 { _mm512_loadu_ps(p) } else { _mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_loadu_ps(p.add(16))) };
                m = max_first(m, v);
            }
            let t = if n - c0 >= 16 { u16::MAX } else { tail(n - c0) };
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(c0), t, m);
        }
    }
}

/// The pooling geometry of `x [N, C, spatial…]` into `out`, dilation 1.
fn pool_geom(kernel: &[usize], stride: &[usize], padding: &[usize], x: &[usize], out: &[usize]) -> Geom {
    Geom::new(&x[2..], &out[2..], kernel, stride, padding, &[])
}

/// `Pool`: 2-D (NCHW) or 3-D (NCDHW, three `kernel_size` entries) window pooling in floor
/// mode. `Max`/`Min`/`Prod` combine the in-bounds cells only (padding never wins; a window
/// wholly in the padding gives the identity: −∞, +∞, 1, or the integer extremes), `Sum`
/// adds them, `Mean` divides that sum by the full window area. Floats (halves via f32) and,
/// except `Mean`, integers (exact i64, wrapping on store).
pub fn pool(a: &Pool, x: In, out: &mut Out) -> Result<(), String> {
    let g = pool_geom(&a.kernel_size, &a.stride, &a.padding, x.dims, out.dims);
    match x.dtype {
        DType::F32 if a.kind == ReduceOp::Max && g.big[0] == 1 && g.k[0] == 1 => max_planes_2d(x.get::<f32>(), out.get::<f32>(), &g),
        DType::F32 => pool_planes(a.kind, x.get::<f32>(), out.get::<f32>(), &g, (f32::NEG_INFINITY, f32::INFINITY)),
        DType::F64 => pool_planes(a.kind, x.get::<f64>(), out.get::<f64>(), &g, (f64::NEG_INFINITY, f64::INFINITY)),
        DType::F16 | DType::BF16 => {
            let mut o = vec![0f32; out.numel()];
            pool_planes(a.kind, &widen(x), &mut o, &g, (f32::NEG_INFINITY, f32::INFINITY));
            narrow(&o, out);
        }
        d if d.is_int() && a.kind != ReduceOp::Mean => {
            let xs: Vec<Int> = ints(x).into_iter().map(Int).collect();
            let mut o = vec![Int(0); out.numel()];
            let (lo, hi) = int_range(d);
            pool_planes(a.kind, &xs, &mut o, &g, (Int(lo), Int(hi)));
            store_ints(&o.iter().map(|v| v.0).collect::<Vec<_>>(), out);
        }
        d => return Err(format!("{:?} pooling has no kernel for {d}", a.kind)),
    }
    Ok(())
}

/// Per plane: zeros, then each window's first maximum (row-major window order, padding
/// excluded, a NaN beats any number) receives that window's upstream value.
fn max_pool_backward_planes<T: Real>(x: &[T], dy: &[T], dx: &mut [T], g: &Geom) {
    let (bi, o) = (g.big_cells(), g.small_cells());
    for_chunks(dx, bi, o * g.taps(), |plane, dx| {
        let (x, dy) = (&x[plane * bi..(plane + 1) * bi], &dy[plane * o..(plane + 1) * o]);
        dx.fill(T::ZERO);
        let mut best: Vec<Option<usize>> = vec![None; o];
        windows(g, |oi, xi| {
            let v = x[xi];
            let better = match best[oi] {
                None => true,
                Some(b) => !x[b].is_nan() && (v > x[b] || v.is_nan()),
            };
            if better {
                best[oi] = Some(xi);
            }
        });
        for (oi, b) in best.into_iter().enumerate() {
            if let Some(xi) = b {
                dx[xi] = dx[xi] + dy[oi];
            }
        }
    });
}

fn max_pool_backward_any(kernel: &[usize], stride: &[usize], padding: &[usize], x: In, dy: In, out: &mut Out) -> Result<(), String> {
    let g = pool_geom(kernel, stride, padding, x.dims, dy.dims);
    match x.dtype {
        DType::F32 => max_pool_backward_planes(x.get::<f32>(), dy.get::<f32>(), out.get::<f32>(), &g),
        DType::F64 => max_pool_backward_planes(x.get::<f64>(), dy.get::<f64>(), out.get::<f64>(), &g),
        DType::F16 | DType::BF16 => {
            let mut o = vec![0f32; out.numel()];
            max_pool_backward_planes(&widen(x), &widen(dy), &mut o, &g);
            narrow(&o, out);
        }
        d => return Err(format!("max-pool backward runs on float tensors, not {d}")),
    }
    Ok(())
}

/// `MaxPool2dBackward(x [N,C,H,W], ȳ [N,C,H_o,W_o])` → `dx` shaped like `x`; overlapping
/// windows accumulate.
pub fn max_pool_backward(a: &MaxPool2dBackward, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    max_pool_backward_any(&a.kernel_size, &a.stride, &a.padding, x, dy, out)
}

/// `MaxPool3dBackward(x [N,C,D,H,W], ȳ)`, the 3-D analogue.
pub fn max_pool3d_backward(a: &MaxPool3dBackward, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    max_pool_backward_any(&a.kernel_size, &a.stride, &a.padding, x, dy, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_pass_f32_max_matches_the_window_loop() {
        // Odd planes, windows over every edge (one wholly in the padding: −∞), strides 1–3,
        // NaNs that must win.
        let cases = [([9, 11], [3, 3], [2, 2], [1, 1]), ([7, 1], [2, 1], [1, 1], [1, 0]), ([5, 6], [3, 2], [3, 1], [2, 1]), ([1, 63], [1, 5], [1, 3], [0, 2]), ([4, 4], [1, 1], [1, 1], [1, 1]), ([9, 70], [3, 3], [2, 2], [1, 1]), ([6, 40], [2, 3], [1, 1], [0, 1]), ([5, 37], [1, 4], [1, 2], [0, 0])];
        for ([h, w], k, s, p) in cases {
            let small = [(h + 2 * p[0] - k[0]) / s[0] + 1, (w + 2 * p[1] - k[1]) / s[1] + 1];
            let g = Geom::new(&[h, w], &small, &k, &s, &p, &[]);
            let planes = 3;
            let mut x: Vec<f32> = (0..planes * h * w).map(|i| ((i * 7919 % 1013) as f32 / 101.0 - 5.0).sin()).collect();
            x[h * w + w / 2] = f32::NAN;
            let mut want = vec![0.0f32; planes * g.small_cells()];
            pool_planes(ReduceOp::Max, &x, &mut want, &g, (f32::NEG_INFINITY, f32::INFINITY));
            let mut got = vec![0.0f32; want.len()];
            max_planes_2d(&x, &mut got, &g);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(a == b || (a.is_nan() && b.is_nan()), "cell {i}: {a} vs {b} for {g:?}");
            }
            assert!(got.iter().any(|v| v.is_nan()));
            assert_eq!(got.contains(&f32::NEG_INFINITY), k == [1, 1]);
        }
    }
}
