//! Winograd F(2×2, 3×3) f32 convolution, for 3×3 windows of stride 1 and dilation 1.
//!
//! Each 2 × 2 block of output cells (a *tile*) is computed from the 4 × 4 input patch under
//! it as `Y = Aᵀ [Σ_c (G g_c Gᵀ) ⊙ (Bᵀ d_c B)] A`: per input channel and tile, 16
//! multiply-adds instead of a direct conv's 36, in sixteen independent products, one per point
//! `ξν` of the 4 × 4 transform domain, `M_ξν [C_out, T] = U_ξν [C_out, C_in] · V_ξν [C_in, T]`.
//! The weight's transforms `U` are packed once ([`Winograd::new`]); each call transforms the
//! input into `V`, laid out as the register tile's panels, runs the tile kernels over each
//! (output-channel panel, tile segment) for all sixteen points, and transforms that block of
//! `M` back into the output, finishing it (bias, residual, activation) on the way out.
//!
//! The transforms' coefficients are 0, ±1 and ±½: results differ from a direct conv's by a
//! few roundings (F(2×2, 3×3) is the most accurate of its family; larger tiles save more
//! multiplies and lose digits).

use super::{put_piece, task_split, Finish, Geom};
use crate::kernels::matmul::{with_buffer, Mat, OutPtr, PackedB, Tile};
use rayon::prelude::*;
use std::cell::RefCell;

/// Points of the transform domain (4 × 4).
const POINTS: usize = 16;

/// Fewest input and output channels for which the transforms pay off.
const MIN_CHANNELS: usize = 16;

thread_local! {
    /// The transformed input `V`, kept per thread across calls.
    static INPUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A task's accumulators: `M` for its segments at all sixteen points.
    static PRODUCTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// How the register tiles cover each product `M_ξν [C_out, T]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tiling {
    /// Rows are output channels (`U` packed as rows of `a`), columns `nr` tiles: any tile.
    Channels,
    /// Rows are `mr` tiles, columns output channels (`U` packed as columns of `aᵀ`), the
    /// tiles' `V` read in place ([`Tile::gathered_rows`], AVX-512): for few tiles.
    Tiles { mr: usize },
}

/// A conv weight `[C_out, C_in, 3, 3]` transformed to `U` and packed for one tiling.
pub struct Winograd {
    /// The weight as given (`U` does not give it back exactly) and its dims.
    weight: Vec<f32>,
    dims: Vec<usize>,
    tile: Tile,
    tiling: Tiling,
    /// `U_ξν [C_out, C_in]` for each point, packed as `tiling` reads it.
    points: Vec<PackedB>,
}

/// Whether a conv of `c_in → c_out` channels over window `g` runs here: 2-D, 3 × 3, stride 1,
/// dilation 1, and enough channels on both sides.
pub(super) fn applies(c_in: usize, c_out: usize, g: &Geom) -> bool {
    g.big[0] == 1 && g.k == [1, 3, 3] && g.s == [1; 3] && g.d == [1; 3] && c_in >= MIN_CHANNELS && c_out >= MIN_CHANNELS
}

/// The tile and tiling for `c_out` output channels over `tiles` tiles: output channels as rows
/// on the tile that pads them least, unless tiles as rows on some AVX-512 tile keep clearly
/// more of the products useful (weighted by `m·v / (m·v + 2)` for `m` rows of `v` vectors).
fn tiling(c_out: usize, tiles: usize) -> (Tile, Tiling) {
    let rows = Tile::for_rows(c_out);
    let share = |used: usize, all: usize, m: usize, v: usize| used as f64 / all as f64 * (m * v) as f64 / (m * v + 2) as f64;
    let by_channels = share(c_out * tiles, c_out.div_ceil(rows.mr) * rows.mr * tiles.div_ceil(rows.nr) * rows.nr, rows.mr, rows.nr.div_ceil(16));
    let by_tiles = |t: &Tile| {
        let m = (4..=t.mr).filter(|&m| t.gathered_rows(m).is_some()).min_by_key(|&m| (tiles.div_ceil(m) * m, usize::MAX - m))?;
        Some((share(c_out * tiles, c_out.div_ceil(t.nr) * t.nr * tiles.div_ceil(m) * m, m, t.nr / 16), *t, m))
    };
    let best = Tile::available().iter().filter(|t| t.isa == rows.isa).filter_map(by_tiles).max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((share, t, mr)) if share > 1.03 * by_channels => (t, Tiling::Tiles { mr }),
        _ => (rows, Tiling::Channels),
    }
}

