//! Scaled dot-product attention (OPS.md §7) and its backward ops (§22, `attention/backward.rs`);
//! rotary embeddings are in `attention/rope.rs`.
//!
//! Layouts (per tensor, see [`Heads`]): rank 4 is head-major `[B, H, S, D]`, rank 3 is
//! `[B, S, H·D]` with head `h` at columns `[h·D, (h+1)·D)`, rank 2 is `[S, H·D]` (`B = 1`).
//! F32 and F64 compute in their own precision (F16/BF16 go through F32, as OPS.md computes
//! scores and softmax in F32). F32 scores and weighted sums are register tiles (`tiled.rs`,
//! `micro.rs`); F64 keeps scalar dot products.
//!
//! Masking: `Causal` and `SlidingWindow(w)` align the queries with the last keys
//! (`abs_q = S_k − S_q + qi`); `Custom` keeps keys whose mask value is ≥ 0.5 (Bool: true);
//! `Bias` adds a tensor broadcast to `[B, H, S_q, S_k]`. OPS.md replaces masked logits by
//! −1e9, so a row with no key left has uniform weights (the mean of V). Rows with at least one
//! kept key skip the masked ones: their weight `exp(−1e9 − max)` is exactly 0 in f32 and f64
//! unless every kept logit is itself below about −1e9 + 700.

mod backward;
mod micro;
mod rope;
mod tiled;

pub use backward::*;
pub use rope::*;

use super::norm::{through_f32, values_f64};
use super::real::Real;
use super::by_float;
use crate::view::{broadcast_strides, In, Out};
use rayon::prelude::*;
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::DType;

/// Queries per task of the forward kernel.
const Q_BLOCK: usize = 16;
/// Keys scored at once (the tile of the online softmax).
const K_TILE: usize = 64;

/// Where the rows of each `(batch, head)` of one Q/K/V/output tensor live.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heads {
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    /// Elements per head row.
    pub width: usize,
    head_major: bool,
}

impl Heads {
    /// The layout of a tensor of `dims` with `heads` heads.
    pub fn of(dims: &[usize], heads: usize) -> Heads {
        match *dims {
            [b, h, s, d] => Heads { batch: b, heads: h, seq: s, width: d, head_major: true },
            [b, s, w] => Heads { batch: b, heads, seq: s, width: w / heads, head_major: false },
            [s, w] => Heads { batch: 1, heads, seq: s, width: w / heads, head_major: false },
            _ => unreachable!("inference admits ranks 2 to 4 only"),
        }
    }

    /// Offset of row `s` of head `h` of batch item `b`.
    pub fn row(&self, b: usize, h: usize, s: usize) -> usize {
        if self.head_major {
            ((b * self.heads + h) * self.seq + s) * self.width
        } else {
            (b * self.seq + s) * self.heads * self.width + h * self.width
        }
    }

    /// Copies the `seq × width` rows of head `(b, h)` out of `x`, contiguous.
    pub fn gather<T: Copy>(&self, x: &[T], b: usize, h: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(self.seq * self.width);
        for s in 0..self.seq {
            let at = self.row(b, h, s);
            out.extend_from_slice(&x[at..at + self.width]);
        }
        out
    }

    /// Writes `rows` (from row `s0` on, contiguous) into head `(b, h)` of `x`.
    pub fn scatter<T: Copy>(&self, x: &mut [T], b: usize, h: usize, s0: usize, rows: &[T]) {
        for (i, r) in rows.chunks(self.width).enumerate() {
            let at = self.row(b, h, s0 + i);
            x[at..at + self.width].copy_from_slice(r);
        }
    }
}

/// `Σ a_i·b_i`, summed in 8 interleaved partial sums (which lets the compiler vectorize it).
pub(crate) fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::ZERO; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = ca.remainder().iter().zip(cb.remainder()).fold(T::ZERO, |s, (&x, &y)| s + x * y);
    for (xa, xb) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] = acc[i] + xa[i] * xb[i];
        }
    }
    acc.iter().fold(tail, |s, &v| s + v)
}

/// The masking of one attention node: which keys each query keeps, and any additive bias.
pub(crate) struct Masking<T> {
    kind: MaskKind,
    s_q: usize,
    s_k: usize,
    /// `Custom`: whether key `k` of batch `b` is kept, at `b·keep_strides[0] + k·keep_strides[1]`.
    keep: Vec<bool>,
    keep_strides: Vec<usize>,
    /// `Bias`: values read at the broadcast strides over `[B, H, S_q, S_k]`.
    bias: Vec<T>,
    bias_strides: Vec<usize>,
    /// `Bias`: per query, the keys outside which every head's bias is a mask (≤ −1e9).
    bias_span: Vec<(usize, usize)>,
}

