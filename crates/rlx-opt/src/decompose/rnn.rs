//! Decompositions of the rnn family: every layer, direction and time step unrolled into
//! `MatMul`, `Binary`, `Activation`, `Narrow`, `Concat`, `Reshape` and `Transpose` (OPS.md §13).
//!
//! Per layer and direction the input projection of the whole sequence is one `MatMul`
//! (`[B, S, in] · w_ihᵀ + b`); each step then narrows its row, adds `h·w_hhᵀ` and applies the
//! gates. A zero initial state is not materialized: the first step drops the terms it would
//! zero. The sequence length must be static; the batch may be symbolic.
//!
//! The decomposed graph returns `h_n`/`c_n` as values; it does not write them back into the
//! carry inputs (the in-place side effect of `carry` is the executor's, see rlx-cpu's
//! `kernels::rnn`).

use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{Dim, Graph, IrError, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::Lstm, OpKind::Gru, OpKind::Rnn];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let (cell, h, layers, bidirectional, carry) = match op {
        Op::Lstm(a) => (Cell::Lstm, a.hidden_size, a.num_layers, a.bidirectional, a.carry),
        Op::Gru(a) => (Cell::Gru, a.hidden_size, a.num_layers, a.bidirectional, a.carry),
        Op::Rnn(a) => (Cell::Rnn { relu: a.relu }, a.hidden_size, a.num_layers, a.bidirectional, a.carry),
        _ => return None,
    };
    let u = Unroll { cell, kind: op.kind(), h, layers, dirs: if bidirectional { 2 } else { 1 }, carry };
    Some(u.build(g, x))
}

#[derive(Clone, Copy)]
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
}

struct Unroll {
    cell: Cell,
    kind: OpKind,
    h: usize,
    layers: usize,
    dirs: usize,
    carry: bool,
}

/// One direction's recurrent weights and biases.
struct Recurrent {
    /// `w_hhᵀ [H, G·H]`.
    w_hh_t: ValueId,
    /// GRU's `b_hh [G·H]`.
    b_hh: Option<ValueId>,
}

impl Unroll {
    fn build(&self, g: &mut Graph, x: &[ValueId]) -> Result<Vec<ValueId>, IrError> {
        let xt = g.ty(x[0]).clone();
        let s = xt.static_dim(1).map_err(|e| {
            IrError::Invalid(format!(
                "{} decomposition unrolls the sequence, so its length must be static: {e}",
                self.kind
            ))
        })?;
        if s == 0 {
            return Err(IrError::Invalid(format!("{} decomposition: the sequence {xt} is empty", self.kind)));
        }
        let batch = xt.shape.dim(0).clone();
        let (h, dirs, gh) = (self.h, self.dirs, self.cell.gates() * self.h);
        let biases = if matches!(self.cell, Cell::Gru) { 2 } else { 1 };
        let (w_ih, w_hh, b_in) = (x[1], x[2], x[3]);
        let init = if self.carry { &x[3 + biases..] } else { &[][..] };
        let mut inp = x[0];
        let mut in_width = xt.shape.dim(2).clone();
        let mut w_off = 0;
        let (mut h_n, mut c_n) = (Vec::new(), Vec::new());
        for l in 0..self.layers {
            let mut outs = Vec::with_capacity(dirs);
            for d in 0..dirs {
                let blk = l * dirs + d;
                let w = weight_t(g, w_ih, blk * gh, gh, &in_width, w_off + d * gh * in_width.as_static().unwrap_or(0))?;
                let xp = g.matmul(inp, w)?;
                let b = g.narrow(b_in, 0, blk * gh, gh)?;
                let xp = g.binary(BinaryOp::Add, xp, b)?;
                let rec = Recurrent {
                    w_hh_t: weight_t(g, w_hh, blk * gh, gh, &Dim::Static(h), blk * gh * h)?,
                    b_hh: if biases == 2 { Some(g.narrow(x[4], 0, blk * gh, gh)?) } else { None },
                };
                let mut state: [Option<ValueId>; 2] = [None, None];
                for (k, s0) in init.iter().enumerate() {
                    let v = g.narrow(*s0, 0, blk, 1)?;
                    state[k] = Some(g.reshape_to(v, &Shape(vec![batch.clone(), Dim::Static(h)]))?);
                }
                let mut ys = vec![None; s];
                for k in 0..s {
                    let t = if d == 0 { k } else { s - 1 - k };
                    let row = g.narrow(xp, 1, t, 1)?;
                    let row = g.reshape_to(row, &Shape(vec![batch.clone(), Dim::Static(gh)]))?;
                    state = self.step(g, row, &rec, state)?;
                    let ht = state[0].expect("a step leaves a hidden state");
                    ys[t] = Some(g.reshape_to(ht, &Shape(vec![batch.clone(), Dim::Static(1), Dim::Static(h)]))?);
                }
                let ys: Vec<ValueId> = ys.into_iter().flatten().collect();
                outs.push(if ys.len() == 1 { ys[0] } else { g.concat(&ys, 1)? });
                let lead = |g: &mut Graph, v: ValueId| {
                    g.reshape_to(v, &Shape(vec![Dim::Static(1), batch.clone(), Dim::Static(h)]))
                };
                h_n.push(lead(g, state[0].expect("a step leaves a hidden state"))?);
                if let Some(c) = state[1] {
                    c_n.push(lead(g, c)?);
                }
            }
            w_off += dirs * gh * in_width.as_static().unwrap_or(0);
            inp = if dirs == 1 { outs[0] } else { g.concat(&outs, 2)? };
            in_width = Dim::Static(dirs * h);
        }
        let mut result = vec![inp, join(g, &h_n)?];
        if matches!(self.cell, Cell::Lstm) {
            result.push(join(g, &c_n)?);
        }
        Ok(result)
    }

