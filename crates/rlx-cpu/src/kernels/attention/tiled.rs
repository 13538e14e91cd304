//! The f32 forward of `Attention` on register tiles (FlashAttention-2 order): per head and
//! block of queries, the logits of one key tile come straight from the key rows against the
//! block's queries stored lane-wise, the online softmax rescales the block's running output,
//! and `P·V` is added straight from the value rows (`micro.rs`); no key tile is packed.
//! Blocks of a few queries (decode), and blocks whose queries see mostly different keys (a
//! batched decode step: each sequence's query over its own cache), instead take dot products
//! over each query's own key rows, in the same order of operations per query, so a query's
//! output is the same bits in either; there the query heads that share a KV head go together,
//! each load and transposition of a key row serving all of them.
//! K and V rows may be read at indices (`kv_rows`: a pooled KV cache read in place), in the
//! same order of operations as the rows gathered first, so with the same bits.
//! Memory stays at one block × tile of logits, whatever the sequence length. Same results
//! as the scalar kernel in `mod.rs` (which f64 keeps) up to f32 summation order.

use super::micro::{self, Rows, LANES};
use super::{mean_rows, Heads, Logits, Masking};
use crate::kernels::elementwise::exp_neg;
use crate::kernels::matmul::OutPtr;
use crate::view::Out;
use rayon::prelude::*;
use std::cell::RefCell;

/// Queries per block.
const QB: usize = 64;
/// Keys per tile.
const KT: usize = 128;
/// Blocks of fewer queries take dot products (a lane-wise tile would be mostly padding).
const FEW: usize = 8;
/// Lane tiles pay off once a block's queries score at least `1/SHARED` of its key span on
/// average ([`apart`]).
const SHARED: usize = 4;
const NEG_INF: f32 = f32::NEG_INFINITY;

/// The operands of one head `(b, h)` and the masking and transform of its logits.
#[derive(Clone, Copy)]
struct Head<'a> {
    q: Rows<'a>,
    k: Rows<'a>,
    v: Rows<'a>,
    /// Rows of `v` (the keys).
    seq: usize,
    b: usize,
    h: usize,
    logits: Logits<f32>,
    mask: &'a Masking<f32>,
}

impl Head<'_> {
    /// Whether logits need the scalar softcap or bias pass before scaling.
    fn special(&self) -> bool {
        self.logits.softcap.is_some() || !self.mask.bias.is_empty()
    }

    /// The scale left to apply after [`Head::special`]'s pass (which scales itself).
    fn scale(&self) -> f32 {
        if self.special() {
            1.0
        } else {
            self.logits.scale
        }
    }
}

/// Working memory of one block, kept per thread across calls.
#[derive(Default)]
struct Scratch {
    /// Logits, then weights, of one tile: `[KT][QB]` lane-wise, or one query's logits of each
    /// head `[heads][KT]` on the dot-product path.
    scores: Vec<f32>,
    /// The dot-product path's weights of one query, `[KT][heads]`.
    weights: Vec<f32>,
    /// The block's queries transposed, `[d][QB]` (lanes past the block's queries are zero).
    qt: Vec<f32>,
    /// The block's output rows `[nq][heads][dv]`, unnormalised until the last tile.
    acc: Vec<f32>,
    /// The dot-product path's running maxima and normalisers, `[nq][heads]`.
    max: Vec<f32>,
    sum: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The online-softmax state of a block's queries: running maxima and normalisers.
struct Softmax {
    max: [f32; QB],
    sum: [f32; QB],
}

/// The larger of `m` and `x`, skipping a NaN (`maxnum`: a plain value, where a compare and
/// select here became a masked store to the running maxima). A NaN logit needs no sticky
/// maximum: its weight `e^(NaN − shift)` is NaN whatever the shift, and so are the sums and
/// output rows it reaches.
#[inline(always)]
fn max(m: f32, x: f32) -> f32 {
    m.max(x)
}

impl Softmax {
    /// [`fold`] for query `i`.
    #[inline(always)]
    fn fold(&mut self, i: usize, tile_max: f32) -> (f32, f32) {
        fold(&mut self.max[i], &mut self.sum[i], tile_max)
    }
}

/// Folds a tile's maximum `tile_max` into a query's running maximum and normaliser: returns
/// the factor its running sum and output were rescaled by, and the shift for the tile's
/// weights.
#[inline(always)]
fn fold(max_run: &mut f32, sum: &mut f32, tile_max: f32) -> (f32, f32) {
    let (old, new) = (*max_run, max(*max_run, tile_max));
    let corr = if old == NEG_INF { 0.0 } else { exp_neg(old - new) };
    *sum *= corr;
    *max_run = new;
    (corr, if new == NEG_INF { 0.0 } else { new })
}

/// The largest of `xs` skipping NaNs (−∞ when none is larger), in 16 lanes: the maximum of
/// a set, whatever the order.
#[inline(always)]
fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [NEG_INF; 16];
    let chunks = xs.chunks_exact(16);
    let tail = chunks.remainder().iter().fold(NEG_INF, |m, &x| max(m, x));
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = max(*m, x);
        }
    }
    lanes.iter().fold(tail, |m, &x| max(m, x))
}

