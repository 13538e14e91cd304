//! State-space scans: Mamba-1 selective scan, Mamba-2 SSD and the gated delta rule
//! (OPS.md §13). Batch-first, zero initial state unless carried; differentiated via their
//! unrolled decomposition. Callers prepare discretization inputs (softplus'ed steps, negative
//! `A`, expanded groups, normalized q/k) beforehand.

use super::{Arity, OpDef};
use crate::{Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// Mamba-1 SSM (`selective_scan_ref`): inputs `(x [B,S,Hd], delta [B,S,Hd], a [Hd,N],
/// b [B,S,N], c [B,S,N])`, output `[B,S,Hd]`. No `D` skip and no gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectiveScan {
    pub state_size: usize,
}

/// Mamba-2 scalar-decay scan: inputs `(x [B,S,Hh,P], dt [B,S,Hh], a [Hh], b [B,S,Hh,N],
/// c [B,S,Hh,N])`, output the shape of `x`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mamba2 {
    pub head_dim: usize,
    pub state_size: usize,
}

/// Gated delta-rule linear attention: inputs `(q, k, v [B,S,Hv,N], g, beta [B,S,Hv])` with
/// `g [B,S,Hv,N]` if `gate_per_channel`, plus `state [B,Hv,N,N]` with `carry_state` (read as
/// the initial state, overwritten with the final one). Output `[B,S,Hv,N]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatedDeltaNet {
    pub state_size: usize,
    pub carry_state: bool,
    pub gate_per_channel: bool,
}

/// Checks that every operand is a float tensor of one dtype.
fn same_float(names: &[&str], ts: &[TensorType]) -> Result<(), String> {
    let d = ts[0].dtype;
    if !d.is_float() {
        return Err(format!("{} {} must be a float tensor", names[0], ts[0]));
    }
    if let Some((n, t)) = names.iter().zip(ts).find(|(_, t)| t.dtype != d) {
        return Err(format!("{n} {t} must have the dtype of {} {}", names[0], ts[0]));
    }
    Ok(())
}

/// Checks that `t` has exactly the dims `want`.
fn expect(name: &str, t: &TensorType, want: Vec<Dim>, layout: &str) -> Result<(), String> {
    let want = Shape(want);
    if t.shape != want {
        return Err(format!("{name} {t} must be {want} ({layout})"));
    }
    Ok(())
}

fn positive(name: &str, v: usize) -> Result<(), String> {
    if v == 0 {
        Err(format!("{name} must be at least 1"))
    } else {
        Ok(())
    }
}

