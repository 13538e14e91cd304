//! ONNX `Attention` (opsets 23–24) lowered to matrix products and a softmax: 3-D inputs split
//! into heads, past key/value caches concatenated, grouped key/value heads repeated, boolean
//! or additive masks, causal and sliding-window masking aligned to the cache, `nonpad_kv_seqlen` padding, softcap,
//! and the four `qk_matmul_output` modes. Fully masked rows give zeros, as the reference does.
//! `FlexAttention` of the `ai.onnx.preview` domain lowers the same way.

use super::elementwise::{act, bin, bin_scalar, cast_to, select};
use super::matmul::matmul_nd;
use super::shape::{expand_to, reshape_static, transpose_to};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::import::inline_graph;
use crate::onnx::tensor::dtype;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ops::reduce::{Reduce, ReduceOp};
use rlx_ir::ops::shape::{Concat, Pad, PadMode};
use rlx_ir::ops::softmax::Softmax;
use rlx_ir::{DType, Shape, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[("Attention", attention)];

/// The converters of the `ai.onnx.preview` domain.
pub const PREVIEW: &[(&str, Convert)] = &[("FlexAttention", flex_attention)];

/// `[B, S, h·H]` → `[B, h, S, H]`.
fn split_heads(cx: &mut Cx<'_>, x: ValueId, heads: usize) -> OpResult<ValueId> {
    let [b, s, hidden]: [usize; 3] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("3-D input expected".into()))?;
    if heads == 0 || hidden % heads != 0 {
        return invalid(format!("{heads} heads do not divide hidden size {hidden}"));
    }
    let y = reshape_static(cx, x, &[b, s, heads, hidden / heads])?;
    transpose_to(cx, y, &[0, 2, 1, 3])
}

/// `[B, kv, L, H]` → `[B, kv·g, L, H]`, each head repeated `g` times in place (`np.repeat`).
fn repeat_heads(cx: &mut Cx<'_>, x: ValueId, g: usize) -> OpResult<ValueId> {
    if g == 1 {
        return Ok(x);
    }
    let [b, kv, l, h]: [usize; 4] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("4-D key expected".into()))?;
    let y = reshape_static(cx, x, &[b, kv, 1, l, h])?;
    let y = expand_to(cx, y, &Shape::of(&[b, kv, g, l, h]))?;
    reshape_static(cx, y, &[b, kv * g, l, h])
}

/// `allowed ? 0 : −inf` in `dt`.
fn bias_of(cx: &mut Cx<'_>, allowed: ValueId, dt: DType) -> OpResult<ValueId> {
    let zero = cx.scalar(dt, 0.0)?;
    let minus_inf = cx.scalar(dt, f64::NEG_INFINITY)?;
    select(cx, allowed, zero, minus_inf)
}

/// Softmax over the last axis. Half-precision logits take the spelled-out
/// `exp(x − max) / Σ exp(x − max)`, each step rounded to the half type, as the ONNX reference
/// (and the function body's `Softmax` in the input type) computes it; rlx's `Softmax` would
/// keep the intermediates in F32 and land an ulp away.
fn softmax_last(cx: &mut Cx<'_>, x: ValueId) -> OpResult<ValueId> {
    if !matches!(cx.dtype(x), DType::F16 | DType::BF16) {
        return cx.add1(Softmax { axis: -1 }, &[x]);
    }
    let axes = vec![cx.rank(x) - 1];
    let top = cx.add1(Reduce { op: ReduceOp::Max, axes: axes.clone(), keep_dim: true }, &[x])?;
    let shifted = bin(cx, BinaryOp::Sub, x, top)?;
    let e = act(cx, ActivationKind::Exp, shifted)?;
    let total = cx.add1(Reduce { op: ReduceOp::Sum, axes, keep_dim: true }, &[e])?;
    bin(cx, BinaryOp::Div, e, total)
}

