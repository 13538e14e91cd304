//! Scaled dot-product attention and its backward ops (OPS.md §7, §22); the rotary embeddings
//! (`Rope`, `RopeBackward`, `AxialRope2d`) live in `attention/rope.rs`.
//!
//! Layouts: rank 4 is head-major `[B, H, S, D]`; rank 3 is `[B, S, H·D]` with head `h` at
//! columns `[h·D, (h+1)·D)`; rank 2 is `[S, H·D]` (one batch item). K and V carry `num_heads`
//! heads or, for GQA/MQA, fewer (`H_kv` dividing `H`, read from their shapes as torch SDPA's
//! `enable_gqa` does): query head `h` reads KV head `⌊h / (H / H_kv)⌋`, the same result as
//! OPS.md's consecutive repeat of KV heads before the op, without the copies. The backward kinds
//! take `num_heads` KV heads only; grouped attention differentiates through its decomposition.

mod rope;
pub use rope::*;

use super::{Arity, OpDef};
use crate::{Dim, Graph, NodeId, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// Which keys each query attends to. Masked logits become −1e9 (finite, so a fully masked row
/// gives uniform weights). Queries sit at the end of the keys: `abs_q = S_k − S_q + qi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MaskKind {
    /// Every key.
    None,
    /// Keys `ki ≤ abs_q` (bottom-right aligned, as flash-attention ≥ 2.1 and KV-cache decode).
    Causal,
    /// The `w` keys `abs_q − w < ki ≤ abs_q`, self included (HF `sliding_window`, llama.cpp `n_swa`).
    SlidingWindow(usize),
    /// A key-padding mask input `[B, S_k]`: keys whose value is ≥ 0.5 are kept (BERT).
    Custom,
    /// An additive bias input broadcastable to `[B, H, S_q, S_k]`.
    Bias,
}

impl MaskKind {
    /// Whether the op takes the mask or bias as an extra input.
    pub fn takes_input(self) -> bool {
        matches!(self, MaskKind::Custom | MaskKind::Bias)
    }
}

/// `softmax(mask((Q·Kᵀ)·α))·V` per batch item and head, with optional Gemma-2 logit softcap
/// `s = c·tanh(s/c)`; inputs `(q, k, v)` plus `mask` when `mask_kind` takes one. `S_k` may
/// differ from `S_q`. The output has Q's layout with per-head width `v_head_dim`.
///
/// A last, optional input `kv_rows [U]` (integers in `[0, N)`) reads K and V at those rows:
/// with `[S, H·D]` operands and `k [N, H_kv·D]`, `v [N, H_kv·D_v]`, the result is that of
/// `Gather(axis 0)` of both by `kv_rows` first (`S_k = U`, the mask indexing the gathered
/// rows), without the copies: a pooled KV cache read in place by each step's sequences.
/// Only the rank-2 layout takes it; backends that do not claim this form get the gathers
/// back through the decomposition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    pub num_heads: usize,
    pub head_dim: usize,
    /// Per-head width of V and of the output; `head_dim` when `None`.
    pub v_head_dim: Option<usize>,
    pub mask_kind: MaskKind,
    /// The logit scale `α`; `1/√head_dim` when `None`.
    pub score_scale: Option<f32>,
    /// The softcap `c`, applied before masking; none when `None`.
    pub attn_logit_softcap: Option<f32>,
}

impl Attention {
    /// Plain multi-head attention: default scale, no softcap, V as wide as Q.
    pub fn new(num_heads: usize, head_dim: usize, mask_kind: MaskKind) -> Attention {
        Attention { num_heads, head_dim, v_head_dim: None, mask_kind, score_scale: None, attn_logit_softcap: None }
    }

    /// The logit scale actually applied.
    pub fn scale(&self) -> f32 {
        self.score_scale.unwrap_or(1.0 / (self.head_dim as f32).sqrt())
    }

    /// The KV heads of a key operand of type `k` (`num_heads` unless grouped); meaningful once
    /// the node's inputs have passed inference.
    pub fn kv_heads(&self, k: &TensorType) -> usize {
        kv_heads_of(self.num_heads, self.head_dim, k)
    }

