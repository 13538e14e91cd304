//! Recurrent layers `RNN`, `GRU` and `LSTM`, unrolled over their (static) sequence: the input
//! projection of every step is one `MatMul`, then each step adds the recurrent product, applies
//! the gate activations and carries the state. Forward, reverse and bidirectional directions;
//! `layout = 1` (batch first); LSTM peepholes; GRU `linear_before_reset`; `clip`;
//! `sequence_lens` only when every sequence is full length.

use super::elementwise::{act, bin, bin_scalar, select};
use super::matmul::matmul_nd;
use super::shape::{reshape_static, transpose_to};
use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("RNN", |cx, n| recurrent(cx, n, Cell::Rnn)),
    ("GRU", |cx, n| recurrent(cx, n, Cell::Gru)),
    ("LSTM", |cx, n| recurrent(cx, n, Cell::Lstm)),
];

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// A gate activation by its ONNX name, with `alpha`/`beta` where it takes them.
#[derive(Clone)]
struct Activation {
    name: String,
    alpha: Option<f32>,
    beta: Option<f32>,
}

fn apply(cx: &mut Cx<'_>, f: &Activation, x: ValueId) -> OpResult<ValueId> {
    let kind = match f.name.as_str() {
        "Sigmoid" => ActivationKind::Sigmoid,
        "Tanh" => ActivationKind::Tanh,
        "Relu" => ActivationKind::Relu,
        "Softsign" => ActivationKind::Softsign,
        "Softplus" => ActivationKind::Softplus,
        "HardSigmoid" => {
            let y = bin_scalar(cx, BinaryOp::Mul, x, f.alpha.unwrap_or(0.2) as f64)?;
            let y = bin_scalar(cx, BinaryOp::Add, y, f.beta.unwrap_or(0.5) as f64)?;
            let y = bin_scalar(cx, BinaryOp::Min, y, 1.0)?;
            return bin_scalar(cx, BinaryOp::Max, y, 0.0);
        }
        "LeakyRelu" => {
            let scaled = bin_scalar(cx, BinaryOp::Mul, x, f.alpha.unwrap_or(0.01) as f64)?;
            let zero = cx.scalar(cx.dtype(x), 0.0)?;
            let neg = cx.add1(Compare { op: CmpOp::Lt }, &[x, zero])?;
            return select(cx, neg, scaled, x);
        }
        other => return unsupported(format!("activation {other}")),
    };
    act(cx, kind, x)
}

/// `x[.., start..start+len]` on the last axis.
fn part(cx: &mut Cx<'_>, x: ValueId, index: usize, width: usize) -> OpResult<ValueId> {
    let axis = cx.rank(x) - 1;
    cx.add1(Narrow { axis, start: index * width, len: width }, &[x])
}

/// `[dirs, ..]` → the slice of direction `d` without its axis.
fn direction(cx: &mut Cx<'_>, x: ValueId, d: usize) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let one = cx.add1(Narrow { axis: 0, start: d, len: 1 }, &[x])?;
    reshape_static(cx, one, &dims[1..])
}