    /// One time step: `xp [B, G·H]` is the input projection with its bias; `state` is
    /// `[h, c]` (`None` = zero). Returns the new `[h, c]`.
    fn step(
        &self,
        g: &mut Graph,
        xp: ValueId,
        rec: &Recurrent,
        state: [Option<ValueId>; 2],
    ) -> Result<[Option<ValueId>; 2], IrError> {
        use ActivationKind::{Relu, Sigmoid, Tanh};
        let hd = self.h;
        let [h, c] = state;
        let hp = match h {
            Some(h) => Some(g.matmul(h, rec.w_hh_t)?),
            None => None,
        };
        let gate = |g: &mut Graph, v: ValueId, k: usize| {
            let axis = g.ty(v).rank() - 1;
            g.narrow(v, axis, k * hd, hd)
        };
        match self.cell {
            Cell::Lstm => {
                let z = add_opt(g, xp, hp)?;
                let act = |g: &mut Graph, k: usize, kind: ActivationKind| -> Result<ValueId, IrError> {
                    let v = gate(g, z, k)?;
                    g.activation(kind, v)
                };
                let (i, f, gg, o) = (act(g, 0, Sigmoid)?, act(g, 1, Sigmoid)?, act(g, 2, Tanh)?, act(g, 3, Sigmoid)?);
                let ig = g.binary(BinaryOp::Mul, i, gg)?;
                let c = match c {
                    Some(c) => {
                        let fc = g.binary(BinaryOp::Mul, f, c)?;
                        g.binary(BinaryOp::Add, fc, ig)?
                    }
                    None => ig,
                };
                let tc = g.activation(Tanh, c)?;
                Ok([Some(g.binary(BinaryOp::Mul, o, tc)?), Some(c)])
            }
            Cell::Gru => {
                let b_hh = rec.b_hh.expect("GRU has a recurrent bias");
                // `w_hh·h + b_hh`, or just `b_hh` from a zero state.
                let hp = match hp {
                    Some(hp) => g.binary(BinaryOp::Add, hp, b_hh)?,
                    None => b_hh,
                };
                let sum_act = |g: &mut Graph, k: usize| -> Result<ValueId, IrError> {
                    let (a, b) = (gate(g, xp, k)?, gate(g, hp, k)?);
                    let v = g.binary(BinaryOp::Add, a, b)?;
                    g.activation(Sigmoid, v)
                };
                let (r, z) = (sum_act(g, 0)?, sum_act(g, 1)?);
                let (xn, hn) = (gate(g, xp, 2)?, gate(g, hp, 2)?);
                let rhn = g.binary(BinaryOp::Mul, r, hn)?;
                let n = g.binary(BinaryOp::Add, xn, rhn)?;
                let n = g.activation(Tanh, n)?;
                // (1 − z)·n + z·h = n + z·(h − n); from a zero state, n − z·n.
                let h = match h {
                    Some(h) => {
                        let diff = g.binary(BinaryOp::Sub, h, n)?;
                        let zd = g.binary(BinaryOp::Mul, z, diff)?;
                        g.binary(BinaryOp::Add, n, zd)?
                    }
                    None => {
                        let zn = g.binary(BinaryOp::Mul, z, n)?;
                        g.binary(BinaryOp::Sub, n, zn)?
                    }
                };
                Ok([Some(h), None])
            }
            Cell::Rnn { relu } => {
                let a = add_opt(g, xp, hp)?;
                Ok([Some(g.activation(if relu { Relu } else { Tanh }, a)?), None])
            }
        }
    }
}

/// `a + b`, or `a` when `b` is a zero that was never built.
fn add_opt(g: &mut Graph, a: ValueId, b: Option<ValueId>) -> Result<ValueId, IrError> {
    match b {
        Some(b) => g.binary(BinaryOp::Add, a, b),
        None => Ok(a),
    }
}

/// The transpose `[width, rows]` of the weight block `[rows, width]` that starts at row `row`
/// of a 2-D stacked weight, or at element `flat` of a flat (1-D) one.
fn weight_t(g: &mut Graph, w: ValueId, row: usize, rows: usize, width: &Dim, flat: usize) -> Result<ValueId, IrError> {
    let block = if g.ty(w).rank() == 2 {
        g.narrow(w, 0, row, rows)?
    } else {
        let width = width
            .as_static()
            .ok_or_else(|| IrError::Invalid(format!("flat rnn weight with a symbolic width {width}")))?;
        let v = g.narrow(w, 0, flat, rows * width)?;
        g.reshape(v, &[rows as i64, width as i64])?
    };
    g.transpose(block, &[1, 0])
}

