//! The recurrent-state layers of Gated DeltaNet / Mamba style models: `LinearAttention` (the
//! linear, gated, delta and gated-delta rules) unrolled over its static sequence with batched
//! matrix products in F32, and `CausalConvWithState` as a depthwise `Conv` over the carried
//! state joined with the input.

use super::elementwise::{act, bin, bin_scalar, cast_to};
use super::matmul::matmul_nd;
use super::shape::{reshape_static, transpose_to};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::conv::Conv;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] =
    &[("LinearAttention", linear_attention), ("CausalConvWithState", causal_conv_with_state)];

/// `x[.., t, ..]` on `axis`, the axis kept with extent 1.
fn at(cx: &mut Cx<'_>, x: ValueId, axis: usize, t: usize) -> OpResult<ValueId> {
    cx.add1(Narrow { axis, start: t, len: 1 }, &[x])
}

/// `[B, T, h·d]` → `[B, h, T, d]` in F32.
fn heads(cx: &mut Cx<'_>, x: ValueId, h: usize, what: &str) -> OpResult<ValueId> {
    let [b, t, hd]: [usize; 3] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid(format!("{what} must be 3-D (B, T, H·D)")))?;
    if hd % h != 0 {
        return invalid(format!("{what}'s last dim {hd} is not a multiple of {h} heads"));
    }
    let x = cast_to(cx, x, DType::F32)?;
    let x = reshape_static(cx, x, &[b, t, h, hd / h])?;
    transpose_to(cx, x, &[0, 2, 1, 3])
}

/// `LinearAttention` (opset 27): per token, `S ← exp(g)·S` (gated rules), the write
/// `w = β·(v − Sᵀk)` (delta rules) or `w = v`, `S ← S + k ⊗ w`, and `o = scale·qᵀS` with each
/// key/value state shared by `q_num_heads / kv_num_heads` consecutive query heads.
fn linear_attention(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let rule = n.string("update_rule", "gated_delta");
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        r => return invalid(format!("update_rule `{r}` (linear, gated, delta or gated_delta)")),
    };
    let (hq, hkv) = (n.int("q_num_heads", 0), n.int("kv_num_heads", 0));
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return invalid(format!("q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}"));
    }
    let (hq, hkv) = (hq as usize, hkv as usize);
    let group = hq / hkv;
    let (query, key, value) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let (decay, beta) = (n.opt_input(4), n.opt_input(5));
    if gated != decay.is_some() {
        return invalid(format!("update_rule `{rule}` {} the decay input", if gated { "requires" } else { "forbids" }));
    }
    if delta != beta.is_some() {
        return invalid(format!("update_rule `{rule}` {} the beta input", if delta { "requires" } else { "forbids" }));
    }
    let out_dt = cx.dtype(query);
    let q = heads(cx, query, hq, "query")?;
    let k = heads(cx, key, hkv, "key")?;
    let v = heads(cx, value, hkv, "value")?;
    let [b, _, t, dk] = cx.dims(q)?[..] else { return invalid("query must be 3-D") };
    let vd = cx.dims(v)?;
    let dv = vd[3];
    if cx.dims(k)? != [b, hkv, t, dk] || vd[..3] != [b, hkv, t] {
        return invalid(format!("key {:?} and value {:?} do not match query {:?}", cx.dims(key)?, cx.dims(value)?, cx.dims(query)?));
    }
    // Query heads grouped by the key/value head they read: [B, Hkv, T, G, dk].
    let q = reshape_static(cx, q, &[b, hkv, group, t, dk])?;
    let q = transpose_to(cx, q, &[0, 1, 3, 2, 4])?;
    let gate = match decay {
        Some(g) => {
            let width = *cx.dims(g)?.last().unwrap_or(&0);
            if width != hkv && width != hkv * dk {
                return invalid(format!("decay's last dim {width} must be kv_num_heads ({hkv}) or kv_num_heads·d_k ({})", hkv * dk));
            }
            let g = heads(cx, g, hkv, "decay")?;
            Some(act(cx, ActivationKind::Exp, g)?)
        }
        None => None,
    };
    let beta = match beta {
        Some(x) => {
            let width = *cx.dims(x)?.last().unwrap_or(&0);
            if width != hkv && width != 1 {
                return invalid(format!("beta's last dim {width} must be kv_num_heads ({hkv}) or 1"));
            }
            Some(heads(cx, x, width, "beta")?)
        }
        None => None,
    };
    let state_dt = n.opt_input(3).map_or(out_dt, |s| cx.dtype(s));
    let mut state = match n.opt_input(3) {
        Some(s) => {
            if cx.dims(s)? != [b, hkv, dk, dv] {
                return invalid(format!("past_state {:?} must be [{b}, {hkv}, {dk}, {dv}]", cx.dims(s)?));
            }
            cast_to(cx, s, DType::F32)?
        }
        None => cx.values(DType::F32, &[b, hkv, dk, dv], &vec![0.0; b * hkv * dk * dv])?,
    };
    let mut outs = Vec::with_capacity(t);
    for i in 0..t {
        if let Some(g) = gate {
            let g = at(cx, g, 2, i)?;
            let width = cx.dims(g)?[3];
            let g = reshape_static(cx, g, &[b, hkv, width, 1])?;
            state = bin(cx, BinaryOp::Mul, state, g)?;
        }
        let k_row = at(cx, k, 2, i)?;
        let mut w = at(cx, v, 2, i)?;
        if let Some(beta) = beta {
            let read = matmul_nd(cx, k_row, state)?;
            let diff = bin(cx, BinaryOp::Sub, w, read)?;
            let rate = at(cx, beta, 2, i)?;
            w = bin(cx, BinaryOp::Mul, rate, diff)?;
        }
        let k_col = reshape_static(cx, k_row, &[b, hkv, dk, 1])?;
        let write = matmul_nd(cx, k_col, w)?;
        state = bin(cx, BinaryOp::Add, state, write)?;
        let q_t = at(cx, q, 2, i)?;
        let q_t = reshape_static(cx, q_t, &[b, hkv, group, dk])?;
        let o = matmul_nd(cx, q_t, state)?;
        outs.push(reshape_static(cx, o, &[b, 1, hq * dv])?);
    }
    let scale = match n.float("scale", 0.0) as f64 {
        0.0 => 1.0 / (dk as f64).sqrt(),
        s => s,
    };
    let y = if outs.len() == 1 { outs[0] } else { cx.add1(Concat { axis: 1 }, &outs)? };
    let y = bin_scalar(cx, BinaryOp::Mul, y, scale)?;
    Ok(vec![cast_to(cx, y, out_dt)?, cast_to(cx, state, state_dt)?])
}

