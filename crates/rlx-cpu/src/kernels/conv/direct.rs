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

use super::{Finish, Geom};
use crate::kernels::matmul::{with_buffer, OutPtr, PackedB, MAX_TILE, PAR_FLOPS};
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    /// The padded copy of the input, kept per thread across calls.
    static INPUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Where each output cell's taps lie in the phase-split copy of one (image, group)'s input.
#[derive(Debug, PartialEq)]
struct Layout {
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

impl Layout {
    /// The layout of a 2-D window (one cell on the leading axis); `None` otherwise.
    fn new(g: &Geom) -> Option<Layout> {
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
        Some(Layout { hq, wq, phases, channel: phases[0] * phases[1] * hq * wq, taps })
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

/// `out [C_out, O] = w · windows(x)` for one (image, group) of a conv, `x [c_in, H, W]` and `w`
/// packed by rows ([`super::prepack`]), finished on the way out by `finish` when given as
/// `(finish, channel of row 0, flat output index of out[0])`. Returns `false`, writing
/// nothing, when the op is not 2-D or `w`'s tile has no in-place kernel
/// ([`Tile::gathered`](crate::kernels::matmul::Tile::gathered)).
pub(super) fn conv(x: &[f32], c_in: usize, w: &PackedB, g: &Geom, out: &mut [f32], parallel: bool, finish: Option<(&Finish, usize, usize)>) -> bool {
    let Some(layout) = Layout::new(g) else { return false };
    let tile = w.tile();
    let cells = g.small[1] * layout.wq;
    let padded = |nv: usize| cells.div_ceil(16 * nv) * 16 * nv;
    // Three vectors a row load less per multiply-add; two pad less on narrow outputs.
    let nv = if tile.gathered(3).is_some() && padded(3) * 25 <= padded(2) * 27 { 3 } else { 2 };
    let Some(kernel) = tile.gathered(nv) else { return false };
    let (mr, nr, o, ow, taps) = (tile.mr, 16 * nv, g.small_cells(), g.small[2], layout.taps.len());
    let c_out = out.len() / o;
    let (mt, nt, k) = (c_out.div_ceil(mr), cells.div_ceil(nr), c_in * taps);
    let offsets: Vec<usize> = (0..k).map(|p| p / taps * layout.channel + layout.taps[p % taps]).collect();
    let parallel = parallel && c_out * k * o >= PAR_FLOPS && rayon::current_num_threads() > 1;
    let copied = c_in * layout.channel;
    with_buffer(&INPUT, copied + nt * nr, |copy| {
        let (planes, slack) = copy.split_at_mut(copied);
        let fill = |(c, dst): (usize, &mut [f32])| layout.fill(&x[c * g.big_cells()..][..g.big_cells()], g, dst);
        if parallel {
            planes.par_chunks_mut(layout.channel).enumerate().for_each(fill);
        } else {
            planes.chunks_mut(layout.channel).enumerate().for_each(fill);
        }
        slack.fill(0.0);
        let (copy, dst) = (&*copy, OutPtr(out.as_mut_ptr()));
        let task = |t: usize| {
            let (i, j) = (t / nt, t % nt);
            let mut acc = [0.0f32; MAX_TILE];
            for (p0, kc, panels) in w.blocks() {
                // Safety: row panel `i` holds `mr × kc` floats; every read `j·nr + offsets[p] +
                // 0..nr` stays inside the copy (the last tile's overhang lands in `slack`), and
                // `acc` holds the `mr × nr` tile.
                unsafe { kernel(kc, panels[i * mr * kc..].as_ptr(), copy.as_ptr().add(j * nr), offsets[p0..].as_ptr(), acc.as_mut_ptr(), nr, p0 > 0) };
            }
            let (h, q1) = (mr.min(c_out - i * mr), ((j + 1) * nr).min(cells));
            let mut q = j * nr;
            while q < q1 {
                let (row_start, col) = (q - q % layout.wq, q % layout.wq);
                if col < ow {
                    let (cell, len) = (q / layout.wq * ow + col, (row_start + ow).min(q1) - q);
                    for r in 0..h {
                        let row = i * mr + r;
                        // Safety: task `t` alone writes these cells of output rows of its panel.
                        let piece = unsafe { std::slice::from_raw_parts_mut(dst.get().add(row * o + cell), len) };
                        let src = &acc[r * nr + q - j * nr..][..len];
                        match finish {
                            Some((f, channel, at)) => f.store(channel + row, at + row * o + cell, src, piece),
                            None => piece.copy_from_slice(src),
                        }
                    }
                }
                q = row_start + layout.wq;
            }
        };
        if parallel {
            (0..mt * nt).into_par_iter().for_each(task);
        } else {
            (0..mt * nt).for_each(task);
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_places_each_tap_of_a_strided_dilated_window() {
        // 3×3 window, stride 2, dilation 2 on W: tap (u, v) is at row phase u % 2 (plane 0 or
        // 2 of 2 × 2), row u / 2, column v (2·v is even: column phase 0).
        let g = Geom::new(&[9, 10], &[5, 4], &[3, 3], &[2, 2], &[1, 1], &[1, 2]);
        let l = Layout::new(&g).unwrap();
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