fn attention(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (mut q, mut k, mut v) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let rank3 = cx.rank(q) == 3;
    if rank3 {
        let (qh, kvh) = (n.int("q_num_heads", 0) as usize, n.int("kv_num_heads", 0) as usize);
        q = split_heads(cx, q, qh)?;
        k = split_heads(cx, k, kvh)?;
        v = split_heads(cx, v, kvh)?;
    }
    let dt = cx.dtype(q);
    let qd = cx.dims(q)?;
    let [b, q_heads, s, head] = qd[..] else { return invalid("Q must be 4-D after splitting heads") };
    if cx.rank(k) != 4 || cx.rank(v) != 4 {
        return invalid("K and V must be 4-D after splitting heads");
    }
    let past_len = match n.opt_input(4) {
        Some(pk) => {
            let pv = n.input(5)?;
            if cx.rank(pk) != 4 {
                return invalid("past_key must be 4-D");
            }
            let len = cx.dims(pk)?[2];
            k = cx.add1(Concat { axis: 2 }, &[pk, k])?;
            v = cx.add1(Concat { axis: 2 }, &[pv, v])?;
            len
        }
        None => 0,
    };
    let (present_k, present_v) = (k, v);
    let l = cx.dims(k)?[2];
    let kv_heads = cx.dims(k)?[1];
    let nonpad = n.opt_input(6);

    let mut bias = None;
    if let Some(mut mask) = n.opt_input(3) {
        let md = cx.dims(mask)?;
        let width = *md.last().ok_or_else(|| OpError::Invalid("attn_mask needs an axis".into()))?;
        let is_bool = cx.dtype(mask) == DType::Bool;
        if width < l {
            let mut pads = vec![[0, 0]; md.len()];
            pads[md.len() - 1] = [0, l - width];
            let fill = if is_bool { 0.0 } else { f64::NEG_INFINITY };
            mask = cx.add1(Pad { pads, mode: PadMode::Constant(fill) }, &[mask])?;
        }
        bias = Some(if is_bool { bias_of(cx, mask, dt)? } else { cast_to(cx, mask, dt)? });
    }
    let positions = |cx: &mut Cx<'_>, dims: &[usize], count: usize| cx.values(DType::I64, dims, &(0..count).map(|i| i as f64).collect::<Vec<_>>());
    let causal = n.int("is_causal", 0) != 0;
    let (left, right) = (n.int("left_window_size", -1), n.int("right_window_size", -1));
    if causal || left >= 0 || right >= 0 {
        let i = positions(cx, &[s, 1], s)?;
        let j = positions(cx, &[1, l], l)?;
        let ahead = bin(cx, BinaryOp::Sub, j, i)?;
        let offset = match (past_len, nonpad) {
            (0, Some(np)) => {
                let np = cast_to(cx, np, DType::I64)?;
                let off = bin_scalar(cx, BinaryOp::Sub, np, s as f64)?;
                reshape_static(cx, off, &[b, 1, 1, 1])?
            }
            (p, _) => cx.scalar(DType::I64, p as f64)?,
        };
        let mut limits = Vec::new();
        if causal {
            limits.push(cx.add1(Compare { op: CmpOp::Le }, &[ahead, offset])?);
        }
        if left >= 0 {
            let lo = bin_scalar(cx, BinaryOp::Sub, offset, left as f64)?;
            limits.push(cx.add1(Compare { op: CmpOp::Ge }, &[ahead, lo])?);
        }
        if right >= 0 {
            let hi = bin_scalar(cx, BinaryOp::Add, offset, right as f64)?;
            limits.push(cx.add1(Compare { op: CmpOp::Le }, &[ahead, hi])?);
        }
        let mut allowed = limits[0];
        for &m in &limits[1..] {
            allowed = bin(cx, BinaryOp::BitAnd, allowed, m)?;
        }
        let window = bias_of(cx, allowed, dt)?;
        bias = Some(match bias {
            Some(m) => bin(cx, BinaryOp::Add, m, window)?,
            None => window,
        });
    }
    if let Some(np) = nonpad {
        let np = cast_to(cx, np, DType::I64)?;
        let np = reshape_static(cx, np, &[b, 1, 1, 1])?;
        let j = positions(cx, &[1, 1, 1, l], l)?;
        let inside = cx.add1(Compare { op: CmpOp::Lt }, &[j, np])?;
        let pad_bias = bias_of(cx, inside, dt)?;
        bias = Some(match bias {
            Some(m) => bin(cx, BinaryOp::Add, m, pad_bias)?,
            None => pad_bias,
        });
    }

    if q_heads != kv_heads {
        if kv_heads == 0 || q_heads % kv_heads != 0 {
            return invalid(format!("{q_heads} query heads are not a multiple of {kv_heads} key/value heads"));
        }
        k = repeat_heads(cx, k, q_heads / kv_heads)?;
        v = repeat_heads(cx, v, q_heads / kv_heads)?;
    }
    let scale = n.attr("scale").map_or(1.0 / (head as f64).sqrt(), |a| a.f as f64).sqrt();
    let qs = bin_scalar(cx, BinaryOp::Mul, q, scale)?;
    let ks = bin_scalar(cx, BinaryOp::Mul, k, scale)?;
    let kt = transpose_to(cx, ks, &[0, 1, 3, 2])?;
    let mut qk = matmul_nd(cx, qs, kt)?;
    let softcap = n.float("softcap", 0.0) as f64;
    if softcap > 0.0 {
        let t = bin_scalar(cx, BinaryOp::Div, qk, softcap)?;
        let t = act(cx, ActivationKind::Tanh, t)?;
        qk = bin_scalar(cx, BinaryOp::Mul, t, softcap)?;
    }
    let mode = n.int("qk_matmul_output_mode", 0);
    let with_bias = match bias {
        Some(bias) => bin(cx, BinaryOp::Add, qk, bias)?,
        None => qk,
    };
    let mut qk_out = if mode == 2 { with_bias } else { qk };
    let precision = match n.attr("softmax_precision") {
        Some(a) => dtype(a.i as i32).ok_or_else(|| OpError::Unsupported(format!("softmax_precision {}", a.i)))?,
        None => dt,
    };
    let logits = cast_to(cx, with_bias, precision)?;
    let mut probs = softmax_last(cx, logits)?;
    if let Some(bias) = bias {
        let top = cx.add1(Reduce { op: ReduceOp::Max, axes: vec![cx.rank(bias) - 1], keep_dim: true }, &[bias])?;
        let minus_inf = cx.scalar(dt, f64::NEG_INFINITY)?;
        let dead = cx.add1(Compare { op: CmpOp::Eq }, &[top, minus_inf])?;
        let zero = cx.scalar(precision, 0.0)?;
        probs = select(cx, dead, zero, probs)?;
    }
    let probs = cast_to(cx, probs, dt)?;
    if mode == 3 {
        qk_out = probs;
    }
    let mut y = matmul_nd(cx, probs, v)?;
    if rank3 {
        let yd = cx.dims(y)?;
        y = transpose_to(cx, y, &[0, 2, 1, 3])?;
        y = reshape_static(cx, y, &[yd[0], yd[2], yd[1] * yd[3]])?;
    }
    let qk_out = cast_to(cx, qk_out, dt)?;
    Ok(vec![y, present_k, present_v, qk_out])
}