impl Winograd {
    /// Transforms and packs `w [C_out, C_in, 3, 3]` (`dims`) for a conv whose output planes
    /// have `tiles` tiles ([`tiling`]).
    pub fn new(w: &[f32], dims: &[usize], tiles: usize) -> Winograd {
        let (tile, tiling) = tiling(dims.first().copied().unwrap_or(0), tiles);
        Winograd::with(tile, tiling, w, dims)
    }

    /// [`Winograd::new`] on a given tile and tiling (tiles as rows only where the tile has an
    /// in-place kernel of `mr` rows, else output channels as rows); `dims` may also be
    /// `[C_out, C_in·9]`.
    pub fn with(tile: Tile, tiling: Tiling, w: &[f32], dims: &[usize]) -> Winograd {
        let tiling = match tiling {
            Tiling::Tiles { mr } if tile.gathered_rows(mr).is_none() => Tiling::Channels,
            t => t,
        };
        let c_out = dims.first().copied().unwrap_or(0);
        let c_in = dims.iter().skip(1).product::<usize>() / 9;
        let u = transform_weight(w, c_out * c_in);
        let points = u
            .chunks_exact(c_out * c_in)
            .map(|u| {
                let a = Mat::row_major(u, c_out, c_in);
                match tiling {
                    Tiling::Channels => PackedB::rows_of(tile, a, &[c_out, c_in]),
                    Tiling::Tiles { .. } => PackedB::columns_of(tile, a, &[c_out, c_in]),
                }
            })
            .collect();
        Winograd { weight: w.to_vec(), dims: dims.to_vec(), tile, tiling, points }
    }

    /// The weight as given.
    pub fn unpack(&self) -> Vec<f32> {
        self.weight.clone()
    }

    /// The weight's dims as given.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The tile and tiling it is packed for.
    pub fn packing(&self) -> (Tile, Tiling) {
        (self.tile, self.tiling)
    }
}

/// `U = G g Gᵀ` for each of `n` 3 × 3 kernels in `w`, laid out point-major: `u[ξν][i]` (in f64,
/// `G g` first, rounded once).
fn transform_weight(w: &[f32], n: usize) -> Vec<f32> {
    const G: [[f64; 3]; 4] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
    let mut u = vec![0.0f32; POINTS * n];
    for (i, g) in w.chunks_exact(9).enumerate() {
        let gg: [[f64; 3]; 4] = std::array::from_fn(|xi| std::array::from_fn(|b| (0..3).map(|a| G[xi][a] * g[a * 3 + b] as f64).sum()));
        for (xi, row) in gg.iter().enumerate() {
            for (nu, gn) in G.iter().enumerate() {
                u[(xi * 4 + nu) * n + i] = (row[0] * gn[0] + row[1] * gn[1] + row[2] * gn[2]) as f32;
            }
        }
    }
    u
}

/// Where a call's transformed input lies: per point, `segments` panels of `c_in × width`
/// floats (step `c`'s `width` tiles contiguous), tile `t` in panel `t / width`, lane
/// `t % width`.
struct Layout {
    /// Output rows and columns, and tile rows and columns.
    oh: usize,
    ow: usize,
    th: usize,
    tw: usize,
    width: usize,
    segments: usize,
    c_in: usize,
    c_out: usize,
}

impl Layout {
    fn tiles(&self) -> usize {
        self.th * self.tw
    }

    /// Floats per point.
    fn point(&self) -> usize {
        self.segments * self.c_in * self.width
    }