    /// [`Attention::kv_heads`] of a key operand of concrete `dims` (a kernel's view).
    pub fn kv_heads_of_dims(&self, dims: &[usize]) -> usize {
        kv_heads_at(self.num_heads, self.head_dim, dims.len(), |axis| dims.get(axis).copied())
    }

    /// The position of the `kv_rows` input among a node's `inputs` inputs, when it has one.
    pub fn kv_rows_input(&self, inputs: usize) -> Option<usize> {
        let at = 3 + usize::from(self.mask_kind.takes_input());
        (inputs > at).then_some(at)
    }
}

/// The KV heads a key operand `k` carries: dim 1 of `[B, H_kv, S, D]`, else its last dim over
/// `head_dim` (`num_heads` when that is not static).
pub fn kv_heads_of(num_heads: usize, head_dim: usize, k: &TensorType) -> usize {
    kv_heads_at(num_heads, head_dim, k.rank(), |axis| k.shape.0.get(axis).and_then(Dim::as_static))
}

/// [`kv_heads_of`] of a key operand of `rank` whose static sizes `dim` gives.
fn kv_heads_at(num_heads: usize, head_dim: usize, rank: usize, dim: impl Fn(usize) -> Option<usize>) -> usize {
    match (rank, dim(if rank == 4 { 1 } else { rank.saturating_sub(1) })) {
        (4, Some(n)) => n,
        (_, Some(w)) => w / head_dim.max(1),
        (_, None) => num_heads,
    }
}

/// Which input `AttentionBackward` differentiates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AttentionBwdWrt {
    Query,
    Key,
    Value,
}

/// One of `dQ`, `dK`, `dV` of `Attention` with default scale, no softcap and `v_head_dim =
/// head_dim` (other forms are differentiated through the decomposition); inputs
/// `(q, k, v, dy)` plus the mask. `dS` is zero at masked positions; the mask gets no gradient.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionBackward {
    pub num_heads: usize,
    pub head_dim: usize,
    pub mask_kind: MaskKind,
    pub wrt: AttentionBwdWrt,
}

/// `dQ`, `dK` and `dV` at once (three outputs), recomputing scores and softmax once; inputs
/// and rules as `AttentionBackward`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionBackwardAll {
    pub num_heads: usize,
    pub head_dim: usize,
    pub mask_kind: MaskKind,
}

/// The position of the sequence axis in an attention or rope layout of `rank`.
fn seq_axis(rank: usize) -> usize {
    match rank {
        4 | 3 => rank - 2,
        _ => 0,
    }
}

/// `heads·width`, or an error when the attributes overflow.
fn heads_times(heads: usize, width: usize) -> Result<usize, String> {
    heads
        .checked_mul(width)
        .ok_or_else(|| format!("{heads} heads × {width} overflow"))
}

/// `axis` of `name` must be `want` (`what` says where that size comes from).
fn expect_dim(name: &str, t: &TensorType, axis: usize, want: &Dim, what: &str) -> Result<(), String> {
    let got = t.shape.dim(axis);
    if got != want {
        return Err(format!("axis {axis} of {name} {t} is {got}, expected {want} ({what})"));
    }
    Ok(())
}

/// Whether `src` stretches to `target` under NumPy broadcasting without changing it.
fn broadcasts_to(src: &Shape, target: &Shape) -> bool {
    src.rank() <= target.rank()
        && src.dims().iter().rev().zip(target.dims().iter().rev()).all(|(s, t)| s == t || *s == Dim::Static(1))
}

/// Checks the heads attributes shared by the forward and backward kinds.
fn check_heads(num_heads: usize, head_dim: usize, mask_kind: MaskKind) -> Result<(), String> {
    if num_heads == 0 || head_dim == 0 {
        return Err(format!("num_heads {num_heads} and head_dim {head_dim} must be at least 1"));
    }
    if mask_kind == MaskKind::SlidingWindow(0) {
        return Err("a sliding window must hold at least 1 key".into());
    }
    Ok(())
}

