//! Direct f32 convolution: the GEMM's register tile reading its `b` rows in place from a
//! padded copy of the input — no window matrix, no packing of windows.
//!
//! Each (image, group)'s input is copied once into a padded layout split by stride phase:
//! per channel, one `hq × wq` plane per (row phase `a`, column phase `b`) of the stride,
//! holding input cell `(i·s_h + a − p_h, j·s_w + b − p_w)` at `(i, j)` (zero outside the
//! input). Output cell `(oh, ow)` is numbered `q = oh·wq + ow` — the last `wq − OW` numbers
//! of each row are computed and dropped — so that its tap `(u, v)` on channel `c` lies at
//! `q + offset(c, u, v)`: a tile of consecutive cells reads one contiguous run of the copy
//! per step of the inner dimension.

use super::{put_piece, task_split, Finish, Geom, GROUP};
use crate::kernels::matmul::{with_buffer, Layout, OutPtr, PackedB, Tile, MAX_TILE};
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    /// The padded copy of the input, kept per thread across calls.
    static INPUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Where each output cell's taps lie in the phase-split copy of one (image, group)'s input.
#[derive(Debug, PartialEq)]
struct Phased {
    /// Rows and columns of one phase plane.
    hq: usize,
    wq: usize,
    /// Stride phases on the H and W axes that some tap reads.
    phases: [usize; 2],
    /// Floats per channel (all its phase planes).
    channel: usize,
    /// Per tap (row-major over the kernel), its offset from the cell it belongs to.
    taps: Vec<usize>,
}

impl Phased {
    /// The layout of a 2-D window (one cell on the leading axis); `None` otherwise.
    fn new(g: &Geom) -> Option<Phased> {
        if g.big[0] != 1 || g.small[0] != 1 || g.k[0] != 1 {
            return None;
        }
        let ([kh, kw], [sh, sw], [dh, dw]) = ([g.k[1], g.k[2]], [g.s[1], g.s[2]], [g.d[1], g.d[2]]);
        let (hq, wq) = (g.small[1] + (kh - 1) * dh / sh, g.small[2] + (kw - 1) * dw / sw);
        let phases = [sh.min((kh - 1) * dh + 1), sw.min((kw - 1) * dw + 1)];
        let mut taps = Vec::with_capacity(kh * kw);
        for u in 0..kh {
            for v in 0..kw {
                let (ru, rv) = (u * dh, v * dw);
                let plane = (ru % sh) * phases[1] + rv % sw;
                taps.push((plane * hq + ru / sh) * wq + rv / sw);
            }
        }
        Some(Phased { hq, wq, phases, channel: phases[0] * phases[1] * hq * wq, taps })
    }

    /// Copies one channel `x [H, W]` into its `channel` floats of the copy.
    fn fill(&self, x: &[f32], g: &Geom, out: &mut [f32]) {
        let ([h, w], [sh, sw], [ph, pw]) = ([g.big[1], g.big[2]], [g.s[1], g.s[2]], [g.p[1], g.p[2]]);
        for (plane, dst) in out.chunks_exact_mut(self.hq * self.wq).enumerate() {
            let (a, b) = (plane / self.phases[1], plane % self.phases[1]);
            let lo = pw.saturating_sub(b).div_ceil(sw).min(self.wq);
            let hi = if w + pw > b { ((w + pw - b - 1) / sw + 1).min(self.wq) } else { 0 }.max(lo);
            for (i, row) in dst.chunks_exact_mut(self.wq).enumerate() {
                let Some(r) = (i * sh + a).checked_sub(ph).filter(|&r| r < h) else {
                    row.fill(0.0);
                    continue;
                };
                row[..lo].fill(0.0);
                row[hi..].fill(0.0);
                if hi > lo {
                    let src = &x[r * w + lo * sw + b - pw..];
                    if sw == 1 {
                        row[lo..hi].copy_from_slice(&src[..hi - lo]);
                    } else {
                        row[lo..hi].iter_mut().zip(src.iter().step_by(sw)).for_each(|(v, &x)| *v = x);
                    }
                }
            }
        }
    }
}