    /// Offset of step `c` of segment `s` at point `pt`.
    fn at(&self, pt: usize, s: usize, c: usize) -> usize {
        pt * self.point() + (s * self.c_in + c) * self.width
    }
}

/// Writes `V = Bᵀ d B` for every tile of channel `x [H, W]` (padding `p = [p_h, p_w]`) at its
/// place in `v` (the layout's panels, this channel's steps only; lanes past the last tile
/// zeroed).
///
/// # Safety
/// `v` must address the whole transformed input of `l`; only channel `c`'s steps are written.
unsafe fn transform_input(x: &[f32], hw: [usize; 2], p: [usize; 2], c: usize, l: &Layout, v: &OutPtr) {
    let ([h, w], [ph, pw], tw) = (hw, p, l.tw);
    // Padded rows (padded cell (i, u) holds input cell (i − p_h, u − p_w)) in a ring of four
    // by padded row, with a vector of slack for whole-vector reads.
    let len = 2 * tw + 2 + SLACK;
    let mut ring = vec![vec![0.0f32; len]; 4];
    let fill = |i: usize, row: &mut [f32]| match i.checked_sub(ph).filter(|&r| r < h) {
        Some(r) => {
            let lo = pw.min(2 * tw + 2);
            let n = w.min(2 * tw + 2 - lo);
            row[..lo].fill(0.0);
            row[lo..lo + n].copy_from_slice(&x[r * w..][..n]);
            row[lo + n..].fill(0.0);
        }
        None => row.fill(0.0),
    };
    fill(0, &mut ring[0]);
    fill(1, &mut ring[1]);
    let columns = simd::columns();
    for ty in 0..l.th {
        fill(2 * ty + 2, &mut ring[(2 * ty + 2) % 4]);
        fill(2 * ty + 3, &mut ring[(2 * ty + 3) % 4]);
        let d = |a: usize| &ring[(2 * ty + a) % 4];
        for xi in 0..4 {
            let (x, y, sign) = match xi {
                0 => (d(0), d(2), -1.0),
                1 => (d(1), d(2), 1.0),
                2 => (d(2), d(1), -1.0),
                _ => (d(1), d(3), -1.0),
            };
            let mut tx = 0;
            while tx < tw {
                let t = ty * tw + tx;
                let (s, lane) = (t / l.width, t % l.width);
                let run = (l.width - lane).min(tw - tx);
                columns([&x[2 * tx..], &y[2 * tx..]], sign, run, std::array::from_fn(|nu| v.at(l.at(xi * 4 + nu, s, c) + lane)));
                tx += run;
            }
        }
    }
    let tiles = l.tiles();
    if !tiles.is_multiple_of(l.width) {
        let (s, lane) = (tiles / l.width, tiles % l.width);
        for pt in 0..POINTS {
            std::ptr::write_bytes(v.at(l.at(pt, s, c) + lane), 0, l.width - lane);
        }
    }
}

/// Floats of slack past a padded row, for whole-vector reads.
const SLACK: usize = 32;

/// Row `ξ` of `V = Bᵀ d B` for `n` tiles: the row `e = x + sign·y` of `Bᵀ d` (tile `i`'s
/// columns at `e[2i .. 2i + 4]`, `x` and `y` two padded rows, `sign` ±1), then `dst[ν][i] =
/// (e B)[ν]` (`e[2i] − e[2i+2]`, `e[2i+1] + e[2i+2]`, `e[2i+2] − e[2i+1]`, `e[2i+1] −
/// e[2i+3]`). `x` and `y` hold `2n + 2` floats and [`SLACK`] more; each `dst[ν]` addresses
/// `n` floats.
type Columns = unsafe fn([&[f32]; 2], f32, usize, [*mut f32; 4]);