/// `FlexAttention` (`ai.onnx.preview` opset 1) over `[B, H, L, E]` inputs: `Q·Kᵀ` with `√scale`
/// applied to both operands, the `score_mod` graph, a softmax in `softmax_precision` (F32 for
/// half inputs), the `prob_mod` graph, the product with `V`; grouped key/value heads repeated.
/// The modifier graphs are converted in place on the `[B, H, L, S]` tensor.
fn flex_attention(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (q, k, v) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let (qd, kd, vd) = (cx.dims(q)?, cx.dims(k)?, cx.dims(v)?);
    let (&[_, hq, _, e], &[_, hkv, s, ek], &[_, hv, sv, _]) = (&qd[..], &kd[..], &vd[..]) else {
        return invalid(format!("Q {qd:?}, K {kd:?} and V {vd:?} must be 4-D"));
    };
    if hkv != hv || s != sv || e != ek {
        return invalid(format!("Q {qd:?}, K {kd:?} and V {vd:?} disagree in heads, sequence or head size"));
    }
    let (k, v) = if hq != hkv {
        if hkv == 0 || hq % hkv != 0 {
            return invalid(format!("{hq} query heads are not a multiple of {hkv} key/value heads"));
        }
        (repeat_heads(cx, k, hq / hkv)?, repeat_heads(cx, v, hq / hkv)?)
    } else {
        (k, v)
    };
    let dt = cx.dtype(q);
    let precision = match n.attr("softmax_precision") {
        Some(a) => dtype(a.i as i32).ok_or_else(|| OpError::Unsupported(format!("softmax_precision {}", a.i)))?,
        None if matches!(dt, DType::F16 | DType::BF16) => DType::F32,
        None => dt,
    };
    let scale = n.attr("scale").map_or(1.0 / (e as f64).sqrt(), |a| a.f as f64);
    let root = (scale as f32).sqrt() as f64;
    let qs = bin_scalar(cx, BinaryOp::Mul, q, root)?;
    let ks = bin_scalar(cx, BinaryOp::Mul, k, root)?;
    let kt = transpose_to(cx, ks, &[0, 1, 3, 2])?;
    let scores = matmul_nd(cx, qs, kt)?;
    let scores = cast_to(cx, scores, precision)?;
    let scores = modify(cx, n, "score_mod", scores)?;
    let probs = softmax_last(cx, scores)?;
    let probs = modify(cx, n, "prob_mod", probs)?;
    let v_c = cast_to(cx, v, precision)?;
    let y = matmul_nd(cx, probs, v_c)?;
    Ok(vec![cast_to(cx, y, cx.dtype(v))?])
}

