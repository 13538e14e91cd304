//! Stacked recurrent layers (OPS.md §13): `Lstm`, `Gru`, `Rnn`, batch-first, PyTorch gate
//! orders, multi-layer and bidirectional.
//!
//! Per layer and direction, the input projection of the whole sequence is one GEMM
//! (`[B·S, in] × [in, G·H]` plus the input bias); the recurrence then runs per batch element
//! (rayon over the batch when the work pays for threads), one matrix-vector product with
//! `w_hh` per step.
//!
//! Operands (all one float dtype; f16/bf16 compute in f32):
//! `x [B, S, I]`; `w_ih`, `w_hh`, biases as the IR accepts them (flat concatenation or stacked
//! rows: both are the same row-major bytes, blocks `(l, d)` in order `l·D + d`, `w_ih` block
//! `[G·H, in_l]` with `in_0 = I`, `in_l = D·H`; `w_hh` blocks `[G·H, H]`; bias blocks `[G·H]`);
//! with `carry`, the initial states `[L·D, B, H]` follow.
//!
//! Outputs: `y [B, S, D·H]` (the last layer), `h_n` (and for LSTM `c_n`) `[L·D, B, H]`. The
//! reverse direction scans `t = S−1 … 0`, so its final state is the one at `t = 0`.
//!
//! In-place carry: these kernels only *read* the carry inputs. Writing the final states back
//! into the `h0`/`c0` buffers (`mutated_inputs()`) is the executor's job: after the step, copy
//! output 1 (`h_n`) into input `mutated_inputs()[0]` and, for LSTM, output 2 (`c_n`) into
//! input `mutated_inputs()[1]`; both have exactly the type of the input they replace.

use super::elementwise::act;
use super::real::Real;
use super::{on_floats, FloatKernel, PAR_MIN};
use crate::view::{In, Out};
use gemm::Parallelism;
use rayon::prelude::*;
use rlx_ir::ops::elementwise::ActivationKind;
use rlx_ir::ops::rnn::{Gru, Lstm, Rnn};

/// Multiply-adds below which the input projection GEMM runs single-threaded.
const PAR_FLOPS: usize = 1 << 18;

/// `Lstm`: inputs `(x, w_ih, w_hh, bias[, h0, c0])`, outputs `(y, h_n, c_n)`. Gates i, f, g, o;
/// `bias = b_ih + b_hh`.
pub fn lstm(a: &Lstm, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    on_floats(&Stack::new(Cell::Lstm, a.hidden_size, a.num_layers, a.bidirectional), ins, outs)
}

/// `Gru`: inputs `(x, w_ih, w_hh, b_ih, b_hh[, h0])`, outputs `(y, h_n)`. Gates r, z, n with
/// the reset gate applied after the recurrent bias (`linear_before_reset = 1`).
pub fn gru(a: &Gru, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    on_floats(&Stack::new(Cell::Gru, a.hidden_size, a.num_layers, a.bidirectional), ins, outs)
}

/// `Rnn`: inputs `(x, w_ih, w_hh, bias[, h0])`, outputs `(y, h_n)`; tanh, or ReLU with `relu`.
pub fn rnn(a: &Rnn, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    on_floats(&Stack::new(Cell::Rnn { relu: a.relu }, a.hidden_size, a.num_layers, a.bidirectional), ins, outs)
}

/// The recurrence of one cell kind.
#[derive(Clone, Copy, Debug)]
enum Cell {
    Lstm,
    Gru,
    Rnn { relu: bool },
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn { .. } => 1,
        }
    }

    /// Biases among the inputs (GRU keeps `b_ih` and `b_hh` apart).
    fn biases(self) -> usize {
        if matches!(self, Cell::Gru) {
            2
        } else {
            1
        }
    }

    /// One time step for one batch element: `xp` is the input projection with its bias, `hp`
    /// the recurrent projection `w_hh·h` (plus `b_hh` for GRU); updates `h` (and `c`).
    fn step<T: Real>(self, xp: &[T], hp: &[T], h: &mut [T], c: &mut [T]) {
        let n = h.len();
        let sig = |v: T| act(ActivationKind::Sigmoid, v);
        match self {
            Cell::Lstm => {
                for j in 0..n {
                    let z = |k: usize| xp[k * n + j] + hp[k * n + j];
                    let (i, f, g, o) = (sig(z(0)), sig(z(1)), z(2).tanh(), sig(z(3)));
                    c[j] = f * c[j] + i * g;
                    h[j] = o * c[j].tanh();
                }
            }
            Cell::Gru => {
                for j in 0..n {
                    let r = sig(xp[j] + hp[j]);
                    let z = sig(xp[n + j] + hp[n + j]);
                    let cand = (xp[2 * n + j] + r * hp[2 * n + j]).tanh();
                    h[j] = (T::ONE - z) * cand + z * h[j];
                }
            }
            Cell::Rnn { relu } => {
                for j in 0..n {
                    let v = xp[j] + hp[j];
                    h[j] = if relu { act(ActivationKind::Relu, v) } else { v.tanh() };
                }
            }
        }
    }
}