/// The key range `range` of one query, within tile `[t0, t0 + nk)`, relative to `t0`.
#[inline(always)]
fn local((lo, hi): (usize, usize), t0: usize, nk: usize) -> std::ops::Range<usize> {
    let (a, e) = (lo.clamp(t0, t0 + nk) - t0, hi.clamp(t0, t0 + nk) - t0);
    a..e.max(a)
}

/// Query heads one task of the dot-product path takes at most (of those sharing a KV head).
const MAX_HEADS: usize = 8;

/// How a block of queries is computed: its queries' key ranges, their span `[lo, hi)`, and
/// whether it takes dot products (`few`), because its queries are few or `apart`.
struct Plan {
    ranges: [(usize, usize); QB],
    span: (usize, usize),
    few: bool,
    apart: bool,
}

impl Plan {
    #[inline(always)]
    fn of(mask: &Masking<f32>, q0: usize, nq: usize) -> Plan {
        let mut ranges = [(0, 0); QB];
        for (i, r) in ranges[..nq].iter_mut().enumerate() {
            *r = mask.range(q0 + i);
        }
        let own = &ranges[..nq];
        let lo = own.iter().filter(|r| r.0 < r.1).map(|r| r.0).min().unwrap_or(0);
        let hi = own.iter().map(|r| r.1).max().unwrap_or(0);
        let apart = apart(own, hi - lo);
        Plan { ranges, span: (lo, hi), few: nq < FEW || apart, apart }
    }
}

/// Queries `q0..q0 + nq` of the heads `hds`: their output rows into `sc.acc`, `[nq][heads][dv]`.
/// Several heads (sharing one KV head) go together only on the dot-product path.
#[inline(always)]
fn block_generic(hds: &[Head], q0: usize, nq: usize, sc: &mut Scratch) {
    let hd = &hds[0];
    let plan = Plan::of(hd.mask, q0, nq);
    let (ranges, (lo, hi)) = (&plan.ranges[..nq], plan.span);
    if plan.few {
        return block_dots(hds, q0, ranges, (lo, hi), sc);
    }
    assert_eq!(hds.len(), 1, "lane blocks take one head a task");
    let (d, dv) = (hd.q.width, hd.v.width);
    let mut st = Softmax { max: [NEG_INF; QB], sum: [0.0; QB] };
    sc.acc.clear();
    sc.acc.resize(nq * dv, 0.0);
    sc.scores.resize(KT * QB, 0.0);
    sc.qt.clear();
    sc.qt.resize(d * QB, 0.0);
    micro::transpose(hd.q.skip(q0), nq, &mut sc.qt, QB);
    for t0 in (lo..hi).step_by(KT) {
        let nk = KT.min(hi - t0);
        lane_tile(hd, q0, ranges, (t0, nk), &mut st, sc);
    }
    finish(hds, q0, &st.sum[..nq], &mut sc.acc);
}

/// Whether a block's queries share too few keys for lane tiles, which score every query
/// against the block's whole span of `span` keys: their own ranges cover under a quarter of
/// `queries · span` (the sequences of a batched decode step, each over its own cache), so dot
/// products over each query's own keys do less work.
#[inline(always)]
fn apart(ranges: &[(usize, usize)], span: usize) -> bool {
    let own: usize = ranges.iter().map(|&(a, e)| e.saturating_sub(a)).sum();
    own * SHARED < ranges.len() * span
}

