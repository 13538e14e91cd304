//! The f32 forward of `Attention` on GEMM tiles (FlashAttention-2 order): for each head and
//! block of queries, the logits of one key tile are a single `sgemm`, the online softmax
//! rescales the block's running output, and a second `sgemm` adds `P·V`. Memory stays at one
//! block × tile of logits, whatever the sequence length. Same results as the scalar kernel in
//! `mod.rs` (which f64 keeps) up to f32 summation order.

use super::{mean_rows, Heads, Logits, Masking};
use crate::kernels::elementwise::{exp_neg, exp_shifted};
use crate::kernels::matmul::{sgemm, Mat, MatMut};
use crate::view::Out;
use rayon::prelude::*;

/// Queries per block (rows of the logit tile).
const QB: usize = 64;
/// Keys per tile (columns of the logit tile).
const KT: usize = 128;

/// One tensor's rows of head `(b, h)` as a matrix from row `s0` on, `rows` rows.
fn rows<'a>(l: &Heads, x: &'a [f32], (b, h): (usize, usize), s0: usize, rows: usize) -> Mat<'a> {
    let stride = l.row(b, h, 1) - l.row(b, h, 0);
    let start = l.row(b, h, s0);
    let end = if rows == 0 { start } else { start + (rows - 1) * stride + l.width };
    Mat { data: &x[start..end], rows, cols: l.width, strides: [stride, 1] }
}

/// The running state of one block: output rows (unnormalised), row maxima and row sums.
struct Block {
    acc: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    logits: Vec<f32>,
}

/// The attention of queries `q0..q0 + nq` of head `(b, h)`: `nq × dv` output rows.
#[allow(clippy::too_many_arguments)]
fn block(
    (q, k, v): (Mat, &[f32], &[f32]),
    (lk, lv): (&Heads, &Heads),
    (b, h): (usize, usize),
    q0: usize,
    logits: Logits<f32>,
    mask: &Masking<f32>,
) -> Result<Vec<f32>, String> {
    let (nq, dv) = (q.rows, lv.width);
    let mut st = Block { acc: vec![0.0; nq * dv], max: vec![f32::NEG_INFINITY; nq], sum: vec![0.0; nq], logits: vec![0.0; nq * KT] };
    let ranges: Vec<(usize, usize)> = (q0..q0 + nq).map(|qi| mask.range(qi)).collect();
    let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    for t0 in (lo..hi).step_by(KT) {
        let nk = KT.min(hi - t0);
        let keys = rows(lk, k, (b, h), t0, nk);
        let kt = Mat { data: keys.data, rows: keys.cols, cols: nk, strides: [1, keys.strides[0]] };
        let s = &mut st.logits[..nq * nk];
        sgemm(q, kt, MatMut::row_major(s, nq, nk), false, false)?;
        for (i, row) in s.chunks_mut(nk).enumerate() {
            let qi = q0 + i;
            let (rlo, rhi) = ranges[i];
            for (j, x) in row.iter_mut().enumerate() {
                let kj = t0 + j;
                *x = if kj < rlo || kj >= rhi || !mask.kept(b, kj) { f32::NEG_INFINITY } else { logits.apply(*x) + mask.bias(b, h, qi, kj) };
            }
            let tile_max = row.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m || x.is_nan() { x } else { m });
            let new_max = if st.max[i].is_nan() || tile_max.is_nan() { f32::NAN } else { st.max[i].max(tile_max) };
            if new_max == f32::NEG_INFINITY {
                row.fill(0.0);
                continue;
            }
            if st.max[i] != new_max {
                let corr = if st.max[i] == f32::NEG_INFINITY { 0.0 } else { exp_neg(st.max[i] - new_max) };
                st.sum[i] *= corr;
                st.acc[i * dv..(i + 1) * dv].iter_mut().for_each(|a| *a *= corr);
                st.max[i] = new_max;
            }
            st.sum[i] += exp_shifted(row, new_max);
        }
        let vals = rows(lv, v, (b, h), t0, nk);
        sgemm(Mat::row_major(&*s, nq, nk), vals, MatMut::row_major(&mut st.acc, nq, dv), true, false)?;
    }
    let mut fallback: Option<Vec<f32>> = None;
    for (i, out) in st.acc.chunks_mut(dv.max(1)).enumerate() {
        if mask.any_kept(b, q0 + i) {
            let inv = 1.0 / st.sum[i];
            out.iter_mut().for_each(|a| *a *= inv);
        } else {
            let all = rows(lv, v, (b, h), 0, lv.seq);
            let mean = fallback.get_or_insert_with(|| {
                let dense: Vec<f32> = (0..lv.seq).flat_map(|s| &all.data[s * all.strides[0]..][..dv]).copied().collect();
                mean_rows(&dense, dv)
            });
            out.copy_from_slice(mean);
        }
    }
    Ok(st.acc)
}

/// The output's base pointer, shared by tasks that write disjoint rows.
struct OutRows(*mut f32);
// Safety: each (batch, head, query) row is written by exactly one task (see `forward`).
unsafe impl Sync for OutRows {}

impl OutRows {
    fn at(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// The f32 forward over `[B, H, S, D]`, `[B, S, H·D]` or `[S, H·D]` operands (see [`Heads`]).
pub(super) fn forward(
    (lq, lk, lv, lo): (Heads, Heads, Heads, Heads),
    (xq, xk, xv): (&[f32], &[f32], &[f32]),
    logits: Logits<f32>,
    mask: &Masking<f32>,
    out: &mut Out,
) -> Result<(), String> {
    let heads = lq.heads;
    let tasks: Vec<(usize, usize, usize)> =
        (0..lq.batch * heads).flat_map(|bh| (0..lq.seq).step_by(QB).map(move |q0| (bh / heads, bh % heads, q0))).collect();
    let o = out.get::<f32>();
    let (len, base) = (o.len(), OutRows(o.as_mut_ptr()));
    let dv = lo.width;
    if dv == 0 {
        return Ok(());
    }
    let run = |&(b, h, q0): &(usize, usize, usize)| -> Result<(), String> {
        let q = rows(&lq, xq, (b, h), q0, QB.min(lq.seq - q0));
        let result = block((q, xk, xv), (&lk, &lv), (b, h), q0, logits, mask)?;
        for (i, row) in result.chunks_exact(dv).enumerate() {
            let at = lo.row(b, h, q0 + i);
            assert!(at + dv <= len, "attention output row out of bounds");
            // Safety: in bounds (checked); tasks own disjoint (b, h, q0..q0 + QB) rows.
            unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), base.at(at), dv) };
        }
        Ok(())
    };
    let work = lq.batch * heads * lq.seq * lk.seq * (lq.width + lv.width);
    if work < crate::kernels::PAR_MIN {
        tasks.iter().try_for_each(run)
    } else {
        tasks.par_iter().try_for_each(run)
    }
}