/// `x` through the modifier graph attribute `name` if the node has one; it must keep the
/// shape and element type.
fn modify(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, name: &str, x: ValueId) -> OpResult<ValueId> {
    let Some(graph) = n.attr(name).and_then(|a| a.g.as_ref()) else { return Ok(x) };
    let outs = inline_graph(cx, graph, n.opsets, n.base, &[x]).map_err(|e| match e {
        OpError::Unsupported(r) => OpError::Unsupported(format!("{name}: {r}")),
        OpError::Invalid(r) => OpError::Invalid(format!("{name}: {r}")),
    })?;
    match outs[..] {
        [y] if cx.ty(y) == cx.ty(x) => Ok(y),
        [y] => invalid(format!("{name} turns {} into {}; it must keep shape and type", cx.ty(x), cx.ty(y))),
        _ => invalid(format!("{name} must have one output, not {}", outs.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{float, graph, graph_attr, import_graph, node};
    use crate::error::IoError;

    /// `FlexAttention` on `[1, 1, 2, 4]` inputs whose `score_mod` adds `addend` to the scores.
    fn flex(addend: &str) -> crate::error::Result<crate::onnx::OnnxGraph> {
        let score_mod = graph(
            vec![node("Add", "", &["scores", addend], &["out"], vec![])],
            vec![float("scores", &[1, 1, 2, 2])],
            vec![float("out", &[1, 1, 2, 2])],
        );
        let n = node("FlexAttention", "ai.onnx.preview", &["q", "k", "v"], &["y"], vec![graph_attr("score_mod", score_mod)]);
        let ins = ["q", "k", "v"].iter().map(|s| float(s, &[1, 1, 2, 4])).collect();
        import_graph(&[("", 26), ("ai.onnx.preview", 1)], graph(vec![n], ins, vec![float("y", &[1, 1, 2, 4])]))
    }

    #[test]
    fn a_score_mod_graph_is_converted_in_place() {
        assert!(flex("scores").is_ok());
    }

    #[test]
    fn a_score_mod_reading_an_outer_value_names_it() {
        match flex("q") {
            Err(IoError::OnnxNode { op, reason, .. }) => {
                assert_eq!(op, "FlexAttention");
                assert!(reason.contains("score_mod") && reason.contains("`q`"), "{reason}");
            }
            other => panic!("{:?}", other.map(|g| g.outputs)),
        }
    }
}
