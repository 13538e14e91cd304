//! Convolution, pooling and resize (OPS.md §10) and their backward ops (§22).
//!
//! Every conv-like op runs over three spatial axes: a 2-D op is a 3-D one with `D = 1`
//! (and a 1-D conv is a 2-D one with `H = 1`, OPS.md §10). Convolutions lower onto GEMM:
//! per (image, group) `out [C_out, O] = W [C_out, C/g·K] · windows [C/g·K, O]` (`K` taps,
//! `O` output cells). On f32 the weight is packed in the GEMM's row panels — once per plan
//! when it is a weight the executor pre-packs ([`prepack`]), else per call — and each GEMM
//! task writes the windows of its output cells straight into its packed column panels
//! ([`sgemm_filled`](crate::kernels::matmul::sgemm_filled); no column matrix, and a 1×1
//! conv copies its input rows), with `FusedConvBiasAct`'s bias, residual and activation in
//! the epilogue. A 3×3 stride-1 f32 conv with enough channels runs Winograd F(2×2, 3×3)
//! instead ([`winograd`]: 16 multiply-adds per channel and 2 × 2 output tile, not 36). Where
//! the weight's tile has an in-place kernel (AVX-512), other 2-D f32 convs skip the windows
//! altogether ([`direct`]): the tile reads its rows straight from a padded,
//! stride-phase-split copy of the input. f64 builds the column matrix and runs
//! [`gemm_slice`](crate::kernels::matmul::gemm_slice); transposed convs multiply first and
//! scatter-add the columns back (col2im). f16/bf16 operands compute in f32.


mod direct;
mod fused;
mod pool;
mod resize;
mod winograd;

pub use fused::{conv_bias_act, conv_prepacked};
pub use pool::{max_pool3d_backward, max_pool_backward, pool};
pub use resize::resize_nearest;
pub use winograd::{Tiling as WinogradTiling, Winograd};

use super::elementwise::{act, gelu_in_place, per_act};
use super::matmul::{gemm_slice, narrow, sgemm_filled, widen, Epilogue, Layout, Mat, MatMut, OutPtr, PackedB, PAR_FLOPS};
use super::real::Real;
use super::{by_size, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::elementwise::ActivationKind;
use std::ops::Range;
use rlx_ir::ops::conv::{
    Conv, Conv2dBackwardInput, Conv2dBackwardWeight, Conv3d, Conv3dBackwardInput, Conv3dBackwardWeight, ConvTranspose2d,
    ConvTranspose3d, Im2Col,
};
use rlx_ir::DType;

/// The window of a conv-like op over three spatial axes (2-D ops have a leading axis with
/// extent 1, kernel 1, stride 1, no padding).
///
/// `big` is the spatial extent of the side the window slides over (a conv's input, a
/// transposed conv's output), `small` that of the side with one cell per window position.
/// Window position `o`, tap `k` covers big cell `o·s − p + k·d` on each axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Geom {
    pub big: [usize; 3],
    pub small: [usize; 3],
    pub k: [usize; 3],
    pub s: [usize; 3],
    pub p: [usize; 3],
    pub d: [usize; 3],
}

/// `v` with missing entries set to `default`, right-aligned into three axes (axes before
/// the op's spatial axes get `lead`).
fn axes3(v: &[usize], rank: usize, default: usize, lead: usize) -> [usize; 3] {
    let mut out = [lead; 3];
    for i in 0..rank {
        out[3 - rank + i] = v.get(i).copied().unwrap_or(default);
    }
    out
}

impl Geom {
    /// From the spatial extents of both sides and the window attributes (missing stride and
    /// dilation entries are 1, missing padding 0; OPS.md §10). `kernel` fixes the rank.
    pub fn new(big: &[usize], small: &[usize], kernel: &[usize], stride: &[usize], padding: &[usize], dilation: &[usize]) -> Geom {
        let r = kernel.len();
        Geom {
            big: axes3(big, r, 1, 1),
            small: axes3(small, r, 1, 1),
            k: axes3(kernel, r, 1, 1),
            s: axes3(stride, r, 1, 1),
            p: axes3(padding, r, 0, 0),
            d: axes3(dilation, r, 1, 1),
        }
    }

    /// A window over an output of extent `small` whose input extent is not known (`big` is set
    /// to `small`): enough to choose how to pack the weight ([`prepack`]).
    pub fn of_output(small: &[usize], kernel: &[usize], stride: &[usize], padding: &[usize], dilation: &[usize]) -> Geom {
        Geom::new(small, small, kernel, stride, padding, dilation)
    }

    /// Cells of one big plane.
    pub fn big_cells(&self) -> usize {
        self.big.iter().product()
    }

    /// Cells of one small plane.
    pub fn small_cells(&self) -> usize {
        self.small.iter().product()
    }

    /// Taps of one window.
    pub fn taps(&self) -> usize {
        self.k.iter().product()
    }

    /// The big cell on axis `a` under window position `o` and tap `k`, if inside.
    #[inline]
    pub fn src(&self, a: usize, o: usize, k: usize) -> Option<usize> {
        let i = (o * self.s[a] + k * self.d[a]).checked_sub(self.p[a])?;
        (i < self.big[a]).then_some(i)
    }

    /// For W-axis tap `k`: the window positions `lo..hi` whose cell lies inside, and the big
    /// cell under position `lo` (empty range when none does).
    fn inside(&self, k: usize) -> (usize, usize, usize) {
        let (s, sw, off) = (self.s[2], self.small[2], k * self.d[2]);
        let lo = self.p[2].saturating_sub(off).div_ceil(s).min(sw);
        let hi = match (self.big[2] + self.p[2]).checked_sub(off + 1) {
            Some(last) => (last / s + 1).min(sw),
            None => 0,
        };
        let hi = hi.max(lo);
        (lo, hi, (lo * s + off).saturating_sub(self.p[2]))
    }

    /// A 1×1 window with stride 1 and no padding: the column matrix is the input itself.
    fn pointwise(&self) -> bool {
        self.k == [1; 3] && self.s == [1; 3] && self.p == [0; 3] && self.big == self.small
    }