/// Final states `[1, B, H]` joined into `[L·D, B, H]`.
fn join(g: &mut Graph, states: &[ValueId]) -> Result<ValueId, IrError> {
    if states.len() == 1 {
        Ok(states[0])
    } else {
        g.concat(states, 0)
    }
}

#[cfg(test)]
mod tests {
    use crate::legalize;
    use rlx_ir::text::parse;
    use rlx_ir::OpKind;

    const PRIMITIVES: &[OpKind] = crate::decompose::PRIMITIVES;

    fn lowers(src: &str, kind: OpKind) -> rlx_ir::Graph {
        let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let (out, report) = legalize(&g, "test", PRIMITIVES).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.kinds[&kind].keys().eq([&crate::Outcome::CommonIr]), "{report}");
        assert!(out.nodes().iter().all(|n| PRIMITIVES.contains(&n.op.kind())), "{out}");
        rlx_ir::verify(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(out.outputs().len(), g.outputs().len());
        for (a, b) in out.outputs().iter().zip(g.outputs()) {
            assert_eq!(out.ty(*a), g.ty(*b));
        }
        out
    }

    #[test]
    fn lstm_two_layers_bidirectional_carried_unrolls() {
        // L = 2, D = 2, H = 4, I = 3: w_ih flat = 2·16·3 + 2·16·8 = 352.
        let src = r#"
            %0 = Input(name:"x",ty:(dtype:F32,shape:["B",5,3]))()
            %1 = Param(name:"w_ih",ty:(dtype:F32,shape:[352]))()
            %2 = Param(name:"w_hh",ty:(dtype:F32,shape:[64,4]))()
            %3 = Param(name:"b",ty:(dtype:F32,shape:[64]))()
            %4 = Input(name:"h0",ty:(dtype:F32,shape:[4,"B",4]))()
            %5 = Input(name:"c0",ty:(dtype:F32,shape:[4,"B",4]))()
            %6 = Lstm(hidden_size:4,num_layers:2,bidirectional:true,carry:true)(%0, %1, %2, %3, %4, %5)
            return %6, %6.1, %6.2"#;
        let out = lowers(src, OpKind::Lstm);
        assert_eq!(out.ty(out.outputs()[0]).to_string(), "f32[B, 5, 8]");
        // One recurrent product per layer, direction and step.
        let products = out.nodes().iter().filter(|n| n.op.kind() == OpKind::MatMul).count();
        assert_eq!(products, 2 * 2 * (1 + 5));
    }

    #[test]
    fn gru_and_rnn_unroll_from_a_zero_state() {
        let gru = r#"
            %0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,6]))()
            %1 = Param(name:"w_ih",ty:(dtype:F64,shape:[36,6]))()
            %2 = Param(name:"w_hh",ty:(dtype:F64,shape:[36,6]))()
            %3 = Param(name:"b_ih",ty:(dtype:F64,shape:[36]))()
            %4 = Param(name:"b_hh",ty:(dtype:F64,shape:[36]))()
            %5 = Gru(hidden_size:6,num_layers:2,bidirectional:false,carry:false)(%0, %1, %2, %3, %4)
            return %5, %5.1"#;
        let out = lowers(gru, OpKind::Gru);
        // The first step of each layer has no recurrent product.
        assert_eq!(out.nodes().iter().filter(|n| n.op.kind() == OpKind::MatMul).count(), 2 * (1 + 2));
        let rnn = r#"
            %0 = Input(name:"x",ty:(dtype:F32,shape:[2,4,3]))()
            %1 = Param(name:"w_ih",ty:(dtype:F32,shape:[10,3]))()
            %2 = Param(name:"w_hh",ty:(dtype:F32,shape:[10,5]))()
            %3 = Param(name:"b",ty:(dtype:F32,shape:[10]))()
            %4 = Input(name:"h0",ty:(dtype:F32,shape:[2,2,5]))()
            %5 = Rnn(hidden_size:5,num_layers:1,bidirectional:true,carry:true,relu:true)(%0, %1, %2, %3, %4)
            return %5, %5.1"#;
        let out = lowers(rnn, OpKind::Rnn);
        assert!(out.to_string().contains("Activation(kind:Relu)"), "{out}");
    }

    #[test]
    fn symbolic_sequence_is_refused() {
        let src = r#"
            %0 = Input(name:"x",ty:(dtype:F32,shape:[2,"S",3]))()
            %1 = Param(name:"w_ih",ty:(dtype:F32,shape:[4,3]))()
            %2 = Param(name:"w_hh",ty:(dtype:F32,shape:[4,4]))()
            %3 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %4 = Rnn(hidden_size:4,num_layers:1,bidirectional:false,carry:false,relu:false)(%0, %1, %2, %3)
            return %4"#;
        let g = parse(src).unwrap();
        let e = legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("Rnn decomposition unrolls the sequence, so its length must be static"), "{e}");
    }
}
