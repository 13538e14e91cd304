//! Decompositions of the ssm family: the scans unrolled over time into `Binary`, `Activation`
//! (`Exp`), `MatMul`, `Narrow`, `Concat`, `Reshape` (OPS.md §13).
//!
//! Everything that does not depend on the state is computed for the whole sequence first
//! (decays `exp(Δ·A)`, inputs `Δ·B·x`); each step narrows its slice and updates the state with
//! one multiply-add. A zero initial state is not materialized (the first step's state is its
//! input term). The sequence length must be static; the batch may be symbolic.
//!
//! `GatedDeltaNet` with `carry_state` reads the carried state; the decomposed graph cannot
//! write the final state back into that input (rlx-cpu's `kernels::ssm` says what the executor
//! must do for the in-place form).

use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, Dim, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::SelectiveScan, OpKind::Mamba2, OpKind::GatedDeltaNet];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::SelectiveScan(_) => selective_scan(g, x),
        Op::Mamba2(_) => mamba2(g, x),
        Op::GatedDeltaNet(a) => gated_delta_net(g, x, a.gate_per_channel),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// The leading `[B, S]` of `x` and the static `S`.
fn batch_seq(g: &Graph, x: ValueId, kind: OpKind) -> Result<(Dim, Dim, usize), IrError> {
    let t = g.ty(x);
    let s = t.static_dim(1).map_err(|e| {
        IrError::Invalid(format!("{kind} decomposition unrolls the sequence, so its length must be static: {e}"))
    })?;
    if s == 0 {
        return Err(IrError::Invalid(format!("{kind} decomposition: the sequence {t} is empty")));
    }
    Ok((t.shape.dim(0).clone(), t.shape.dim(1).clone(), s))
}

/// `[lead.., rest..]` as a shape with static `rest`.
fn shape(lead: &[&Dim], rest: &[usize]) -> Shape {
    Shape(lead.iter().map(|d| (*d).clone()).chain(rest.iter().map(|&n| Dim::Static(n))).collect())
}