    /// Calls `f(row, small_line_start, big_line_start)` for every line of the column matrix:
    /// one (tap, od, oh) triple whose W cells lie inside on the D and H axes; the W axis is
    /// left to the caller. Lines that fall outside on D or H are reported with `None`.
    #[inline]
    fn lines(&self, mut f: impl FnMut(usize, [usize; 3], usize, Option<usize>)) {
        let [_, bh, bw] = self.big;
        let [sd, sh, sw] = self.small;
        let mut tap = 0;
        for kd in 0..self.k[0] {
            for kh in 0..self.k[1] {
                for kw in 0..self.k[2] {
                    let mut at = 0;
                    for od in 0..sd {
                        let id = self.src(0, od, kd);
                        for oh in 0..sh {
                            let base = match (id, self.src(1, oh, kh)) {
                                (Some(id), Some(ih)) => Some((id * bh + ih) * bw),
                                _ => None,
                            };
                            f(tap, [kd, kh, kw], at, base);
                            at += sw;
                        }
                    }
                    tap += 1;
                }
            }
        }
    }
}

/// Copies the windows of `x [c, big]` into `col [c·K, O]`: row `(ci, tap)`, column = window
/// position; cells outside `x` are `T::default()` (zero).
pub fn im2col<T: Copy + Default>(x: &[T], c: usize, g: &Geom, col: &mut [T]) {
    let (bi, rows) = (g.big_cells(), g.taps() * g.small_cells());
    for ci in 0..c {
        im2col_plane(&x[ci * bi..(ci + 1) * bi], g, &mut col[ci * rows..(ci + 1) * rows]);
    }
}

/// The `K` rows of one channel's plane: each line of `W` cells is a zero head, a run read from
/// the plane (contiguous at stride 1) and a zero tail.
fn im2col_plane<T: Copy + Default>(plane: &[T], g: &Geom, col: &mut [T]) {
    let o = g.small_cells();
    let (s, sw) = (g.s[2], g.small[2]);
    g.lines(|tap, [_, _, kw], at, base| {
        let line = &mut col[tap * o + at..tap * o + at + sw];
        let Some(base) = base else {
            line.fill(T::default());
            return;
        };
        let (lo, hi, first) = g.inside(kw);
        line[..lo].fill(T::default());
        line[hi..].fill(T::default());
        if hi == lo {
            return;
        }
        let src = &plane[base + first..];
        if s == 1 {
            line[lo..hi].copy_from_slice(&src[..hi - lo]);
        } else {
            for (v, &x) in line[lo..hi].iter_mut().zip(src.iter().step_by(s)) {
                *v = x;
            }
        }
    });
}

/// The adjoint of [`im2col`]: adds every entry of `col [c·K, O]` onto the cell of
/// `x [c, big]` it was read from (entries that came from outside are dropped).
pub fn col2im<T: Real>(col: &[T], c: usize, g: &Geom, x: &mut [T]) {
    let (bi, o, kk, sw) = (g.big_cells(), g.small_cells(), g.taps(), g.small[2]);
    for ci in 0..c {
        let plane = &mut x[ci * bi..(ci + 1) * bi];
        g.lines(|tap, [_, _, kw], at, base| {
            let Some(base) = base else { return };
            let row = (ci * kk + tap) * o;
            for (ow, &v) in col[row + at..row + at + sw].iter().enumerate() {
                if let Some(iw) = g.src(2, ow, kw) {
                    plane[base + iw] = plane[base + iw] + v;
                }
            }
        });
    }
}

/// Runs `f(i, chunk)` over the `chunk`-sized pieces of `out`, on several threads when there
/// are enough pieces and enough work (`work` multiply-adds per piece); a lone large piece
/// runs on this thread so that its GEMM can spread instead.
fn for_chunks<T: Send>(out: &mut [T], chunk: usize, work: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if chunk == 0 {
        return;
    }
    if splits(out.len(), chunk, work) {
        out.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        out.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// Whether [`for_chunks`] runs the `chunk`-sized pieces of `len` elements on several threads
/// (a GEMM inside a piece then stays on its thread).
fn splits(len: usize, chunk: usize, work: usize) -> bool {
    let pieces = len / chunk.max(1);
    let big_pieces = work >= (1 << 18);
    pieces > 1 && pieces * work >= PAR_MIN && (pieces >= rayon::current_num_threads() || !big_pieces)
}

/// Channel geometry of a (transposed) conv: batch, channels on both sides, groups.
#[derive(Clone, Copy, Debug)]
pub struct Channels {
    pub n: usize,
    /// Channels of the operand read through windows in [`conv_forward`] (the conv input).
    pub c_in: usize,
    pub c_out: usize,
    pub groups: usize,
}

/// Cross-correlation `out [N, C_out, small] = x [N, C_in, big] ⋆ w [C_out, C_in/g, K]`, per
/// (image, group): `out_g [C_out/g, O] = w_g [C_out/g, C_in/g·K] × im2col(x_g)`. f32 runs on
/// [`conv_f32`].
pub fn conv_forward<T: Real>(x: &[T], w: &[T], out: &mut [T], ch: Channels, g: &Geom) -> Result<(), String> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let f = bytemuck::cast_slice::<T, f32>;
        return conv_f32(f(x), f(w), bytemuck::cast_slice_mut::<T, f32>(out), ch, g, None, None);
    }
    let (cig, cog) = (ch.c_in / ch.groups, ch.c_out / ch.groups);
    let (bi, o) = (g.big_cells(), g.small_cells());
    let rows = cig * g.taps();
    let parallel = !splits(out.len(), cog * o, cog * rows * o);
    for_chunks(out, cog * o, cog * rows * o, |ng, chunk| {
        let (b, gi) = (ng / ch.groups, ng % ch.groups);
        let xs = &x[(b * ch.c_in + gi * cig) * bi..][..cig * bi];
        let wg = &w[gi * cog * rows..][..cog * rows];
        if g.pointwise() {
            gemm_slice(Mat::row_major(wg, cog, rows), Mat::row_major(xs, rows, o), chunk, false, parallel);
        } else {
            let mut col = vec![T::ZERO; rows * o];
            im2col(xs, cig, g, &mut col);
            gemm_slice(Mat::row_major(wg, cog, rows), Mat::row_major(&col, rows, o), chunk, false, parallel);
        }
    });
    Ok(())
}