/// How a direct conv's register tiles cover its output `[C_out, cells]`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tiling {
    /// Rows are output channels (`w` packed [`Layout::RowsOfA`]), columns `16·nv` consecutive
    /// cell numbers `q` (the dropped ones included).
    Channels { nv: usize },
    /// Rows are `mr` cells of one output row, columns output channels (`w` packed
    /// [`Layout::ColumnsOfA`]): no dropped cells, for narrow outputs.
    Cells { mr: usize },
}

/// Vectors per tile row when output channels are the rows: three load less per multiply-add,
/// two pad less on narrow outputs.
fn vectors(tile: &Tile, cells: usize) -> usize {
    let padded = |nv: usize| cells.div_ceil(16 * nv) * 16 * nv;
    if tile.gathered(3).is_some() && padded(3) * 25 <= padded(2) * 27 {
        3
    } else {
        2
    }
}

/// Cells per tile row when cells are the rows: the count from 4 to `tile.mr` that pads an
/// output row of `ow` cells the least (the larger on ties).
fn cell_rows(tile: &Tile, ow: usize) -> usize {
    (4..=tile.mr).filter(|&m| tile.gathered_rows(m).is_some()).min_by_key(|&m| (ow.div_ceil(m) * m, usize::MAX - m)).unwrap_or(tile.mr)
}

/// The tile and packing for the weight of a conv with `c_out` output channels (of its group)
/// over window `g` (its `big` is not read): output channels as rows on the tile that pads them
/// least, unless cells as rows on some AVX-512 tile waste clearly less (the tiles' share of
/// useful work, times `m·v / (m·v + 2)` for `m` rows of `v` vectors: bigger tiles keep more of
/// their time on multiply-adds).
pub(super) fn packing(c_out: usize, g: &Geom) -> (Tile, Layout) {
    let rows = Tile::for_rows(c_out);
    let Some(phased) = Phased::new(g).filter(|_| rows.gathered(2).is_some()) else { return (rows, Layout::RowsOfA) };
    let share = |used: usize, all: usize, m: usize, v: usize| used as f64 / all as f64 * (m * v) as f64 / (m * v + 2) as f64;
    let (oh, ow, cells) = (g.small[1], g.small[2], g.small[1] * phased.wq);
    let nv = vectors(&rows, cells);
    let by_channels = share(c_out * oh * ow, c_out.div_ceil(rows.mr) * rows.mr * cells.div_ceil(16 * nv) * 16 * nv, rows.mr, nv);
    let by_cells = |t: &Tile| {
        let m = cell_rows(t, ow);
        share(c_out * ow, c_out.div_ceil(t.nr) * t.nr * ow.div_ceil(m) * m, m, t.nr / 16)
    };
    let tiles: Vec<Tile> = Tile::available().into_iter().filter(|t| t.isa == rows.isa && t.gathered_rows(4).is_some()).collect();
    match tiles.into_iter().map(|t| (by_cells(&t), t)).max_by(|a, b| a.0.total_cmp(&b.0)) {
        Some((share, t)) if share > 1.03 * by_channels => (t, Layout::ColumnsOfA),
        _ => (rows, Layout::RowsOfA),
    }
}