/// Geometry of a stack of layers.
struct Stack {
    cell: Cell,
    h: usize,
    layers: usize,
    dirs: usize,
}

impl Stack {
    fn new(cell: Cell, h: usize, layers: usize, bidirectional: bool) -> Stack {
        Stack { cell, h, layers, dirs: if bidirectional { 2 } else { 1 } }
    }
}

/// One batch element's share of a layer: its index, its `[S, D·H]` outputs and its final
/// `[D, H]` hidden and cell states.
type Task<'a, T> = (usize, &'a mut [T], &'a mut [T], &'a mut [T]);

/// What one layer-direction reads: its weights and, with carry, its initial states.
struct Direction<'a, T> {
    /// `[B·S, G·H]` input projection plus input bias.
    proj: Vec<T>,
    w_hh: &'a [T],
    /// GRU's recurrent bias `b_hh`, added to `w_hh·h`.
    b_hh: Option<&'a [T]>,
    /// `[B, H]` initial states, or zeros.
    h0: Option<&'a [T]>,
    c0: Option<&'a [T]>,
}

impl FloatKernel for Stack {
    fn run<T: Real>(&self, ins: &[&[T]], dims: &[&[usize]], outs: &mut [&mut [T]]) -> Result<(), String> {
        let (b, s, i) = (dims[0][0], dims[0][1], dims[0][2]);
        let (h, dirs, gh) = (self.h, self.dirs, self.cell.gates() * self.h);
        let dh = dirs * h;
        let nb = self.cell.biases();
        let (x, w_ih, w_hh, biases, init) = (ins[0], ins[1], ins[2], &ins[3..3 + nb], &ins[3 + nb..]);
        let mut prev: Vec<T> = Vec::new();
        let mut w_off = 0;
        for l in 0..self.layers {
            let (inp, in_l) = if l == 0 { (x, i) } else { (&prev[..], dh) };
            let block = |d: usize| l * dirs + d;
            let state = |k: usize, d: usize| init.get(k).map(|s0| &s0[block(d) * b * h..][..b * h]);
            let ds: Vec<Direction<T>> = (0..dirs)
                .map(|d| Direction {
                    proj: project(
                        inp,
                        b * s,
                        in_l,
                        &w_ih[w_off + d * gh * in_l..][..gh * in_l],
                        &biases[0][block(d) * gh..][..gh],
                    ),
                    w_hh: &w_hh[block(d) * gh * h..][..gh * h],
                    b_hh: biases.get(1).map(|bh| &bh[block(d) * gh..][..gh]),
                    h0: state(0, d),
                    c0: state(1, d),
                })
                .collect();
            w_off += dirs * gh * in_l;
            let mut out = vec![T::ZERO; b * s * dh];
            let mut hs = vec![T::ZERO; b * dh];
            let mut cs = vec![T::ZERO; b * dh];
            let row = s * dh;
            let mut tasks: Vec<Task<T>> = Vec::with_capacity(b);
            let mut rest = &mut out[..];
            for ((bi, hb), cb) in hs.chunks_mut(dh).enumerate().zip(cs.chunks_mut(dh)) {
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut(row);
                rest = tail;
                tasks.push((bi, mine, hb, cb));
            }
            let run = |(bi, ob, hb, cb): Task<T>| self.sequence(&ds, bi, s, ob, hb, cb);
            if b > 1 && b * s * gh * h >= PAR_MIN {
                tasks.into_par_iter().for_each(run);
            } else {
                tasks.into_iter().for_each(run);
            }
            for d in 0..dirs {
                for bi in 0..b {
                    let at = (block(d) * b + bi) * h;
                    outs[1][at..at + h].copy_from_slice(&hs[bi * dh + d * h..][..h]);
                    if let Some(c_n) = outs.get_mut(2) {
                        c_n[at..at + h].copy_from_slice(&cs[bi * dh + d * h..][..h]);
                    }
                }
            }
            prev = out;
        }
        outs[0].copy_from_slice(&prev);
        Ok(())
    }
}