/// What a fused conv does to its output once the product is in (`FusedConvBiasAct`):
/// `act(y + bias[c] [+ residual])`.
pub struct Finish<'a> {
    /// Per output channel, `[C_out]`.
    pub bias: &'a [f32],
    /// Laid out as the output, `[N, C_out, small]`.
    pub residual: Option<&'a [f32]>,
    pub activation: Option<ActivationKind>,
}

impl Finish<'_> {
    /// Writes `src` finished into `dst`, the piece of output channel `oc` starting at flat
    /// output index `at`: one pass (a direct conv's tile straight into the output), on AVX-512
    /// with masked tails for bias, residual and ReLU (the pieces are short and many).
    fn store(&self, oc: usize, at: usize, src: &[f32], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.activation, None | Some(ActivationKind::Relu)) && std::arch::is_x86_feature_detected!("avx512f") {
            let residual = self.residual.map(|r| &r[at..at + dst.len()]);
            // Safety: the CPU has AVX-512F.
            return unsafe { store_avx512(src, dst, self.bias[oc], residual, self.activation.is_some()) };
        }
        dst.copy_from_slice(src);
        self.apply(oc, at, dst);
    }

    /// Finishes `y`, the piece of output channel `oc` starting at flat output index `at`.
    fn apply(&self, oc: usize, at: usize, y: &mut [f32]) {
        let b = self.bias[oc];
        match self.residual {
            Some(r) => y.iter_mut().zip(&r[at..]).for_each(|(y, &r)| *y = *y + b + r),
            None => y.iter_mut().for_each(|y| *y += b),
        }
        match self.activation {
            None => {}
            Some(ActivationKind::Relu) => y.iter_mut().for_each(|y| *y = if *y < 0.0 { 0.0 } else { *y }),
            Some(ActivationKind::Gelu) => gelu_in_place(y),
            Some(kind) => per_act!(kind, K => y.iter_mut().for_each(|y| *y = act(K, *y))),
        }
    }
}

/// `dst = max(src + bias [+ residual], 0)` (without `relu`, no max), 16 lanes at a time;
/// `src`, `dst` and `residual` have one length. ReLU passes NaN, as [`Finish::apply`] and the
/// `Relu` kind do (`max` returns its second operand where either is NaN).
/// Full vectors load unmasked: a masked load of `src` (the tile just stored by the kernel)
/// waits for the stores to reach the cache instead of being forwarded from them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_avx512(src: &[f32], dst: &mut [f32], bias: f32, residual: Option<&[f32]>, relu: bool) {
    use std::arch::x86_64::*;
    let (n, b, zero) = (dst.len(), _mm512_set1_ps(bias), _mm512_setzero_ps());
    let finish = |v: __m512, r: Option<__m512>| {
        let v = _mm512_add_ps(v, b);
        let v = r.map_or(v, |r| _mm512_add_ps(v, r));
        if relu {
            _mm512_max_ps(zero, v)
        } else {
            v
        }
    };
    let full = n / 16 * 16;
    for i in (0..full).step_by(16) {
        let r = residual.map(|r| _mm512_loadu_ps(r.as_ptr().add(i)));
        _mm512_storeu_ps(dst.as_mut_ptr().add(i), finish(_mm512_loadu_ps(src.as_ptr().add(i)), r));
    }
    if full < n {
        let m = ((1u32 << (n - full)) - 1) as u16;
        let r = residual.map(|r| _mm512_maskz_loadu_ps(m, r.as_ptr().add(full)));
        _mm512_mask_storeu_ps(dst.as_mut_ptr().add(full), m, finish(_mm512_maskz_loadu_ps(m, src.as_ptr().add(full)), r));
    }
}

/// Tile segments one task of a direct or Winograd conv runs side by side, each block of the
/// packed weight swept over all of them.
const GROUP: usize = 8;

/// How a direct or Winograd conv of `flops` multiply-adds splits its `panels × segments`
/// register tiles into tasks: the threads it uses (one unless `parallel` and at least
/// [`PAR_FLOPS`]), and segments per task, up to [`GROUP`], fewer when that would leave under
/// four tasks a thread.
fn task_split(panels: usize, segments: usize, flops: usize, parallel: bool) -> (usize, usize) {
    let threads = if parallel && flops >= PAR_FLOPS { rayon::current_num_threads() } else { 1 };
    (threads, (panels * segments).div_ceil(4 * threads).div_ceil(panels).clamp(1, GROUP))
}

/// Writes `src` as the cells from `cell` of output channel `channel` of `out [C_out, o]` (a
/// direct or Winograd conv's finished piece), through `finish` when given as `(finish, channel
/// of row 0, flat output index of out[0])`.
///
/// # Safety
/// The cells lie inside `out`, and no other task writes them meanwhile.
unsafe fn put_piece(out: &OutPtr, o: usize, finish: Option<(&Finish, usize, usize)>, channel: usize, cell: usize, src: &[f32]) {
    let piece = std::slice::from_raw_parts_mut(out.at(channel * o + cell), src.len());
    match finish {
        Some((f, first, at)) => f.store(first + channel, at + channel * o + cell, src, piece),
        None => piece.copy_from_slice(src),
    }
}

/// A conv weight laid out once for its kernel ([`prepack`]).
pub enum PackedConv {
    /// In the GEMM's panels, for a GEMM or direct conv.
    Gemm(PackedB),
    /// Transformed for a Winograd conv (3 × 3, stride 1).
    Winograd(Winograd),
}

impl PackedConv {
    /// The weight as given.
    pub fn unpack(&self) -> Vec<f32> {
        match self {
            PackedConv::Gemm(p) => p.unpack(),
            PackedConv::Winograd(w) => w.unpack(),
        }
    }

    /// The weight's dims as given.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            PackedConv::Gemm(p) => p.dims(),
            PackedConv::Winograd(w) => w.dims().to_vec(),
        }
    }
}