fn recurrent(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, cell: Cell) -> OpResult<Vec<ValueId>> {
    let layout = n.int("layout", 0);
    let mut x = n.input(0)?;
    if layout == 1 {
        x = transpose_to(cx, x, &[1, 0, 2])?;
    }
    let [steps, batch, _]: [usize; 3] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("X must be 3-D".into()))?;
    if let Some(lens) = n.opt_input(4) {
        if cx.const_ints(lens, "sequence_lens")?.iter().any(|&l| l != steps as i64) {
            return unsupported("sequence_lens shorter than the sequence");
        }
    }
    let (w, r) = (n.input(1)?, n.input(2)?);
    let hidden = n.int("hidden_size", 0) as usize;
    let dirs = match n.string("direction", "forward").as_str() {
        "forward" | "reverse" => 1,
        "bidirectional" => 2,
        d => return invalid(format!("direction `{d}`")),
    };
    let reverse_only = n.string("direction", "forward") == "reverse";
    let names: Vec<String> = n.attr("activations").map_or_else(
        || cell.default_activations().iter().cycle().take(cell.default_activations().len() * dirs).map(|s| s.to_string()).collect(),
        |a| a.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
    );
    let alphas = n.floats("activation_alpha").unwrap_or_default();
    let betas = n.floats("activation_beta").unwrap_or_default();
    let per_dir = cell.default_activations().len();
    let acts: Vec<Activation> = names
        .iter()
        .enumerate()
        .map(|(i, name)| Activation { name: name.clone(), alpha: alphas.get(i).copied(), beta: betas.get(i).copied() })
        .collect();
    if acts.len() < per_dir * dirs {
        return invalid(format!("{} activations for {dirs} direction(s)", acts.len()));
    }
    let clip = n.attr("clip").map(|a| a.f as f64);
    let g = cell.gates();
    let dt = cx.dtype(x);
    let mut ys = Vec::new();
    let mut finals_h = Vec::new();
    let mut finals_c = Vec::new();
    for d in 0..dirs {
        let wd = direction(cx, w, d)?;
        let rd = direction(cx, r, d)?;
        let wt = transpose_to(cx, wd, &[1, 0])?;
        let rt = transpose_to(cx, rd, &[1, 0])?;
        let xw = matmul_nd(cx, x, wt)?;
        let (wb, rb) = match n.opt_input(3) {
            Some(b) => {
                let bd = direction(cx, b, d)?;
                (Some(part(cx, bd, 0, g * hidden)?), Some(part(cx, bd, 1, g * hidden)?))
            }
            None => (None, None),
        };
        let xw = match wb {
            Some(wb) => bin(cx, BinaryOp::Add, xw, wb)?,
            None => xw,
        };
        let mut h = match n.opt_input(5) {
            Some(h0) => direction(cx, h0, d)?,
            None => cx.values(dt, &[batch, hidden], &vec![0.0; batch * hidden])?,
        };
        let mut c = match (cell, n.opt_input(6)) {
            (Cell::Lstm, Some(c0)) => direction(cx, c0, d)?,
            _ => cx.values(dt, &[batch, hidden], &vec![0.0; batch * hidden])?,
        };
        let peep = match (cell, n.opt_input(7)) {
            (Cell::Lstm, Some(p)) => {
                let pd = direction(cx, p, d)?;
                Some([part(cx, pd, 0, hidden)?, part(cx, pd, 1, hidden)?, part(cx, pd, 2, hidden)?])
            }
            _ => None,
        };
        let f = &acts[d * per_dir..(d + 1) * per_dir];
        let backwards = reverse_only || d == 1;
        let mut outs = vec![None; steps];
        for s in 0..steps {
            let t = if backwards { steps - 1 - s } else { s };
            let xt = cx.add1(Narrow { axis: 0, start: t, len: 1 }, &[xw])?;
            let xt = reshape_static(cx, xt, &[batch, g * hidden])?;
            let gate_in = |cx: &mut Cx<'_>, v: ValueId| -> OpResult<ValueId> {
                match clip {
                    Some(c) => {
                        let v = bin_scalar(cx, BinaryOp::Min, v, c)?;
                        bin_scalar(cx, BinaryOp::Max, v, -c)
                    }
                    None => Ok(v),
                }
            };
            match cell {
                Cell::Rnn | Cell::Lstm => {
                    let hr = matmul_nd(cx, h, rt)?;
                    let mut pre = bin(cx, BinaryOp::Add, xt, hr)?;
                    if let Some(rb) = rb {
                        pre = bin(cx, BinaryOp::Add, pre, rb)?;
                    }
                    if cell == Cell::Rnn {
                        let pre = gate_in(cx, pre)?;
                        h = apply(cx, &f[0], pre)?;
                    } else {
                        let mut i = part(cx, pre, 0, hidden)?;
                        let o = part(cx, pre, 1, hidden)?;
                        let mut fg = part(cx, pre, 2, hidden)?;
                        let cc = part(cx, pre, 3, hidden)?;
                        if let Some([pi, _, pf]) = peep {
                            let a = bin(cx, BinaryOp::Mul, pi, c)?;
                            i = bin(cx, BinaryOp::Add, i, a)?;
                            let b = bin(cx, BinaryOp::Mul, pf, c)?;
                            fg = bin(cx, BinaryOp::Add, fg, b)?;
                        }
                        let (i, fg, cc) = (gate_in(cx, i)?, gate_in(cx, fg)?, gate_in(cx, cc)?);
                        let i = apply(cx, &f[0], i)?;
                        let fg = apply(cx, &f[0], fg)?;
                        let cc = apply(cx, &f[1], cc)?;
                        let keep = bin(cx, BinaryOp::Mul, fg, c)?;
                        let add = bin(cx, BinaryOp::Mul, i, cc)?;
                        c = bin(cx, BinaryOp::Add, keep, add)?;
                        let mut o = o;
                        if let Some([_, po, _]) = peep {
                            let a = bin(cx, BinaryOp::Mul, po, c)?;
                            o = bin(cx, BinaryOp::Add, o, a)?;
                        }
                        let o = gate_in(cx, o)?;
                        let o = apply(cx, &f[0], o)?;
                        let hc = apply(cx, &f[2], c)?;
                        h = bin(cx, BinaryOp::Mul, o, hc)?;
                    }
                }
                Cell::Gru => {
                    let rz = part(cx, rt, 0, hidden)?;
                    let rr = part(cx, rt, 1, hidden)?;
                    let rh = part(cx, rt, 2, hidden)?;
                    let bias = |cx: &mut Cx<'_>, v: ValueId, k: usize| -> OpResult<ValueId> {
                        match rb {
                            Some(rb) => {
                                let b = part(cx, rb, k, hidden)?;
                                bin(cx, BinaryOp::Add, v, b)
                            }
                            None => Ok(v),
                        }
                    };
                    let hz = matmul_nd(cx, h, rz)?;
                    let xz = part(cx, xt, 0, hidden)?;
                    let z = bin(cx, BinaryOp::Add, xz, hz)?;
                    let z = bias(cx, z, 0)?;
                    let hr = matmul_nd(cx, h, rr)?;
                    let xr = part(cx, xt, 1, hidden)?;
                    let rg = bin(cx, BinaryOp::Add, xr, hr)?;
                    let rg = bias(cx, rg, 1)?;
                    let (z, rg) = (gate_in(cx, z)?, gate_in(cx, rg)?);
                    let z = apply(cx, &f[0], z)?;
                    let rg = apply(cx, &f[0], rg)?;
                    let recur = if n.int("linear_before_reset", 0) != 0 {
                        let hh = matmul_nd(cx, h, rh)?;
                        let hh = bias(cx, hh, 2)?;
                        bin(cx, BinaryOp::Mul, rg, hh)?
                    } else {
                        let gated = bin(cx, BinaryOp::Mul, rg, h)?;
                        let hh = matmul_nd(cx, gated, rh)?;
                        bias(cx, hh, 2)?
                    };
                    let xh = part(cx, xt, 2, hidden)?;
                    let cand = bin(cx, BinaryOp::Add, xh, recur)?;
                    let cand = gate_in(cx, cand)?;
                    let cand = apply(cx, &f[1], cand)?;
                    let one = cx.scalar(dt, 1.0)?;
                    let keep_new = bin(cx, BinaryOp::Sub, one, z)?;
                    let a = bin(cx, BinaryOp::Mul, keep_new, cand)?;
                    let b = bin(cx, BinaryOp::Mul, z, h)?;
                    h = bin(cx, BinaryOp::Add, a, b)?;
                }
            }
            outs[t] = Some(reshape_static(cx, h, &[1, 1, batch, hidden])?);
        }
        let outs: Vec<ValueId> = outs.into_iter().flatten().collect();
        ys.push(if outs.len() == 1 { outs[0] } else { cx.add1(Concat { axis: 0 }, &outs)? });
        finals_h.push(reshape_static(cx, h, &[1, batch, hidden])?);
        finals_c.push(reshape_static(cx, c, &[1, batch, hidden])?);
    }
    let cat = |cx: &mut Cx<'_>, v: Vec<ValueId>, axis: usize| if v.len() == 1 { Ok(v[0]) } else { cx.add1(Concat { axis }, &v) };
    let mut y = cat(cx, ys, 1)?;
    let mut yh = cat(cx, finals_h, 0)?;
    let mut yc = cat(cx, finals_c, 0)?;
    if layout == 1 {
        y = transpose_to(cx, y, &[2, 0, 1, 3])?;
        yh = transpose_to(cx, yh, &[1, 0, 2])?;
        yc = transpose_to(cx, yc, &[1, 0, 2])?;
    }
    Ok(vec![y, yh, yc])
}