/// One key tile `[t0, t0 + nk)` for a block stored lane-wise: logits `[nk][QB]`, masked and
/// scaled, folded into the running state, and their weights times the values added.
#[inline(always)]
fn lane_tile(hd: &Head, q0: usize, ranges: &[(usize, usize)], (t0, nk): (usize, usize), st: &mut Softmax, sc: &mut Scratch) {
    let nq = ranges.len();
    let nl = nq.next_multiple_of(LANES);
    let keys = hd.k.skip(t0);
    let s = &mut sc.scores[..nk * QB];
    for l0 in (0..nl).step_by(LANES) {
        let own = ranges[l0..nq.min(l0 + LANES)].iter().map(|&r| local(r, t0, nk)).filter(|r| !r.is_empty());
        let (a, e) = own.fold((nk, 0), |(a, e), r| (a.min(r.start), e.max(r.end)));
        micro::logits(keys, &sc.qt, QB, l0, a..e.max(a), s);
    }
    if hd.special() {
        for (i, &r) in ranges.iter().enumerate() {
            for j in local(r, t0, nk) {
                let x = &mut s[j * QB + i];
                *x = hd.logits.apply(*x) + hd.mask.bias(hd.b, hd.h, q0 + i, t0 + j);
            }
        }
    }
    let scale = hd.scale();
    let full = nl == nq && ranges.iter().all(|&(a, e)| a <= t0 && e >= t0 + nk);
    let (mut lo, mut hi) = ([0; QB], [0; QB]);
    for (i, &(a, e)) in ranges.iter().enumerate() {
        (lo[i], hi[i]) = (a, e);
    }
    let mut tile_max = [NEG_INF; QB];
    for (j, row) in s.chunks_exact_mut(QB).enumerate() {
        let (row, kj) = (&mut row[..nl], t0 + j);
        if !hd.mask.kept(hd.b, kj) {
            row.fill(NEG_INF);
        } else if full {
            for (x, m) in row.iter_mut().zip(&mut tile_max) {
                *x *= scale;
                *m = max(*m, *x);
            }
        } else {
            for (i, (x, m)) in row.iter_mut().zip(&mut tile_max).enumerate() {
                *x = if kj >= lo[i] && kj < hi[i] { *x * scale } else { NEG_INF };
                *m = max(*m, *x);
            }
        }
    }
    let (mut corr, mut shift) = ([0.0; QB], [0.0; QB]);
    for i in 0..nl {
        (corr[i], shift[i]) = st.fold(i, tile_max[i]);
    }
    for (row, &c) in sc.acc.chunks_exact_mut(hd.v.width.max(1)).zip(&corr) {
        if c != 1.0 {
            row.iter_mut().for_each(|a| *a *= c);
        }
    }
    let mut tile_sum = [0.0; QB];
    for row in s.chunks_exact_mut(QB) {
        for ((x, &m), t) in row[..nl].iter_mut().zip(&shift).zip(&mut tile_sum) {
            *x = exp_neg(*x - m);
            *t += *x;
        }
    }
    for (sum, t) in st.sum[..nl].iter_mut().zip(tile_sum) {
        *sum += t;
    }
    micro::weighted_values(s, QB, hd.v.skip(t0), 0..nq, |i| local(ranges[i], t0, nk), &mut sc.acc);
}

/// Queries `q0..` (key ranges `ranges`, spanning `[lo, hi)`) of the heads `hds`, which read
/// one K and V, one query at a time over each key tile: every head's logits as dot products
/// with the key rows, scored together, then the steps of [`lane_tile`] on each head's row,
/// summed in the same order, and the values weighted for all heads at once.
#[inline(always)]
fn block_dots(hds: &[Head], q0: usize, ranges: &[(usize, usize)], (lo, hi): (usize, usize), sc: &mut Scratch) {
    let (hd, g) = (&hds[0], hds.len());
    let (nq, dv) = (ranges.len(), hd.v.width);
    sc.acc.clear();
    sc.acc.resize(nq * g * dv, 0.0);
    sc.max.clear();
    sc.max.resize(nq * g, NEG_INF);
    sc.sum.clear();
    sc.sum.resize(nq * g, 0.0);
    sc.scores.resize(g * KT, 0.0);
    sc.weights.resize(KT * g, 0.0);
    let mut qs: [&[f32]; MAX_HEADS] = [&[]; MAX_HEADS];
    for t0 in (lo..hi).step_by(KT) {
        let nk = KT.min(hi - t0);
        let (keys, values) = (hd.k.skip(t0), hd.v.skip(t0));
        for (i, &r) in ranges.iter().enumerate() {
            let own = local(r, t0, nk);
            if own.is_empty() {
                continue;
            }
            for (q, h) in qs.iter_mut().zip(hds) {
                *q = h.q.row(q0 + i);
            }
            micro::dots(&qs[..g], keys, own.clone(), &mut sc.scores, KT);
            for (n, h) in hds.iter().enumerate() {
                let s = &mut sc.scores[n * KT..][..nk];
                if let Some(bias) = h.mask.bias_keys(h.b, h.h, q0 + i, t0 + own.start..t0 + own.end) {
                    for (x, &c) in s[own.clone()].iter_mut().zip(bias) {
                        *x = h.logits.apply(*x) + c;
                    }
                } else if h.special() {
                    for j in own.clone() {
                        s[j] = h.logits.apply(s[j]) + h.mask.bias(h.b, h.h, q0 + i, t0 + j);
                    }
                }
                let scale = h.scale();
                if h.mask.keeps_all() {
                    s[own.clone()].iter_mut().for_each(|x| *x *= scale);
                } else {
                    for j in own.clone() {
                        s[j] = if h.mask.kept(h.b, t0 + j) { s[j] * scale } else { NEG_INF };
                    }
                }
                let tile_max = max_of(&s[own.clone()]);
                let at = i * g + n;
                let (corr, shift) = fold(&mut sc.max[at], &mut sc.sum[at], tile_max);
                let acc = &mut sc.acc[at * dv..][..dv];
                if corr != 1.0 {
                    acc.iter_mut().for_each(|a| *a *= corr);
                }
                s[own.clone()].iter_mut().for_each(|x| *x = exp_neg(*x - shift));
                sc.sum[at] += s[own.clone()].iter().fold(0.0, |t, &x| t + x);
                for j in own.clone() {
                    sc.weights[j * g + n] = s[j];
                }
            }
            micro::weighted_values(&sc.weights, g, values, 0..g, |_| own.clone(), &mut sc.acc[i * g * dv..][..g * dv]);
        }
    }
    finish(hds, q0, &sc.sum, &mut sc.acc);
}