/// `CausalConvWithState` (opset 27): `x` `[B, C, L]` joined after the carried `k − 1` steps
/// (zeros when absent), a depthwise `Conv` with the `[C, 1, k]` kernel and optional bias, then
/// `silu`/`swish` if asked; the new state is the last `k − 1` steps of the joined sequence.
fn causal_conv_with_state(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let [b, c, l]: [usize; 3] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("input must be 3-D (batch, channels, length)".into()))?;
    let wd = cx.dims(w)?;
    let [wc, 1, k] = wd[..] else { return invalid(format!("weight {wd:?} must be [channels, 1, k]")) };
    if wc != c || k == 0 {
        return invalid(format!("weight {wd:?} does not fit {c} channels"));
    }
    let silu = match n.string("activation", "none").as_str() {
        "none" => false,
        "silu" | "swish" => true,
        a => return invalid(format!("activation `{a}` (silu, swish or none)")),
    };
    let dt = cx.dtype(x);
    let joined = match (k, n.opt_input(3)) {
        (1, _) => x,
        (_, Some(past)) => {
            if cx.dims(past)? != [b, c, k - 1] {
                return invalid(format!("past_state {:?} must be [{b}, {c}, {}]", cx.dims(past)?, k - 1));
            }
            let past = cast_to(cx, past, dt)?;
            cx.add1(Concat { axis: 2 }, &[past, x])?
        }
        (_, None) => {
            let zeros = cx.values(dt, &[b, c, k - 1], &vec![0.0; b * c * (k - 1)])?;
            cx.add1(Concat { axis: 2 }, &[zeros, x])?
        }
    };
    let lifted = reshape_static(cx, joined, &[b, c, 1, l + k - 1])?;
    let kernel = reshape_static(cx, w, &[c, 1, 1, k])?;
    let kernel = cast_to(cx, kernel, dt)?;
    let conv = Conv { kernel_size: vec![1, k], stride: vec![1, 1], padding: vec![0, 0], dilation: vec![1, 1], groups: c };
    let y = cx.add1(conv, &[lifted, kernel])?;
    let mut y = reshape_static(cx, y, &[b, c, l])?;
    if let Some(bias) = n.opt_input(2) {
        let bias = cast_to(cx, bias, dt)?;
        let bias = reshape_static(cx, bias, &[c, 1])?;
        y = bin(cx, BinaryOp::Add, y, bias)?;
    }
    if silu {
        y = act(cx, ActivationKind::Silu, y)?;
    }
    let state = if k == 1 {
        cx.values(dt, &[b, c, 0], &[])?
    } else {
        cx.add1(Narrow { axis: 2, start: l, len: k - 1 }, &[joined])?
    };
    Ok(vec![y, state])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{float, graph, import_graph, int_attr, node, string_attr};
    use crate::error::IoError;

    /// `LinearAttention` over `[1, 2, 8]` inputs (2 heads of 4) with `extra` inputs after the
    /// past state.
    fn linear_attention(rule: &str, extra: &[&str]) -> IoError {
        let attrs = vec![int_attr("q_num_heads", 2), int_attr("kv_num_heads", 2), string_attr("update_rule", rule)];
        let mut inputs = vec!["q", "k", "v", ""];
        inputs.extend(extra);
        let n = node("LinearAttention", "", &inputs, &["y", "s"], attrs);
        let mut ins: Vec<_> = ["q", "k", "v"].iter().map(|s| float(s, &[1, 2, 8])).collect();
        ins.extend(extra.iter().map(|s| float(s, &[1, 2, 2])));
        let outs = vec![float("y", &[1, 2, 8]), float("s", &[1, 2, 4, 4])];
        match import_graph(&[("", 27)], graph(vec![n], ins, outs)) {
            Err(e) => e,
            Ok(g) => panic!("imported: {:?}", g.outputs),
        }
    }

    #[test]
    fn unknown_update_rules_name_node_op_and_opset() {
        match linear_attention("quadratic", &[]) {
            IoError::OnnxNode { node, op, opset, reason, .. } => {
                assert_eq!((node.as_str(), op.as_str(), opset), ("LinearAttention_node", "LinearAttention", 27));
                assert!(reason.contains("update_rule `quadratic`"), "{reason}");
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn the_rule_decides_which_of_decay_and_beta_are_allowed() {
        let e = linear_attention("linear", &["decay"]).to_string();
        assert!(e.contains("forbids the decay input"), "{e}");
        let e = linear_attention("delta", &[]).to_string();
        assert!(e.contains("requires the beta input"), "{e}");
    }
}