/// Checks `(q, k, v)` in one of the three layouts and returns the output type, whose per-head
/// width is `v_dim`. K and V carry `num_heads` heads or, when `grouped`, a divisor of it.
fn check_qkv(num_heads: usize, head_dim: usize, v_dim: usize, grouped: bool, qkv: &[TensorType]) -> Result<TensorType, String> {
    let (q, k, v) = (&qkv[0], &qkv[1], &qkv[2]);
    if !q.dtype.is_float() {
        return Err(format!("q {q} must be a float tensor"));
    }
    let rank = q.rank();
    if !(2..=4).contains(&rank) {
        return Err(format!("q {q} must be [B, H, S, D], [B, S, H·D] or [S, H·D]"));
    }
    for (name, t) in [("k", k), ("v", v)] {
        if t.dtype != q.dtype || t.rank() != rank {
            return Err(format!("{name} {t} must be a {} tensor of rank {rank}, like q {q}", q.dtype));
        }
    }
    let last = rank - 1;
    let s = seq_axis(rank);
    let q_width = if rank == 4 { head_dim } else { heads_times(num_heads, head_dim)? };
    expect_dim("q", q, last, &Dim::Static(q_width), if rank == 4 { "head_dim" } else { "num_heads × head_dim" })?;
    let kv_heads = if grouped { kv_heads_of(num_heads, head_dim, k) } else { num_heads };
    if kv_heads == 0 || num_heads % kv_heads != 0 {
        return Err(format!("k {k} has {kv_heads} heads of {head_dim}, which must divide num_heads {num_heads}"));
    }
    let (k_width, v_width, out_width) = if rank == 4 {
        (head_dim, v_dim, v_dim)
    } else {
        (heads_times(kv_heads, head_dim)?, heads_times(kv_heads, v_dim)?, heads_times(num_heads, v_dim)?)
    };
    let (what_k, what_v) = match (rank, kv_heads == num_heads) {
        (4, _) => ("head_dim", "v_head_dim"),
        (_, true) => ("num_heads × head_dim", "num_heads × v_head_dim"),
        (_, false) => ("whole KV heads of head_dim", "the KV heads of k × v_head_dim"),
    };
    expect_dim("k", k, last, &Dim::Static(k_width), what_k)?;
    expect_dim("v", v, last, &Dim::Static(v_width), what_v)?;
    if rank == 4 {
        expect_dim("q", q, 1, &Dim::Static(num_heads), "num_heads")?;
        let what = if kv_heads == num_heads { "num_heads" } else { "the KV heads of k" };
        expect_dim("k", k, 1, &Dim::Static(kv_heads), what)?;
        expect_dim("v", v, 1, &Dim::Static(kv_heads), what)?;
    }
    if rank >= 3 {
        expect_dim("k", k, 0, q.shape.dim(0), "the batch of q")?;
        expect_dim("v", v, 0, q.shape.dim(0), "the batch of q")?;
    }
    expect_dim("v", v, s, k.shape.dim(s), "the key length of k")?;
    let mut out = q.shape.clone();
    out.0[last] = Dim::Static(out_width);
    Ok(TensorType::new(q.dtype, out))
}

/// Checks the mask or bias input against `q [.., S_q, ..]` and `k [.., S_k, ..]`.
fn check_mask(mask_kind: MaskKind, mask: &TensorType, q: &TensorType, k: &TensorType, num_heads: usize) -> Result<(), String> {
    let s = seq_axis(q.rank());
    let batch = if q.rank() >= 3 { q.shape.dim(0).clone() } else { Dim::Static(1) };
    let (s_q, s_k) = (q.shape.dim(s).clone(), k.shape.dim(s).clone());
    let (target, what) = match mask_kind {
        MaskKind::Custom => {
            if !(mask.dtype.is_float() || mask.dtype == crate::DType::Bool) {
                return Err(format!("mask {mask} must be float or bool"));
            }
            (Shape(vec![batch, s_k]), "[B, S_k]")
        }
        _ => {
            if !mask.dtype.is_float() {
                return Err(format!("bias {mask} must be a float tensor"));
            }
            (Shape(vec![batch, Dim::Static(num_heads), s_q, s_k]), "[B, H, S_q, S_k]")
        }
    };
    if !broadcasts_to(&mask.shape, &target) {
        return Err(format!("{} {mask} does not broadcast to {what} = {target}", if mask_kind == MaskKind::Custom { "mask" } else { "bias" }));
    }
    Ok(())
}