impl<T: Real> Masking<T> {
    /// The masking of `kind` for `batch × heads` heads of `s_q` queries and `s_k` keys, with
    /// the mask or bias operand when the kind takes one.
    pub fn new(kind: MaskKind, extra: Option<In>, batch: usize, heads: usize, s_q: usize, s_k: usize) -> Masking<T> {
        let mut m = Masking { kind, s_q, s_k, keep: Vec::new(), keep_strides: Vec::new(), bias: Vec::new(), bias_strides: Vec::new(), bias_span: Vec::new() };
        match (kind, extra) {
            (MaskKind::Custom, Some(mask)) => {
                m.keep = values_f64(mask).iter().map(|&v| v >= 0.5).collect();
                m.keep_strides = broadcast_strides(mask.dims, &[batch, s_k]);
            }
            (MaskKind::Bias, Some(bias)) => {
                m.bias = match bias.dtype {
                    // Read as they are (an f32 is exact in f64), not through an f64 copy: a
                    // batched decode step's `[T, U]` mask is read by every layer.
                    DType::F32 => bias.get::<f32>().iter().map(|&v| T::of(f64::from(v))).collect(),
                    _ => values_f64(bias).iter().map(|&v| T::of(v)).collect(),
                };
                m.bias_strides = broadcast_strides(bias.dims, &[batch, heads, s_q, s_k]);
                m.bias_span = (0..s_q).map(|qi| m.bias_span_of(batch, heads, qi)).collect();
            }
            _ => {}
        }
        m
    }

    /// The keys of query `qi` from the first to the last whose bias exceeds −1e9 (or is NaN)
    /// in some head; all keys when a head has none there (a fully masked row averages every key). A key
    /// outside gets weight `e^(s + bias − max)`, exactly 0 in f32 beside a kept key, so the
    /// kernels skip it: a KV cache's unfilled slots (hidden by a −1e9 or −∞ bias) cost
    /// nothing.
    fn bias_span_of(&self, batch: usize, heads: usize, qi: usize) -> (usize, usize) {
        let s = &self.bias_strides;
        let (batch, heads) = (if s[0] == 0 { 1 } else { batch }, if s[1] == 0 { 1 } else { heads });
        let (mut lo, mut hi) = (self.s_k, 0);
        // Above −1e9, or NaN.
        let shown = |x: &T| !matches!(x.partial_cmp(&T::of(-1e9)), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal));
        for b in 0..batch {
            for h in 0..heads {
                let kept = |k: &usize| shown(&self.bias(b, h, qi, *k));
                let found = match self.bias_keys(b, h, qi, 0..self.s_k) {
                    // Keys contiguous: a scan of the row from each end.
                    Some(row) => shown_span(row, shown),
                    None => ((0..self.s_k).find(kept), (0..self.s_k).rev().find(kept)),
                };
                match found {
                    (Some(first), Some(last)) => (lo, hi) = (lo.min(first), hi.max(last + 1)),
                    _ => return (0, self.s_k),
                }
            }
        }
        if lo < hi { (lo, hi) } else { (0, self.s_k) }
    }

    /// The keys `[lo, hi)` that query `qi` may keep (before a `Custom` mask); empty when a
    /// structural mask leaves it none.
    pub fn range(&self, qi: usize) -> (usize, usize) {
        let abs_q = self.s_k as isize - self.s_q as isize + qi as isize;
        let hi = (abs_q + 1).clamp(0, self.s_k as isize) as usize;
        match self.kind {
            MaskKind::Causal => (0, hi),
            MaskKind::SlidingWindow(w) => ((abs_q - w as isize + 1).clamp(0, hi as isize) as usize, hi),
            MaskKind::Bias if !self.bias_span.is_empty() => self.bias_span[qi],
            _ => (0, self.s_k),
        }
    }

    /// Whether every key survives (no `Custom` mask).
    pub fn keeps_all(&self) -> bool {
        self.keep.is_empty()
    }

    /// Whether key `k` survives the `Custom` mask of batch item `b` (always, for other kinds).
    pub fn kept(&self, b: usize, k: usize) -> bool {
        self.keep.is_empty() || self.keep[b * self.keep_strides[0] + k * self.keep_strides[1]]
    }

    /// Whether query `qi` of batch item `b` keeps at least one key.
    pub fn any_kept(&self, b: usize, qi: usize) -> bool {
        let (lo, hi) = self.range(qi);
        (lo..hi).any(|k| self.kept(b, k))
    }

    /// The biases of keys `keys` of logit row `(b, h, qi)` when they are contiguous (a bias
    /// not broadcast over keys); `None` otherwise or without a bias.
    pub fn bias_keys(&self, b: usize, h: usize, qi: usize, keys: std::ops::Range<usize>) -> Option<&[T]> {
        let s = &self.bias_strides;
        if self.bias.is_empty() || s[3] != 1 {
            return None;
        }
        self.bias.get(b * s[0] + h * s[1] + qi * s[2]..).and_then(|row| row.get(keys))
    }

    /// The bias added to logit `(b, h, qi, k)` (zero without a bias).
    pub fn bias(&self, b: usize, h: usize, qi: usize, k: usize) -> T {
        if self.bias.is_empty() {
            return T::ZERO;
        }
        let s = &self.bias_strides;
        self.bias[b * s[0] + h * s[1] + qi * s[2] + k * s[3]]
    }
}

/// The first and last of `row`'s elements that `shown` holds for, testing 16 at a time where
/// none does (a mask row's hidden runs, compared in vector registers).
fn shown_span<T: Real>(row: &[T], shown: impl Fn(&T) -> bool + Copy) -> (Option<usize>, Option<usize>) {
    let any = |c: &[T]| c.iter().fold(0usize, |n, x| n + usize::from(shown(x))) > 0;
    let first = row.chunks(16).enumerate().find(|(_, c)| any(c)).and_then(|(i, c)| c.iter().position(shown).map(|p| i * 16 + p));
    let last = row.rchunks(16).enumerate().find(|(_, c)| any(c)).and_then(|(i, c)| c.iter().rposition(shown).map(|p| row.len() - i * 16 - c.len() + p));
    (first, last)
}

