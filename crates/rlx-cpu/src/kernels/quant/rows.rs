//! The loop every quantized matmul shares: `out[m, j] = Σ_k x[m, k]·w[j, k]` with the weight
//! decoded one block at a time into a small buffer (never materialized whole), threads over
//! output columns. A block's contribution to a tile of rows is one call of [`dot_block`], the
//! step a per-format integer dot kernel would replace.

use crate::kernels::real::Real;
use rayon::prelude::*;
use std::ops::Range;

/// A quantized weight read as `n()` rows of `k()` values — row `j` is output column `j` of
/// the matmul — decoded `block()` values at a time (the last block of a row may be shorter).
pub(super) trait Rows: Sync {
    fn n(&self) -> usize;
    fn k(&self) -> usize;
    fn block(&self) -> usize;
    /// Decodes values `b·block() .. b·block() + out.len()` of row `j` into `out`.
    fn decode(&self, j: usize, b: usize, out: &mut [f32]);
}

/// Rows of `x` that share each decoded block.
const ROW_TILE: usize = 16;

/// Multiply-adds below which a product runs on one thread.
const PAR_FLOPS: usize = 1 << 18;

/// `out [rows, n] = x [rows, k] · wᵀ`, accumulated in `T` (f32 or f64) and rounded to f32.
pub(super) fn matmul_rows<T: Real + From<f32>>(x: &[T], w: &dyn Rows, out: &mut [f32]) {
    let (n, k) = (w.n(), w.k());
    if n == 0 || out.is_empty() {
        return;
    }
    let rows = out.len() / n;
    let per_task = if rows * n * k < PAR_FLOPS { n } else { n.div_ceil(4 * rayon::current_num_threads()) };
    let starts: Vec<usize> = (0..n).step_by(per_task).collect();
    let parts: Vec<Vec<f32>> =
        starts.par_iter().map(|&j0| columns(x, w, rows, j0..(j0 + per_task).min(n))).collect();
    for (&j0, part) in starts.iter().zip(&parts) {
        for (dj, col) in part.chunks_exact(rows).enumerate() {
            for (m, &v) in col.iter().enumerate() {
                out[m * n + j0 + dj] = v;
            }
        }
    }
}

/// Output columns `cols` for every row of `x`, column-major (`[cols.len(), rows]`).
fn columns<T: Real + From<f32>>(x: &[T], w: &dyn Rows, rows: usize, cols: Range<usize>) -> Vec<f32> {
    let (k, bs) = (w.k(), w.block().max(1));
    let mut res = vec![0f32; cols.len() * rows];
    let mut buf = vec![0f32; bs];
    let mut acc = [T::ZERO; ROW_TILE];
    for m0 in (0..rows).step_by(ROW_TILE) {
        let tile = ROW_TILE.min(rows - m0);
        let xs = &x[m0 * k..(m0 + tile) * k];
        for (c, j) in cols.clone().enumerate() {
            acc.fill(T::ZERO);
            for (b, k0) in (0..k).step_by(bs).enumerate() {
                let w_blk = &mut buf[..bs.min(k - k0)];
                w.decode(j, b, w_blk);
                dot_block(w_blk, xs, k, k0, &mut acc[..tile]);
            }
            for (t, a) in acc[..tile].iter().enumerate() {
                res[c * rows + m0 + t] = a.f64() as f32;
            }
        }
    }
    res
}

/// `acc[t] += Σ_i w_blk[i]·xs[t·k + k0 + i]`: one decoded block against a tile of rows.
fn dot_block<T: Real + From<f32>>(w_blk: &[f32], xs: &[T], k: usize, k0: usize, acc: &mut [T]) {
    for (t, a) in acc.iter_mut().enumerate() {
        let xr = &xs[t * k + k0..t * k + k0 + w_blk.len()];
        let mut s = T::ZERO;
        for (&wv, &xv) in w_blk.iter().zip(xr) {
            s = s + T::from(wv) * xv;
        }
        *a = *a + s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense row-major `[n, k]` matrix as rows, decoded in blocks of 3.
    struct Dense(Vec<f32>, usize, usize);

    impl Rows for Dense {
        fn n(&self) -> usize {
            self.1
        }
        fn k(&self) -> usize {
            self.2
        }
        fn block(&self) -> usize {
            3
        }
        fn decode(&self, j: usize, b: usize, out: &mut [f32]) {
            out.copy_from_slice(&self.0[j * self.2 + 3 * b..][..out.len()]);
        }
    }

    #[test]
    fn blockwise_product_matches_a_plain_loop() {
        // Ragged last block (k = 7), a partial row tile, and enough work to use threads.
        for (rows, n, k) in [(3, 5, 7), (37, 300, 31)] {
            let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 23) as f32 - 11.0).collect();
            let x: Vec<f64> = (0..rows * k).map(|i| ((i * 104729) % 17) as f64 * 0.25 - 2.0).collect();
            let mut out = vec![f32::NAN; rows * n];
            matmul_rows(&x, &Dense(w.clone(), n, k), &mut out);
            for m in 0..rows {
                for j in 0..n {
                    let want: f64 = (0..k).map(|i| x[m * k + i] * f64::from(w[j * k + i])).sum();
                    assert_eq!(out[m * n + j], want as f32, "({m}, {j})");
                }
            }
        }
    }
}