/// K and V as the `kv_rows [U]` of `rows` reads them: `[U, width]` of each rank-2 operand.
fn rows_read(rows: &TensorType, k: &TensorType, v: &TensorType) -> Result<(TensorType, TensorType), String> {
    if !rows.dtype.is_int() || rows.rank() != 1 {
        return Err(format!("kv_rows {rows} must be a rank-1 integer tensor"));
    }
    if k.rank() != 2 || v.rank() != 2 {
        return Err(format!("kv_rows reads rank-2 [N, H·D] keys and values, got k {k} and v {v}"));
    }
    expect_dim("v", v, 0, k.shape.dim(0), "the rows of k")?;
    let read = |t: &TensorType| TensorType::new(t.dtype, Shape(vec![rows.shape.dim(0).clone(), t.shape.dim(1).clone()]));
    Ok((read(k), read(v)))
}

impl OpDef for Attention {
    fn arity(&self) -> Arity {
        let n = 3 + usize::from(self.mask_kind.takes_input());
        Arity::Between(n, n + 1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_heads(self.num_heads, self.head_dim, self.mask_kind)?;
        if self.v_head_dim == Some(0) {
            return Err("v_head_dim must be at least 1".into());
        }
        if let Some(a) = self.score_scale.filter(|a| !a.is_finite()) {
            return Err(format!("score_scale must be finite, got {a}"));
        }
        if let Some(c) = self.attn_logit_softcap.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(format!("attn_logit_softcap must be finite and positive, got {c}"));
        }
        let v_dim = self.v_head_dim.unwrap_or(self.head_dim);
        let mut qkv = inputs[..3].to_vec();
        if let Some(at) = self.kv_rows_input(inputs.len()) {
            (qkv[1], qkv[2]) = rows_read(&inputs[at], &inputs[1], &inputs[2])?;
        }
        let out = check_qkv(self.num_heads, self.head_dim, v_dim, true, &qkv)?;
        if self.mask_kind.takes_input() {
            check_mask(self.mask_kind, &inputs[3], &qkv[0], &qkv[1], self.num_heads)?;
        }
        Ok(vec![out])
    }
}

/// Checks `(q, k, v, dy, mask?)` of the backward kinds; `dy` has the type of `q`.
fn check_backward(num_heads: usize, head_dim: usize, mask_kind: MaskKind, inputs: &[TensorType]) -> Result<(), String> {
    check_heads(num_heads, head_dim, mask_kind)?;
    let out = check_qkv(num_heads, head_dim, head_dim, false, inputs)?;
    let dy = &inputs[3];
    if *dy != out {
        return Err(format!("the upstream gradient {dy} must have the type of the attention output {out}"));
    }
    if mask_kind.takes_input() {
        check_mask(mask_kind, &inputs[4], &inputs[0], &inputs[1], num_heads)?;
    }
    Ok(())
}

impl OpDef for AttentionBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.mask_kind.takes_input() { 5 } else { 4 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_backward(self.num_heads, self.head_dim, self.mask_kind, inputs)?;
        let i = match self.wrt {
            AttentionBwdWrt::Query => 0,
            AttentionBwdWrt::Key => 1,
            AttentionBwdWrt::Value => 2,
        };
        Ok(vec![inputs[i].clone()])
    }
}

impl OpDef for AttentionBackwardAll {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.mask_kind.takes_input() { 5 } else { 4 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_backward(self.num_heads, self.head_dim, self.mask_kind, inputs)?;
        Ok(inputs[..3].to_vec())
    }
}

/// `[q, k, v, dy]` plus the mask, if any.
fn with_mask(mut inputs: Vec<ValueId>, mask: Option<ValueId>) -> Vec<ValueId> {
    inputs.extend(mask);
    inputs
}

/// Builders for attention.
impl Graph {
    /// Attention of `q`, `k`, `v`; `mask` is the mask or bias input of a `Custom`/`Bias` mask.
    pub fn attention(&mut self, attrs: Attention, q: ValueId, k: ValueId, v: ValueId, mask: Option<ValueId>) -> crate::Result<ValueId> {
        self.add1(attrs, &with_mask(vec![q, k, v], mask))
    }

    /// The gradient of attention w.r.t. `attrs.wrt`, for the upstream `dy`.
    pub fn attention_backward(
        &mut self,
        attrs: AttentionBackward,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        dy: ValueId,
        mask: Option<ValueId>,
    ) -> crate::Result<ValueId> {
        self.add1(attrs, &with_mask(vec![q, k, v, dy], mask))
    }