/// Packs the weight `w [C_out, C_in, K]` of an ungrouped conv over window `g` once, as
/// [`conv_f32`] reads it: transformed for a Winograd conv where one applies
/// ([`winograd::applies`]), else the rows of `[C_out, C_in·K]` in row panels, or for a direct
/// conv with cells as the tile's rows in column panels of its transpose
/// ([`direct::packing`]). `dims` is the weight's shape; `g`'s input extent is not read.
pub fn prepack(w: &[f32], dims: &[usize], g: &Geom) -> PackedConv {
    let (rows, cols) = (dims.first().copied().unwrap_or(0), dims.iter().skip(1).product::<usize>());
    if winograd::applies(cols / g.taps(), rows, g) {
        return PackedConv::Winograd(Winograd::new(w, dims, g.small[1].div_ceil(2) * g.small[2].div_ceil(2)));
    }
    let a = Mat::row_major(w, rows, cols);
    PackedConv::Gemm(match direct::packing(rows, g) {
        (tile, Layout::ColumnsOfA) => PackedB::columns_of(tile, a, dims),
        (tile, _) => PackedB::rows_of(tile, a, dims),
    })
}

/// [`conv_forward`] in f32: per (image, group), `out_g [C_out/g, O] = w_g × windows(x_g)`, the
/// weight packed once (`packed`, from [`prepack`], for an ungrouped conv; else each group's
/// here). A Winograd weight runs [`winograd::conv`]; else [`direct::conv`] where it applies,
/// otherwise [`sgemm_filled`], with the windows written straight into the GEMM's panels
/// ([`fill_windows`]). `finish` runs on each piece of the output while it is in cache. With as many (image, group) pieces as threads
/// the pieces run side by side, each product on one thread; otherwise in turn, each product
/// split over the pool.
pub fn conv_f32(x: &[f32], w: &[f32], out: &mut [f32], ch: Channels, g: &Geom, finish: Option<&Finish>, packed: Option<&PackedConv>) -> Result<(), String> {
    let (cig, cog) = (ch.c_in / ch.groups, ch.c_out / ch.groups);
    let (bi, o) = (g.big_cells(), g.small_cells());
    let rows = cig * g.taps();
    if cog * o == 0 {
        return Ok(());
    }
    let own: Vec<PackedConv>;
    let weights: Vec<&PackedConv> = match packed {
        Some(p) if ch.groups == 1 && p.dims().iter().product::<usize>() == cog * rows => vec![p],
        Some(p) => return Err(format!("conv: weight packed as {:?} for {} groups of [{cog}, {rows}]", p.dims(), ch.groups)),
        None => {
            let group = |gi: usize| prepack(&w[gi * cog * rows..][..cog * rows], &[cog, rows], g);
            own = (0..ch.groups).map(group).collect();
            own.iter().collect()
        }
    };
    let one = |ng: usize, chunk: &mut [f32], parallel: bool| {
        let (b, gi) = (ng / ch.groups, ng % ch.groups);
        let xs = &x[(b * ch.c_in + gi * cig) * bi..][..cig * bi];
        let first = (b * ch.c_out + gi * cog) * o;
        let finish_at = finish.map(|f| (f, gi * cog, first));
        let weight = match weights[gi] {
            PackedConv::Winograd(w) if winograd::applies(cig, cog, g) => {
                winograd::conv(xs, cig, w, g, chunk, parallel, finish_at);
                return Ok(());
            }
            PackedConv::Winograd(_) => return Err(format!("conv: weight transformed for a 3×3 window of stride 1, run over {g:?}")),
            PackedConv::Gemm(p) => p,
        };
        if direct::conv(xs, cig, weight, g, chunk, parallel, finish_at) {
            return Ok(());
        }
        let epilogue = |r: usize, c0: usize, y: &mut [f32]| {
            if let Some(f) = finish {
                f.apply(gi * cog + r, first + r * o + c0, y);
            }
        };
        let epilogue: Option<Epilogue> = finish.is_some().then_some(&epilogue);
        let nr = weight.tile().nr;
        let fill = |p0: usize, kc: usize, cols: Range<usize>, panels: &mut [f32]| fill_windows(xs, g, nr, p0, kc, cols, panels);
        sgemm_filled(weight, o, &fill, MatMut::row_major(chunk, cog, o), parallel, epilogue)
    };
    let pieces = out.len() / (cog * o);
    let work = pieces * cog * rows * o;
    if pieces > 1 && pieces >= rayon::current_num_threads() && work >= PAR_MIN {
        out.par_chunks_mut(cog * o).enumerate().try_for_each(|(i, c)| one(i, c, false))
    } else {
        out.chunks_mut(cog * o).enumerate().try_for_each(|(i, c)| one(i, c, true))
    }
}

/// Writes column tiles `cols` (of `nr` window positions each) of the window matrix of
/// `x [c, big]` (row `(ci, tap)`, column = window position, as [`im2col`] lays it out), at
/// rows `p0..p0 + kc`, into `panels` in the layout of the GEMM's packed `b`: per tile `kc × nr`
/// floats, row-major, zeros outside `x` and past the last window position.
fn fill_windows(x: &[f32], g: &Geom, nr: usize, p0: usize, kc: usize, cols: Range<usize>, panels: &mut [f32]) {
    let (bi, o, taps) = (g.big_cells(), g.small_cells(), g.taps());
    let ([_, bh, bw], [_, sh, sw], s) = (g.big, g.small, g.s[2]);
    let (start, end) = (cols.start * nr, (cols.end * nr).min(o));
    for p in 0..kc {
        let (ci, tap) = ((p0 + p) / taps, (p0 + p) % taps);
        let (kd, kh, kw) = (tap / (g.k[1] * g.k[2]), tap / g.k[2] % g.k[1], tap % g.k[2]);
        let plane = &x[ci * bi..][..bi];
        let mut out = Cursor { panels: &mut *panels, at: p * nr, lane: 0, nr, jump: (kc - 1) * nr };
        if g.pointwise() {
            out.copy(&plane[start..end]);
        } else {
            let (lo, hi, first) = g.inside(kw);
            let (mut od, mut oh) = (start / sw / sh, start / sw % sh);
            let mut l0 = start - start % sw;
            while l0 < end {
                let (a, b) = (start.max(l0), end.min(l0 + sw));
                match g.src(0, od, kd).zip(g.src(1, oh, kh)) {
                    None => out.zeros(b - a),
                    Some((id, ih)) => {
                        let (ia, ib) = ((l0 + lo).clamp(a, b), (l0 + hi).clamp(a, b));
                        out.zeros(ia - a);
                        if ib > ia {
                            let from = (id * bh + ih) * bw + first + (ia - l0 - lo) * s;
                            if s == 1 {
                                out.copy(&plane[from..from + ib - ia]);
                            } else {
                                out.gather(&plane[from..], s, ib - ia);
                            }
                        }
                        out.zeros(b - ib);
                    }
                }
                l0 += sw;
                oh += 1;
                if oh == sh {
                    (oh, od) = (0, od + 1);
                }
            }
        }
        out.zeros(cols.end * nr - end);
    }
}