impl Stack {
    /// Runs every direction of one layer over the sequence of batch element `bi`, writing its
    /// `[S, D·H]` outputs and its final `[D, H]` states.
    fn sequence<T: Real>(&self, ds: &[Direction<T>], bi: usize, s: usize, out: &mut [T], hs: &mut [T], cs: &mut [T]) {
        let (h, gh) = (self.h, self.cell.gates() * self.h);
        let dh = ds.len() * h;
        let mut hp = vec![T::ZERO; gh];
        for (d, dir) in ds.iter().enumerate() {
            let hv = &mut hs[d * h..(d + 1) * h];
            let cv = &mut cs[d * h..(d + 1) * h];
            if let Some(h0) = dir.h0 {
                hv.copy_from_slice(&h0[bi * h..(bi + 1) * h]);
            }
            if let Some(c0) = dir.c0 {
                cv.copy_from_slice(&c0[bi * h..(bi + 1) * h]);
            }
            for k in 0..s {
                let t = if d == 0 { k } else { s - 1 - k };
                for (r, p) in hp.iter_mut().enumerate() {
                    let w = &dir.w_hh[r * h..(r + 1) * h];
                    let bias = dir.b_hh.map_or(T::ZERO, |bh| bh[r]);
                    *p = w.iter().zip(hv.iter()).fold(bias, |acc, (&a, &b)| acc + a * b);
                }
                self.cell.step(&dir.proj[(bi * s + t) * gh..][..gh], &hp, hv, cv);
                out[t * dh + d * h..][..h].copy_from_slice(hv);
            }
        }
    }
}