/// The logit transform of one node: scale, optional softcap.
#[derive(Clone, Copy)]
pub(crate) struct Logits<T> {
    pub scale: T,
    pub softcap: Option<T>,
}

impl<T: Real> Logits<T> {
    /// The logit of a query·key dot product: `α·dot`, then `c·tanh(·/c)` with a softcap.
    pub fn apply(&self, dot: T) -> T {
        let s = dot * self.scale;
        match self.softcap {
            Some(c) => c * (s / c).tanh(),
            None => s,
        }
    }
}

/// The mean of the `rows × width` rows `v` (the output of a fully masked query row).
pub(crate) fn mean_rows<T: Real>(v: &[T], width: usize) -> Vec<T> {
    let rows = v.len() / width.max(1);
    let mut m = vec![T::ZERO; width];
    for r in v.chunks(width) {
        m.iter_mut().zip(r).for_each(|(a, &x)| *a = *a + x);
    }
    let n = T::of(rows as f64);
    m.iter_mut().for_each(|a| *a = *a / n);
    m
}

/// The online-softmax state of one query row: running max, normalizer and weighted sum of V.
pub(crate) struct RowState<T> {
    pub max: T,
    pub sum: T,
    pub acc: Vec<T>,
}

impl<T: Real> RowState<T> {
    pub fn new(width: usize) -> RowState<T> {
        RowState { max: T::of(f64::NEG_INFINITY), sum: T::ZERO, acc: vec![T::ZERO; width] }
    }

    /// Folds in the logits `s[j]` of keys whose value rows are `v_row(j)`.
    pub fn update<'a>(&mut self, s: &[T], v_row: impl Fn(usize) -> &'a [T]) where T: 'a {
        let tile_max = s.iter().fold(T::of(f64::NEG_INFINITY), |m, &x| m.max_nan(x));
        let new_max = self.max.max_nan(tile_max);
        if new_max == T::of(f64::NEG_INFINITY) {
            return; // every logit so far is −inf: nothing to weigh yet
        }
        let corr = if self.max == T::of(f64::NEG_INFINITY) { T::ZERO } else { (self.max - new_max).exp() };
        if corr != T::ONE {
            self.sum = self.sum * corr;
            self.acc.iter_mut().for_each(|a| *a = *a * corr);
        }
        for (j, &x) in s.iter().enumerate() {
            let p = (x - new_max).exp();
            self.sum = self.sum + p;
            for (a, &v) in self.acc.iter_mut().zip(v_row(j)) {
                *a = *a + p * v;
            }
        }
        self.max = new_max;
    }

    /// The normalized output row.
    pub fn finish(self) -> Vec<T> {
        let sum = self.sum;
        self.acc.into_iter().map(|a| a / sum).collect()
    }
}

/// One head of attention, queries `q0..q1`: returns their output rows (`width_v` each).
#[allow(clippy::too_many_arguments)]
fn head_block<T: Real>(
    q: &[T],
    k: &[T],
    v: &[T],
    (d, dv): (usize, usize),
    (b, h): (usize, usize),
    (q0, q1): (usize, usize),
    logits: Logits<T>,
    mask: &Masking<T>,
) -> Vec<T> {
    let mut out = Vec::with_capacity((q1 - q0) * dv);
    let mut fallback: Option<Vec<T>> = None;
    let mut s = Vec::with_capacity(K_TILE);
    for qi in q0..q1 {
        if !mask.any_kept(b, qi) {
            out.extend_from_slice(fallback.get_or_insert_with(|| mean_rows(v, dv)));
            continue;
        }
        let qr = &q[qi * d..(qi + 1) * d];
        let (lo, hi) = mask.range(qi);
        let mut state = RowState::new(dv);
        let mut keys = Vec::with_capacity(K_TILE);
        let mut t = lo;
        while t < hi {
            let end = (t + K_TILE).min(hi);
            s.clear();
            keys.clear();
            for kj in t..end {
                if mask.kept(b, kj) {
                    s.push(logits.apply(dot(qr, &k[kj * d..(kj + 1) * d])) + mask.bias(b, h, qi, kj));
                    keys.push(kj);
                }
            }
            state.update(&s, |j| &v[keys[j] * dv..(keys[j] + 1) * dv]);
            t = end;
        }
        out.extend(state.finish());
    }
    out
}

/// The operand layouts `(q, k, v, out)`, masking and logit transform of one node whose
/// queries see `s_k` keys.
fn setup<T: Real>(a: &Attention, ins: &[In], out_dims: &[usize], s_k: usize) -> ((Heads, Heads, Heads, Heads), Masking<T>, Logits<T>) {
    let kv = a.kv_heads_of_dims(ins[1].dims);
    let layouts = (Heads::of(ins[0].dims, a.num_heads), Heads::of(ins[1].dims, kv), Heads::of(ins[2].dims, kv), Heads::of(out_dims, a.num_heads));
    let lq = layouts.0;
    let mask = Masking::<T>::new(a.mask_kind, ins.get(3).copied(), lq.batch, a.num_heads, lq.seq, s_k);
    // The default scale in f64 (`Attention::scale` rounds it to f32).
    let scale = a.score_scale.map_or(1.0 / (a.head_dim as f64).sqrt(), f64::from);
    let logits = Logits { scale: T::of(scale), softcap: a.attn_logit_softcap.map(|c| T::of(c as f64)) };
    (layouts, mask, logits)
}