/// Normalises each output row of `acc` (`[nq][heads][dv]`) by its sum, or gives the mean of
/// V to a query that keeps no key.
#[inline(always)]
fn finish(hds: &[Head], q0: usize, sum: &[f32], acc: &mut [f32]) {
    let (hd, g) = (&hds[0], hds.len());
    let mut fallback: Option<Vec<f32>> = None;
    let dv = hd.v.width;
    for (n, out) in acc.chunks_exact_mut(dv.max(1)).enumerate() {
        if hd.mask.any_kept(hd.b, q0 + n / g) {
            let inv = 1.0 / sum[n];
            out.iter_mut().for_each(|a| *a *= inv);
        } else {
            let mean = fallback.get_or_insert_with(|| {
                let dense: Vec<f32> = (0..hd.seq).flat_map(|s| hd.v.row(s)).copied().collect();
                mean_rows(&dense, dv)
            });
            out.copy_from_slice(mean);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2(hds: &[Head], q0: usize, nq: usize, sc: &mut Scratch) {
    block_generic(hds, q0, nq, sc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn block_avx512(hds: &[Head], q0: usize, nq: usize, sc: &mut Scratch) {
    block_generic(hds, q0, nq, sc)
}

/// [`block_generic`] compiled for AVX-512F or AVX2 + FMA when the CPU has them (a lane tile's
/// 16 queries fill one zmm register or two ymm).
fn block(hds: &[Head], q0: usize, nq: usize, sc: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // Safety: the CPU has the features the function is compiled for.
        return unsafe { block_avx512(hds, q0, nq, sc) };
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // Safety: the CPU has the features the function is compiled for.
        return unsafe { block_avx2(hds, q0, nq, sc) };
    }
    block_generic(hds, q0, nq, sc)
}

/// One tensor's rows of head `(b, h)`, read at the rows `at` when given.
fn head_rows<'a>(l: &Heads, x: &'a [f32], (b, h): (usize, usize), at: Option<&'a [usize]>, what: &str) -> Result<Rows<'a>, String> {
    let (start, stride) = (l.row(b, h, 0), l.row(b, h, 1) - l.row(b, h, 0));
    let end = if l.seq == 0 { start } else { start + (l.seq - 1) * stride + l.width };
    let data = x.get(start..end).ok_or_else(|| format!("attention: {what} of {} elements has no rows [{start}, {end}) for head ({b}, {h})", x.len()))?;
    Ok(Rows { data, stride, width: l.width, at })
}

/// The f32 forward over `[B, H, S, D]`, `[B, S, H·D]` or `[S, H·D]` operands (see [`Heads`]),
/// K and V read at the rows `kv_rows` when given (each below their `seq`).
pub(super) fn forward(
    (lq, lk, lv, lo): (Heads, Heads, Heads, Heads),
    (xq, xk, xv): (&[f32], &[f32], &[f32]),
    kv_rows: Option<&[usize]>,
    logits: Logits<f32>,
    mask: &Masking<f32>,
    out: &mut Out,
) -> Result<(), String> {
    let (heads, group) = (lq.heads, lq.heads / lk.heads.max(1));
    let dv = lo.width;
    if dv == 0 {
        return Ok(());
    }
    let tasks = tasks(&lq, group, mask);
    let o = out.get::<f32>();
    let (len, base) = (o.len(), OutPtr(o.as_mut_ptr()));
    let s_k = kv_rows.map_or(lk.seq, <[usize]>::len);
    let rows = |b: usize, h: usize| -> Result<[Rows; 3], String> {
        Ok([
            head_rows(&lq, xq, (b, h), None, "query")?,
            head_rows(&lk, xk, (b, h / group), kv_rows, "key")?,
            head_rows(&lv, xv, (b, h / group), kv_rows, "value")?,
        ])
    };
    let run = |(n, t): (usize, &Task)| -> Result<(), String> {
        // The next block's rows lie a head's width apart in `[B, S, H·D]`, pages apart and
        // beyond the hardware prefetcher's reach: asked for into L2 now, they arrive while
        // this block runs (its query transposition had waited on them, one miss at a time,
        // for a seventh of the kernel's time).
        if let Some(next) = tasks.get(n + 1).filter(|t| t.nq >= FEW) {
            let [nq, nk, nv] = rows(next.b, next.h0)?;
            micro::prefetch::<{ micro::L2 }>(nq, next.q0..next.q0 + next.nq);
            micro::prefetch::<{ micro::L2 }>(nk, 0..KT.min(s_k));
            micro::prefetch::<{ micro::L2 }>(nv, 0..KT.min(s_k));
        }
        let head = |h: usize| -> Result<Head, String> {
            let [q, k, v] = rows(t.b, h)?;
            Ok(Head { q, k, v, seq: s_k, b: t.b, h, logits, mask })
        };
        let mut hds = [head(t.h0)?; MAX_HEADS];
        for (g, hd) in hds.iter_mut().enumerate().take(t.nh).skip(1) {
            *hd = head(t.h0 + g)?;
        }
        SCRATCH.with(|cell| {
            let mut own = Scratch::default();
            let mut held = cell.try_borrow_mut();
            let sc = held.as_deref_mut().unwrap_or(&mut own);
            block(&hds[..t.nh], t.q0, t.nq, sc);
            for (r, row) in sc.acc.chunks_exact(dv).enumerate() {
                let at = lo.row(t.b, t.h0 + r % t.nh, t.q0 + r / t.nh);
                assert!(at + dv <= len, "attention output row out of bounds");
                // Safety: in bounds (checked); tasks own disjoint (b, h, q0..q0 + nq) rows.
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), base.at(at), dv) };
            }
        });
        Ok(())
    };
    let work = lq.batch * heads * lq.seq * s_k * (lq.width + lv.width);
    if work < crate::kernels::PAR_MIN {
        tasks.iter().enumerate().try_for_each(run)
    } else {
        tasks.par_iter().enumerate().try_for_each(run)
    }
}

/// Heads `h0..h0 + nh` of batch item `b`, queries `q0..q0 + nq`: one task of the forward.
struct Task {
    b: usize,
    h0: usize,
    nh: usize,
    q0: usize,
    nq: usize,
}

/// The forward's tasks, per batch item and KV head: a block of `QB` queries a task per query
/// head where it lane tiles; on the dot-product path the block's query heads of the KV head
/// (up to [`MAX_HEADS`]) in one task, which reads each key row once for all of them, and a
/// block of queries `apart` a task per query (they share no keys, and a batched decode step's
/// few heads would leave threads idle).
fn tasks(lq: &Heads, group: usize, mask: &Masking<f32>) -> Vec<Task> {
    let group = group.max(1);
    // A block's path depends on its queries' key ranges alone, the same in every batch item
    // and head.
    let plans: Vec<Plan> = (0..lq.seq).step_by(QB).map(|q0| Plan::of(mask, q0, QB.min(lq.seq - q0))).collect();
    let mut tasks = Vec::new();
    for b in 0..lq.batch {
        for g0 in (0..lq.heads).step_by(group) {
            for (q0, plan) in (0..lq.seq).step_by(QB).zip(&plans) {
                let nq = QB.min(lq.seq - q0);
                let g1 = (g0 + group).min(lq.heads);
                if !plan.few {
                    tasks.extend((g0..g1).map(|h0| Task { b, h0, nh: 1, q0, nq }));
                    continue;
                }
                let queries = if plan.apart { 1 } else { nq };
                for h0 in (g0..g1).step_by(MAX_HEADS) {
                    let nh = MAX_HEADS.min(g1 - h0);
                    tasks.extend((q0..q0 + nq).step_by(queries).map(|q| Task { b, h0, nh, q0: q, nq: queries.min(q0 + nq - q) }));
                }
            }
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::In;
    use rlx_ir::ops::attention::MaskKind;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 500.0) - 1.0).collect()
    }

    #[test]
    fn the_vector_build_matches_the_plain_one_bit_for_bit() {
        // One head, d = 33, dv = 20, causal: a lane block of 64 queries and a few-query block
        // of 5, against 300 keys (three tiles).
        let (sq, sk, d, dv) = (69, 300, 33, 20);
        let (q, k, v) = (data(sq * d, 1), data(sk * d, 2), data(sk * dv, 3));
        let mask = Masking::<f32>::new(MaskKind::Causal, None, 1, 1, sq, sk);
        let hd = Head {
            q: Rows { data: &q, stride: d, width: d, at: None },
            k: Rows { data: &k, stride: d, width: d, at: None },
            v: Rows { data: &v, stride: dv, width: dv, at: None },
            seq: sk,
            b: 0,
            h: 0,
            logits: Logits { scale: 0.3, softcap: None },
            mask: &mask,
        };
        for (q0, nq) in [(0, 64), (64, 5)] {
            let mut plain = Scratch::default();
            block_generic(&[hd], q0, nq, &mut plain);
            let mut builds = vec![("best", Scratch::default())];
            block(&[hd], q0, nq, &mut builds[0].1);
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                let mut avx2 = Scratch::default();
                // Safety: the CPU has the features the function is compiled for.
                unsafe { block_avx2(&[hd], q0, nq, &mut avx2) };
                builds.push(("avx2", avx2));
            }
            for (name, vector) in &builds {
                assert_eq!(vector.acc.len(), nq * dv);
                for (x, y) in vector.acc.iter().zip(&plain.acc) {
                    assert_eq!(x.to_bits(), y.to_bits(), "{name}: {x} vs {y} in the block at {q0}");
                }
            }
        }
    }

    #[test]
    fn a_query_alone_gets_the_bits_it_gets_in_a_block() {
        // Decode (one query, the dot-product path) against prefill (a lane block): causal
        // through a bias, d = 64, 150 keys (two tiles).
        let (sq, sk, d) = (40, 150, 64);
        let (q, k, v) = (data(sq * d, 4), data(sk * d, 5), data(sk * d, 6));
        let bias: Vec<f32> = (0..sq * sk).map(|n| if n % sk <= sk - sq + n / sk { 0.0 } else { -1e9 }).collect();
        let extra = In { dtype: rlx_ir::DType::F32, dims: &[sq, sk], bytes: bytemuck::cast_slice(&bias) };
        let mask = Masking::<f32>::new(MaskKind::Bias, Some(extra), 1, 1, sq, sk);
        fn rows(x: &[f32], d: usize) -> Rows<'_> {
            Rows { data: x, stride: d, width: d, at: None }
        }
        let hd = Head { q: rows(&q, d), k: rows(&k, d), v: rows(&v, d), seq: sk, b: 0, h: 0, logits: Logits { scale: 0.125, softcap: None }, mask: &mask };
        let mut all = Scratch::default();
        block(&[hd], 0, sq, &mut all);
        for qi in 0..sq {
            let mut one = Scratch::default();
            block(&[hd], qi, 1, &mut one);
            for (x, y) in one.acc.iter().zip(&all.acc[qi * d..(qi + 1) * d]) {
                assert_eq!(x.to_bits(), y.to_bits(), "query {qi}: {x} alone, {y} in the block");
            }
        }
    }

    #[test]
    fn a_batched_decode_block_scores_each_query_on_its_own_keys() {
        // Eight queries, each seeing only its own run of keys from a multiple of 128 (the
        // sequences of a batched decode step over the union of their caches): the block takes
        // per-query dot products, a causal prefill block lane tiles, and each query's output is
        // the bits it gets alone and the f64 softmax over its own keys.
        let (d, lens) = (64, [5, 130, 1, 77, 128, 200, 40, 3]);
        let starts: Vec<usize> = lens.iter().scan(0usize, |end, &l| Some(std::mem::replace(end, (*end + l).next_multiple_of(128)))).collect();
        let (sq, sk) = (lens.len(), starts[7] + lens[7]);
        let (q, k, v) = (data(sq * d, 21), data(sk * d, 22), data(sk * d, 23));
        let bias: Vec<f32> = (0..sq * sk).map(|n| if (starts[n / sk]..starts[n / sk] + lens[n / sk]).contains(&(n % sk)) { 0.0 } else { -1e9 }).collect();
        let extra = In { dtype: rlx_ir::DType::F32, dims: &[sq, sk], bytes: bytemuck::cast_slice(&bias) };
        let mask = Masking::<f32>::new(MaskKind::Bias, Some(extra), 1, 1, sq, sk);
        let ranges: Vec<(usize, usize)> = (0..sq).map(|qi| mask.range(qi)).collect();
        assert!(apart(&ranges, sk), "disjoint ranges take the per-query path");
        let causal: Vec<(usize, usize)> = (0..64).map(|i| (0, 100 + i)).collect();
        assert!(!apart(&causal, 164), "a causal prefill block lane tiles");
        fn rows(x: &[f32], d: usize) -> Rows<'_> {
            Rows { data: x, stride: d, width: d, at: None }
        }
        let hd = Head { q: rows(&q, d), k: rows(&k, d), v: rows(&v, d), seq: sk, b: 0, h: 0, logits: Logits { scale: 0.125, softcap: None }, mask: &mask };
        let mut all = Scratch::default();
        block(&[hd], 0, sq, &mut all);
        for qi in 0..sq {
            let mut one = Scratch::default();
            block(&[hd], qi, 1, &mut one);
            let own = starts[qi]..starts[qi] + lens[qi];
            let logit = |j: usize| (0..d).map(|p| f64::from(q[qi * d + p]) * f64::from(k[j * d + p])).sum::<f64>() * 0.125;
            let m = own.clone().map(logit).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = own.clone().map(|j| (logit(j) - m).exp()).sum();
            for c in 0..d {
                let want: f64 = own.clone().map(|j| (logit(j) - m).exp() / z * f64::from(v[j * d + c])).sum();
                let (x, y) = (one.acc[c], all.acc[qi * d + c]);
                assert_eq!(x.to_bits(), y.to_bits(), "query {qi}: {x} alone, {y} in the block");
                assert!((f64::from(x) - want).abs() < 1e-5, "query {qi}: {x} vs {want}");
            }
        }
    }

    #[test]
    fn query_heads_sharing_a_kv_head_score_together_as_each_alone() {
        // Nine query heads over three KV heads (`[S, H·D]`), D 64: a batched decode step of
        // five sequences over a union of cache rows read at indices, and one decode query,
        // each through the planned tasks (heads of a KV head together, a query a task) against
        // every head alone; then a grouped task against the forward's output.
        let (d, heads, kv, lens) = (64, 9, 3, [3usize, 70, 1, 129, 12]);
        let starts: Vec<usize> = lens.iter().scan(0usize, |end, &l| Some(std::mem::replace(end, (*end + l).next_multiple_of(128)))).collect();
        let (sq, sk) = (lens.len(), starts[4] + lens[4]);
        let pool = sk + 40;
        let at: Vec<usize> = (0..sk).map(|j| (j * 7 + 3) % pool).collect();
        let (q, k, v) = (data(sq * heads * d, 31), data(pool * kv * d, 32), data(pool * kv * d, 33));
        let bias: Vec<f32> = (0..sq * sk).map(|n| if (starts[n / sk]..starts[n / sk] + lens[n / sk]).contains(&(n % sk)) { 0.0 } else { -1e9 }).collect();
        let extra = In { dtype: rlx_ir::DType::F32, dims: &[sq, sk], bytes: bytemuck::cast_slice(&bias) };
        let mask = Masking::<f32>::new(MaskKind::Bias, Some(extra), 1, heads, sq, sk);
        let (lq, lkv) = (Heads::of(&[sq, heads * d], heads), Heads::of(&[pool, kv * d], kv));
        let plan = tasks(&lq, heads / kv, &mask);
        assert!(plan.iter().all(|t| t.nh == 3 && t.nq == 1), "a query a task, three heads each");
        let head = |h: usize| Head {
            q: head_rows(&lq, &q, (0, h), None, "q").unwrap(),
            k: head_rows(&lkv, &k, (0, h / 3), Some(&at), "k").unwrap(),
            v: head_rows(&lkv, &v, (0, h / 3), Some(&at), "v").unwrap(),
            seq: sk,
            b: 0,
            h,
            logits: Logits { scale: 0.125, softcap: None },
            mask: &mask,
        };
        for t in &plan {
            let hds: Vec<Head> = (t.h0..t.h0 + t.nh).map(head).collect();
            let mut together = Scratch::default();
            block(&hds, t.q0, t.nq, &mut together);
            for (g, hd) in hds.iter().enumerate() {
                let mut alone = Scratch::default();
                block(&[*hd], t.q0, t.nq, &mut alone);
                for (x, y) in together.acc[g * d..][..d].iter().zip(&alone.acc) {
                    assert_eq!(x.to_bits(), y.to_bits(), "query {}, head {}: {x} together, {y} alone", t.q0, hd.h);
                }
            }
        }
        let mut out = vec![0f32; sq * heads * d];
        let mut o = Out { dtype: rlx_ir::DType::F32, dims: &[sq, heads * d], bytes: bytemuck::cast_slice_mut(&mut out) };
        forward((lq, lkv, lkv, lq), (&q, &k, &v), Some(&at), Logits { scale: 0.125, softcap: None }, &mask, &mut o).unwrap();
        for qi in 0..sq {
            let own = starts[qi]..starts[qi] + lens[qi];
            for h in 0..heads {
                let (qr, kv_col) = (&q[(qi * heads + h) * d..][..d], h / 3 * d);
                let logit = |j: usize| (0..d).map(|p| f64::from(qr[p]) * f64::from(k[at[j] * kv * d + kv_col + p])).sum::<f64>() * 0.125;
                let m = own.clone().map(logit).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = own.clone().map(|j| (logit(j) - m).exp()).sum();
                for c in 0..d {
                    let want: f64 = own.clone().map(|j| (logit(j) - m).exp() / z * f64::from(v[at[j] * kv * d + kv_col + c])).sum();
                    let got = out[(qi * heads + h) * d + c];
                    assert!((f64::from(got) - want).abs() < 1e-5, "query {qi}, head {h}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn decode_on_odd_sizes_and_strided_rows_matches_the_block_and_f64() {
        // A few queries alone (the AVX2 dot products, key groups of 32 and 8, a scalar tail)
        // against the same queries in a lane block, and against f64: rows `d + 3` apart as
        // in `[S, H·D]`, head widths that are not multiples of 8, 1 to 300 keys.
        for (d, sk) in [(1, 7), (7, 63), (33, 129), (64, 300), (9, 1)] {
            let (sq, stride) = (9, d + 3);
            let (q, k, v) = (data(sq * stride, 7), data(sk * stride, 8), data(sk * stride, 9));
            let bias: Vec<f32> = (0..sq * sk).map(|n| if n % sk <= sk.saturating_sub(sq) + n / sk { 0.01 * (n % 5) as f32 } else { -1e9 }).collect();
            let extra = In { dtype: rlx_ir::DType::F32, dims: &[sq, sk], bytes: bytemuck::cast_slice(&bias) };
            let mask = Masking::<f32>::new(MaskKind::Bias, Some(extra), 1, 1, sq, sk);
            fn rows(x: &[f32], stride: usize) -> Rows<'_> {
                Rows { data: &x[..x.len() - 3], stride, width: stride - 3, at: None }
            }
            let hd = Head { q: rows(&q, stride), k: rows(&k, stride), v: rows(&v, stride), seq: sk, b: 0, h: 0, logits: Logits { scale: 0.3, softcap: None }, mask: &mask };
            let mut all = Scratch::default();
            block(&[hd], 0, sq, &mut all);
            for qi in 0..sq {
                let mut one = Scratch::default();
                block(&[hd], qi, 1, &mut one);
                let (lo, hi) = mask.range(qi);
                let logit = |j: usize| (0..d).map(|p| f64::from(q[qi * stride + p]) * f64::from(k[j * stride + p])).sum::<f64>() * 0.3 + f64::from(bias[qi * sk + j]);
                let m = (lo..hi).map(logit).fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = (lo..hi).map(|j| (logit(j) - m).exp()).sum();
                for c in 0..d {
                    let want: f64 = (lo..hi).map(|j| (logit(j) - m).exp() / z * f64::from(v[j * stride + c])).sum();
                    let (x, y) = (one.acc[c], all.acc[qi * d + c]);
                    assert_eq!(x.to_bits(), y.to_bits(), "d {d}, {sk} keys, query {qi}: {x} alone, {y} in the block");
                    assert!((f64::from(x) - want).abs() < 1e-5, "d {d}, {sk} keys, query {qi}: {x} vs {want}");
                }
            }
        }
    }
}