    /// `[dq, dk, dv]` of attention for the upstream `dy`.
    pub fn attention_backward_all(
        &mut self,
        attrs: AttentionBackwardAll,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        dy: ValueId,
        mask: Option<ValueId>,
    ) -> crate::Result<Vec<ValueId>> {
        let node: NodeId = self.add(attrs, &with_mask(vec![q, k, v, dy], mask))?;
        Ok((0..3).map(|i| ValueId::new(node, i)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn ty(dims: &[&str]) -> TensorType {
        let dims = dims.iter().map(|d| d.parse::<usize>().map(Dim::Static).unwrap_or_else(|_| Dim::sym(d)));
        TensorType::new(DType::F32, Shape(dims.collect()))
    }

    #[test]
    fn head_major_and_packed_layouts() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["B", "8", "S", "64"]));
        let k = g.input("k", ty(&["B", "8", "T", "64"]));
        let v = g.input("v", ty(&["B", "8", "T", "128"]));
        let attrs = Attention { v_head_dim: Some(128), ..Attention::new(8, 64, MaskKind::Causal) };
        let o = g.attention(attrs, q, k, v, None).unwrap();
        assert_eq!(g.ty(o), &ty(&["B", "8", "S", "128"]));
        let q3 = g.input("q3", ty(&["B", "S", "512"]));
        let k3 = g.input("k3", ty(&["B", "T", "512"]));
        let o = g.attention(Attention::new(8, 64, MaskKind::None), q3, k3, k3, None).unwrap();
        assert_eq!(g.ty(o), g.ty(q3));
        let e = g.attention(Attention::new(8, 32, MaskKind::None), q3, k3, k3, None).unwrap_err().to_string();
        assert!(e.contains("axis 2 of q f32[B, S, 512] is 512, expected 256 (num_heads × head_dim)"), "{e}");
    }

