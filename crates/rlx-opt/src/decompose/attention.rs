//! Decompositions of the attention family (OPS.md §7, §22): `Attention` and its backward
//! ops into `MatMul`/`Reduce`/`Binary`/`Where` over head-major `[B, H, S, D]` views, and the
//! rotary embeddings (`Rope`, `RopeBackward`, `AxialRope2d`) into `Narrow`/`Mul`/`Concat`.
//!
//! Half-float operands are cast to F32 first (OPS.md computes scores and softmax in F32,
//! where the −1e9 of masked logits is finite). `Causal` and `SlidingWindow` become a constant
//! Bool mask, so they need static sequence lengths.

use super::norm::{in_f32, scalar};
use rlx_ir::ops::attention::*;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Attention,
    OpKind::AttentionBackward,
    OpKind::AttentionBackwardAll,
    OpKind::Rope,
    OpKind::RopeBackward,
    OpKind::AxialRope2d,
];

type R<T = ValueId> = Result<T, IrError>;

/// The logit that masked positions get.
const MASKED: f64 = -1e9;

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<R<Vec<ValueId>>> {
    Some(match op {
        Op::Attention(a) => read_rows(g, a, x).and_then(|x| in_f32(g, &x, |g, x| attention(g, a, x))).map(|v| vec![v]),
        Op::AttentionBackward(a) => {
            let wrt = match a.wrt {
                AttentionBwdWrt::Query => 0,
                AttentionBwdWrt::Key => 1,
                AttentionBwdWrt::Value => 2,
            };
            let dtype = g.ty(x[wrt]).dtype;
            attention_grads(g, a.num_heads, a.head_dim, a.mask_kind, x, &[wrt]).and_then(|v| back_to(g, v, dtype))
        }
        Op::AttentionBackwardAll(a) => {
            let dtype = g.ty(x[0]).dtype;
            attention_grads(g, a.num_heads, a.head_dim, a.mask_kind, x, &[0, 1, 2]).and_then(|v| back_to(g, v, dtype))
        }
        Op::Rope(a) => in_f32(g, x, |g, x| rope(g, x, a.head_dim, a.n_rot, a.style, false)).map(|v| vec![v]),
        Op::RopeBackward(a) => in_f32(g, x, |g, x| rope(g, x, a.head_dim, a.n_rot, a.style, true)).map(|v| vec![v]),
        Op::AxialRope2d(a) => in_f32(g, x, |g, x| axial_rope(g, a, x[0])).map(|v| vec![v]),
        _ => return None,
    })
}

fn bin(g: &mut Graph, op: BinaryOp, a: ValueId, b: ValueId) -> R {
    g.binary(op, a, b)
}

/// `values` cast to `dtype` where they differ.
fn back_to(g: &mut Graph, values: Vec<ValueId>, dtype: DType) -> R<Vec<ValueId>> {
    values.into_iter().map(|v| if g.ty(v).dtype == dtype { Ok(v) } else { g.cast(v, dtype) }).collect()
}

/// `v` cast to F32 when it is a half float.
fn widen(g: &mut Graph, v: ValueId) -> R {
    match g.ty(v).dtype {
        DType::F16 | DType::BF16 => g.cast(v, DType::F32),
        _ => Ok(v),
    }
}

/// Q, K or V (or an output-shaped gradient) as head-major `[B, H, S, D]`.
fn to_heads(g: &mut Graph, x: ValueId, heads: usize) -> R {
    let ty = g.ty(x).clone();
    let dims = ty.shape.dims();
    let (b, s, w) = match dims {
        [_, _, _, _] => return Ok(x),
        [b, s, w] => (b.clone(), s.clone(), w),
        [s, w] => (Dim::Static(1), s.clone(), w),
        _ => return Err(IrError::Invalid(format!("attention operand {ty} has no head layout"))),
    };
    let w = w.as_static().ok_or_else(|| IrError::Invalid(format!("the head width of {ty} must be static")))?;
    let split = g.reshape_to(x, &Shape(vec![b, s, Dim::Static(heads), Dim::Static(w / heads)]))?;
    g.transpose(split, &[0, 2, 1, 3])
}

