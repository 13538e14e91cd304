//! The driver of products with a weight rounded to a narrow type once ([`super::int8`],
//! [`super::bfloat16`]): tiles of [`MR`] rows × [`NR`] columns, tasks of one panel of rows of `a`
//! (rounded by the task) against a run of the weight's column panels.

use super::sgemm::Epilogue;
use super::{Mat, MatMut, OutPtr};
use rayon::prelude::*;

/// Rows of `a` per tile.
pub const MR: usize = 12;
/// Columns of the weight per tile (two 512-bit registers of f32 or i32 sums).
pub const NR: usize = 32;
/// Multiply-adds below which a product runs on one thread.
const PAR_MACS: usize = 1 << 18;

/// A weight `[k, n]` rounded to a narrow type in panels of [`NR`] columns, and how rows of `a`
/// meet it.
pub(super) trait Narrow: Sync {
    /// Up to [`MR`] rows of `a` rounded as the tile reads them.
    type Rows;
    /// The type's name, for errors.
    const NAME: &'static str;
    fn dims(&self) -> [usize; 2];
    /// An empty row panel.
    fn rows(&self) -> Self::Rows;
    /// Rounds rows `i0 .. i0 + count` of `a` into `rows`.
    fn fill(&self, rows: &mut Self::Rows, a: &Mat<f32>, i0: usize, count: usize);
    /// The row panel against column panel `p`, as f32 outputs.
    fn tile(&self, rows: &Self::Rows, p: usize, out: &mut [[f32; NR]; MR]);
}

/// `c = a·w` with `w` a narrow weight, then `epilogue` over each finished piece of `c` (once
/// per row of a task's block: a call per tile row cost as much as a bias and GELU); on
/// several threads with `parallel` when large. Errors name the mismatch when the shapes
/// disagree or a slice is too short.
pub(super) fn product<W: Narrow>(w: &W, a: Mat<f32>, c: MatMut, parallel: bool, epilogue: Option<Epilogue>) -> Result<(), String> {
    let ([wk, n], m, k) = (w.dims(), a.rows, a.cols);
    if k != wk || c.rows != m || c.cols != n {
        return Err(format!("{} product: [{m}, {k}] × [{wk}, {n}] does not give [{}, {}]", W::NAME, c.rows, c.cols));
    }
    if a.data.len() < a.span() || c.ld < n || (m > 0 && c.data.len() < (m - 1) * c.ld + n) {
        return Err(format!("{} product: operand slices of {} and {} elements are too short for their strides", W::NAME, a.data.len(), c.data.len()));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (row_panels, col_panels) = (m.div_ceil(MR), n.div_ceil(NR));
    let threads = if parallel && m * n * k >= PAR_MACS { rayon::current_num_threads() } else { 1 };
    // Few row panels for the threads: each also takes a share of the columns.
    let col_chunks = if threads > 1 { (2 * threads).div_ceil(row_panels).clamp(1, col_panels) } else { 1 };
    let per_chunk = col_panels.div_ceil(col_chunks);
    let ld = c.ld;
    let out = OutPtr(c.data.as_mut_ptr());
    let task = |t: usize| {
        let (rp, chunk) = (t / col_chunks, t % col_chunks);
        let (i0, rows) = (rp * MR, MR.min(m - rp * MR));
        let mut panel = w.rows();
        w.fill(&mut panel, &a, i0, rows);
        let (p0, p1) = (chunk * per_chunk, ((chunk + 1) * per_chunk).min(col_panels));
        // SAFETY: tasks write disjoint blocks of `c` (rows of one row panel, columns of one
        // chunk), which holds row `i0 + r` up to column `n` (checked above) and overlaps no
        // operand (`&mut`).
        let row = |r: usize, j0: usize, j1: usize| unsafe { std::slice::from_raw_parts_mut(out.at((i0 + r) * ld + j0), j1 - j0) };
        for p in p0..p1 {
            let (j0, cols) = (p * NR, NR.min(n - p * NR));
            let mut tile = [[0f32; NR]; MR];
            w.tile(&panel, p, &mut tile);
            for (r, values) in tile.iter().enumerate().take(rows) {
                row(r, j0, j0 + cols).copy_from_slice(&values[..cols]);
            }
        }
        if let Some(e) = epilogue {
            let (j0, j1) = (p0 * NR, (p1 * NR).min(n));
            for r in 0..rows.min(if p0 < p1 { MR } else { 0 }) {
                e(i0 + r, j0, row(r, j0, j1));
            }
        }
    };
    let tasks = row_panels * col_chunks;
    if threads > 1 {
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
    Ok(())
}