fn mul(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId, IrError> {
    g.binary(BinaryOp::Mul, a, b)
}

/// `state ← decay_t·state + input_t` for every `t` (`decay`, `input` are `[B, S, ..]` and
/// broadcast together), starting from zero; returns the states `[state_1 .. state_S]`, each
/// `[B, 1, ..]`.
fn scan(g: &mut Graph, s: usize, decay: ValueId, input: ValueId) -> Result<Vec<ValueId>, IrError> {
    let mut states: Vec<ValueId> = Vec::with_capacity(s);
    for t in 0..s {
        let u = g.narrow(input, 1, t, 1)?;
        let next = match states.last() {
            Some(&prev) => {
                let a = g.narrow(decay, 1, t, 1)?;
                let kept = mul(g, a, prev)?;
                g.binary(BinaryOp::Add, kept, u)?
            }
            None => u,
        };
        states.push(next);
    }
    Ok(states)
}

fn concat_seq(g: &mut Graph, xs: &[ValueId]) -> Result<ValueId, IrError> {
    if xs.len() == 1 {
        Ok(xs[0])
    } else {
        g.concat(xs, 1)
    }
}

/// `s_t = exp(Δ_t·A)·s_{t−1} + Δ_t·x_t·B_t` as `[B, S, Hd, N]` states, then `y = s·C` in one
/// batched product.
fn selective_scan(g: &mut Graph, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (xv, delta, a, bm, cm) = (x[0], x[1], x[2], x[3], x[4]);
    let (b, sd, s) = batch_seq(g, xv, OpKind::SelectiveScan)?;
    let [hd, n] = [g.ty(a).shape.dim(0).clone(), g.ty(a).shape.dim(1).clone()];
    let col = Shape(vec![b.clone(), sd.clone(), hd.clone(), Dim::Static(1)]);
    let d4 = g.reshape_to(delta, &col)?;
    let da = mul(g, d4, a)?;
    let decay = g.activation(ActivationKind::Exp, da)?;
    let dx = mul(g, delta, xv)?;
    let dx = g.reshape_to(dx, &col)?;
    let b4 = g.reshape_to(bm, &Shape(vec![b.clone(), sd.clone(), Dim::Static(1), n.clone()]))?;
    let input = mul(g, dx, b4)?;
    let states = scan(g, s, decay, input)?;
    let all = concat_seq(g, &states)?;
    let c4 = g.reshape_to(cm, &Shape(vec![b.clone(), sd.clone(), n, Dim::Static(1)]))?;
    let y = g.matmul(all, c4)?;
    g.reshape_to(y, &Shape(vec![b, sd, hd]))
}

/// `S_t = exp(dt_t·a)·S_{t−1} + (dt_t·x_t) ⊗ b_t` as `[B, S, Hh, P, N]` states, then
/// `y = S·c` in one batched product.
fn mamba2(g: &mut Graph, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (xv, dt, a, bm, cm) = (x[0], x[1], x[2], x[3], x[4]);
    let (b, sd, s) = batch_seq(g, xv, OpKind::Mamba2)?;
    let (hh, p, n) = {
        let (xt, bt) = (g.ty(xv), g.ty(bm));
        (
            xt.shape.dim(2).clone(),
            xt.static_dim(3).map_err(IrError::Invalid)?,
            bt.static_dim(3).map_err(IrError::Invalid)?,
        )
    };
    let lead = [&b, &sd, &hh];
    let da = mul(g, dt, a)?;
    let decay = g.activation(ActivationKind::Exp, da)?;
    let decay = g.reshape_to(decay, &shape(&lead, &[1, 1]))?;
    let dt4 = g.reshape_to(dt, &shape(&lead, &[1]))?;
    let u = mul(g, dt4, xv)?;
    let u = g.reshape_to(u, &shape(&lead, &[p, 1]))?;
    let b5 = g.reshape_to(bm, &shape(&lead, &[1, n]))?;
    let input = mul(g, u, b5)?;
    let states = scan(g, s, decay, input)?;
    let all = concat_seq(g, &states)?;
    let c5 = g.reshape_to(cm, &shape(&lead, &[n, 1]))?;
    let y = g.matmul(all, c5)?;
    g.reshape_to(y, &shape(&lead, &[p]))
}

/// A scalar constant of `dtype` (halves are made in f32 and cast).
fn scalar(g: &mut Graph, dtype: DType, v: f64) -> Result<ValueId, IrError> {
    match dtype {
        DType::F64 => g.constant(TensorType::of(DType::F64, &[]), v.to_le_bytes().to_vec()),
        DType::F32 => g.constant(TensorType::of(DType::F32, &[]), (v as f32).to_le_bytes().to_vec()),
        d => {
            let c = scalar(g, DType::F32, v)?;
            g.cast(c, d)
        }
    }
}

/// Per step and head, with `S [N, N]` as `[B, 1, Hv, N, N]` (rows = key dim):
/// `S ← S·e^g`; `d = (vᵀ − kᵀS)·β`; `S += k dᵀ`; `oᵀ = (q/√N)ᵀ S`.
fn gated_delta_net(g: &mut Graph, x: &[ValueId], per_channel: bool) -> Result<ValueId, IrError> {
    let (q, k, v, gate, beta) = (x[0], x[1], x[2], x[3], x[4]);
    let (b, sd, s) = batch_seq(g, q, OpKind::GatedDeltaNet)?;
    let (hv, n, dtype) = {
        let t = g.ty(q);
        (t.shape.dim(2).clone(), t.static_dim(3).map_err(IrError::Invalid)?, t.dtype)
    };
    let lead = [&b, &sd, &hv];
    let row = |g: &mut Graph, t: ValueId| g.reshape_to(t, &shape(&lead, &[1, n]));
    let eg = g.activation(ActivationKind::Exp, gate)?;
    let decay = g.reshape_to(eg, &shape(&lead, &[if per_channel { n } else { 1 }, 1]))?;
    let k_row = row(g, k)?;
    let k_col = g.reshape_to(k, &shape(&lead, &[n, 1]))?;
    let v_row = row(g, v)?;
    let scale = scalar(g, dtype, 1.0 / (n as f64).sqrt())?;
    let qs = mul(g, q, scale)?;
    let q_row = row(g, qs)?;
    let beta = g.reshape_to(beta, &shape(&lead, &[1, 1]))?;
    let mut state = match x.get(5) {
        Some(&st) => {
            Some(g.reshape_to(st, &Shape(vec![b.clone(), Dim::Static(1), hv.clone(), Dim::Static(n), Dim::Static(n)]))?)
        }
        None => None,
    };
    let mut outs = Vec::with_capacity(s);
    for t in 0..s {
        let at = |g: &mut Graph, v: ValueId| g.narrow(v, 1, t, 1);
        let (kr, kc, vr, qr, bt) = (at(g, k_row)?, at(g, k_col)?, at(g, v_row)?, at(g, q_row)?, at(g, beta)?);
        let (diff, decayed) = match state {
            Some(st) => {
                let e = at(g, decay)?;
                let st = mul(g, st, e)?;
                let u = g.matmul(kr, st)?;
                (g.binary(BinaryOp::Sub, vr, u)?, Some(st))
            }
            None => (vr, None),
        };
        let d = mul(g, diff, bt)?;
        let kd = mul(g, kc, d)?;
        let st = match decayed {
            Some(st) => g.binary(BinaryOp::Add, st, kd)?,
            None => kd,
        };
        outs.push(g.matmul(qr, st)?);
        state = Some(st);
    }
    let o = concat_seq(g, &outs)?;
    g.reshape_to(o, &shape(&lead, &[n]))
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
        assert_eq!(out.ty(out.outputs()[0]), g.ty(g.outputs()[0]));
        out
    }

    #[test]
    fn selective_scan_unrolls_with_a_symbolic_batch() {
        let src = r#"
            %0 = Input(name:"x",ty:(dtype:F32,shape:["B",4,6]))()
            %1 = Input(name:"delta",ty:(dtype:F32,shape:["B",4,6]))()
            %2 = Param(name:"a",ty:(dtype:F32,shape:[6,3]))()
            %3 = Input(name:"b",ty:(dtype:F32,shape:["B",4,3]))()
            %4 = Input(name:"c",ty:(dtype:F32,shape:["B",4,3]))()
            %5 = SelectiveScan(state_size:3)(%0, %1, %2, %3, %4)
            return %5"#;
        lowers(src, OpKind::SelectiveScan);
    }

    #[test]
    fn mamba2_unrolls() {
        let src = r#"
            %0 = Input(name:"x",ty:(dtype:F64,shape:[2,5,3,4]))()
            %1 = Input(name:"dt",ty:(dtype:F64,shape:[2,5,3]))()
            %2 = Param(name:"a",ty:(dtype:F64,shape:[3]))()
            %3 = Input(name:"b",ty:(dtype:F64,shape:[2,5,3,7]))()
            %4 = Input(name:"c",ty:(dtype:F64,shape:[2,5,3,7]))()
            %5 = Mamba2(head_dim:4,state_size:7)(%0, %1, %2, %3, %4)
            return %5"#;
        let out = lowers(src, OpKind::Mamba2);
        assert_eq!(out.nodes().iter().filter(|n| n.op.kind() == OpKind::Concat).count(), 1);
    }

    #[test]
    fn gated_delta_net_unrolls_with_and_without_carry() {
        let head = r#"
            %0 = Input(name:"q",ty:(dtype:F32,shape:["B",3,2,4]))()
            %1 = Input(name:"g",ty:(dtype:F32,shape:["B",3,2,4]))()
            %2 = Input(name:"beta",ty:(dtype:F32,shape:["B",3,2]))()
            %3 = Input(name:"s",ty:(dtype:F32,shape:["B",2,4,4]))()"#;
        let carried = format!("{head}\n%4 = GatedDeltaNet(state_size:4,carry_state:true,gate_per_channel:true)(%0, %0, %0, %1, %2, %3)\nreturn %4");
        let out = lowers(&carried, OpKind::GatedDeltaNet);
        // kᵀS and qᵀS at every step.
        assert_eq!(out.nodes().iter().filter(|n| n.op.kind() == OpKind::MatMul).count(), 2 * 3);
        let fresh = r#"
            %0 = Input(name:"q",ty:(dtype:BF16,shape:[1,2,1,3]))()
            %1 = Input(name:"g",ty:(dtype:BF16,shape:[1,2,1]))()
            %2 = GatedDeltaNet(state_size:3,carry_state:false,gate_per_channel:false)(%0, %0, %0, %1, %1)
            return %2"#;
        let out = lowers(fresh, OpKind::GatedDeltaNet);
        assert!(out.to_string().contains("Cast(to:BF16)"), "{out}");
    }

    #[test]
    fn symbolic_sequence_is_refused() {
        let src = r#"
            %0 = Input(name:"x",ty:(dtype:F32,shape:[1,"S",2,2]))()
            %1 = Input(name:"dt",ty:(dtype:F32,shape:[1,"S",2]))()
            %2 = Param(name:"a",ty:(dtype:F32,shape:[2]))()
            %3 = Mamba2(head_dim:2,state_size:2)(%0, %1, %2, %0, %0)
            return %3"#;
        let e = legalize(&parse(src).unwrap(), "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("Mamba2 decomposition unrolls the sequence"), "{e}");
    }
}