/// Writes one row of the GEMM's packed `b` in order of window position: `nr` floats into a
/// panel, then on at the same row of the next panel (`jump` further).
struct Cursor<'a> {
    panels: &'a mut [f32],
    at: usize,
    lane: usize,
    nr: usize,
    jump: usize,
}

impl Cursor<'_> {
    /// Writes the next `n` positions with `f(piece, done)`, piece by piece within a panel
    /// (`done` positions written before the piece).
    #[inline]
    fn put(&mut self, n: usize, mut f: impl FnMut(&mut [f32], usize)) {
        let mut done = 0;
        while done < n {
            let len = (self.nr - self.lane).min(n - done);
            f(&mut self.panels[self.at..self.at + len], done);
            (self.at, self.lane, done) = (self.at + len, self.lane + len, done + len);
            if self.lane == self.nr {
                (self.at, self.lane) = (self.at + self.jump, 0);
            }
        }
    }

    fn zeros(&mut self, n: usize) {
        self.put(n, |piece, _| piece.fill(0.0));
    }

    fn copy(&mut self, src: &[f32]) {
        self.put(src.len(), |piece, done| piece.copy_from_slice(&src[done..done + piece.len()]));
    }

    /// `n` values of `src` at stride `s`.
    fn gather(&mut self, src: &[f32], s: usize, n: usize) {
        self.put(n, |piece, done| piece.iter_mut().zip(src[done * s..].iter().step_by(s)).for_each(|(v, &x)| *v = x));
    }
}

/// Transposed conv `out [N, C_out, big]` of `x [N, C_in, small]` with
/// `w [C_in, C_out/g, K]`: per (image, group) `col [C_out/g·K, O] = w_gᵀ × x_g`, then
/// col2im scatter-adds every column entry to big cell `o·s − p + k·d` (dropped outside).
/// `ch.c_in` / `ch.c_out` are the transposed conv's own input / output channels.
pub fn conv_transpose<T: Real>(x: &[T], w: &[T], out: &mut [T], ch: Channels, g: &Geom) {
    let (cig, cog) = (ch.c_in / ch.groups, ch.c_out / ch.groups);
    let (bi, o) = (g.big_cells(), g.small_cells());
    let rows = cog * g.taps();
    let parallel = !splits(out.len(), cog * bi, rows * cig * o);
    for_chunks(out, cog * bi, rows * cig * o, |ng, chunk| {
        let (b, gi) = (ng / ch.groups, ng % ch.groups);
        let xs = &x[(b * ch.c_in + gi * cig) * o..][..cig * o];
        let wg = &w[gi * cig * rows..][..cig * rows];
        chunk.fill(T::ZERO);
        if g.pointwise() {
            gemm_slice(Mat { data: wg, rows, cols: cig, strides: [1, rows] }, Mat::row_major(xs, cig, o), chunk, false, parallel);
        } else {
            let mut col = vec![T::ZERO; rows * o];
            gemm_slice(Mat { data: wg, rows, cols: cig, strides: [1, rows] }, Mat::row_major(xs, cig, o), &mut col, false, parallel);
            col2im(&col, cog, g, chunk);
        }
    });
}

/// Weight gradient `dw [C_out, C_in/g, K] = Σ_n ȳ_{n,g} [C_out/g, O] × im2col(x_{n,g})ᵀ` of a
/// conv with input `x [N, C_in, big]` and upstream `dy [N, C_out, small]`.
pub fn conv_backward_weight<T: Real>(x: &[T], dy: &[T], dw: &mut [T], ch: Channels, g: &Geom) {
    let (cig, cog) = (ch.c_in / ch.groups, ch.c_out / ch.groups);
    let (bi, o) = (g.big_cells(), g.small_cells());
    let rows = cig * g.taps();
    let parallel = !splits(dw.len(), cog * rows, ch.n * cog * rows * o);
    for_chunks(dw, cog * rows, ch.n * cog * rows * o, |gi, chunk| {
        if ch.n == 0 {
            chunk.fill(T::ZERO);
        }
        let mut col = vec![T::ZERO; if g.pointwise() { 0 } else { rows * o }];
        for b in 0..ch.n {
            let xs = &x[(b * ch.c_in + gi * cig) * bi..][..cig * bi];
            let dys = &dy[(b * ch.c_out + gi * cog) * o..][..cog * o];
            let cols = if g.pointwise() {
                xs
            } else {
                im2col(xs, cig, g, &mut col);
                &col
            };
            gemm_slice(Mat::row_major(dys, cog, o), Mat { data: cols, rows: o, cols: rows, strides: [1, o] }, chunk, b > 0, parallel);
        }
    });
}

/// Runs `$body` with `$a`, `$b`, `$o` bound to f32 or f64 slices of two float operands and
/// the output; f16/bf16 widen to f32 and the result narrows back.
macro_rules! floats2 {
    ($x:expr, $y:expr, $out:expr, |$a:ident, $b:ident, $o:ident| $body:expr) => {
        match $out.dtype {
            DType::F32 => {
                let ($a, $b, $o) = ($x.get::<f32>(), $y.get::<f32>(), $out.get::<f32>());
                $body;
                Ok(())
            }
            DType::F64 => {
                let ($a, $b, $o) = ($x.get::<f64>(), $y.get::<f64>(), $out.get::<f64>());
                $body;
                Ok(())
            }
            DType::F16 | DType::BF16 => {
                let (wa, wb) = (widen($x), widen($y));
                let mut wo = vec![0f32; $out.numel()];
                {
                    let ($a, $b, $o) = (&wa[..], &wb[..], &mut wo[..]);
                    $body;
                }
                narrow(&wo, $out);
                Ok(())
            }
            d => Err(format!("this kernel runs on float tensors, not {d}")),
        }
    };
}

/// The (small-side, weight, big-side) channel counts of a forward conv `x ⋆ w`.
fn forward_channels(x: &[usize], w: &[usize], groups: usize) -> Channels {
    Channels { n: x[0], c_in: x[1], c_out: w[0], groups }
}