/// The output half: `Y = Aᵀ M A` elementwise over a block of products, `m` holding the sixteen
/// points' `n` floats each, point-major; `y` receives `Y_ab` for `a, b ∈ {0, 1}`, `n` floats
/// each.
fn transform_output(m: &[f32], n: usize, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // Safety: the CPU has AVX-512F; `m` holds 16·n floats and `y` 4·n.
        return unsafe { simd::avx512::output(&m[..POINTS * n], n, &mut y[..4 * n]) };
    }
    simd::portable_output(m, n, y)
}

/// The transforms' inner loops: portable, and on AVX-512 sixteen tiles or products at a time.
mod simd {
    use super::Columns;

    /// The column transform for this CPU.
    pub(super) fn columns() -> Columns {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return avx512::columns;
        }
        portable_columns
    }

    /// `out[2i] = a[i]`, `out[2i + 1] = b[i]` for the `n` floats of `a` and `b`.
    pub(super) type Interleave = fn([&[f32]; 2], &mut [f32]);

    /// The interleave for this CPU.
    pub(super) fn interleave() -> Interleave {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // Safety: the CPU has AVX-512F.
            return |ab, out| unsafe { avx512::interleave(ab, out) };
        }
        portable_interleave
    }

    pub(super) fn portable_interleave([a, b]: [&[f32]; 2], out: &mut [f32]) {
        for ((o, &a), &b) in out.chunks_exact_mut(2).zip(a).zip(b) {
            (o[0], o[1]) = (a, b);
        }
    }

    pub(super) fn portable_output(m: &[f32], n: usize, y: &mut [f32]) {
        let p: [&[f32]; super::POINTS] = std::array::from_fn(|i| &m[i * n..][..n]);
        for i in 0..n {
            // Rows of Aᵀ M: r0 = M0 + M1 + M2, r1 = M1 − M2 − M3 (per column ν).
            let r0: [f32; 4] = std::array::from_fn(|nu| p[nu][i] + p[4 + nu][i] + p[8 + nu][i]);
            let r1: [f32; 4] = std::array::from_fn(|nu| p[4 + nu][i] - p[8 + nu][i] - p[12 + nu][i]);
            y[i] = r0[0] + r0[1] + r0[2];
            y[n + i] = r0[1] - r0[2] - r0[3];
            y[2 * n + i] = r1[0] + r1[1] + r1[2];
            y[3 * n + i] = r1[1] - r1[2] - r1[3];
        }
    }

    pub(super) unsafe fn portable_columns([x, y]: [&[f32]; 2], sign: f32, n: usize, dst: [*mut f32; 4]) {
        let e = |j: usize| x[j] + sign * y[j];
        for i in 0..n {
            let (e0, e1, e2, e3) = (e(2 * i), e(2 * i + 1), e(2 * i + 2), e(2 * i + 3));
            *dst[0].add(i) = e0 - e2;
            *dst[1].add(i) = e1 + e2;
            *dst[2].add(i) = e2 - e1;
            *dst[3].add(i) = e1 - e3;
        }
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) mod avx512 {
        use std::arch::x86_64::*;

        /// The first `k` of 16 lanes (all from 16 on).
        fn lanes(k: usize) -> u16 {
            if k >= 16 {
                u16::MAX
            } else {
                ((1u32 << k) - 1) as u16
            }
        }

        /// [`super::Columns`]: the even and odd columns of 32 floats split by two permutes.
        #[target_feature(enable = "avx512f")]
        pub(in super::super) unsafe fn columns([x, y]: [&[f32]; 2], sign: f32, n: usize, dst: [*mut f32; 4]) {
            debug_assert!(x.len().min(y.len()) >= 2 * n.div_ceil(16) * 16 + 2);
            let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
            let (xp, yp, sign) = (x.as_ptr(), y.as_ptr(), _mm512_set1_ps(sign));
            // e[j..j + 16] = x + sign·y: one rounding, as in the portable loop.
            let e = |j: usize| _mm512_fmadd_ps(sign, _mm512_loadu_ps(yp.add(j)), _mm512_loadu_ps(xp.add(j)));
            for i in (0..n).step_by(16) {
                let (a, b) = (e(2 * i), e(2 * i + 16));
                let (c, d) = (e(2 * i + 2), e(2 * i + 18));
                let (e0, e1) = (_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
                let (e2, e3) = (_mm512_permutex2var_ps(c, even, d), _mm512_permutex2var_ps(c, odd, d));
                let m = lanes(n - i);
                _mm512_mask_storeu_ps(dst[0].add(i), m, _mm512_sub_ps(e0, e2));
                _mm512_mask_storeu_ps(dst[1].add(i), m, _mm512_add_ps(e1, e2));
                _mm512_mask_storeu_ps(dst[2].add(i), m, _mm512_sub_ps(e2, e1));
                _mm512_mask_storeu_ps(dst[3].add(i), m, _mm512_sub_ps(e1, e3));
            }
        }

        /// [`super::Interleave`], sixteen pairs at a time.
        #[target_feature(enable = "avx512f")]
        pub(in super::super) unsafe fn interleave([a, b]: [&[f32]; 2], out: &mut [f32]) {
            let n = a.len().min(b.len()).min(out.len() / 2);
            let lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
            let hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
            let (ap, bp, op) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
            for i in (0..n).step_by(16) {
                let k = lanes(n - i);
                let (x, y) = (_mm512_maskz_loadu_ps(k, ap.add(i)), _mm512_maskz_loadu_ps(k, bp.add(i)));
                _mm512_mask_storeu_ps(op.add(2 * i), lanes(2 * (n - i)), _mm512_permutex2var_ps(x, lo, y));
                if n - i > 8 {
                    _mm512_mask_storeu_ps(op.add(2 * i + 16), lanes(2 * (n - i) - 16), _mm512_permutex2var_ps(x, hi, y));
                }
            }
        }

        /// [`super::super::transform_output`] sixteen products at a time.
        #[target_feature(enable = "avx512f")]
        pub(in super::super) unsafe fn output(m: &[f32], n: usize, y: &mut [f32]) {
            let (mp, yp) = (m.as_ptr(), y.as_mut_ptr());
            for i in (0..n).step_by(16) {
                let k = lanes(n - i);
                let p = |pt: usize| _mm512_maskz_loadu_ps(k, mp.add(pt * n + i));
                let r0: [__m512; 4] = std::array::from_fn(|nu| _mm512_add_ps(_mm512_add_ps(p(nu), p(4 + nu)), p(8 + nu)));
                let r1: [__m512; 4] = std::array::from_fn(|nu| _mm512_sub_ps(_mm512_sub_ps(p(4 + nu), p(8 + nu)), p(12 + nu)));
                for (a, r) in [r0, r1].iter().enumerate() {
                    let y0 = _mm512_add_ps(_mm512_add_ps(r[0], r[1]), r[2]);
                    let y1 = _mm512_sub_ps(_mm512_sub_ps(r[1], r[2]), r[3]);
                    _mm512_mask_storeu_ps(yp.add(2 * a * n + i), k, y0);
                    _mm512_mask_storeu_ps(yp.add((2 * a + 1) * n + i), k, y1);
                }
            }
        }
    }
}