impl OpDef for SelectiveScan {
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        same_float(&["x", "delta", "a", "b", "c"], inputs)?;
        positive("state_size", self.state_size)?;
        let x = &inputs[0];
        if x.rank() != 3 {
            return Err(format!("x {x} must be [B, S, Hd]"));
        }
        let [b, s, hd] = [0, 1, 2].map(|i| x.shape.dim(i).clone());
        let n = Dim::Static(self.state_size);
        expect("delta", &inputs[1], x.shape.0.clone(), "[B, S, Hd]")?;
        expect("a", &inputs[2], vec![hd, n.clone()], "[Hd, N]")?;
        expect("b", &inputs[3], vec![b.clone(), s.clone(), n.clone()], "[B, S, N]")?;
        expect("c", &inputs[4], vec![b, s, n], "[B, S, N]")?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for Mamba2 {
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        same_float(&["x", "dt", "a", "b", "c"], inputs)?;
        positive("head_dim", self.head_dim)?;
        positive("state_size", self.state_size)?;
        let x = &inputs[0];
        if x.rank() != 4 || x.shape.dim(3) != &Dim::Static(self.head_dim) {
            return Err(format!("x {x} must be [B, S, Hh, P] with P = head_dim {}", self.head_dim));
        }
        let [b, s, hh] = [0, 1, 2].map(|i| x.shape.dim(i).clone());
        let bsh = vec![b, s, hh.clone()];
        let mut bshn = bsh.clone();
        bshn.push(Dim::Static(self.state_size));
        expect("dt", &inputs[1], bsh, "[B, S, Hh]")?;
        expect("a", &inputs[2], vec![hh], "[Hh]")?;
        expect("b", &inputs[3], bshn.clone(), "[B, S, Hh, N]")?;
        expect("c", &inputs[4], bshn, "[B, S, Hh, N]")?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for GatedDeltaNet {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.carry_state { 6 } else { 5 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        same_float(&["q", "k", "v", "g", "beta", "state"], inputs)?;
        positive("state_size", self.state_size)?;
        let q = &inputs[0];
        let n = Dim::Static(self.state_size);
        if q.rank() != 4 || q.shape.dim(3) != &n {
            return Err(format!("q {q} must be [B, S, Hv, N] with N = state_size {}", self.state_size));
        }
        let [b, s, hv] = [0, 1, 2].map(|i| q.shape.dim(i).clone());
        expect("k", &inputs[1], q.shape.0.clone(), "the shape of q")?;
        expect("v", &inputs[2], q.shape.0.clone(), "the shape of q")?;
        let bsh = vec![b.clone(), s, hv.clone()];
        if self.gate_per_channel {
            expect("g", &inputs[3], q.shape.0.clone(), "[B, S, Hv, N] with gate_per_channel")?;
        } else {
            expect("g", &inputs[3], bsh.clone(), "[B, S, Hv]")?;
        }
        expect("beta", &inputs[4], bsh, "[B, S, Hv]")?;
        if let Some(state) = inputs.get(5) {
            expect("state", state, vec![b, hv, n.clone(), n], "[B, Hv, N, N]")?;
        }
        Ok(vec![q.clone()])
    }
    fn mutated_inputs(&self) -> Vec<usize> {
        if self.carry_state {
            vec![5]
        } else {
            Vec::new()
        }
    }
}

/// Builders for the ssm family.
impl crate::Graph {
    /// Mamba-1 selective scan over `(x, delta, a, b, c)`; `state_size` is read from `a`.
    pub fn selective_scan(&mut self, x: crate::ValueId, delta: crate::ValueId, a: crate::ValueId, b: crate::ValueId, c: crate::ValueId) -> crate::Result<crate::ValueId> {
        let state_size = self.ty(a).shape.dims().last().and_then(Dim::as_static).unwrap_or(0);
        self.add1(SelectiveScan { state_size }, &[x, delta, a, b, c])
    }

    /// Mamba-2 SSD scan over `(x, dt, a, b, c)`; `head_dim` and `state_size` are read from
    /// `x` and `b`.
    pub fn mamba2(&mut self, x: crate::ValueId, dt: crate::ValueId, a: crate::ValueId, b: crate::ValueId, c: crate::ValueId) -> crate::Result<crate::ValueId> {
        let last = |g: &Self, v| g.ty(v).shape.dims().last().and_then(Dim::as_static).unwrap_or(0);
        let attrs = Mamba2 { head_dim: last(self, x), state_size: last(self, b) };
        self.add1(attrs, &[x, dt, a, b, c])
    }

    /// Gated delta-rule attention; `state` (`[B,Hv,N,N]`) is carried and updated in place.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &mut self,
        q: crate::ValueId,
        k: crate::ValueId,
        v: crate::ValueId,
        g: crate::ValueId,
        beta: crate::ValueId,
        state: Option<crate::ValueId>,
        gate_per_channel: bool,
    ) -> crate::Result<crate::ValueId> {
        let state_size = self.ty(q).shape.dims().last().and_then(Dim::as_static).unwrap_or(0);
        let attrs = GatedDeltaNet { state_size, carry_state: state.is_some(), gate_per_channel };
        let mut ins = vec![q, k, v, g, beta];
        ins.extend(state);
        self.add1(attrs, &ins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph};

    fn ty(dims: &[Dim]) -> TensorType {
        TensorType::new(DType::F32, Shape(dims.to_vec()))
    }

    #[test]
    fn selective_scan_ties_state_size_to_a_b_c() {
        let mut g = Graph::new();
        let (bb, s) = (Dim::sym("B"), Dim::sym("S"));
        let x = g.input("x", ty(&[bb.clone(), s.clone(), 64.into()]));
        let a = g.param("a", ty(&[64.into(), 16.into()]));
        let b = g.input("b", ty(&[bb.clone(), s.clone(), 16.into()]));
        let y = g.selective_scan(x, x, a, b, b).unwrap();
        assert_eq!(g.ty(y), g.ty(x));
        let c = g.input("c", ty(&[bb, s, 8.into()]));
        let e = g.selective_scan(x, x, a, b, c).unwrap_err().to_string();
        assert!(e.contains("c f32[B, S, 8] must be [B, S, 16]"), "{e}");
    }

    #[test]
    fn mamba2_heads() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[2, 10, 4, 32]));
        let dt = g.input("dt", TensorType::of(DType::F32, &[2, 10, 4]));
        let a = g.param("a", TensorType::of(DType::F32, &[4]));
        let b = g.input("b", TensorType::of(DType::F32, &[2, 10, 4, 64]));
        let y = g.mamba2(x, dt, a, b, b).unwrap();
        assert_eq!(g.ty(y), g.ty(x));
        let e = g.mamba2(x, dt, dt, b, b).unwrap_err().to_string();
        assert!(e.contains("a f32[2, 10, 4] must be [4] ([Hh])"), "{e}");
    }

    #[test]
    fn gated_delta_net_carries_its_state_in_place() {
        let mut g = Graph::new();
        let q = g.input("q", TensorType::of(DType::F32, &[1, 6, 2, 8]));
        let gate = g.input("g", TensorType::of(DType::F32, &[1, 6, 2]));
        let st = g.input("st", TensorType::of(DType::F32, &[1, 2, 8, 8]));
        let o = g.gated_delta_net(q, q, q, gate, gate, Some(st), false).unwrap();
        assert_eq!(g.ty(o), g.ty(q));
        assert_eq!(g.node(o.node).op.def().mutated_inputs(), vec![5]);
        let e = g.gated_delta_net(q, q, q, gate, gate, None, true).unwrap_err().to_string();
        assert!(e.contains("with gate_per_channel"), "{e}");
        let bf = g.input("bf", TensorType::of(DType::BF16, &[1, 6, 2]));
        let e = g.gated_delta_net(q, q, q, gate, bf, None, false).unwrap_err().to_string();
        assert!(e.contains("beta bf16[1, 6, 2] must have the dtype of q"), "{e}");
    }
}