/// `Conv` (2-D cross-correlation over NCHW, weights OIHW, `groups` incl. depthwise).
pub fn conv(a: &Conv, x: In, w: In, out: &mut Out) -> Result<(), String> {
    let g = Geom::new(&x.dims[2..], &out.dims[2..], &a.kernel_size, &a.stride, &a.padding, &a.dilation);
    let ch = forward_channels(x.dims, w.dims, a.groups);
    floats2!(x, w, out, |x, w, o| conv_forward(x, w, o, ch, &g)?)
}

/// `Conv3d` over NCDHW; the kernel size is read from `w [C_out, C_in/g, kD, kH, kW]`.
pub fn conv3d(a: &Conv3d, x: In, w: In, out: &mut Out) -> Result<(), String> {
    let g = Geom::new(&x.dims[2..], &out.dims[2..], &w.dims[2..], &a.stride, &a.padding, &a.dilation);
    let ch = forward_channels(x.dims, w.dims, a.groups);
    floats2!(x, w, out, |x, w, o| conv_forward(x, w, o, ch, &g)?)
}

/// Channels of a transposed conv of `x [N, C_in, ..]` into `out [N, C_out, ..]`.
fn transposed_channels(x: &[usize], out: &[usize], groups: usize) -> Channels {
    Channels { n: x[0], c_in: x[1], c_out: out[1], groups }
}

/// `ConvTranspose2d` (weights `[C_in, C_out/g, kH, kW]`); `output_padding` is already in the
/// output extents.
pub fn conv_transpose2d(a: &ConvTranspose2d, x: In, w: In, out: &mut Out) -> Result<(), String> {
    let g = Geom::new(&out.dims[2..], &x.dims[2..], &a.kernel_size, &a.stride, &a.padding, &a.dilation);
    let ch = transposed_channels(x.dims, out.dims, a.groups);
    floats2!(x, w, out, |x, w, o| conv_transpose(x, w, o, ch, &g))
}

/// `ConvTranspose3d` (weights `[C_in, C_out/g, kD, kH, kW]`).
pub fn conv_transpose3d(a: &ConvTranspose3d, x: In, w: In, out: &mut Out) -> Result<(), String> {
    let g = Geom::new(&out.dims[2..], &x.dims[2..], &w.dims[2..], &a.stride, &a.padding, &a.dilation);
    let ch = transposed_channels(x.dims, out.dims, a.groups);
    floats2!(x, w, out, |x, w, o| conv_transpose(x, w, o, ch, &g))
}

/// The geometry attributes every conv backward op carries.
struct Spec<'a> {
    kernel: &'a [usize],
    stride: &'a [usize],
    padding: &'a [usize],
    dilation: &'a [usize],
    groups: usize,
}

macro_rules! spec {
    ($a:expr) => {
        Spec { kernel: &$a.kernel_size, stride: &$a.stride, padding: &$a.padding, dilation: &$a.dilation, groups: $a.groups }
    };
}

/// The input gradient of a conv: the transposed conv of `dy [N, C_out, small]` with the
/// forward weight `w [C_out, C_in/g, K]` (read as a transposed-conv weight), into the
/// declared `dx [N, C_in, big]`.
fn backward_input(sp: Spec, dy: In, w: In, out: &mut Out) -> Result<(), String> {
    let g = Geom::new(&out.dims[2..], &dy.dims[2..], sp.kernel, sp.stride, sp.padding, sp.dilation);
    let ch = transposed_channels(dy.dims, out.dims, sp.groups);
    floats2!(dy, w, out, |dy, w, o| conv_transpose(dy, w, o, ch, &g))
}

/// The weight gradient of a conv from `x [N, C_in, big]` and `dy [N, C_out, small]`.
fn backward_weight(sp: Spec, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    let g = Geom::new(&x.dims[2..], &dy.dims[2..], sp.kernel, sp.stride, sp.padding, sp.dilation);
    let ch = Channels { n: x.dims[0], c_in: x.dims[1], c_out: dy.dims[1], groups: sp.groups };
    floats2!(x, dy, out, |x, dy, o| conv_backward_weight(x, dy, o, ch, &g))
}

/// `Conv2dBackwardInput(ȳ, w)`.
pub fn conv2d_backward_input(a: &Conv2dBackwardInput, dy: In, w: In, out: &mut Out) -> Result<(), String> {
    backward_input(spec!(a), dy, w, out)
}

/// `Conv3dBackwardInput(ȳ, w)`.
pub fn conv3d_backward_input(a: &Conv3dBackwardInput, dy: In, w: In, out: &mut Out) -> Result<(), String> {
    backward_input(spec!(a), dy, w, out)
}

/// `Conv2dBackwardWeight(x, ȳ)`.
pub fn conv2d_backward_weight(a: &Conv2dBackwardWeight, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    backward_weight(spec!(a), x, dy, out)
}

/// `Conv3dBackwardWeight(x, ȳ)`.
pub fn conv3d_backward_weight(a: &Conv3dBackwardWeight, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    backward_weight(spec!(a), x, dy, out)
}

