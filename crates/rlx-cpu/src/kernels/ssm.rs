//! State-space scans (OPS.md §13): Mamba-1 `SelectiveScan`, Mamba-2 `Mamba2` and the gated
//! delta rule `GatedDeltaNet`. Batch-first, row-major, one float dtype for every operand
//! (f16/bf16 compute in f32).
//!
//! Each scan is independent per batch element and per channel block / head, so the work is
//! split into those tasks (rayon when it pays); a task keeps its state in a small local buffer,
//! scans the sequence, and its outputs are scattered into place afterwards.
//!
//! In-place carry (`GatedDeltaNet` with `carry_state`): the op has one output, so the final
//! state can only leave through the `state` input buffer (`mutated_inputs() == [5]`). The
//! dispatch arm cannot write an input, so it asks for no final state; an executor that
//! supports mutated inputs calls [`gated_delta_net`] with `final_state` = a scratch `[B,Hv,N,N]`
//! view (kernel operands never alias) and then copies it over input 5's buffer.

use super::real::Real;
use super::{on_floats, FloatKernel, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::ssm::{GatedDeltaNet, Mamba2, SelectiveScan};

/// Channels of one `SelectiveScan` task.
const CHANNEL_BLOCK: usize = 32;

/// Runs `f(task)` for `0..n`, on rayon threads when `work` (multiply-adds) pays for them.
fn tasks<R: Send>(n: usize, work: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    if n > 1 && work >= PAR_MIN {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// `SelectiveScan`: `x, delta [B,S,Hd]`, `a [Hd,N]`, `b, c [B,S,N]` → `y [B,S,Hd]` with, per
/// channel `h` and zero initial state,
/// `s[h,n] ← exp(Δ_t[h]·A[h,n])·s[h,n] + Δ_t[h]·B_t[n]·x_t[h]`, `y_t[h] = Σ_n C_t[n]·s[h,n]`.
pub fn selective_scan(_: &SelectiveScan, ins: &[In], out: &mut Out) -> Result<(), String> {
    on_floats(&Selective, ins, std::slice::from_mut(out))
}

struct Selective;

impl FloatKernel for Selective {
    fn run<T: Real>(&self, ins: &[&[T]], dims: &[&[usize]], outs: &mut [&mut [T]]) -> Result<(), String> {
        let (x, delta, a, bm, cm) = (ins[0], ins[1], ins[2], ins[3], ins[4]);
        let (b, s, hd, n) = (dims[0][0], dims[0][1], dims[0][2], dims[2][1]);
        let blocks = hd.div_ceil(CHANNEL_BLOCK);
        let results = tasks(b * blocks, b * s * hd * n, |task| {
            let (bi, h0) = (task / blocks, (task % blocks) * CHANNEL_BLOCK);
            let width = CHANNEL_BLOCK.min(hd - h0);
            let mut st = vec![T::ZERO; width * n];
            let mut y = vec![T::ZERO; s * width];
            for t in 0..s {
                let row = (bi * s + t) * hd + h0;
                let (bt, ct) = (&bm[(bi * s + t) * n..][..n], &cm[(bi * s + t) * n..][..n]);
                for j in 0..width {
                    let (dt, xv) = (delta[row + j], x[row + j]);
                    let (sj, aj) = (&mut st[j * n..(j + 1) * n], &a[(h0 + j) * n..][..n]);
                    let mut acc = T::ZERO;
                    for k in 0..n {
                        sj[k] = (dt * aj[k]).exp() * sj[k] + dt * bt[k] * xv;
                        acc = acc + ct[k] * sj[k];
                    }
                    y[t * width + j] = acc;
                }
            }
            y
        });
        for (task, y) in results.iter().enumerate() {
            let (bi, h0) = (task / blocks, (task % blocks) * CHANNEL_BLOCK);
            let width = CHANNEL_BLOCK.min(hd - h0);
            for t in 0..s {
                outs[0][(bi * s + t) * hd + h0..][..width].copy_from_slice(&y[t * width..(t + 1) * width]);
            }
        }
        Ok(())
    }
}

/// `Mamba2`: `x [B,S,Hh,P]`, `dt [B,S,Hh]`, `a [Hh]`, `b, c [B,S,Hh,N]` → `y [B,S,Hh,P]` with,
/// per head and zero initial state `S [P,N]`,
/// `S ← exp(dt_t·a)·S + (dt_t·x_t) ⊗ b_t`, `y_t[p] = Σ_n S[p,n]·c_t[n]`.
pub fn mamba2(_: &Mamba2, ins: &[In], out: &mut Out) -> Result<(), String> {
    on_floats(&Ssd, ins, std::slice::from_mut(out))
}

struct Ssd;

impl FloatKernel for Ssd {
    fn run<T: Real>(&self, ins: &[&[T]], dims: &[&[usize]], outs: &mut [&mut [T]]) -> Result<(), String> {
        let (x, dt, a, bm, cm) = (ins[0], ins[1], ins[2], ins[3], ins[4]);
        let (b, s, hh, p, n) = (dims[0][0], dims[0][1], dims[0][2], dims[0][3], dims[3][3]);
        let results = tasks(b * hh, b * s * hh * p * n, |task| {
            let (bi, hi) = (task / hh, task % hh);
            let mut st = vec![T::ZERO; p * n];
            let mut y = vec![T::ZERO; s * p];
            for t in 0..s {
                let at = (bi * s + t) * hh + hi;
                let step = dt[at];
                let decay = (step * a[hi]).exp();
                let (xt, bt, ct) = (&x[at * p..][..p], &bm[at * n..][..n], &cm[at * n..][..n]);
                for (pi, row) in st.chunks_mut(n).enumerate() {
                    let u = step * xt[pi];
                    let mut acc = T::ZERO;
                    for k in 0..n {
                        row[k] = decay * row[k] + u * bt[k];
                        acc = acc + row[k] * ct[k];
                    }
                    y[t * p + pi] = acc;
                }
            }
            y
        });
        for (task, y) in results.iter().enumerate() {
            let (bi, hi) = (task / hh, task % hh);
            for t in 0..s {
                outs[0][((bi * s + t) * hh + hi) * p..][..p].copy_from_slice(&y[t * p..(t + 1) * p]);
            }
        }
        Ok(())
    }
}

/// `GatedDeltaNet`: `q, k, v [B,S,Hv,N]`, `g [B,S,Hv]` (`[B,S,Hv,N]` with `gate_per_channel`),
/// `beta [B,S,Hv]`, with `carry_state` an initial `state [B,Hv,N,N]` (`S[i,j]`, i = key dim,
/// j = value dim; zeros otherwise) → `o [B,S,Hv,N]`. Per token and head:
/// `S ← S·exp(g_t)` (row `i` by `exp(g_t[i])` per channel); `u_j = Σ_i S[i,j]·k_i`;
/// `d_j = (v_j − u_j)·β_t`; `S[i,j] += k_i·d_j`; `o_j = Σ_i S[i,j]·q_i / √N`.
///
/// `final_state`, when given, receives the final `[B,Hv,N,N]` states (see the module doc for
/// the in-place carry); the dispatch arm passes `None`.
pub fn gated_delta_net(
    a: &GatedDeltaNet,
    ins: &[In],
    out: &mut Out,
    final_state: Option<&mut Out>,
) -> Result<(), String> {
    let k = DeltaRule { per_channel: a.gate_per_channel, keep_state: final_state.is_some() };
    match final_state {
        None => on_floats(&k, ins, std::slice::from_mut(out)),
        Some(st) => {
            let mut outs = [
                Out { dtype: out.dtype, dims: out.dims, bytes: &mut *out.bytes },
                Out { dtype: st.dtype, dims: st.dims, bytes: &mut *st.bytes },
            ];
            on_floats(&k, ins, &mut outs)
        }
    }
}

struct DeltaRule {
    per_channel: bool,
    keep_state: bool,
}

impl FloatKernel for DeltaRule {
    fn run<T: Real>(&self, ins: &[&[T]], dims: &[&[usize]], outs: &mut [&mut [T]]) -> Result<(), String> {
        let (q, k, v, g, beta) = (ins[0], ins[1], ins[2], ins[3], ins[4]);
        let init = ins.get(5);
        let (b, s, hv, n) = (dims[0][0], dims[0][1], dims[0][2], dims[0][3]);
        let scale = T::ONE / T::of(n as f64).sqrt();
        let results = tasks(b * hv, 3 * b * s * hv * n * n, |task| {
            let mut st = match init {
                Some(s0) => s0[task * n * n..(task + 1) * n * n].to_vec(),
                None => vec![T::ZERO; n * n],
            };
            let (bi, hi) = (task / hv, task % hv);
            let mut o = vec![T::ZERO; s * n];
            let mut d = vec![T::ZERO; n];
            for t in 0..s {
                let at = (bi * s + t) * hv + hi;
                let (qt, kt, vt) = (&q[at * n..][..n], &k[at * n..][..n], &v[at * n..][..n]);
                let bt = beta[at];
                // 1. decay
                if self.per_channel {
                    for (row, &gi) in st.chunks_mut(n).zip(&g[at * n..][..n]) {
                        let e = gi.exp();
                        row.iter_mut().for_each(|x| *x = *x * e);
                    }
                } else {
                    let e = g[at].exp();
                    st.iter_mut().for_each(|x| *x = *x * e);
                }
                // 2. u = Sᵀk, d = (v − u)·β
                d.copy_from_slice(vt);
                for (row, &ki) in st.chunks(n).zip(kt) {
                    for (dj, &sij) in d.iter_mut().zip(row) {
                        *dj = *dj - sij * ki;
                    }
                }
                d.iter_mut().for_each(|x| *x = *x * bt);
                // 3. S += k ⊗ d; 4. o = Sᵀq / √N
                let ot = &mut o[t * n..(t + 1) * n];
                for ((row, &ki), &qi) in st.chunks_mut(n).zip(kt).zip(qt) {
                    for ((sij, &dj), oj) in row.iter_mut().zip(&d).zip(ot.iter_mut()) {
                        *sij = *sij + ki * dj;
                        *oj = *oj + *sij * qi;
                    }
                }
                ot.iter_mut().for_each(|x| *x = *x * scale);
            }
            (o, if self.keep_state { st } else { Vec::new() })
        });
        for (task, (o, st)) in results.iter().enumerate() {
            let (bi, hi) = (task / hv, task % hv);
            for t in 0..s {
                outs[0][((bi * s + t) * hv + hi) * n..][..n].copy_from_slice(&o[t * n..(t + 1) * n]);
            }
            if let Some(fin) = outs.get_mut(1) {
                fin[task * n * n..(task + 1) * n * n].copy_from_slice(st);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::run_f32;
    use rlx_ir::DType;

    fn bytes(v: &[f64]) -> Vec<u8> {
        bytemuck::cast_slice::<f64, u8>(v).to_vec()
    }

    /// With one head, `N = 1`: `S ← S·e^g`, `S += k·(v − S·k)·β`, `o = S·q`; the final state
    /// comes out when asked for, starting from the carried one.
    #[test]
    fn delta_rule_scalar_state_and_carry() {
        let (q, k, v) = ([0.5, -1.5, 2.0], [1.0, 0.5, -0.25], [2.0, -1.0, 0.5]);
        let (g, beta) = ([-0.1, -0.2, -0.3], [0.9, 0.5, 0.7]);
        let mut st = 0.4f64;
        let mut want = Vec::new();
        for t in 0..3 {
            st *= f64::exp(g[t]);
            st += k[t] * (v[t] - st * k[t]) * beta[t];
            want.push(st * q[t]);
        }
        let (d4, d3, d0): (&[usize], &[usize], &[usize]) = (&[1, 3, 1, 1], &[1, 3, 1], &[1, 1, 1, 1]);
        let data = [bytes(&q), bytes(&k), bytes(&v), bytes(&g), bytes(&beta), bytes(&[0.4])];
        let ds = [d4, d4, d4, d3, d3, d0];
        let ins: Vec<In> = ds.iter().zip(&data).map(|(d, b)| In { dtype: DType::F64, dims: d, bytes: b }).collect();
        let (mut o, mut fin) = (vec![0u8; 24], vec![0u8; 8]);
        let mut out = Out { dtype: DType::F64, dims: d4, bytes: &mut o };
        let mut state = Out { dtype: DType::F64, dims: d0, bytes: &mut fin };
        let a = GatedDeltaNet { state_size: 1, carry_state: true, gate_per_channel: false };
        gated_delta_net(&a, &ins, &mut out, Some(&mut state)).unwrap();
        let got: &[f64] = bytemuck::cast_slice(&o);
        for (x, y) in got.iter().zip(&want) {
            assert!((x - y).abs() < 1e-15, "{got:?} vs {want:?}");
        }
        assert!((bytemuck::cast_slice::<u8, f64>(&fin)[0] - st).abs() < 1e-15);
    }

    fn rand(n: usize, seed: u32, lo: f32, hi: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                lo + (hi - lo) * (s % 4096) as f32 / 4096.0
            })
            .collect()
    }

    /// Rows `bi` of a `[B, rest..]` tensor.
    fn row(x: &[f32], b: usize, bi: usize) -> &[f32] {
        let n = x.len() / b;
        &x[bi * n..(bi + 1) * n]
    }

    /// Big enough to run threaded, and every batch element matches its single-sequence run.
    #[test]
    fn threaded_scans_match_one_sequence_at_a_time() {
        let (b, s) = (4, 16);
        // Selective scan: 70 channels = three channel blocks.
        let (hd, n) = (70, 16);
        let (x, delta, a) =
            (rand(b * s * hd, 1, -1.0, 1.0), rand(b * s * hd, 2, 0.01, 1.0), rand(hd * n, 3, -2.0, -0.1));
        let (bm, cm) = (rand(b * s * n, 4, -1.0, 1.0), rand(b * s * n, 5, -1.0, 1.0));
        let sel = |bb: usize, x: &[f32], d: &[f32], bm: &[f32], cm: &[f32]| {
            let dims: [&[usize]; 5] = [&[bb, s, hd], &[bb, s, hd], &[hd, n], &[bb, s, n], &[bb, s, n]];
            let k = SelectiveScan { state_size: n };
            run_f32(|ins, outs| selective_scan(&k, ins, &mut outs[0]), &dims, &[x, d, &a, bm, cm], &[&[bb, s, hd]])
                .remove(0)
        };
        let all = sel(b, &x, &delta, &bm, &cm);
        for bi in 0..b {
            let one = sel(1, row(&x, b, bi), row(&delta, b, bi), row(&bm, b, bi), row(&cm, b, bi));
            assert_eq!(one, row(&all, b, bi));
        }
        // Mamba-2 and the delta rule: 8 heads.
        let (hh, p) = (8, 16);
        let (x, dt, a) = (rand(b * s * hh * p, 6, -1.0, 1.0), rand(b * s * hh, 7, 0.01, 1.0), rand(hh, 8, -2.0, -0.1));
        let (bm, cm) = (rand(b * s * hh * n, 9, -1.0, 1.0), rand(b * s * hh * n, 10, -1.0, 1.0));
        let ssd = |bb: usize, x: &[f32], dt: &[f32], bm: &[f32], cm: &[f32]| {
            let dims: [&[usize]; 5] = [&[bb, s, hh, p], &[bb, s, hh], &[hh], &[bb, s, hh, n], &[bb, s, hh, n]];
            let k = Mamba2 { head_dim: p, state_size: n };
            run_f32(|ins, outs| mamba2(&k, ins, &mut outs[0]), &dims, &[x, dt, &a, bm, cm], &[&[bb, s, hh, p]])
                .remove(0)
        };
        let all = ssd(b, &x, &dt, &bm, &cm);
        for bi in 0..b {
            let one = ssd(1, row(&x, b, bi), row(&dt, b, bi), row(&bm, b, bi), row(&cm, b, bi));
            assert_eq!(one, row(&all, b, bi));
        }
        let (q, k, v) = (
            rand(b * s * hh * n, 11, -0.5, 0.5),
            rand(b * s * hh * n, 12, -0.5, 0.5),
            rand(b * s * hh * n, 13, -1.0, 1.0),
        );
        let (g, beta, st) = (
            rand(b * s * hh * n, 14, -1.0, -0.01),
            rand(b * s * hh, 15, 0.05, 0.95),
            rand(b * hh * n * n, 16, -1.0, 1.0),
        );
        let rule = |bb: usize, ops: [&[f32]; 6]| {
            let (e, gt): (&[usize], &[usize]) = (&[bb, s, hh, n], &[bb, s, hh]);
            let dims: [&[usize]; 6] = [e, e, e, e, gt, &[bb, hh, n, n]];
            let attrs = GatedDeltaNet { state_size: n, carry_state: true, gate_per_channel: true };
            run_f32(
                |ins, outs| {
                    let (o, fin) = outs.split_at_mut(1);
                    gated_delta_net(&attrs, ins, &mut o[0], Some(&mut fin[0]))
                },
                &dims,
                &ops,
                &[e, &[bb, hh, n, n]],
            )
        };
        let all = rule(b, [&q, &k, &v, &g, &beta, &st]);
        for bi in 0..b {
            let r = |x| row(x, b, bi);
            let one = rule(1, [r(&q), r(&k), r(&v), r(&g), r(&beta), r(&st)]);
            assert_eq!(one[0], row(&all[0], b, bi));
            assert_eq!(one[1], row(&all[1], b, bi));
        }
    }
}