/// `out [C_out, OH·OW] = conv(x [c_in, H, W], w)` for one (image, group), `g` a window
/// [`applies`] accepts, finished on the way out by `finish` when given as `(finish, channel of
/// row 0, flat output index of out[0])`.
pub(super) fn conv(x: &[f32], c_in: usize, w: &Winograd, g: &Geom, out: &mut [f32], parallel: bool, finish: Option<(&Finish, usize, usize)>) {
    let (tile, [oh, ow]) = (w.tile, [g.small[1], g.small[2]]);
    let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
    // Tiles per segment, the register tile, output channels per panel of the packed weight,
    // and the in-place kernel when tiles are the rows.
    let (width, mr, nr, rows, kernel) = match w.tiling {
        Tiling::Channels => (tile.nr, tile.mr, tile.nr, tile.mr, None),
        Tiling::Tiles { mr } => (mr, mr, tile.nr, tile.nr, tile.gathered_rows(mr)),
    };
    let (o, c_out) = (oh * ow, w.dims[0]);
    let l = Layout { oh, ow, th, tw, width, segments: (th * tw).div_ceil(width), c_in, c_out };
    let panels = c_out.div_ceil(rows);
    let (threads, group) = task_split(panels, l.segments, c_out * c_in * POINTS * l.tiles(), parallel);
    // Consecutive tasks (one thread's share) keep the larger operand's part in cache: the
    // weight's panel when it outweighs the transformed input, else the segment group.
    let panel_major = c_out > l.tiles();
    let groups = l.segments.div_ceil(group);
    // Step offsets for the in-place kernel: step c's `mr` tiles `mr` floats on.
    let offsets: Vec<usize> = (0..c_in).map(|c| c * mr).collect();
    with_buffer(&INPUT, POINTS * l.point(), |v| {
        let vp = OutPtr(v.as_mut_ptr());
        let (hw, p) = ([g.big[1], g.big[2]], [g.p[1], g.p[2]]);
        // Safety: each channel writes only its own steps of `v`.
        let fill = |c: usize| unsafe { transform_input(&x[c * hw[0] * hw[1]..][..hw[0] * hw[1]], hw, p, c, &l, &vp) };
        if threads > 1 {
            (0..c_in).into_par_iter().for_each(fill);
        } else {
            (0..c_in).for_each(fill);
        }
        let (v, dst) = (&*v, OutPtr(out.as_mut_ptr()));
        let block = mr * nr;
        let task = |t: usize| {
            let (panel, first) = if panel_major { (t / groups, t % groups * group) } else { (t % panels, t / panels * group) };
            let range = first..(first + group).min(l.segments);
            with_buffer(&PRODUCTS, range.len() * POINTS * block + 4 * block, |m| {
                let (m, y) = m.split_at_mut(range.len() * POINTS * block);
                for (pt, u) in w.points.iter().enumerate() {
                    for (p0, kc, packed) in u.blocks() {
                        let a = packed[panel * rows * kc..].as_ptr();
                        for (i, s) in range.clone().enumerate() {
                            let (b, acc) = (v[l.at(pt, s, p0)..].as_ptr(), m[(i * POINTS + pt) * block..].as_mut_ptr());
                            // Safety: panel `panel` holds `rows × kc` floats, segment `s` holds
                            // `width` floats per step from `p0` (read `kc` steps on), and `acc`
                            // holds `mr × nr` floats; the kernels are the tile's own.
                            unsafe {
                                match kernel {
                                    Some(k) => k(kc, a, b, offsets.as_ptr(), acc, nr, p0 > 0),
                                    None => tile.run(kc, a, b, acc, nr, p0 > 0),
                                }
                            }
                        }
                    }
                }
                for (i, s) in range.clone().enumerate() {
                    transform_output(&m[i * POINTS * block..][..POINTS * block], block, y);
                    // Safety: each task alone writes its channels' cells of its tiles.
                    store(y, nr, w.tiling, [panel, s], &l, |channel, cell, src| unsafe { put_piece(&dst, o, finish, channel, cell, src) });
                }
            });
        };
        if threads > 1 {
            (0..panels * groups).into_par_iter().for_each(task);
        } else {
            (0..panels * groups).for_each(task);
        }
    });
}