/// K or V as head-major `[B, H, S, D]`: its `H_kv` heads each repeated consecutively for the
/// `H / H_kv` query heads that read it (OPS.md's GQA repeat; the identity when not grouped).
fn to_query_heads(g: &mut Graph, x: ValueId, kv_heads: usize, heads: usize) -> R {
    let x = to_heads(g, x, kv_heads)?;
    if kv_heads == heads {
        return Ok(x);
    }
    let d = g.ty(x).shape.dims().to_vec();
    let (b, s, w) = (d[0].clone(), d[2].clone(), d[3].clone());
    let one = g.reshape_to(x, &Shape(vec![b.clone(), Dim::Static(kv_heads), Dim::Static(1), s.clone(), w.clone()]))?;
    let wide = g.expand_to(one, &Shape(vec![b.clone(), Dim::Static(kv_heads), Dim::Static(heads / kv_heads), s.clone(), w.clone()]))?;
    g.reshape_to(wide, &Shape(vec![b, Dim::Static(heads), s, w]))
}

/// A head-major `[B, H, S, D]` result back in the layout of `like` (rank 4, 3 or 2).
fn from_heads(g: &mut Graph, y: ValueId, like: &TensorType) -> R {
    if like.rank() == 4 {
        return Ok(y);
    }
    let t = g.transpose(y, &[0, 2, 1, 3])?;
    let d = g.ty(y).shape.dims().to_vec();
    let width = Dim::Static(d[1].as_static().unwrap_or(0) * d[3].as_static().unwrap_or(0));
    let mut out: Vec<Dim> = like.shape.dims()[..like.rank() - 1].to_vec();
    out.push(width);
    g.reshape_to(t, &Shape(out))
}

/// `x` with its last two axes swapped.
fn swap_last(g: &mut Graph, x: ValueId) -> R {
    let rank = g.ty(x).rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 1, rank - 2);
    g.transpose(x, &perm)
}

/// The sequence length of an attention operand in its layout.
fn seq_len(ty: &TensorType) -> Dim {
    ty.shape.dim(if ty.rank() == 2 { 0 } else { ty.rank() - 2 }).clone()
}

/// The Bool keep-mask of `kind`, broadcastable to the `[B, H, S_q, S_k]` logits; `None`
/// when every key is kept (`None`, `Bias`).
fn keep_mask(g: &mut Graph, kind: MaskKind, mask: Option<ValueId>, q: &TensorType, k: &TensorType) -> R<Option<ValueId>> {
    match kind {
        MaskKind::None | MaskKind::Bias => Ok(None),
        MaskKind::Custom => {
            let m = mask.ok_or_else(|| IrError::Invalid("a Custom mask needs its mask input".into()))?;
            // [S_k] and [B, S_k] masks broadcast as [.., 1, 1, S_k] against the logits.
            let m = if g.ty(m).rank() == 2 {
                let d = g.ty(m).shape.dims().to_vec();
                g.reshape_to(m, &Shape(vec![d[0].clone(), Dim::Static(1), Dim::Static(1), d[1].clone()]))?
            } else {
                m
            };
            if g.ty(m).dtype == DType::Bool {
                return Ok(Some(m));
            }
            let m = widen(g, m)?;
            let half = scalar(g, g.ty(m).dtype, 0.5)?;
            Ok(Some(g.compare(CmpOp::Ge, m, half)?))
        }
        MaskKind::Causal | MaskKind::SlidingWindow(_) => {
            let (sq, sk) = match (seq_len(q), seq_len(k)) {
                (Dim::Static(a), Dim::Static(b)) => (a, b),
                (a, b) => {
                    return Err(IrError::Invalid(format!(
                        "the {kind:?} mask decomposes into a constant and needs static sequence lengths, got S_q = {a}, S_k = {b}"
                    )))
                }
            };
            let window = match kind {
                MaskKind::SlidingWindow(w) => w as isize,
                _ => isize::MAX,
            };
            let mut data = Vec::with_capacity(sq * sk);
            for qi in 0..sq {
                let abs_q = sk as isize - sq as isize + qi as isize;
                for ki in 0..sk as isize {
                    data.push((ki <= abs_q && ki > abs_q.saturating_sub(window)) as u8);
                }
            }
            Ok(Some(g.constant(TensorType::of(DType::Bool, &[sq, sk]), data)?))
        }
    }
}