/// `inp [rows, k] · wᵀ + bias` for `w [n, k]` row-major (PyTorch's `x·Wᵀ + b`), as `[rows, n]`.
fn project<T: Real>(inp: &[T], rows: usize, k: usize, w: &[T], bias: &[T]) -> Vec<T> {
    let n = bias.len();
    let mut out: Vec<T> = (0..rows).flat_map(|_| bias.iter().copied()).collect();
    if rows == 0 || n == 0 || k == 0 {
        return out;
    }
    let threads = rayon::current_num_threads();
    let par = if rows * n * k >= PAR_FLOPS && threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
    // Safety: `out` is `[rows, n]`, `inp` holds `[rows, k]` and `w` `[n, k]` row-major (sizes
    // checked by inference), read as `wᵀ [k, n]` with column stride `k`; no operand aliases
    // `out`. T is f32 or f64 (`on_floats` widens halves), both gemm element types.
    unsafe {
        gemm::gemm(
            rows, n, k,
            out.as_mut_ptr(), 1, n as isize, true,
            inp.as_ptr(), 1, k as isize,
            w.as_ptr(), k as isize, 1,
            T::ONE, T::ONE, false, false, false, par,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::run_f32;
    use rlx_ir::DType;

    fn sig(v: f64) -> f64 {
        1.0 / (1.0 + (-v).exp())
    }

    /// A one-unit LSTM over two steps, by hand.
    #[test]
    fn lstm_one_unit_by_hand() {
        let x = [0.5f64, -1.0];
        let w_ih = [0.1, 0.2, 0.3, 0.4];
        let w_hh = [-0.5, 0.6, -0.7, 0.8];
        let bias = [0.01, 0.02, 0.03, 0.04];
        let (mut h, mut c) = (0.0, 0.0);
        let mut ys = Vec::new();
        for &xt in &x {
            let z: Vec<f64> = (0..4).map(|k| w_ih[k] * xt + w_hh[k] * h + bias[k]).collect();
            c = sig(z[1]) * c + sig(z[0]) * z[2].tanh();
            h = sig(z[3]) * c.tanh();
            ys.push(h);
        }
        let dims: [&[usize]; 4] = [&[1, 2, 1], &[4, 1], &[4, 1], &[4]];
        let bytes = |v: &[f64]| bytemuck::cast_slice::<f64, u8>(v).to_vec();
        let data = [bytes(&x), bytes(&w_ih), bytes(&w_hh), bytes(&bias)];
        let ins: Vec<In> = dims.iter().zip(&data).map(|(d, b)| In { dtype: DType::F64, dims: d, bytes: b }).collect();
        let (mut y, mut hn, mut cn) = (vec![0u8; 16], vec![0u8; 8], vec![0u8; 8]);
        let mut outs = [
            Out { dtype: DType::F64, dims: &[1, 2, 1], bytes: &mut y },
            Out { dtype: DType::F64, dims: &[1, 1, 1], bytes: &mut hn },
            Out { dtype: DType::F64, dims: &[1, 1, 1], bytes: &mut cn },
        ];
        let a = Lstm { hidden_size: 1, num_layers: 1, bidirectional: false, carry: false };
        lstm(&a, &ins, &mut outs).unwrap();
        let f = |b: &[u8]| bytemuck::cast_slice::<u8, f64>(b).to_vec();
        assert!((f(&y)[0] - ys[0]).abs() < 1e-15 && (f(&y)[1] - ys[1]).abs() < 1e-15);
        assert!((f(&hn)[0] - h).abs() < 1e-15 && (f(&cn)[0] - c).abs() < 1e-15);
    }

    fn rand(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2000) as f32 / 2000.0 - 0.5
            })
            .collect()
    }

    /// A 2-layer bidirectional LSTM over 64 sequences (threaded over the batch) gives, for
    /// every sequence, what it gives for that sequence alone (one thread).
    #[test]
    fn batch_threads_match_one_sequence_at_a_time() {
        let (b, s, i, h) = (64, 9, 5, 16);
        let a = Lstm { hidden_size: h, num_layers: 2, bidirectional: true, carry: true };
        let (gh, w_ih_len) = (4 * h, 2 * 4 * h * (i + 2 * h));
        let (x, w_ih, w_hh, bias) = (rand(b * s * i, 1), rand(w_ih_len, 2), rand(4 * gh * h, 3), rand(4 * gh, 4));
        let (h0, c0) = (rand(4 * b * h, 5), rand(4 * b * h, 6));
        let run = |bb: usize, x: &[f32], h0: &[f32], c0: &[f32]| {
            let dims: [&[usize]; 6] = [&[bb, s, i], &[w_ih_len], &[4 * gh, h], &[4 * gh], &[4, bb, h], &[4, bb, h]];
            run_f32(
                |ins, outs| lstm(&a, ins, outs),
                &dims,
                &[x, &w_ih, &w_hh, &bias, h0, c0],
                &[&[bb, s, 2 * h], &[4, bb, h], &[4, bb, h]],
            )
        };
        let all = run(b, &x, &h0, &c0);
        for bi in [0, 17, 63] {
            let pick = |st: &[f32]| (0..4).flat_map(|k| st[(k * b + bi) * h..][..h].to_vec()).collect::<Vec<f32>>();
            let one = run(1, &x[bi * s * i..(bi + 1) * s * i], &pick(&h0), &pick(&c0));
            assert_eq!(one[0], all[0][bi * s * 2 * h..(bi + 1) * s * 2 * h]);
            assert_eq!(one[1], pick(&all[1]));
            assert_eq!(one[2], pick(&all[2]));
        }
    }

    /// An empty sequence passes the carried states through and writes no `y`.
    #[test]
    fn empty_sequence_returns_the_carried_state() {
        let a = Gru { hidden_size: 2, num_layers: 1, bidirectional: true, carry: true };
        let h0 = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let w = rand(24, 1);
        let dims: [&[usize]; 6] = [&[2, 0, 2], &[12, 2], &[12, 2], &[12], &[12], &[2, 2, 2]];
        let outs = run_f32(
            |ins, outs| gru(&a, ins, outs),
            &dims,
            &[&[], &w, &w, &w[..12], &w[..12], &h0],
            &[&[2, 0, 4], &[2, 2, 2]],
        );
        assert!(outs[0].is_empty());
        assert_eq!(outs[1], h0);
    }
}