/// `out [C_out, O] = w · windows(x)` for one (image, group) of a conv, `x [c_in, H, W]` and `w`
/// packed as [`packing`] says ([`super::prepack`]), finished on the way out by `finish` when
/// given as `(finish, channel of row 0, flat output index of out[0])`. Returns `false`,
/// writing nothing, when the op is not 2-D or `w`'s tile has no in-place kernel
/// ([`Tile::gathered`], [`Tile::gathered_rows`]).
pub(super) fn conv(x: &[f32], c_in: usize, w: &PackedB, g: &Geom, out: &mut [f32], parallel: bool, finish: Option<(&Finish, usize, usize)>) -> bool {
    let Some(phased) = Phased::new(g) else { return false };
    let (tile, o, oh, ow, wq, taps) = (w.tile(), g.small_cells(), g.small[1], g.small[2], phased.wq, phased.taps.len());
    let cells = oh * wq;
    let tiling = match w.layout() {
        Layout::RowsOfA => Tiling::Channels { nv: vectors(&tile, cells) },
        Layout::ColumnsOfA => Tiling::Cells { mr: cell_rows(&tile, ow) },
        Layout::B => return false,
    };
    let (kernel, mr, nr) = match tiling {
        Tiling::Channels { nv } => (tile.gathered(nv), tile.mr, 16 * nv),
        Tiling::Cells { mr } => (tile.gathered_rows(mr), mr, tile.nr),
    };
    let Some(kernel) = kernel else { return false };
    let c_out = out.len() / o;
    // Tiles along the packed operand's panels and along the cells (segments).
    let (panels, segments) = match tiling {
        Tiling::Channels { .. } => (c_out.div_ceil(mr), cells.div_ceil(nr)),
        Tiling::Cells { mr } => (c_out.div_ceil(nr), oh * ow.div_ceil(mr)),
    };
    let k = c_in * taps;
    let offsets: Vec<usize> = (0..k).map(|p| p / taps * phased.channel + phased.taps[p % taps]).collect();
    let (threads, group) = task_split(panels, segments, c_out * k * o, parallel);
    let parallel = threads > 1;
    let groups = segments.div_ceil(group);
    let copied = c_in * phased.channel;
    with_buffer(&INPUT, copied + cells.div_ceil(nr) * nr + mr + wq, |copy| {
        let (planes, slack) = copy.split_at_mut(copied);
        let fill = |(c, dst): (usize, &mut [f32])| phased.fill(&x[c * g.big_cells()..][..g.big_cells()], g, dst);
        if parallel {
            planes.par_chunks_mut(phased.channel).enumerate().for_each(fill);
        } else {
            planes.chunks_mut(phased.channel).enumerate().for_each(fill);
        }
        slack.fill(0.0);
        let (copy, dst) = (&*copy, OutPtr(out.as_mut_ptr()));
        // Safety: each task alone writes its channels' cells (disjoint tiles of the output).
        let put = |channel: usize, cell: usize, src: &[f32]| unsafe { put_piece(&dst, o, finish, channel, cell, src) };
        let q0 = |segment: usize| match tiling {
            Tiling::Channels { .. } => segment * nr,
            Tiling::Cells { mr } => segment / ow.div_ceil(mr) * wq + segment % ow.div_ceil(mr) * mr,
        };
        let finished = |panel: usize, segment: usize, acc: &[f32]| match tiling {
            Tiling::Channels { .. } => {
                let (h, q0, q1) = (mr.min(c_out - panel * mr), q0(segment), (q0(segment) + nr).min(cells));
                let mut q = q0;
                while q < q1 {
                    let (row_start, col) = (q - q % wq, q % wq);
                    if col < ow {
                        let (cell, len) = (q / wq * ow + col, (row_start + ow).min(q1) - q);
                        for r in 0..h {
                            put(panel * mr + r, cell, &acc[r * nr + q - q0..][..len]);
                        }
                    }
                    q = row_start + wq;
                }
            }
            Tiling::Cells { mr } => {
                let (row, col) = (q0(segment) / wq, q0(segment) % wq);
                let len = mr.min(ow - col);
                let mut column = [0.0f32; 16];
                for c in 0..nr.min(c_out - panel * nr) {
                    column.iter_mut().zip(acc[c..].iter().step_by(nr)).take(len).for_each(|(v, &a)| *v = a);
                    put(panel * nr + c, row * ow + col, &column[..len]);
                }
            }
        };
        let width = if let Tiling::Channels { .. } = tiling { mr } else { nr };
        // A task: one panel × `group` segments, each block of the packed operand swept over
        // all of them while it is in cache.
        let task = |t: usize| {
            let (panel, first) = (t / groups, t % groups * group);
            let range = first..(first + group).min(segments);
            let mut acc = [[0.0f32; MAX_TILE]; GROUP];
            for (p0, kc, packed) in w.blocks() {
                for (segment, acc) in range.clone().zip(acc.iter_mut()) {
                    // Safety: panel `panel` holds `width × kc` floats; every read at `q0 +
                    // offsets[p]` (`nr` floats by channels, `mr` by cells) stays inside the copy,
                    // the overhang of the last tiles landing in `slack`; `acc` holds `mr × nr`.
                    unsafe { kernel(kc, packed[panel * width * kc..].as_ptr(), copy.as_ptr().add(q0(segment)), offsets[p0..].as_ptr(), acc.as_mut_ptr(), nr, p0 > 0) };
                }
            }
            for (segment, acc) in range.zip(&acc) {
                finished(panel, segment, acc);
            }
        };
        if parallel {
            (0..panels * groups).into_par_iter().for_each(task);
        } else {
            (0..panels * groups).for_each(task);
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_outputs_take_cells_as_tile_rows() {
        // 512 channels over 7 × 7 cells: by channels a tile would drop 14 of each 63 cell
        // numbers; by cells, 7 to a tile row, nothing. 64 channels over 56 × 56: by channels.
        let avx512 = Tile::best().gathered(2).is_some();
        let narrow = Geom::of_output(&[7, 7], &[3, 3], &[1, 1], &[1, 1], &[1, 1]);
        let (tile, layout) = packing(512, &narrow);
        assert_eq!(layout, if avx512 { Layout::ColumnsOfA } else { Layout::RowsOfA });
        if avx512 {
            assert_eq!(cell_rows(&tile, 7), 7);
        }
        let wide = Geom::of_output(&[56, 56], &[3, 3], &[1, 1], &[1, 1], &[1, 1]);
        let (tile, layout) = packing(64, &wide);
        assert_eq!(layout, Layout::RowsOfA);
        if avx512 {
            // AVX-512's 8-row tile divides 64 channels; AVX2's tiles leave some rows padded.
            assert_eq!(64 % tile.mr, 0);
        }
    }

    #[test]
    fn layout_places_each_tap_of_a_strided_dilated_window() {
        // 3×3 window, stride 2, dilation 2 on W: tap (u, v) is at row phase u % 2 (plane 0 or
        // 2 of 2 × 2), row u / 2, column v (2·v is even: column phase 0).
        let g = Geom::new(&[9, 10], &[5, 4], &[3, 3], &[2, 2], &[1, 1], &[1, 2]);
        let l = Phased::new(&g).unwrap();
        assert_eq!((l.hq, l.wq, l.phases), (6, 6, [2, 2]));
        assert_eq!(l.taps, vec![0, 1, 2, 72, 73, 74, 6, 7, 8]);
        let x: Vec<f32> = (0..90).map(|i| i as f32 + 1.0).collect();
        let mut copy = vec![f32::NAN; l.channel];
        l.fill(&x, &g, &mut copy);
        for oh in 0..5 {
            for ow in 0..4 {
                for (t, off) in l.taps.iter().enumerate() {
                    let (u, v) = (t / 3, t % 3);
                    let (r, c) = ((oh * 2 + u) as isize - 1, (ow * 2 + 2 * v) as isize - 1);
                    let want = if (0..9).contains(&r) && (0..10).contains(&c) { x[(r * 10 + c) as usize] } else { 0.0 };
                    assert_eq!(copy[oh * l.wq + ow + off], want, "cell ({oh}, {ow}) tap ({u}, {v})");
                }
            }
        }
    }
}