/// Softmax over the last axis: `exp(s − max)/Σ exp(s − max)`.
fn softmax(g: &mut Graph, s: ValueId) -> R {
    let last = g.ty(s).rank() - 1;
    let m = g.reduce(ReduceOp::Max, s, &[last], true)?;
    let c = bin(g, BinaryOp::Sub, s, m)?;
    let e = g.activation(ActivationKind::Exp, c)?;
    let z = g.reduce(ReduceOp::Sum, e, &[last], true)?;
    bin(g, BinaryOp::Div, e, z)
}

/// The attention weights `P [B, H, S_q, S_k]` of head-major `q`, `k`, and the keep mask.
#[allow(clippy::too_many_arguments)]
fn weights(
    g: &mut Graph,
    q: ValueId,
    k: ValueId,
    scale: f64,
    softcap: Option<f32>,
    bias: Option<ValueId>,
    keep: Option<ValueId>,
) -> R {
    let kt = swap_last(g, k)?;
    let s = g.matmul(q, kt)?;
    let dtype = g.ty(s).dtype;
    let a = scalar(g, dtype, scale)?;
    let mut s = bin(g, BinaryOp::Mul, s, a)?;
    if let Some(c) = softcap {
        let c = scalar(g, dtype, c as f64)?;
        let t = bin(g, BinaryOp::Div, s, c)?;
        let t = g.activation(ActivationKind::Tanh, t)?;
        s = bin(g, BinaryOp::Mul, t, c)?;
    }
    if let Some(b) = bias {
        let b = if g.ty(b).dtype == dtype { b } else { g.cast(b, dtype)? };
        s = bin(g, BinaryOp::Add, s, b)?;
    }
    if let Some(keep) = keep {
        let neg = scalar(g, dtype, MASKED)?;
        s = g.select(keep, s, neg)?;
    }
    softmax(g, s)
}

/// `(q, k, v, mask?)` → `softmax(mask(α·Q·Kᵀ))·V` in Q's layout.
/// `(q, k, v, mask?)` of an `Attention`, K and V gathered at its `kv_rows` when it has them.
fn read_rows(g: &mut Graph, a: &Attention, x: &[ValueId]) -> R<Vec<ValueId>> {
    let mut x = x.to_vec();
    if let Some(at) = a.kv_rows_input(x.len()) {
        let rows = x.remove(at);
        x[1] = g.gather(x[1], rows, 0)?;
        x[2] = g.gather(x[2], rows, 0)?;
    }
    Ok(x)
}

fn attention(g: &mut Graph, a: &Attention, x: &[ValueId]) -> R {
    let (qt, kt) = (g.ty(x[0]).clone(), g.ty(x[1]).clone());
    let keep = keep_mask(g, a.mask_kind, x.get(3).copied(), &qt, &kt)?;
    let bias = if a.mask_kind == MaskKind::Bias { Some(x[3]) } else { None };
    let kv_heads = a.kv_heads(&kt);
    let q = to_heads(g, x[0], a.num_heads)?;
    let (k, v) = (to_query_heads(g, x[1], kv_heads, a.num_heads)?, to_query_heads(g, x[2], kv_heads, a.num_heads)?);
    let scale = a.score_scale.map_or(1.0 / (a.head_dim as f64).sqrt(), f64::from);
    let p = weights(g, q, k, scale, a.attn_logit_softcap, bias, keep)?;
    let o = g.matmul(p, v)?;
    from_heads(g, o, &qt)
}

