//! Stacked recurrent layers: LSTM, GRU and Elman RNN (OPS.md §13), batch-first, PyTorch gate
//! orders. Differentiated via their unrolled decomposition.
//!
//! Weights of every `(layer, direction)` block are concatenated layer-major, then direction
//! (`l·D + d`). `w_ih` block `(l, d)` is `[G·H, in_l]` (`in_0 = I`, `in_l = D·H` after), `w_hh`
//! blocks are `[G·H, H]`, bias blocks `[G·H]`, with `G` gates per cell. A weight is accepted as
//! the flat concatenation (1-D), or stacked by rows (2-D `[L·D·G·H, width]`) when every block
//! has the same width. Outputs are `y [B, S, D·H]` and the final states `[L·D, B, H]`.

use super::{Arity, OpDef};
use crate::{Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// LSTM stack (`torch.nn.LSTM`, gates i, f, g, o; bias = `b_ih + b_hh` pre-summed); inputs
/// `(x [B,S,I], w_ih, w_hh, bias)`, plus `(h0, c0)` with `carry`.
///
/// Outputs `(y, h_n, c_n)`. With `carry`, the final states are also written back into the
/// `h0`/`c0` buffers (streaming decode).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lstm {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub bidirectional: bool,
    pub carry: bool,
}

/// GRU stack (`torch.nn.GRU`, gates r, z, n, ONNX `linear_before_reset = 1`); inputs
/// `(x, w_ih, w_hh, b_ih, b_hh)`, plus `h0` (updated in place) with `carry`. Outputs `(y, h_n)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gru {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub bidirectional: bool,
    pub carry: bool,
}

/// Elman RNN stack (`torch.nn.RNN`), `h' = act(x·w_ihᵀ + h·w_hhᵀ + bias)` with `act = ReLU`
/// if `relu` else tanh; inputs `(x, w_ih, w_hh, bias)`, plus `h0` (updated in place) with
/// `carry`. Outputs `(y, h_n)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rnn {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub bidirectional: bool,
    pub carry: bool,
    pub relu: bool,
}

/// The geometry of a stack: hidden size, layers, directions and gates per cell.
struct Stack {
    h: usize,
    layers: usize,
    dirs: usize,
    gates: usize,
}

impl Stack {
    fn new(hidden_size: usize, num_layers: usize, bidirectional: bool, gates: usize) -> Result<Stack, String> {
        if hidden_size == 0 || num_layers == 0 {
            return Err(format!(
                "hidden_size {hidden_size} and num_layers {num_layers} must be at least 1"
            ));
        }
        let s = Stack { h: hidden_size, layers: num_layers, dirs: if bidirectional { 2 } else { 1 }, gates };
        // L·D·G·H·H bounds every product of these factors below.
        [s.dirs, s.gates, s.h, s.h]
            .iter()
            .try_fold(s.layers, |acc, &f| acc.checked_mul(f))
            .ok_or_else(|| format!("hidden_size {hidden_size} and num_layers {num_layers} overflow the weight sizes"))?;
        Ok(s)
    }

    /// Rows of all blocks stacked: `L·D·G·H`.
    fn rows(&self) -> usize {
        self.layers * self.dirs * self.gates * self.h
    }

    /// `[L·D, B, H]`, the type of the initial and final states.
    fn state(&self, x: &TensorType) -> TensorType {
        let dims = vec![Dim::Static(self.layers * self.dirs), x.shape.dim(0).clone(), Dim::Static(self.h)];
        TensorType::new(x.dtype, Shape(dims))
    }

    /// Checks `x [B, S, I]` and the weights; returns the output types `y` and `n_states` states.
    fn infer(&self, x: &TensorType, w_ih: &TensorType, w_hh: &TensorType, biases: &[&TensorType], states: &[&TensorType], n_states: usize) -> Result<Vec<TensorType>, String> {
        if x.rank() != 3 {
            return Err(format!("x {x} must be batch-first [B, S, I]"));
        }
        if !x.dtype.is_float() {
            return Err(format!("x {x} must be a float tensor"));
        }
        let mut operands = [w_ih, w_hh].into_iter().chain(biases.iter().copied()).chain(states.iter().copied());
        if let Some(t) = operands.find(|t| t.dtype != x.dtype) {
            return Err(format!("every operand must have the dtype of x {x}, got {t}"));
        }
        self.check_w_ih(x, w_ih)?;
        let gh = self.gates * self.h;
        self.check_weight("w_hh", w_hh, gh * self.h, &Dim::Static(self.h))?;
        for b in biases {
            let want = Shape::of(&[self.rows()]);
            if b.shape != want {
                return Err(format!("bias {b} must be the flat concatenation {want} of [{gh}] blocks"));
            }
        }
        let state = self.state(x);
        if let Some(s) = states.iter().find(|s| **s != &state) {
            return Err(format!("initial state {s} must be {state} ([L·D, B, H])"));
        }
        let y = TensorType::new(
            x.dtype,
            Shape(vec![x.shape.dim(0).clone(), x.shape.dim(1).clone(), Dim::Static(self.dirs * self.h)]),
        );
        let mut out = vec![y];
        out.extend(std::iter::repeat_n(state, n_states));
        Ok(out)
    }