/// The scalar forward kernel over typed slices (f64; f32 runs on register tiles in `tiled.rs`).
fn forward<T: Real>(a: &Attention, ins: &[In], out: &mut Out) {
    let ((lq, lk, lv, lo), mask, logits) = setup::<T>(a, ins, out.dims, Heads::of(ins[1].dims, 1).seq);
    let (bsz, heads, s_q, s_k) = (lq.batch, a.num_heads, lq.seq, lk.seq);
    let (xq, xk, xv) = (ins[0].get::<T>(), ins[1].get::<T>(), ins[2].get::<T>());
    let (d, dv) = (lq.width, lv.width);
    let tasks: Vec<(usize, usize)> = (0..bsz * heads).map(|bh| (bh / heads, bh % heads)).collect();
    let work = bsz * heads * s_q * s_k * (d + dv);
    let per_head = |&(b, h): &(usize, usize)| -> Vec<(usize, Vec<T>)> {
        let kv = h / (heads / lk.heads);
        let (q, k, v) = (lq.gather(xq, b, h), lk.gather(xk, b, kv), lv.gather(xv, b, kv));
        let blocks: Vec<usize> = (0..s_q).step_by(Q_BLOCK).collect();
        let run = |&q0: &usize| (q0, head_block(&q, &k, &v, (d, dv), (b, h), (q0, (q0 + Q_BLOCK).min(s_q)), logits, &mask));
        if work < super::PAR_MIN {
            blocks.iter().map(run).collect()
        } else {
            blocks.par_iter().map(run).collect()
        }
    };
    let results: Vec<Vec<(usize, Vec<T>)>> = if work < super::PAR_MIN {
        tasks.iter().map(per_head).collect()
    } else {
        tasks.par_iter().map(per_head).collect()
    };
    let o = out.get::<T>();
    for (&(b, h), blocks) in tasks.iter().zip(results) {
        for (q0, rows) in blocks {
            lo.scatter(o, b, h, q0, &rows);
        }
    }
}

/// `Attention`: inputs `(q, k, v)` plus the mask/bias for `Custom`/`Bias`, and K and V's
/// `kv_rows`; any of the three layouts, `S_k ≠ S_q`, grouped KV heads (read in place by each
/// query head of their group), `v_head_dim`, `score_scale` and softcap. Keys are tiled with
/// an online softmax, so no `S_q × S_k` matrix is formed; work splits over batch × heads ×
/// query blocks. F32 (and the half floats, widened) runs on register tiles, reading K and V
/// at their `kv_rows` in place; F64 on scalar dot products, over the rows gathered first.
pub fn attention(a: &Attention, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let (ins, kv_rows) = match a.kv_rows_input(ins.len()) {
        Some(at) => {
            let n = ins[1].dims.first().copied().unwrap_or(0);
            (&ins[..at], Some(super::index::gather_indices(&ins[at], n, &format!("the {n} rows of k and v"))?))
        }
        None => (ins, None),
    };
    through_f32(ins, outs, |ins, outs| match (ins[0].dtype, kv_rows.as_deref()) {
        (DType::F32, rows) => {
            let s_k = rows.map_or(Heads::of(ins[1].dims, 1).seq, <[usize]>::len);
            let (layouts, mask, logits) = setup::<f32>(a, ins, outs[0].dims, s_k);
            tiled::forward(layouts, (ins[0].get(), ins[1].get(), ins[2].get()), rows, logits, &mask, &mut outs[0])
        }
        (DType::F64, Some(rows)) => {
            let (k, v) = (gathered::<f64>(ins[1], rows), gathered::<f64>(ins[2], rows));
            let dims = [[rows.len(), ins[1].dims[1]], [rows.len(), ins[2].dims[1]]];
            let mut read = ins.to_vec();
            read[1] = In { dtype: DType::F64, dims: &dims[0], bytes: bytemuck::cast_slice(&k) };
            read[2] = In { dtype: DType::F64, dims: &dims[1], bytes: bytemuck::cast_slice(&v) };
            forward::<f64>(a, &read, &mut outs[0]);
            Ok(())
        }
        (d, Some(_)) => Err(format!("attention with kv_rows runs on f32 and f64, not {d}")),
        (d, None) => by_float!(d, T => forward::<T>(a, ins, &mut outs[0])),
    })
}