/// `(q, k, v, ȳ, mask?)` → the gradients listed in `which` (0 = dQ, 1 = dK, 2 = dV), each in
/// its input's layout, computed in F32 for half inputs: `dV = Pᵀ·ȳ`, `dP = ȳ·Vᵀ`,
/// `dS = P∘(dP − Σ dP∘P)` zeroed where masked, `dQ = α·dS·K`, `dK = α·dSᵀ·Q`.
fn attention_grads(g: &mut Graph, heads: usize, head_dim: usize, kind: MaskKind, x: &[ValueId], which: &[usize]) -> R<Vec<ValueId>> {
    let x: Vec<ValueId> = x.iter().map(|&v| widen(g, v)).collect::<R<_>>()?;
    let types: Vec<TensorType> = x[..3].iter().map(|&v| g.ty(v).clone()).collect();
    let keep = keep_mask(g, kind, x.get(4).copied(), &types[0], &types[1])?;
    let bias = if kind == MaskKind::Bias { Some(x[4]) } else { None };
    let q = to_heads(g, x[0], heads)?;
    let k = to_heads(g, x[1], heads)?;
    let v = to_heads(g, x[2], heads)?;
    let dy = to_heads(g, x[3], heads)?;
    let alpha = 1.0 / (head_dim as f64).sqrt();
    let p = weights(g, q, k, alpha, None, bias, keep)?;
    let mut ds = None;
    let mut out = Vec::new();
    for &w in which {
        let grad = if w == 2 {
            let pt = swap_last(g, p)?;
            g.matmul(pt, dy)?
        } else {
            let ds = match ds {
                Some(ds) => ds,
                None => {
                    let vt = swap_last(g, v)?;
                    let dp = g.matmul(dy, vt)?;
                    let pdp = bin(g, BinaryOp::Mul, dp, p)?;
                    let last = g.ty(pdp).rank() - 1;
                    let rs = g.reduce(ReduceOp::Sum, pdp, &[last], true)?;
                    let c = bin(g, BinaryOp::Sub, dp, rs)?;
                    let mut d = bin(g, BinaryOp::Mul, p, c)?;
                    if let Some(keep) = keep {
                        let zero = scalar(g, g.ty(d).dtype, 0.0)?;
                        d = g.select(keep, d, zero)?;
                    }
                    let a = scalar(g, g.ty(d).dtype, alpha)?;
                    let d = bin(g, BinaryOp::Mul, d, a)?;
                    ds = Some(d);
                    d
                }
            };
            if w == 0 {
                g.matmul(ds, k)?
            } else {
                let dst = swap_last(g, ds)?;
                g.matmul(dst, q)?
            }
        };
        out.push(from_heads(g, grad, &types[w])?);
    }
    Ok(out)
}

/// The `[S, n_rot/2]` rows of a rope table for `seq` positions, in `dtype`.
fn table_rows(g: &mut Graph, t: ValueId, half: usize, seq: &Dim, dtype: DType) -> R {
    let ty = g.ty(t).clone();
    let width = if ty.rank() == 1 { half } else { ty.static_dim(ty.rank() - 1).map_err(IrError::Invalid)? };
    let rows2 = g.reshape(t, &[-1, width as i64])?;
    let rows = g.ty(rows2).shape.dim(0).clone();
    let mut t = rows2;
    if rows != *seq {
        match (&rows, seq) {
            (Dim::Static(n), Dim::Static(s)) if n >= s => t = g.narrow(t, 0, 0, *s)?,
            _ => {
                return Err(IrError::Invalid(format!(
                    "the Rope decomposition reads rows 0..{seq} of the table {ty}; it needs both static or the table to have exactly {seq} rows"
                )))
            }
        }
    }
    if width > half {
        t = g.narrow(t, 1, 0, half)?;
    }
    if g.ty(t).dtype != dtype {
        t = g.cast(t, dtype)?;
    }
    Ok(t)
}

/// `(a, b) → (a·c − b·s, a·s + b·c)`.
fn rotate(g: &mut Graph, a: ValueId, b: ValueId, c: ValueId, s: ValueId) -> R<(ValueId, ValueId)> {
    let ac = bin(g, BinaryOp::Mul, a, c)?;
    let bs = bin(g, BinaryOp::Mul, b, s)?;
    let as_ = bin(g, BinaryOp::Mul, a, s)?;
    let bc = bin(g, BinaryOp::Mul, b, c)?;
    Ok((bin(g, BinaryOp::Sub, ac, bs)?, bin(g, BinaryOp::Add, as_, bc)?))
}

