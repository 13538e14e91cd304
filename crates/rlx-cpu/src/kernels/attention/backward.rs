//! `AttentionBackward` and `AttentionBackwardAll` (OPS.md §22): default scale `1/√head_dim`,
//! no softcap, `v_head_dim = head_dim`; inputs `(q, k, v, ȳ)` plus the mask/bias, in the
//! layouts and with the masking of the forward kernel.
//!
//! Per block of at most [`Q_CHUNK`] queries the logits `S = QKᵀ` and `dP = ȳVᵀ` are
//! recomputed as products (`Q_CHUNK × S_k` scratch, never `S_q × S_k`): `P = softmax(αS +
//! bias)` over each query's kept keys, `dS = α·P∘(dP − Σ P∘dP)`, then `dQ = dS·K`, `dK +=
//! dSᵀ·Q` and `dV += Pᵀ·ȳ` as three more, all on the GEMM kernels (operands read through their
//! strides, nothing transposed in memory). `dS` is zero at masked logits (the −1e9 is a
//! constant), so a fully masked row, whose weights are uniform, feeds only `dV`.

use super::{Heads, Masking};
use crate::kernels::matmul::{gemm_slice, Mat};
use crate::kernels::norm::through_f32;
use crate::kernels::real::Real;
use crate::kernels::{by_float, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::attention::{AttentionBackward, AttentionBackwardAll, AttentionBwdWrt, MaskKind};

/// Queries per chunk when one head's queries are split across threads.
const Q_CHUNK: usize = 128;

/// The gradients one chunk of queries of one head contributes: `dQ` of its rows, and partial
/// `dK`, `dV` over all keys.
struct Partial<T> {
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
}

/// `q0..q1` of one head `(b, h)`; `q`, `dy` are `[S_q, d]`, `k`, `v` `[S_k, d]`, contiguous.
#[allow(clippy::too_many_arguments)]
fn chunk<T: Real>(q: &[T], k: &[T], v: &[T], dy: &[T], d: usize, (b, h): (usize, usize), (q0, q1): (usize, usize), alpha: T, mask: &Masking<T>) -> Partial<T> {
    let s_k = k.len() / d;
    let mut g = Partial { dq: vec![T::ZERO; (q1 - q0) * d], dk: vec![T::ZERO; s_k * d], dv: vec![T::ZERO; s_k * d] };
    if s_k == 0 || d == 0 {
        return g;
    }
    // Keys as the right operand of `S = QKᵀ` and `dP = ȳVᵀ`: `[d, S_k]` read through strides.
    let (kt, vt) = (Mat { data: k, rows: d, cols: s_k, strides: [1, d] }, Mat { data: v, rows: d, cols: s_k, strides: [1, d] });
    let (mut p, mut ds) = (Vec::new(), Vec::new());
    for r0 in (q0..q1).step_by(Q_CHUNK) {
        let rows = (q1 - r0).min(Q_CHUNK);
        let (qb, dyb) = (&q[r0 * d..(r0 + rows) * d], &dy[r0 * d..(r0 + rows) * d]);
        p.resize(rows * s_k, T::ZERO);
        ds.resize(rows * s_k, T::ZERO);
        gemm_slice(Mat::row_major(qb, rows, d), kt, &mut p, false, false);
        gemm_slice(Mat::row_major(dyb, rows, d), vt, &mut ds, false, false);
        for (r, (pr, dr)) in p.chunks_mut(s_k).zip(ds.chunks_mut(s_k)).enumerate() {
            let qi = r0 + r;
            if !mask.any_kept(b, qi) {
                pr.fill(T::ONE / T::of(s_k as f64));
                dr.fill(T::ZERO);
                continue;
            }
            let (lo, hi) = mask.range(qi);
            let kept = |j: usize| j >= lo && j < hi && mask.kept(b, j);
            let mut m = T::of(f64::NEG_INFINITY);
            for (j, x) in pr.iter_mut().enumerate().filter(|&(j, _)| kept(j)) {
                *x = *x * alpha + mask.bias(b, h, qi, j);
                m = m.max_nan(*x);
            }
            let mut z = T::ZERO;
            for (j, x) in pr.iter_mut().enumerate() {
                *x = if kept(j) { (*x - m).exp() } else { T::ZERO };
                z = z + *x;
            }
            let mut row_dot = T::ZERO;
            for (x, &dp) in pr.iter_mut().zip(dr.iter()) {
                *x = *x / z;
                row_dot = row_dot + *x * dp;
            }
            for (dp, &x) in dr.iter_mut().zip(pr.iter()) {
                *dp = x * (*dp - row_dot) * alpha;
            }
        }
        let dq = &mut g.dq[(r0 - q0) * d..(r0 - q0 + rows) * d];
        gemm_slice(Mat::row_major(&ds, rows, s_k), Mat::row_major(k, s_k, d), dq, false, false);
        gemm_slice(Mat { data: &ds, rows: s_k, cols: rows, strides: [1, s_k] }, Mat::row_major(qb, rows, d), &mut g.dk, true, false);
        gemm_slice(Mat { data: &p, rows: s_k, cols: rows, strides: [1, s_k] }, Mat::row_major(dyb, rows, d), &mut g.dv, true, false);
    }
    g
}

/// Computes the gradients of every head and writes those listed in `which` (0 = dQ, 1 = dK,
/// 2 = dV) into `outs`, in order.
fn grads<T: Real>(num_heads: usize, head_dim: usize, kind: MaskKind, ins: &[In], outs: &mut [Out], which: &[usize]) {
    let lay = [0, 1, 2].map(|i| Heads::of(ins[i].dims, num_heads));
    let ldy = Heads::of(ins[3].dims, num_heads);
    let (bsz, s_q, s_k, d) = (lay[0].batch, lay[0].seq, lay[1].seq, head_dim);
    let mask = Masking::<T>::new(kind, ins.get(4).copied(), bsz, num_heads, s_q, s_k);
    let alpha = T::of(1.0 / (head_dim as f64).sqrt());
    let (xq, xk, xv, xdy) = (ins[0].get::<T>(), ins[1].get::<T>(), ins[2].get::<T>(), ins[3].get::<T>());
    let heads = bsz * num_heads;
    // Split a head's queries only when there are too few heads to fill the threads; the
    // split depends on the shapes alone, so results do not depend on the thread count.
    let parts = (16 / heads.max(1)).clamp(1, 8).min(s_q.div_ceil(Q_CHUNK)).max(1);
    let per = s_q.div_ceil(parts).max(1);
    let par = heads * s_q * s_k * d >= PAR_MIN;
    let per_head = |bh: usize| -> [Vec<T>; 3] {
        let (b, h) = (bh / num_heads, bh % num_heads);
        let (q, k, v, dy) = (lay[0].gather(xq, b, h), lay[1].gather(xk, b, h), lay[2].gather(xv, b, h), ldy.gather(xdy, b, h));
        let starts: Vec<usize> = (0..s_q).step_by(per).collect();
        let run = |&q0: &usize| chunk(&q, &k, &v, &dy, d, (b, h), (q0, (q0 + per).min(s_q)), alpha, &mask);
        let partials: Vec<Partial<T>> = if par { starts.par_iter().map(run).collect() } else { starts.iter().map(run).collect() };
        let mut it = partials.into_iter();
        let mut total = it.next().unwrap_or(Partial { dq: Vec::new(), dk: vec![T::ZERO; s_k * d], dv: vec![T::ZERO; s_k * d] });
        for p in it {
            total.dq.extend(p.dq);
            total.dk.iter_mut().zip(p.dk).for_each(|(a, x)| *a = *a + x);
            total.dv.iter_mut().zip(p.dv).for_each(|(a, x)| *a = *a + x);
        }
        [total.dq, total.dk, total.dv]
    };
    let results: Vec<[Vec<T>; 3]> = if par { (0..heads).into_par_iter().map(per_head).collect() } else { (0..heads).map(per_head).collect() };
    for (out, &w) in outs.iter_mut().zip(which) {
        let o = out.get::<T>();
        for (bh, r) in results.iter().enumerate() {
            lay[w].scatter(o, bh / num_heads, bh % num_heads, 0, &r[w]);
        }
    }
}

/// `AttentionBackward{wrt}`: one of `dQ`, `dK`, `dV` (shape of that input).
pub fn attention_backward(a: &AttentionBackward, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let w = match a.wrt {
        AttentionBwdWrt::Query => 0,
        AttentionBwdWrt::Key => 1,
        AttentionBwdWrt::Value => 2,
    };
    through_f32(ins, outs, |ins, outs| by_float!(ins[0].dtype, T => grads::<T>(a.num_heads, a.head_dim, a.mask_kind, ins, outs, &[w])))
}

/// `AttentionBackwardAll`: outputs `dQ`, `dK`, `dV`, scores and softmax recomputed once.
pub fn attention_backward_all(a: &AttentionBackwardAll, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    through_f32(ins, outs, |ins, outs| by_float!(ins[0].dtype, T => grads::<T>(a.num_heads, a.head_dim, a.mask_kind, ins, outs, &[0, 1, 2])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    fn data(n: usize, seed: u64) -> Vec<f64> {
        (0..n).map(|i| (((i as u64 * 2654435761 + seed * 977) % 1999) as f64 / 1000.0) - 1.0).collect()
    }

    /// dQ, dK, dV of one causal head with S_q = S_k from the materialized P (f64).
    fn naive(q: &[f64], k: &[f64], v: &[f64], dy: &[f64], d: usize) -> [Vec<f64>; 3] {
        let s = q.len() / d;
        let a = 1.0 / (d as f64).sqrt();
        let row = |x: &[f64], i: usize| x[i * d..(i + 1) * d].to_vec();
        let dotf = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
        let (mut dq, mut dk, mut dv) = (vec![0.0; s * d], vec![0.0; s * d], vec![0.0; s * d]);
        for i in 0..s {
            let sc: Vec<f64> = (0..=i).map(|j| dotf(&row(q, i), &row(k, j)) * a).collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
            let p: Vec<f64> = sc.iter().map(|x| (x - m).exp() / z).collect();
            let dp: Vec<f64> = (0..=i).map(|j| dotf(&row(dy, i), &row(v, j))).collect();
            let rd: f64 = p.iter().zip(&dp).map(|(p, g)| p * g).sum();
            for j in 0..=i {
                let ds = p[j] * (dp[j] - rd) * a;
                for e in 0..d {
                    dq[i * d + e] += ds * k[j * d + e];
                    dk[j * d + e] += ds * q[i * d + e];
                    dv[j * d + e] += p[j] * dy[i * d + e];
                }
            }
        }
        [dq, dk, dv]
    }

    /// dQ, dK, dV of one causal head of `[s, d]` operands in dtype `dtype` (element type `T`).
    fn causal_grads<T: bytemuck::Pod + Default>(dtype: DType, operands: [&[T]; 4], s: usize, d: usize) -> [Vec<T>; 3] {
        let dims = [1usize, 1, s, d];
        let ins: Vec<In> = operands.iter().map(|x| In { dtype, dims: &dims, bytes: bytemuck::cast_slice(x) }).collect();
        let mut bufs = [vec![T::default(); s * d], vec![T::default(); s * d], vec![T::default(); s * d]];
        let [b0, b1, b2] = &mut bufs;
        let mut outs = [b0, b1, b2].map(|b| Out { dtype, dims: &dims, bytes: bytemuck::cast_slice_mut(b) });
        let attrs = AttentionBackwardAll { num_heads: 1, head_dim: d, mask_kind: MaskKind::Causal };
        attention_backward_all(&attrs, &ins, &mut outs).unwrap();
        bufs
    }

    #[test]
    fn split_heads_sum_their_partial_key_gradients() {
        // One head of 300 queries: split across threads into query chunks whose dK/dV add up.
        let (s, d) = (300, 8);
        let (q, k, v, dy) = (data(s * d, 1), data(s * d, 2), data(s * d, 3), data(s * d, 4));
        let got = causal_grads(DType::F64, [&q, &k, &v, &dy], s, d);
        for (got, want) in got.iter().zip(naive(&q, &k, &v, &dy, d)) {
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-10, "{g} vs {w}");
            }
        }
    }

    /// The f32 products (sgemm over strided operands, blocks of `Q_CHUNK` queries) against the
    /// f64 reference, normwise per gradient.
    #[test]
    fn f32_gradients_track_the_float64_reference() {
        let (s, d) = (300, 32);
        let (q, k, v, dy) = (data(s * d, 5), data(s * d, 6), data(s * d, 7), data(s * d, 8));
        let narrow: Vec<Vec<f32>> = [&q, &k, &v, &dy].iter().map(|x| x.iter().map(|&e| e as f32).collect()).collect();
        let got = causal_grads(DType::F32, [&narrow[0], &narrow[1], &narrow[2], &narrow[3]], s, d);
        for (got, want) in got.iter().zip(naive(&q, &k, &v, &dy, d)) {
            let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
            let worst = got.iter().zip(&want).fold(0f64, |m, (&g, w)| m.max((g as f64 - w).abs()));
            assert!(worst <= 1e-5 * scale, "largest difference {worst} against a largest gradient of {scale}");
        }
    }
}