/// Rows `rows` of a rank-2 operand `x`, contiguous.
fn gathered<T: bytemuck::Pod + Send + Sync + Default>(x: In, rows: &[usize]) -> Vec<T> {
    let width = x.dims[1];
    let mut out = vec![T::default(); rows.len() * width];
    super::index::copy_rows(x.get::<T>(), &mut out, width, |r| rows[r]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    /// Plain softmax attention of one head with −1e9 masking, materializing the scores.
    fn naive(q: &[f64], k: &[f64], v: &[f64], d: usize, keep: impl Fn(usize, usize) -> bool) -> Vec<f64> {
        let (sq, sk) = (q.len() / d, k.len() / d);
        let dv = v.len() / sk;
        let mut out = vec![0.0; sq * dv];
        for i in 0..sq {
            let s: Vec<f64> = (0..sk)
                .map(|j| if keep(i, j) { (0..d).map(|e| q[i * d + e] * k[j * d + e]).sum::<f64>() / (d as f64).sqrt() } else { -1e9 })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for j in 0..sk {
                for e in 0..dv {
                    out[i * dv + e] += (s[j] - m).exp() / z * v[j * dv + e];
                }
            }
        }
        out
    }

    fn data(n: usize, seed: u64) -> Vec<f64> {
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 500.0) - 1.0).collect()
    }

    fn run(a: &Attention, q: &[f64], k: &[f64], v: &[f64], dims: [&[usize]; 3]) -> Vec<f64> {
        let ins = [
            In { dtype: DType::F64, dims: dims[0], bytes: bytemuck::cast_slice(q) },
            In { dtype: DType::F64, dims: dims[1], bytes: bytemuck::cast_slice(k) },
            In { dtype: DType::F64, dims: dims[2], bytes: bytemuck::cast_slice(v) },
        ];
        let mut y = vec![0f64; q.len() / a.head_dim * a.v_head_dim.unwrap_or(a.head_dim)];
        let mut outs = [Out { dtype: DType::F64, dims: dims[0], bytes: bytemuck::cast_slice_mut(&mut y) }];
        attention(a, &ins, &mut outs).unwrap();
        y
    }

    #[test]
    fn long_causal_decode_matches_the_materialized_softmax() {
        // One head, 3 queries against 150 keys (several key tiles), bottom-right causal.
        let (sq, sk, d) = (3, 150, 4);
        let (q, k, v) = (data(sq * d, 1), data(sk * d, 2), data(sk * d, 3));
        let got = run(&Attention::new(1, d, MaskKind::Causal), &q, &k, &v, [&[1, 1, sq, d], &[1, 1, sk, d], &[1, 1, sk, d]]);
        let want = naive(&q, &k, &v, d, |i, j| j <= sk - sq + i);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
    }

    #[test]
    fn keys_hidden_by_a_bias_are_skipped_without_changing_the_result() {
        // A KV cache: slot 0 hidden by −∞, slots past each query's position by −1e9 (f32 and
        // f64), against the softmax over the visible keys alone.
        let (sq, sk, d) = (4, 40, 8);
        let (q, k, v) = (data(sq * d, 11), data(sk * d, 12), data(sk * d, 13));
        let hidden = |i: usize, j: usize| j == 0 || j > 20 + 5 * i;
        let bias: Vec<f64> = (0..sq * sk).map(|x| if hidden(x / sk, x % sk) { if x % sk == 0 { f64::NEG_INFINITY } else { -1e9 } } else { 0.1 * (x % 7) as f64 }).collect();
        let a = Attention::new(1, d, MaskKind::Bias);
        let mut want = vec![0f64; sq * d];
        let logits = |i: usize, j: usize| (0..d).map(|e| q[i * d + e] * k[j * d + e]).sum::<f64>() / (d as f64).sqrt() + bias[i * sk + j];
        for i in 0..sq {
            let w: Vec<f64> = (0..sk).map(|j| if hidden(i, j) { 0.0 } else { logits(i, j).exp() }).collect();
            let z: f64 = w.iter().sum();
            for e in 0..d {
                want[i * d + e] = (0..sk).map(|j| w[j] / z * v[j * d + e]).sum();
            }
        }
        let dims: [&[usize]; 4] = [&[sq, d], &[sk, d], &[sk, d], &[sq, sk]];
        let y64 = {
            let ins: Vec<In> = [&q, &k, &v, &bias].iter().zip(dims).map(|(x, dims)| In { dtype: DType::F64, dims, bytes: bytemuck::cast_slice(x) }).collect();
            let mut y = vec![0f64; sq * d];
            attention(&a, &ins, &mut [Out { dtype: DType::F64, dims: dims[0], bytes: bytemuck::cast_slice_mut(&mut y) }]).unwrap();
            y
        };
        let f32s: Vec<Vec<f32>> = [&q, &k, &v, &bias].iter().map(|x| x.iter().map(|&v| v as f32).collect()).collect();
        let y32 = {
            let ins: Vec<In> = f32s.iter().zip(dims).map(|(x, dims)| In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) }).collect();
            let mut y = vec![0f32; sq * d];
            attention(&a, &ins, &mut [Out { dtype: DType::F32, dims: dims[0], bytes: bytemuck::cast_slice_mut(&mut y) }]).unwrap();
            y
        };
        for (i, w) in want.iter().enumerate() {
            assert!((y64[i] - w).abs() < 1e-9, "f64 [{i}]: {} vs {w}", y64[i]);
            assert!((f64::from(y32[i]) - w).abs() < 2e-5, "f32 [{i}]: {} vs {w}", y32[i]);
        }
    }

    #[test]
    fn queries_before_every_key_get_the_mean_of_v() {
        // S_q > S_k: the first query has abs_q = −1 and no key; it gets uniform weights.
        let (sq, sk, d) = (3, 2, 2);
        let (q, k, v) = (data(sq * d, 4), data(sk * d, 5), data(sk * d, 6));
        let got = run(&Attention::new(1, d, MaskKind::Causal), &q, &k, &v, [&[sq, d], &[sk, d], &[sk, d]]);
        let want = naive(&q, &k, &v, d, |i, j| (j as isize) <= sk as isize - sq as isize + i as isize);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
        assert!((got[0] - (v[0] + v[2]) / 2.0).abs() < 1e-15);
    }

    #[test]
    fn many_heads_and_query_blocks_run_in_parallel() {
        // [B, S, H·D] with B = 2, H = 3: 6 heads × 7 query blocks, above the parallel threshold.
        let (b, s, h, d) = (2, 100, 3, 8);
        let (q, k, v) = (data(b * s * h * d, 7), data(b * s * h * d, 8), data(b * s * h * d, 9));
        let dims = [b, s, h * d];
        let got = run(&Attention::new(h, d, MaskKind::SlidingWindow(20)), &q, &k, &v, [&dims, &dims, &dims]);
        let head = |x: &[f64], bi: usize, hi: usize| -> Vec<f64> {
            (0..s).flat_map(|si| x[(bi * s + si) * h * d + hi * d..][..d].to_vec()).collect()
        };
        for bi in 0..b {
            for hi in 0..h {
                let want = naive(&head(&q, bi, hi), &head(&k, bi, hi), &head(&v, bi, hi), d, |i, j| j <= i && j + 20 > i);
                assert_eq!(head(&got, bi, hi).len(), want.len());
                for (g, w) in head(&got, bi, hi).iter().zip(&want) {
                    assert!((g - w).abs() < 1e-12, "{g} vs {w}");
                }
            }
        }
    }

    /// The node run once in f64 and once in f32 (the tiled path), with an optional mask/bias.
    fn both(a: &Attention, qkv: [(&[usize], u64); 3], extra: Option<(&[usize], Vec<f64>)>) -> (Vec<f64>, Vec<f32>) {
        let values = qkv.map(|(d, seed)| data(d.iter().product(), seed));
        both_on(a, [qkv[0].0, qkv[1].0, qkv[2].0], values, extra)
    }

    /// [`both`] on given operand values.
    fn both_on(a: &Attention, dims: [&[usize]; 3], data64: [Vec<f64>; 3], extra: Option<(&[usize], Vec<f64>)>) -> (Vec<f64>, Vec<f32>) {
        let data32: Vec<Vec<f32>> = data64.iter().map(|v| v.iter().map(|&x| x as f32).collect()).collect();
        let extra32: Option<Vec<f32>> = extra.as_ref().map(|(_, v)| v.iter().map(|&x| x as f32).collect());
        let out_dims: Vec<usize> = {
            let mut d = dims[0].to_vec();
            let last = d.len() - 1;
            d[last] = d[last] / a.head_dim * a.v_head_dim.unwrap_or(a.head_dim);
            d
        };
        let n: usize = out_dims.iter().product();
        let mut y64 = vec![0f64; n];
        let mut y32 = vec![0f32; n];
        let mut ins64: Vec<In> = (0..3).map(|i| In { dtype: DType::F64, dims: dims[i], bytes: bytemuck::cast_slice(&data64[i]) }).collect();
        let mut ins32: Vec<In> = (0..3).map(|i| In { dtype: DType::F32, dims: dims[i], bytes: bytemuck::cast_slice(&data32[i]) }).collect();
        if let (Some((dims, v)), Some(v32)) = (&extra, &extra32) {
            ins64.push(In { dtype: DType::F64, dims, bytes: bytemuck::cast_slice(v) });
            ins32.push(In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(v32) });
        }
        attention(a, &ins64, &mut [Out { dtype: DType::F64, dims: &out_dims, bytes: bytemuck::cast_slice_mut(&mut y64) }]).unwrap();
        attention(a, &ins32, &mut [Out { dtype: DType::F32, dims: &out_dims, bytes: bytemuck::cast_slice_mut(&mut y32) }]).unwrap();
        (y64, y32)
    }

    /// Every f32 output within 2e-5 (relative above 1) of the f64 one, and NaN where it is NaN.
    fn assert_f32_close(y64: &[f64], y32: &[f32], what: &str) {
        assert_eq!(y64.len(), y32.len(), "{what}: output lengths");
        for (i, (w, g)) in y64.iter().zip(y32).enumerate() {
            let ok = if w.is_nan() { g.is_nan() } else { (*g as f64 - w).abs() <= 2e-5 * (1.0 + w.abs()) };
            assert!(ok, "{what}[{i}]: f32 {g} vs f64 {w}");
        }
    }

    /// Runs every mask kind (Custom with an all-masked batch item, Bias, and softcap on
    /// Causal) on `[B, S, H·D]` operands and compares f32 with f64.
    fn every_mask(b: usize, h: usize, (sq, sk): (usize, usize), (d, dv): (usize, usize), what: &str) {
        let (dq, dk, dvv) = ([b, sq, h * d], [b, sk, h * d], [b, sk, h * dv]);
        let node = |kind| Attention { v_head_dim: Some(dv), ..Attention::new(h, d, kind) };
        let operands = [(&dq[..], 1), (&dk[..], 2), (&dvv[..], 3)];
        for kind in [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(37)] {
            let (y64, y32) = both(&node(kind), operands, None);
            assert_f32_close(&y64, &y32, &format!("{what} {kind:?}"));
        }
        let softcapped = Attention { score_scale: Some(0.7), attn_logit_softcap: Some(3.0), ..node(MaskKind::Causal) };
        let (y64, y32) = both(&softcapped, operands, None);
        assert_f32_close(&y64, &y32, &format!("{what} softcap"));
        let keep: Vec<f64> = (0..b * sk).map(|i| if i >= sk { 0.0 } else { (i % 5 != 1) as u8 as f64 }).collect();
        let (y64, y32) = both(&node(MaskKind::Custom), operands, Some((&[b, sk], keep)));
        assert_f32_close(&y64, &y32, &format!("{what} custom"));
        let bias = data(h * sq * sk, 10);
        let (y64, y32) = both(&node(MaskKind::Bias), operands, Some((&[1, h, sq, sk], bias)));
        assert_f32_close(&y64, &y32, &format!("{what} bias"));
    }

    #[test]
    fn f32_few_queries_match_the_f64_kernel_over_long_key_ranges() {
        // 1 to 7 queries (the dot-product path) against 700 keys (six key tiles); head dims
        // 1 to 129, rows strided by H·D (no multiple of 8).
        for (sq, d, dv) in [(1, 1, 1), (2, 7, 5), (3, 33, 33), (7, 63, 64), (1, 129, 17)] {
            every_mask(2, 3, (sq, 700), (d, dv), &format!("{sq} queries, d {d}, dv {dv}"));
        }
    }

    #[test]
    fn f32_lane_tiles_match_the_f64_kernel_on_odd_head_dims() {
        // 8 to 65 queries: partial lane groups, keys fewer and more than a tile, a
        // one-query last block; head dims 1, 33, 63, 129.
        for (sq, sk, d, dv) in [(8, 9, 1, 3), (17, 130, 33, 7), (64, 64, 63, 63), (65, 200, 129, 32)] {
            every_mask(2, 2, (sq, sk), (d, dv), &format!("{sq}x{sk}, d {d}, dv {dv}"));
        }
    }

    #[test]
    fn f32_nan_in_a_query_or_kept_key_reaches_the_rows_the_f64_kernel_gives_nan() {
        // Causal over 70 queries (a lane block and a few-query block) and over 3 queries: a
        // NaN key row reaches only the queries that keep it, a NaN query only its own row.
        let (h, sk, d) = (2, 70, 9);
        for sq in [70, 3] {
            let dims: [&[usize]; 3] = [&[1, sq, h * d], &[1, sk, h * d], &[1, sk, h * d]];
            let mut values = [data(sq * h * d, 1), data(sk * h * d, 2), data(sk * h * d, 3)];
            values[1][(40 * h) * d + 3] = f64::NAN;
            values[0][(sq - 2) * h * d + d + 1] = f64::NAN;
            let (y64, y32) = both_on(&Attention::new(h, d, MaskKind::Causal), dims, values, None);
            assert!(y64.iter().any(|x| x.is_nan()) && y64.iter().any(|x| !x.is_nan()));
            assert_f32_close(&y64, &y32, &format!("NaN, {sq} queries"));
        }
    }

    #[test]
    fn f32_kv_cache_with_hidden_slots_matches_the_f64_kernel() {
        // A decoder's cache: [1, H, capacity, 64] keys and values, an additive [S, capacity]
        // mask of 0 on visible slots and −1e9 on hidden ones; prompts (lane and few-query
        // blocks) and single decode steps.
        let (h, cap, d) = (3, 64, 64);
        for (sq, pos) in [(11, 0), (6, 0), (1, 11), (1, 40)] {
            let mask: Vec<f64> = (0..sq * cap).map(|n| if n % cap <= pos + n / cap { 0.0 } else { -1e9 }).collect();
            let q: Vec<f64> = data(h * sq * d, 1).iter().map(|x| 3.0 * x).collect();
            let dims: [&[usize]; 3] = [&[1, h, sq, d], &[1, h, cap, d], &[1, h, cap, d]];
            let (y64, y32) = both_on(&Attention::new(h, d, MaskKind::Bias), dims, [q, data(h * cap * d, 2), data(h * cap * d, 3)], Some((&[sq, cap], mask)));
            assert_f32_close(&y64, &y32, &format!("{sq} queries at {pos}"));
        }
    }

    #[test]
    fn f32_tiles_match_the_f64_kernel_on_odd_sizes_and_every_mask() {
        // 129 queries and 257 keys cross the query-block and key-tile edges; d = 7, dv = 5.
        let (b, h, sq, sk, d, dv) = (2, 3, 129, 257, 7, 5);
        let (q4, k4, v4) = ([b, h, sq, d], [b, h, sk, d], [b, h, sk, dv]);
        let with_dv = |kind| Attention { v_head_dim: Some(dv), ..Attention::new(h, d, kind) };
        for kind in [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(33)] {
            let (y64, y32) = both(&with_dv(kind), [(&q4, 1), (&k4, 2), (&v4, 3)], None);
            assert_f32_close(&y64, &y32, &format!("{kind:?}"));
        }
        let softcapped = Attention { score_scale: Some(0.9), attn_logit_softcap: Some(2.5), ..with_dv(MaskKind::Causal) };
        let (y64, y32) = both(&softcapped, [(&q4, 4), (&k4, 5), (&v4, 6)], None);
        assert_f32_close(&y64, &y32, "softcap");
        // Custom: batch item 1 keeps no key at all (the mean-of-V fallback).
        let keep: Vec<f64> = (0..b * sk).map(|i| if i >= sk { 0.0 } else { (i % 3 != 0) as u8 as f64 }).collect();
        let (y64, y32) = both(&with_dv(MaskKind::Custom), [(&q4, 7), (&k4, 8), (&v4, 9)], Some((&[b, sk], keep)));
        assert_f32_close(&y64, &y32, "custom");
        let bias = data(h * sq * sk, 10);
        let (y64, y32) = both(&with_dv(MaskKind::Bias), [(&q4, 11), (&k4, 12), (&v4, 13)], Some((&[1, h, sq, sk], bias)));
        assert_f32_close(&y64, &y32, "bias");
    }

    #[test]
    fn kv_rows_read_in_place_give_the_bits_of_the_rows_gathered_first() {
        // `[S, H·D]` queries of 6 heads over 3 KV heads of 16, K and V read at rows of a
        // 200-row pool: 3 decode queries each over its own scattered rows under a bias (the
        // per-query path), and 20 causal queries over 150 rows (lane tiles). In place, f32
        // gives the bits it gives on the rows gathered first, and f64 agrees.
        let (h, kv, d, n) = (6, 3, 16, 200);
        let (k, v) = (data(n * kv * d, 2), data(n * kv * d, 3));
        let own: [&[i64]; 3] = [&[5, 6, 7, 130, 2], &[10, 11, 12, 13, 14, 15, 131, 133, 199], &[20, 1, 3]];
        let mut rows = vec![0i64; 24];
        let mut bias = vec![-1e9; 3 * 24];
        for (i, r) in own.iter().enumerate() {
            rows[8 * i..8 * i + r.len()].copy_from_slice(r);
            bias[i * 24 + 8 * i..i * 24 + 8 * i + r.len()].fill(0.0);
        }
        let decode = (Attention::new(h, d, MaskKind::Bias), 3, rows, Some(bias));
        let prefill = (Attention::new(h, d, MaskKind::Causal), 20, (0..150).map(|r| (r * 7 % n) as i64).collect(), None);
        for (a, sq, rows, bias) in [decode, prefill] {
            let q = data(sq * h * d, 1);
            let u = rows.len();
            let pick = |x: &[f64]| -> Vec<f64> { rows.iter().flat_map(|&r| x[r as usize * kv * d..][..kv * d].to_vec()).collect() };
            let (kg, vg) = (pick(&k), pick(&v));
            let f32s = |x: &[f64]| -> Vec<f32> { x.iter().map(|&v| v as f32).collect() };
            let (dq, dk, dg, db) = ([sq, h * d], [n, kv * d], [u, kv * d], [sq, u]);
            let bias32 = bias.as_deref().map(f32s);
            let run32 = |k: &[f32], v: &[f32], kdims: &[usize], rows: Option<&[i64]>| -> Result<Vec<f32>, String> {
                let q32 = f32s(&q);
                let mut ins = vec![In { dtype: DType::F32, dims: &dq, bytes: bytemuck::cast_slice(&q32) }];
                ins.push(In { dtype: DType::F32, dims: kdims, bytes: bytemuck::cast_slice(k) });
                ins.push(In { dtype: DType::F32, dims: kdims, bytes: bytemuck::cast_slice(v) });
                ins.extend(bias32.as_ref().map(|b| In { dtype: DType::F32, dims: &db, bytes: bytemuck::cast_slice(b) }));
                ins.extend(rows.map(|r| In { dtype: DType::I64, dims: std::slice::from_ref(&u), bytes: bytemuck::cast_slice(r) }));
                let mut y = vec![0f32; sq * h * d];
                attention(&a, &ins, &mut [Out { dtype: DType::F32, dims: &dq, bytes: bytemuck::cast_slice_mut(&mut y) }])?;
                Ok(y)
            };
            let in_place = run32(&f32s(&k), &f32s(&v), &dk, Some(&rows)).unwrap();
            let first = run32(&f32s(&kg), &f32s(&vg), &dg, None).unwrap();
            for (i, (x, y)) in in_place.iter().zip(&first).enumerate() {
                assert_eq!(x.to_bits(), y.to_bits(), "{sq} queries [{i}]: {x} in place, {y} gathered");
            }
            let mut y64 = vec![0f64; sq * h * d];
            let mut ins = vec![In { dtype: DType::F64, dims: &dq, bytes: bytemuck::cast_slice(&q) }];
            ins.push(In { dtype: DType::F64, dims: &dk, bytes: bytemuck::cast_slice(&k) });
            ins.push(In { dtype: DType::F64, dims: &dk, bytes: bytemuck::cast_slice(&v) });
            ins.extend(bias.as_ref().map(|b| In { dtype: DType::F64, dims: &db, bytes: bytemuck::cast_slice(b) }));
            ins.push(In { dtype: DType::I64, dims: std::slice::from_ref(&u), bytes: bytemuck::cast_slice(&rows) });
            attention(&a, &ins, &mut [Out { dtype: DType::F64, dims: &dq, bytes: bytemuck::cast_slice_mut(&mut y64) }]).unwrap();
            assert_f32_close(&y64, &in_place, &format!("{sq} queries"));
            let mut bad = rows.clone();
            bad[1] = n as i64;
            let e = run32(&f32s(&k), &f32s(&v), &dk, Some(&bad)).unwrap_err();
            assert!(e.contains("index 200 at [1] of the indices is outside [0, 200), the extent of the 200 rows of k and v"), "{e}");
        }
    }

    #[test]
    fn f32_tiles_read_row_major_and_unbatched_layouts() {
        let (b, s, h, d) = (2, 70, 4, 16);
        let dims3 = [b, s, h * d];
        let (y64, y32) = both(&Attention::new(h, d, MaskKind::Causal), [(&dims3, 1), (&dims3, 2), (&dims3, 3)], None);
        assert_f32_close(&y64, &y32, "[B, S, H·D]");
        let (dq, dk) = ([1, h * d], [s, h * d]);
        let (y64, y32) = both(&Attention::new(h, d, MaskKind::Causal), [(&dq, 4), (&dk, 5), (&dk, 6)], None);
        assert_f32_close(&y64, &y32, "one query, [S, H·D]");
    }
}