/// `x` with its last dim replaced by `last` (and `extra` appended).
fn with_last(g: &Graph, x: ValueId, last: &[usize]) -> Shape {
    let mut d = g.ty(x).shape.dims().to_vec();
    d.pop();
    d.extend(last.iter().map(|&n| Dim::Static(n)));
    Shape(d)
}

/// Rotates pairs `(2i, 2i+1)` of the last axis (width `2·c`) of `x` by tables `c`, `s` that
/// broadcast against `[.., c, 1]`.
fn rotate_interleaved(g: &mut Graph, x: ValueId, c: ValueId, s: ValueId) -> R {
    let width = g.ty(x).shape.dims().last().and_then(Dim::as_static).unwrap_or(0);
    let pairs = with_last(g, x, &[width / 2, 2]);
    let xp = g.reshape_to(x, &pairs)?;
    let last = pairs.rank() - 1;
    let a = g.narrow(xp, last, 0, 1)?;
    let b = g.narrow(xp, last, 1, 1)?;
    let (ya, yb) = rotate(g, a, b, c, s)?;
    let y = g.concat(&[ya, yb], last)?;
    let flat = with_last(g, x, &[width]);
    g.reshape_to(y, &flat)
}

/// `(x, cos, sin)` → `Rope` (`inverse`: `RopeBackward`, sine negated).
fn rope(g: &mut Graph, x: &[ValueId], head_dim: usize, n_rot: usize, style: RopeStyle, inverse: bool) -> R {
    let xt = g.ty(x[0]).clone();
    let dtype = xt.dtype;
    let dims = xt.shape.dims();
    let seq = if xt.rank() == 2 { dims[0].clone() } else { dims[1].clone() };
    // Per-head view: [.., H, head_dim] with the sequence axis kept in place.
    let heads_view = match xt.rank() {
        4 => x[0],
        _ => {
            let w = xt.static_dim(xt.rank() - 1).map_err(IrError::Invalid)?;
            let shape = with_last(g, x[0], &[w / head_dim, head_dim]);
            g.reshape_to(x[0], &shape)?
        }
    };
    let half = n_rot / 2;
    let c = table_rows(g, x[1], half, &seq, dtype)?;
    let mut s = table_rows(g, x[2], half, &seq, dtype)?;
    if inverse {
        s = g.activation(ActivationKind::Neg, s)?;
    }
    let last = g.ty(heads_view).rank() - 1;
    let rot = if n_rot == head_dim { heads_view } else { g.narrow(heads_view, last, 0, n_rot)? };
    let y = match style {
        RopeStyle::NeoX => {
            let c = g.reshape_to(c, &Shape(vec![seq.clone(), Dim::Static(1), Dim::Static(half)]))?;
            let s = g.reshape_to(s, &Shape(vec![seq.clone(), Dim::Static(1), Dim::Static(half)]))?;
            let a = g.narrow(rot, last, 0, half)?;
            let b = g.narrow(rot, last, half, half)?;
            let (ya, yb) = rotate(g, a, b, c, s)?;
            g.concat(&[ya, yb], last)?
        }
        RopeStyle::GptJ => {
            let shape = Shape(vec![seq.clone(), Dim::Static(1), Dim::Static(half), Dim::Static(1)]);
            let c = g.reshape_to(c, &shape)?;
            let s = g.reshape_to(s, &shape)?;
            rotate_interleaved(g, rot, c, s)?
        }
    };
    let y = if n_rot == head_dim {
        y
    } else {
        let tail = g.narrow(heads_view, last, n_rot, head_dim - n_rot)?;
        g.concat(&[y, tail], last)?
    };
    g.reshape_to(y, &xt.shape)
}

/// A constant `[S, 1, D/4, 1]` table of `f(angle)` for the angles `pos(t)·θ^(−4c/D)`.
fn axial_table(g: &mut Graph, a: &AxialRope2d, dtype: DType, pos: impl Fn(usize) -> usize, f: fn(f64) -> f64) -> R {
    let (q, seq) = (a.head_dim / 4, a.end_x * a.end_y * a.repeat_factor);
    let values = (0..seq).flat_map(|t| {
        let p = pos(t % (a.end_x * a.end_y)) as f64;
        (0..q).map(move |c| f(p * (a.theta as f64).powf(-4.0 * c as f64 / a.head_dim as f64)))
    });
    let data: Vec<u8> = match dtype {
        DType::F64 => values.flat_map(f64::to_le_bytes).collect(),
        _ => values.flat_map(|v| (v as f32).to_le_bytes()).collect(),
    };
    g.constant(TensorType::of(dtype, &[seq, 1, q, 1]), data)
}