    /// `w_ih`: layer 0 reads `I`, later layers `D·H`.
    fn check_w_ih(&self, x: &TensorType, w: &TensorType) -> Result<(), String> {
        let i = x.shape.dim(2);
        let dh = Dim::Static(self.dirs * self.h);
        let uniform = self.layers == 1 || *i == dh;
        if w.rank() == 2 && uniform {
            return self.check_weight("w_ih", w, 0, i);
        }
        let i = x.static_dim(2).map_err(|e| format!("flat w_ih {w}: {e}"))?;
        let gh = self.gates * self.h;
        let len = ((self.layers - 1) * self.dirs * self.h)
            .checked_add(i)
            .and_then(|width| width.checked_mul(self.dirs * gh))
            .ok_or_else(|| format!("w_ih for input size {i} overflows"))?;
        if w.shape != Shape::of(&[len]) {
            return Err(format!(
                "w_ih {w} must be the flat concatenation [{len}] of [{gh}, in_l] blocks (in_0 = {i}, in_l = {})",
                self.dirs * self.h
            ));
        }
        Ok(())
    }

    /// A weight of `[G·H, width]` blocks: 2-D stacked rows, or flat of `block` elements each.
    fn check_weight(&self, name: &str, w: &TensorType, block: usize, width: &Dim) -> Result<(), String> {
        let stacked = Shape(vec![Dim::Static(self.rows()), width.clone()]);
        let flat = Shape::of(&[self.layers * self.dirs * block]);
        if w.shape == stacked || (block > 0 && w.shape == flat) {
            return Ok(());
        }
        Err(format!("{name} {w} must be {stacked} ({} blocks of [{}, {width}])", self.layers * self.dirs, self.gates * self.h))
    }
}

fn refs(ts: &[TensorType]) -> Vec<&TensorType> {
    ts.iter().collect()
}

impl OpDef for Lstm {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.carry { 6 } else { 4 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let s = Stack::new(self.hidden_size, self.num_layers, self.bidirectional, 4)?;
        s.infer(&inputs[0], &inputs[1], &inputs[2], &refs(&inputs[3..4]), &refs(&inputs[4..]), 2)
    }
    fn mutated_inputs(&self) -> Vec<usize> {
        if self.carry {
            vec![4, 5]
        } else {
            Vec::new()
        }
    }
    fn written_back(&self) -> Vec<(usize, usize)> {
        if self.carry {
            vec![(1, 4), (2, 5)]
        } else {
            Vec::new()
        }
    }
}

impl OpDef for Gru {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.carry { 6 } else { 5 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let s = Stack::new(self.hidden_size, self.num_layers, self.bidirectional, 3)?;
        s.infer(&inputs[0], &inputs[1], &inputs[2], &refs(&inputs[3..5]), &refs(&inputs[5..]), 1)
    }
    fn mutated_inputs(&self) -> Vec<usize> {
        if self.carry {
            vec![5]
        } else {
            Vec::new()
        }
    }
    fn written_back(&self) -> Vec<(usize, usize)> {
        if self.carry {
            vec![(1, 5)]
        } else {
            Vec::new()
        }
    }
}

impl OpDef for Rnn {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.carry { 5 } else { 4 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let s = Stack::new(self.hidden_size, self.num_layers, self.bidirectional, 1)?;
        s.infer(&inputs[0], &inputs[1], &inputs[2], &refs(&inputs[3..4]), &refs(&inputs[4..]), 1)
    }
    fn mutated_inputs(&self) -> Vec<usize> {
        if self.carry {
            vec![4]
        } else {
            Vec::new()
        }
    }
    fn written_back(&self) -> Vec<(usize, usize)> {
        if self.carry {
            vec![(1, 4)]
        } else {
            Vec::new()
        }
    }
}

/// The outputs of a multi-output node.
fn outputs(g: &crate::Graph, node: crate::NodeId) -> Vec<crate::ValueId> {
    (0..g.node(node).outputs.len() as u32).map(|i| crate::ValueId::new(node, i)).collect()
}

/// Builders for the rnn family; each returns `[y, h_n]` (LSTM: `[y, h_n, c_n]`).
impl crate::Graph {
    /// An LSTM stack; `carry` is `Some((h0, c0))` for streaming state, updated in place.
    pub fn lstm(
        &mut self,
        attrs: Lstm,
        x: crate::ValueId,
        w_ih: crate::ValueId,
        w_hh: crate::ValueId,
        bias: crate::ValueId,
        carry: Option<(crate::ValueId, crate::ValueId)>,
    ) -> crate::Result<Vec<crate::ValueId>> {
        let mut ins = vec![x, w_ih, w_hh, bias];
        ins.extend(carry.into_iter().flat_map(|(h, c)| [h, c]));
        let id = self.add(Lstm { carry: carry.is_some(), ..attrs }, &ins)?;
        Ok(outputs(self, id))
    }