/// `Im2Col`: `x [N, C, H, W]` → rows `[N·H_o·W_o, C·kH·kW]`, row `(n, h_o, w_o)`, column
/// `(c, i, j)`, zero outside `x`. Any dtype (a copy of element bits).
pub fn im2col_op(a: &Im2Col, x: In, out: &mut Out) -> Result<(), String> {
    let c = x.dims[1];
    let (kh, kw) = (a.kernel_size[0], a.kernel_size[1]);
    let mut g = Geom::new(&x.dims[2..], &[], &a.kernel_size, &a.stride, &a.padding, &a.dilation);
    for ax in 1..3 {
        g.small[ax] = (g.big[ax] + 2 * g.p[ax] - g.d[ax] * (g.k[ax] - 1) - 1) / g.s[ax] + 1;
    }
    let (bi, o, rows) = (g.big_cells(), g.small_cells(), c * kh * kw);
    by_size!(x.dtype.size(), T => {
        let (x, out) = (x.get::<T>(), out.get::<T>());
        for_chunks(out, o * rows, o * rows, |b, chunk| {
            let mut col = vec![T::default(); rows * o];
            im2col(&x[b * c * bi..(b + 1) * c * bi], c, &g, &mut col);
            for (q, line) in col.chunks_exact(o.max(1)).enumerate() {
                for (r, &v) in line.iter().enumerate() {
                    chunk[r * rows + q] = v;
                }
            }
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::matmul::Tile;

    /// Direct-loop cross-correlation over 3 spatial axes, the definition the GEMM path must
    /// reproduce.
    fn conv_direct(x: &[f64], w: &[f64], ch: Channels, g: &Geom) -> Vec<f64> {
        let (cig, cog) = (ch.c_in / ch.groups, ch.c_out / ch.groups);
        let (bi, o, kk) = (g.big_cells(), g.small_cells(), g.taps());
        let mut out = vec![0.0; ch.n * ch.c_out * o];
        for b in 0..ch.n {
            for oc in 0..ch.c_out {
                let gi = oc / cog;
                for od in 0..g.small[0] {
                    for oh in 0..g.small[1] {
                        for ow in 0..g.small[2] {
                            let mut acc = 0.0;
                            for ci in 0..cig {
                                for t in 0..kk {
                                    let (kd, kh, kw) = (t / (g.k[1] * g.k[2]), (t / g.k[2]) % g.k[1], t % g.k[2]);
                                    if let (Some(i), Some(j), Some(l)) = (g.src(0, od, kd), g.src(1, oh, kh), g.src(2, ow, kw)) {
                                        let xi = (b * ch.c_in + gi * cig + ci) * bi + (i * g.big[1] + j) * g.big[2] + l;
                                        acc += x[xi] * w[(oc * cig + ci) * kk + t];
                                    }
                                }
                            }
                            out[(b * ch.c_out + oc) * o + (od * g.small[1] + oh) * g.small[2] + ow] = acc;
                        }
                    }
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64) / 500.0 - 1.0).collect()
    }

    #[test]
    fn gemm_conv_matches_the_direct_loop() {
        /// (big, kernel, stride, padding, dilation, channels)
        type Case = ([usize; 3], [usize; 3], [usize; 3], [usize; 3], [usize; 3], Channels);
        let cases: &[Case] = &[
            ([1, 7, 9], [1, 3, 3], [1, 1, 2], [0, 1, 0], [1, 1, 2], Channels { n: 2, c_in: 4, c_out: 6, groups: 2 }),
            ([1, 5, 5], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1], Channels { n: 1, c_in: 3, c_out: 2, groups: 1 }),
            ([3, 4, 5], [2, 3, 2], [1, 2, 1], [1, 0, 1], [2, 1, 1], Channels { n: 1, c_in: 3, c_out: 3, groups: 3 }),
        ];
        for &(big, k, s, p, d, ch) in cases {
            let small: Vec<usize> = (0..3).map(|a| (big[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) / s[a] + 1).collect();
            let g = Geom::new(&big, &small, &k, &s, &p, &d);
            let x = values(ch.n * ch.c_in * g.big_cells(), 1);
            let w = values(ch.c_out * ch.c_in / ch.groups * g.taps(), 2);
            let mut out = vec![0.0; ch.n * ch.c_out * g.small_cells()];
            conv_forward(&x, &w, &mut out, ch, &g).unwrap();
            let want = conv_direct(&x, &w, ch, &g);
            for (a, b) in out.iter().zip(&want) {
                assert!((a - b).abs() < 1e-12, "{a} vs {b} for {g:?}");
            }
        }
    }

    #[test]
    fn f32_conv_with_its_epilogue_matches_the_direct_loop() {
        // Batches of one (split inside the GEMM) and of several (pieces side by side), windows
        // hanging over every edge, strides, dilations and groups; channels 1, 3, 7 and 65
        // (65 × 9 taps: two blocks of the inner dimension), more window positions than one
        // column task takes (above 512); the weight packed here per call and packed once on
        // every tile the CPU has. f64 reference, then relu(y + bias[c] + residual).
        type Case = ([usize; 3], [usize; 3], [usize; 3], [usize; 3], [usize; 3], Channels);
        let cases: &[Case] = &[
            ([1, 23, 21], [1, 7, 7], [1, 2, 2], [0, 3, 3], [1, 1, 1], Channels { n: 1, c_in: 3, c_out: 16, groups: 1 }),
            ([1, 14, 15], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], Channels { n: 1, c_in: 8, c_out: 12, groups: 1 }),
            ([1, 13, 12], [1, 3, 3], [1, 2, 3], [0, 1, 2], [1, 2, 1], Channels { n: 3, c_in: 6, c_out: 9, groups: 3 }),
            ([1, 9, 11], [1, 1, 1], [1, 2, 2], [0, 0, 0], [1, 1, 1], Channels { n: 1, c_in: 5, c_out: 7, groups: 1 }),
            ([1, 9, 11], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1], Channels { n: 2, c_in: 4, c_out: 6, groups: 2 }),
            ([1, 4, 5], [1, 3, 5], [1, 1, 1], [0, 2, 6], [1, 1, 3], Channels { n: 1, c_in: 2, c_out: 3, groups: 1 }),
            ([1, 9, 8], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], Channels { n: 1, c_in: 1, c_out: 7, groups: 1 }),
            ([1, 15, 13], [1, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1], Channels { n: 1, c_in: 65, c_out: 13, groups: 1 }),
            ([1, 25, 23], [1, 3, 3], [1, 1, 1], [0, 2, 2], [1, 2, 2], Channels { n: 1, c_in: 7, c_out: 65, groups: 1 }),
            ([1, 11, 13], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1], Channels { n: 3, c_in: 65, c_out: 3, groups: 1 }),
            ([2, 7, 5], [2, 3, 1], [1, 1, 2], [1, 1, 0], [1, 2, 1], Channels { n: 1, c_in: 7, c_out: 5, groups: 1 }),
            // Winograd: odd and even planes, paddings 0 to 2, groups, more tiles than one task
            // takes, two blocks of the inner dimension.
            ([1, 9, 8], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], Channels { n: 2, c_in: 17, c_out: 20, groups: 1 }),
            ([1, 7, 7], [1, 3, 3], [1, 1, 1], [0, 0, 0], [1, 1, 1], Channels { n: 1, c_in: 32, c_out: 40, groups: 1 }),
            ([1, 5, 6], [1, 3, 3], [1, 1, 1], [0, 2, 2], [1, 1, 1], Channels { n: 1, c_in: 20, c_out: 16, groups: 1 }),
            ([1, 10, 9], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], Channels { n: 1, c_in: 64, c_out: 32, groups: 2 }),
            ([1, 30, 29], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], Channels { n: 1, c_in: 19, c_out: 70, groups: 1 }),
            ([1, 6, 5], [1, 3, 3], [1, 1, 1], [0, 1, 1], [1, 1, 1], Channels { n: 1, c_in: 400, c_out: 24, groups: 1 }),
        ];
        for &(big, k, s, p, d, ch) in cases {
            let small: Vec<usize> = (0..3).map(|a| (big[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) / s[a] + 1).collect();
            let g = Geom::new(&big, &small, &k, &s, &p, &d);
            let x = values(ch.n * ch.c_in * g.big_cells(), 6);
            let w = values(ch.c_out * ch.c_in / ch.groups * g.taps(), 7);
            let bias = values(ch.c_out, 8);
            let residual = values(ch.n * ch.c_out * g.small_cells(), 9);
            let f32s = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
            let plain = conv_direct(&x, &w, ch, &g);
            let o = g.small_cells();
            let finished: Vec<f64> = plain.iter().enumerate().map(|(i, &y)| (y + bias[i / o % ch.c_out] + residual[i]).max(0.0)).collect();
            let (x, w, b, r) = (f32s(&x), f32s(&w), f32s(&bias), f32s(&residual));
            let dims = [ch.c_out, ch.c_in / ch.groups, k[0], k[1], k[2]];
            let mut packs: Vec<Option<PackedConv>> = vec![None];
            if ch.groups == 1 {
                let rows = w.len() / ch.c_out;
                let gemm = |p: PackedB| Some(PackedConv::Gemm(p));
                packs.extend(Tile::available().into_iter().map(|t| gemm(PackedB::rows_of(t, Mat::row_major(&w, ch.c_out, rows), &dims))));
                // Output cells as the direct conv's tile rows, where it runs (2-D, AVX-512).
                let cells = Tile::available().into_iter().filter(|t| big[0] == 1 && t.gathered_rows(4).is_some());
                packs.extend(cells.map(|t| gemm(PackedB::columns_of(t, Mat::row_major(&w, ch.c_out, rows), &dims))));
                // Winograd: output channels as rows on every tile, tiles as rows where in place.
                if winograd::applies(ch.c_in, ch.c_out, &g) {
                    for t in Tile::available() {
                        let tilings = [4, 7, 12].into_iter().filter(|&mr| t.gathered_rows(mr).is_some()).map(|mr| WinogradTiling::Tiles { mr });
                        for tiling in std::iter::once(WinogradTiling::Channels).chain(tilings) {
                            packs.push(Some(PackedConv::Winograd(Winograd::with(t, tiling, &w, &dims))));
                        }
                    }
                }
            }
            for packed in &packs {
                let mut out = vec![f32::NAN; plain.len()];
                conv_f32(&x, &w, &mut out, ch, &g, None, packed.as_ref()).unwrap();
                let mut fused = vec![f32::NAN; plain.len()];
                let finish = Finish { bias: &b, residual: Some(&r), activation: Some(ActivationKind::Relu) };
                conv_f32(&x, &w, &mut fused, ch, &g, Some(&finish), packed.as_ref()).unwrap();
                let tile = match packed {
                    None => "per call".into(),
                    Some(PackedConv::Gemm(p)) => format!("{} {:?}", p.tile().name, p.layout()),
                    Some(PackedConv::Winograd(w)) => format!("Winograd {} {:?}", w.packing().0.name, w.packing().1),
                };
                // f32 rounding grows with the terms summed per output (√ of their count).
                let tol = 1e-5f64.max(2e-6 * ((ch.c_in / ch.groups * g.taps()) as f64).sqrt());
                for (got, want) in [(&out, &plain), (&fused, &finished)] {
                    for (a, b) in got.iter().zip(want.iter()) {
                        assert!((*a as f64 - b).abs() < tol * (1.0 + b.abs()), "{a} vs {b} for {g:?} {ch:?} on {tile}");
                    }
                }
            }
        }
        let (x, w, mut out) = (vec![1.0f32; 16], vec![1.0f32; 1], vec![0.0f32; 16]);
        let (ch, g) = (Channels { n: 1, c_in: 1, c_out: 1, groups: 1 }, Geom::new(&[4, 4], &[4, 4], &[1, 1], &[1, 1], &[0, 0], &[1, 1]));
        let wrong = prepack(&[1.0; 8], &[2, 1, 2, 2], &g);
        assert!(conv_f32(&x, &w, &mut out, ch, &g, None, Some(&wrong)).unwrap_err().contains("packed as [2, 1, 2, 2]"));
    }

    #[test]
    fn transpose_and_weight_gradient_are_adjoints_of_the_forward() {
        // <conv(x, w), y> = <x, convT(y, w)> = <w, dW(x, y)>
        let ch = Channels { n: 2, c_in: 4, c_out: 6, groups: 2 };
        let (big, k, s, p, d) = ([1, 8, 7], [1, 3, 2], [1, 2, 3], [0, 1, 1], [1, 1, 2]);
        let small: Vec<usize> = (0..3).map(|a| (big[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) / s[a] + 1).collect();
        let g = Geom::new(&big, &small, &k, &s, &p, &d);
        let x = values(ch.n * ch.c_in * g.big_cells(), 3);
        let w = values(ch.c_out * 2 * g.taps(), 4);
        let y = values(ch.n * ch.c_out * g.small_cells(), 5);
        let mut fwd = vec![0.0; y.len()];
        conv_forward(&x, &w, &mut fwd, ch, &g).unwrap();
        let mut dx = vec![0.0; x.len()];
        conv_transpose(&y, &w, &mut dx, Channels { n: 2, c_in: 6, c_out: 4, groups: 2 }, &g);
        let mut dw = vec![0.0; w.len()];
        conv_backward_weight(&x, &y, &mut dw, ch, &g);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
        let lhs = dot(&fwd, &y);
        assert!((lhs - dot(&x, &dx)).abs() < 1e-9, "{lhs} vs {}", dot(&x, &dx));
        assert!((lhs - dot(&w, &dw)).abs() < 1e-9, "{lhs} vs {}", dot(&w, &dw));
    }
}