/// `x [B, S, H·D]` → SAM2 axial RoPE: the first half of each head rotated by the x angles,
/// the second by the y angles, adjacent channel pairs.
fn axial_rope(g: &mut Graph, a: &AxialRope2d, x: ValueId) -> R {
    let xt = g.ty(x).clone();
    let dtype = xt.dtype;
    let d = a.head_dim;
    let heads = with_last(g, x, &[a.num_heads, d]);
    let xh = g.reshape_to(x, &heads)?;
    let mut parts = Vec::new();
    for (axis, start) in [(0, 0), (1, d / 2)] {
        let pos = move |p: usize| if axis == 0 { p % a.end_x } else { p / a.end_x };
        let c = axial_table(g, a, dtype, pos, f64::cos)?;
        let s = axial_table(g, a, dtype, pos, f64::sin)?;
        let half = g.narrow(xh, 3, start, d / 2)?;
        parts.push(rotate_interleaved(g, half, c, s)?);
    }
    let y = g.concat(&parts, 3)?;
    g.reshape_to(y, &xt.shape)
}

#[cfg(test)]
mod tests {
    use crate::decompose::PRIMITIVES;
    use rlx_ir::text::parse;

    fn lowers(src: &str, gone: &str) -> String {
        let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let (out, _) = crate::legalize(&g, "test", PRIMITIVES).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&out).unwrap();
        let text = out.to_string();
        assert!(!text.contains(&format!("{gone}(")), "{gone} survived:\n{text}");
        text
    }

    fn qkv(dtype: &str, q: &str, kv: &str) -> String {
        format!(
            "%0 = Input(name:\"q\",ty:(dtype:{dtype},shape:{q}))()\n\
             %1 = Input(name:\"k\",ty:(dtype:{dtype},shape:{kv}))()\n\
             %2 = Input(name:\"v\",ty:(dtype:{dtype},shape:{kv}))()\n"
        )
    }

    fn attn(mask: &str) -> String {
        format!("Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:{mask},score_scale:None,attn_logit_softcap:Some(30.0))")
    }

    #[test]
    fn causal_attention_lowers_with_a_constant_mask() {
        let src = format!("{}%3 = {}(%0, %1, %2)\nreturn %3\n", qkv("F32", "[\"B\",3,8]", "[\"B\",5,8]"), attn("Causal"));
        let text = lowers(&src, "Attention");
        assert!(text.contains("Constant(ty:(dtype:Bool,shape:[3,5]),data:[1,1,1,0,0,1,1,1,1,0,1,1,1,1,1])"), "{text}");
        assert!(text.contains("Activation(kind:Tanh)") && text.contains("MatMul()"), "{text}");
        assert!(text.contains("Reshape(new_shape:[\"B\",3,8])"), "{text}");
    }

    #[test]
    fn sliding_windows_keep_w_keys_and_symbolic_lengths_are_refused() {
        let src = format!("{}%3 = {}(%0, %1, %2)\nreturn %3\n", qkv("F32", "[1,2,4,4]", "[1,2,4,4]"), attn("SlidingWindow(2)"));
        assert!(lowers(&src, "Attention").contains("data:[1,0,0,0,1,1,0,0,0,1,1,0,0,0,1,1]"));
        let src = format!("{}%3 = {}(%0, %1, %2)\nreturn %3\n", qkv("F32", "[1,\"S\",8]", "[1,\"S\",8]"), attn("Causal"));
        let g = parse(&src).unwrap();
        let e = crate::legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("needs static sequence lengths"), "{e}");
    }

    #[test]
    fn masks_and_biases_lower() {
        let q = qkv("F16", "[2,3,8]", "[2,5,8]");
        let src = format!("{q}%3 = Input(name:\"m\",ty:(dtype:Bool,shape:[2,5]))()\n%4 = {}(%0, %1, %2, %3)\nreturn %4\n", attn("Custom"));
        let text = lowers(&src, "Attention");
        assert!(text.contains("Reshape(new_shape:[2,1,1,5])") && text.contains("Where()"), "{text}");
        let src = format!("{q}%3 = Input(name:\"m\",ty:(dtype:F16,shape:[2,5]))()\n%4 = {}(%0, %1, %2, %3)\nreturn %4\n", attn("Custom"));
        assert!(lowers(&src, "Attention").contains("Compare(op:Ge)"));
        let src = format!("{q}%3 = Input(name:\"b\",ty:(dtype:F16,shape:[3,5]))()\n%4 = {}(%0, %1, %2, %3)\nreturn %4\n", attn("Bias"));
        assert!(lowers(&src, "Attention").contains("Cast(to:F16)"));
    }

    #[test]
    fn kv_rows_lower_to_gathers_of_the_keys_and_values() {
        let q = qkv("F32", "[3,8]", "[20,8]");
        let src = format!(
            "{q}%3 = Input(name:\"b\",ty:(dtype:F32,shape:[3,6]))()\n\
             %4 = Input(name:\"rows\",ty:(dtype:I64,shape:[6]))()\n%5 = {}(%0, %1, %2, %3, %4)\nreturn %5\n",
            attn("Bias")
        );
        let text = lowers(&src, "Attention");
        assert_eq!(text.matches("Gather(axis:0)").count(), 2, "{text}");
    }

    #[test]
    fn backward_ops_lower() {
        let q = qkv("F32", "[\"B\",2,3,4]", "[\"B\",2,6,4]");
        for op in [
            "AttentionBackward(num_heads:2,head_dim:4,mask_kind:Causal,wrt:Query)",
            "AttentionBackward(num_heads:2,head_dim:4,mask_kind:Causal,wrt:Key)",
            "AttentionBackward(num_heads:2,head_dim:4,mask_kind:Causal,wrt:Value)",
        ] {
            lowers(&format!("{q}%3 = Input(name:\"dy\",ty:(dtype:F32,shape:[\"B\",2,3,4]))()\n%4 = {op}(%0, %1, %2, %3)\nreturn %4\n"), "AttentionBackward");
        }
        let q = qkv("BF16", "[2,3,8]", "[2,3,8]");
        let src = format!(
            "{q}%3 = Input(name:\"dy\",ty:(dtype:BF16,shape:[2,3,8]))()\n\
             %4 = AttentionBackwardAll(num_heads:2,head_dim:4,mask_kind:None)(%0, %1, %2, %3)\nreturn %4.0, %4.1, %4.2\n"
        );
        lowers(&src, "AttentionBackwardAll");
    }

    #[test]
    fn rotary_embeddings_lower() {
        let x = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",\"S\",16]))()\n";
        let t = "%1 = Input(name:\"c\",ty:(dtype:F32,shape:[\"S\",8]))()\n";
        for op in ["Rope(head_dim:8,n_rot:8,style:NeoX)", "RopeBackward(head_dim:8,n_rot:4,style:GptJ)"] {
            let text = lowers(&format!("{x}{t}%2 = {op}(%0, %1, %1)\nreturn %2\n"), op.split('(').next().unwrap());
            assert!(text.contains("Concat(axis:3)"), "{text}");
        }
        let long = "%1 = Param(name:\"c\",ty:(dtype:F64,shape:[64]))()\n";
        let x5 = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,5,12]))()\n";
        let text = lowers(&format!("{x5}{long}%2 = Rope(head_dim:6,n_rot:4,style:GptJ)(%0, %1, %1)\nreturn %2\n"), "Rope");
        assert!(text.contains("Narrow(axis:0,start:0,len:5)") && text.contains("Cast(to:F32)"), "{text}");
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",12,16]))()\n\
                   %1 = AxialRope2d(end_x:3,end_y:2,head_dim:8,num_heads:2,theta:100.0,repeat_factor:2)(%0)\nreturn %1\n";
        assert!(lowers(src, "AxialRope2d").contains("shape:[12,1,2,1]"));
    }
}