/// Writes the output tiles `y` (`Y_ab`, one `mr × nr` register tile each) of channel panel
/// `panel` and tile segment `s` through `put(channel, cell, run)`, one call per channel and
/// output row run.
fn store(y: &[f32], nr: usize, tiling: Tiling, [panel, s]: [usize; 2], l: &Layout, mut put: impl FnMut(usize, usize, &[f32])) {
    // Channels per panel, and the strides of a channel and of a tile in the register tile.
    let (per_panel, sc, st) = match tiling {
        Tiling::Channels => (y.len() / 4 / nr, nr, 1),
        Tiling::Tiles { .. } => (nr, 1, nr),
    };
    let block = y.len() / 4;
    let (t0, end) = (s * l.width, ((s + 1) * l.width).min(l.tiles()));
    let channels = per_panel.min(l.c_out - panel * per_panel);
    let mut run_buf = [0.0f32; 2 * 64];
    let interleave = simd::interleave();
    let mut t = t0;
    while t < end {
        let (ty, tx0) = (t / l.tw, t % l.tw);
        let run = (l.tw - tx0).min(end - t);
        for a in 0..2 {
            let row = 2 * ty + a;
            if row >= l.oh {
                continue;
            }
            let len = (2 * run).min(l.ow - 2 * tx0);
            for r in 0..channels {
                let base = r * sc + (t - t0) * st;
                let (y0, y1) = (&y[2 * a * block + base..], &y[(2 * a + 1) * block + base..]);
                if st == 1 {
                    interleave([&y0[..run], &y1[..run]], &mut run_buf[..2 * run]);
                } else {
                    for i in 0..run {
                        (run_buf[2 * i], run_buf[2 * i + 1]) = (y0[i * st], y1[i * st]);
                    }
                }
                put(panel * per_panel + r, row * l.ow + 2 * tx0, &run_buf[..len]);
            }
        }
        t += run;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32).map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed * 97) % 1000) as f32) / 500.0 - 1.0).collect()
    }

    #[test]
    fn simd_transforms_match_the_portable_ones() {
        // Lengths around the 16-lane vectors, so that full and masked tails both run; the
        // same adds in the same order, so the same bits.
        for n in [1, 7, 16, 23, 48] {
            let (x, y) = (values(2 * n + 2 + SLACK, n as u32), values(2 * n + 2 + SLACK, 5 + n as u32));
            for sign in [1.0, -1.0] {
                let mut want = vec![0.0f32; 4 * n];
                let mut got = vec![f32::NAN; 4 * n];
                let ptrs = |v: &mut [f32]| -> [*mut f32; 4] { std::array::from_fn(|nu| v[nu * n..].as_mut_ptr()) };
                // Safety: `x` and `y` hold 2n + 2 + SLACK floats, each destination n.
                unsafe {
                    simd::portable_columns([&x, &y], sign, n, ptrs(&mut want));
                    simd::columns()([&x, &y], sign, n, ptrs(&mut got));
                }
                assert_eq!(got, want, "columns of {n} tiles, sign {sign}");
            }
            let (mut want, mut got) = (vec![0.0f32; 2 * n], vec![f32::NAN; 2 * n]);
            simd::portable_interleave([&x[..n], &y[..n]], &mut want);
            simd::interleave()([&x[..n], &y[..n]], &mut got);
            assert_eq!(got, want, "interleave of {n} pairs");
            let m = values(POINTS * n, 3 + n as u32);
            let (mut want, mut got) = (vec![0.0f32; 4 * n], vec![f32::NAN; 4 * n]);
            simd::portable_output(&m, n, &mut want);
            transform_output(&m, n, &mut got);
            assert_eq!(got, want, "output transform of {n} products");
        }
    }

    #[test]
    fn packing_gives_the_weight_back_and_needs_an_in_place_kernel_for_tiles_as_rows() {
        let w = values(20 * 17 * 9, 1);
        let packed = Winograd::with(Tile::portable(), Tiling::Tiles { mr: 7 }, &w, &[20, 17, 3, 3]);
        assert_eq!(packed.packing().1, Tiling::Channels, "the portable tile reads no tiles in place");
        assert_eq!((packed.unpack(), packed.dims()), (w, &[20, 17, 3, 3][..]));
    }

    #[test]
    fn weight_transform_is_g_g_gt() {
        // U = G g Gᵀ written out for one kernel: corners are g's corners, the centre point
        // (ξ, ν) = (1, 1) is a quarter of g's sum.
        let g: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let u = transform_weight(&g, 1);
        assert_eq!([u[0], u[3], u[12], u[15]], [1.0, 3.0, 7.0, 9.0]);
        assert_eq!(u[5], 45.0 / 4.0);
    }
}