    /// A GRU stack; `h0` is the streaming state, updated in place.
    #[allow(clippy::too_many_arguments)]
    pub fn gru(
        &mut self,
        attrs: Gru,
        x: crate::ValueId,
        w_ih: crate::ValueId,
        w_hh: crate::ValueId,
        b_ih: crate::ValueId,
        b_hh: crate::ValueId,
        h0: Option<crate::ValueId>,
    ) -> crate::Result<Vec<crate::ValueId>> {
        let mut ins = vec![x, w_ih, w_hh, b_ih, b_hh];
        ins.extend(h0);
        let id = self.add(Gru { carry: h0.is_some(), ..attrs }, &ins)?;
        Ok(outputs(self, id))
    }

    /// An Elman RNN stack; `h0` is the streaming state, updated in place.
    pub fn rnn(
        &mut self,
        attrs: Rnn,
        x: crate::ValueId,
        w_ih: crate::ValueId,
        w_hh: crate::ValueId,
        bias: crate::ValueId,
        h0: Option<crate::ValueId>,
    ) -> crate::Result<Vec<crate::ValueId>> {
        let mut ins = vec![x, w_ih, w_hh, bias];
        ins.extend(h0);
        let id = self.add(Rnn { carry: h0.is_some(), ..attrs }, &ins)?;
        Ok(outputs(self, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph};

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    fn lstm(layers: usize, bidirectional: bool) -> Lstm {
        Lstm { hidden_size: 8, num_layers: layers, bidirectional, carry: false }
    }

    #[test]
    fn single_layer_lstm_takes_pytorch_shaped_weights() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec!["B".into(), "S".into(), 5.into()])));
        let w_ih = g.param("w_ih", f32s(&[32, 5]));
        let w_hh = g.param("w_hh", f32s(&[32, 8]));
        let b = g.param("b", f32s(&[32]));
        let out = g.lstm(lstm(1, false), x, w_ih, w_hh, b, None).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(g.ty(out[0]).to_string(), "f32[B, S, 8]");
        assert_eq!(g.ty(out[2]).to_string(), "f32[1, B, 8]");
        let w_bad = g.param("w_bad", f32s(&[5, 32]));
        let e = g.lstm(lstm(1, false), x, w_bad, w_hh, b, None).unwrap_err().to_string();
        assert!(e.contains("w_ih f32[5, 32] must be [32, 5]"), "{e}");
    }

    #[test]
    fn stacked_bidirectional_weights_are_flat_when_widths_differ() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 7, 5]));
        // L = 2, D = 2, H = 8: w_ih = 2·32·(5 + 16) = 1344, w_hh = 4·32·8 = 1024, bias 4·32.
        let w_ih = g.param("w_ih", f32s(&[1344]));
        let w_hh = g.param("w_hh", f32s(&[128, 8]));
        let b = g.param("b", f32s(&[128]));
        let h0 = g.input("h0", f32s(&[4, 2, 8]));
        let c0 = g.input("c0", f32s(&[4, 2, 8]));
        let out = g.lstm(lstm(2, true), x, w_ih, w_hh, b, Some((h0, c0))).unwrap();
        assert_eq!(g.ty(out[0]), &f32s(&[2, 7, 16]));
        assert_eq!(g.ty(out[1]), &f32s(&[4, 2, 8]));
        let node = g.node(out[0].node);
        assert_eq!(node.op.def().mutated_inputs(), vec![4, 5]);
        let e = g.lstm(lstm(2, true), x, w_hh, w_hh, b, None).unwrap_err().to_string();
        assert!(e.contains("flat concatenation [1344]"), "{e}");
    }

    #[test]
    fn absurd_sizes_are_errors_not_overflows() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 2, 3]));
        let attrs = Lstm { hidden_size: usize::MAX / 2, num_layers: 3, bidirectional: true, carry: false };
        let e = g.lstm(attrs, x, x, x, x, None).unwrap_err().to_string();
        assert!(e.contains("overflow the weight sizes"), "{e}");
    }

    #[test]
    fn gru_and_rnn_states() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[3, 4, 8]));
        let w_ih = g.param("w_ih", f32s(&[48, 8]));
        let w_hh = g.param("w_hh", f32s(&[48, 8]));
        let b = g.param("b", f32s(&[48]));
        let attrs = Gru { hidden_size: 8, num_layers: 2, bidirectional: false, carry: false };
        // I = D·H = 8, so the 2-layer weights stack by rows.
        let out = g.gru(attrs.clone(), x, w_ih, w_hh, b, b, None).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(g.ty(out[1]), &f32s(&[2, 3, 8]));
        let h_bad = g.input("h", f32s(&[2, 4, 8]));
        let e = g.gru(attrs, x, w_ih, w_hh, b, b, Some(h_bad)).unwrap_err().to_string();
        assert!(e.contains("initial state f32[2, 4, 8] must be f32[2, 3, 8]"), "{e}");
        let attrs = Rnn { hidden_size: 8, num_layers: 1, bidirectional: false, carry: false, relu: true };
        let w = g.param("w", f32s(&[8, 8]));
        let bias = g.param("bias", f32s(&[8]));
        let out = g.rnn(attrs, x, w, w, bias, None).unwrap();
        assert_eq!(g.ty(out[0]), &f32s(&[3, 4, 8]));
    }
}