    #[test]
    fn grouped_kv_heads_divide_the_query_heads() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["B", "9", "S", "64"]));
        let k = g.input("k", ty(&["B", "3", "T", "64"]));
        let o = g.attention(Attention::new(9, 64, MaskKind::Causal), q, k, k, None).unwrap();
        assert_eq!(g.ty(o), g.ty(q));
        assert_eq!(Attention::new(9, 64, MaskKind::Causal).kv_heads(g.ty(k)), 3);
        let q3 = g.input("q3", ty(&["S", "576"]));
        let k3 = g.input("k3", ty(&["T", "192"]));
        let v3 = g.input("v3", ty(&["T", "96"]));
        let attrs = Attention { v_head_dim: Some(32), ..Attention::new(9, 64, MaskKind::None) };
        let o = g.attention(attrs, q3, k3, v3, None).unwrap();
        assert_eq!(g.ty(o), &ty(&["S", "288"]));
        let k4 = g.input("k4", ty(&["T", "256"]));
        let e = g.attention(Attention::new(9, 64, MaskKind::None), q3, k4, k4, None).unwrap_err().to_string();
        assert!(e.contains("has 4 heads of 64, which must divide num_heads 9"), "{e}");
        let e = g.attention(Attention::new(9, 64, MaskKind::None), q3, k3, k4, None).unwrap_err().to_string();
        assert!(e.contains("is 256, expected 192 (the KV heads of k × v_head_dim)"), "{e}");
        let attrs = AttentionBackward { num_heads: 9, head_dim: 64, mask_kind: MaskKind::None, wrt: AttentionBwdWrt::Key };
        let e = g.attention_backward(attrs, q3, k3, k3, q3, None).unwrap_err().to_string();
        assert!(e.contains("expected 576 (num_heads × head_dim)"), "{e}");
    }

    #[test]
    fn values_follow_the_keys() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["B", "4", "S", "16"]));
        let k = g.input("k", ty(&["B", "4", "T", "16"]));
        let e = g.attention(Attention::new(4, 16, MaskKind::None), q, k, q, None).unwrap_err().to_string();
        assert!(e.contains("axis 2 of v f32[B, 4, S, 16] is S, expected T (the key length of k)"), "{e}");
    }

    #[test]
    fn masks_broadcast_to_their_layout() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["B", "S", "64"]));
        let pad = g.input("pad", TensorType::new(DType::Bool, ty(&["B", "S"]).shape));
        assert!(g.attention(Attention::new(2, 32, MaskKind::Custom), q, q, q, Some(pad)).is_ok());
        let bias = g.input("bias", ty(&["1", "2", "S", "S"]));
        assert!(g.attention(Attention::new(2, 32, MaskKind::Bias), q, q, q, Some(bias)).is_ok());
        let e = g.attention(Attention::new(2, 32, MaskKind::Custom), q, q, q, Some(bias)).unwrap_err().to_string();
        assert!(e.contains("does not broadcast to [B, S_k] = [B, S]"), "{e}");
        let e = g.attention(Attention::new(2, 32, MaskKind::Bias), q, q, q, None).unwrap_err().to_string();
        assert!(e.contains("takes 4 to 5 inputs, got 3"), "{e}");
    }

    #[test]
    fn kv_rows_read_rank_2_keys_and_values_at_their_rows() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["T", "576"]));
        let (k, v) = (g.input("k", ty(&["4096", "192"])), g.input("v", ty(&["4096", "192"])));
        let rows = g.input("rows", TensorType::new(DType::I64, Shape(vec![Dim::sym("U")])));
        let bias = g.input("bias", ty(&["T", "U"]));
        let attrs = Attention::new(9, 64, MaskKind::Bias);
        assert_eq!(attrs.kv_rows_input(5), Some(4));
        assert_eq!(attrs.kv_rows_input(4), None);
        let o = g.add1(attrs.clone(), &[q, k, v, bias, rows]).unwrap();
        assert_eq!(g.ty(o), g.ty(q));
        let keys = g.input("keys", ty(&["T", "576"]));
        let e = g.add1(attrs.clone(), &[q, k, v, keys, rows]).unwrap_err().to_string();
        assert!(e.contains("does not broadcast to [B, H, S_q, S_k] = [1, 9, T, U]"), "{e}");
        let e = g.add1(attrs, &[q, k, v, bias, bias]).unwrap_err().to_string();
        assert!(e.contains("kv_rows f32[T, U] must be a rank-1 integer tensor"), "{e}");
        let q3 = g.input("q3", ty(&["B", "T", "576"]));
        let k3 = g.input("k3", ty(&["B", "4096", "192"]));
        let e = g.add1(Attention::new(9, 64, MaskKind::None), &[q3, k3, k3, rows]).unwrap_err().to_string();
        assert!(e.contains("kv_rows reads rank-2 [N, H·D] keys and values"), "{e}");
    }

    #[test]
    fn backward_all_has_three_outputs() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["B", "2", "S", "8"]));
        let k = g.input("k", ty(&["B", "2", "T", "8"]));
        let attrs = AttentionBackwardAll { num_heads: 2, head_dim: 8, mask_kind: MaskKind::SlidingWindow(4) };
        let d = g.attention_backward_all(attrs, q, k, k, q, None).unwrap();
        assert_eq!(d.iter().map(|v| g.ty(*v).clone()).collect::<Vec<_>>(), vec![ty(&["B", "2", "S", "8"]), ty(&["B", "2", "T", "8"]), ty(&["B", "2", "T", "8"])]);
        let attrs = AttentionBackward { num_heads: 2, head_dim: 8, mask_kind: MaskKind::None, wrt: AttentionBwdWrt::Key };
        let dk = g.attention_backward(attrs.clone(), q, k, k, q, None).unwrap();
        assert_eq!(g.ty(dk), g.ty(k));
        let e = g.attention_backward(attrs, q, k, k, k, None).unwrap_err().to_string();
        assert!(e.contains("upstream gradient f32[B, 2, T, 8] must have the type of the attention output f32[B, 2, S, 8]"), "{e}");
    }

    #[test]
    fn attributes_are_checked() {
        let mut g = Graph::new();
        let q = g.input("q", ty(&["S", "64"]));
        let capped = Attention { attn_logit_softcap: Some(0.0), ..Attention::new(1, 64, MaskKind::None) };
        assert!(g.attention(capped, q, q, q, None).unwrap_err().to_string().contains("softcap"));
        assert!(g.attention(Attention::new(1, 64, MaskKind::SlidingWindow(0)), q, q, q, None).is_err());
        assert_eq!(Attention::new(1, 64, MaskKind::None).scale(), 0.125);
    }
}
