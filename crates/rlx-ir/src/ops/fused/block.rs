//! Layer-level fusions (OPS.md §19): the fused attention block, the BERT-style transformer
//! layer, and the conv + bias + activation (+ residual) epilogue.

use super::{check_eps, dims_agree, expect_dims, same_float};
use crate::ops::elementwise::ActivationKind;
use crate::ops::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// Self-attention with its projections: `qkv = hidden·qkv_w (+qkv_b)`; `q, k, v` are the three
/// consecutive `H·D` column blocks; optional NeoX RoPE (`n_rot = D`) on `q`, `k`; attention with
/// a `[B, S]` padding mask (keys with mask ≥ 0.5 are kept); `·out_w (+out_b)`.
///
/// Inputs `hidden [B, S, E], qkv_w [E, 3·H·D], out_w [H·D, E], mask [B, S]`, then
/// `qkv_b [3·H·D], out_b [E]` with `has_bias`, then `rope_cos, rope_sin` with `has_rope`
/// (tables as `Rope` reads them: `[S, ≥ D/2]` rows, or flat `[S·D/2]`). Output: `hidden`'s type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedAttentionBlock {
    pub num_heads: usize,
    pub head_dim: usize,
    pub has_bias: bool,
    pub has_rope: bool,
}

/// BERT-style post-norm encoder layer: `h1 = LayerNorm(hidden + attn(hidden))`,
/// `out = LayerNorm(h1 + act(h1·fc1_w + fc1_b)·fc2_w + fc2_b)`.
///
/// Inputs with `has_bias` (14): `hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w,
/// fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask`; without (10): `hidden, qkv_w, out_w, ln1_g, ln1_b,
/// fc1_w, fc2_w, ln2_g, ln2_b, mask`. Shapes as [`FusedAttentionBlock`], with
/// `fc1_w [E, I]`, `fc2_w [I, E]`, `I = intermediate_size`. Output: `hidden`'s type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedTransformerLayer {
    pub num_heads: usize,
    pub head_dim: usize,
    pub intermediate_size: usize,
    pub eps1: f32,
    pub eps2: f32,
    pub activation: ActivationKind,
    pub has_bias: bool,
}

/// `act(conv(x, w) + bias[c] [+ residual])` (cuDNN conv-bias-activation; a ResNet block tail).
///
/// Inputs `x [N, C_in, H, W], w [C_out, C_in/groups, kH, kW], bias [C_out]`, plus
/// `residual [N, C_out, H_o, W_o]` with `has_residual`. `kernel_size` has 2 entries matching
/// `w`; missing `stride`/`dilation` entries are 1 and missing `padding` entries 0. The output
/// extent per axis is `⌊(in + 2p − d·(k−1) − 1)/s⌋ + 1`, computed here rather than declared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedConvBiasAct {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
    pub activation: Option<ActivationKind>,
    pub has_residual: bool,
}

/// The attention operands shared by the block and the layer.
struct AttentionOperands<'a> {
    hidden: &'a TensorType,
    qkv_w: &'a TensorType,
    out_w: &'a TensorType,
    mask: &'a TensorType,
    /// `(qkv_b, out_b)`.
    bias: Option<(&'a TensorType, &'a TensorType)>,
}

/// Checks the attention operands; returns `(B, S, E)`.
fn check_attention(heads: usize, head_dim: usize, a: &AttentionOperands) -> Result<[Dim; 3], String> {
    if heads == 0 || head_dim == 0 {
        return Err(format!("num_heads ({heads}) and head_dim ({head_dim}) must be at least 1"));
    }
    let (hd, hd3) = heads
        .checked_mul(head_dim)
        .and_then(|hd| Some((hd, hd.checked_mul(3)?)))
        .ok_or_else(|| format!("3·num_heads·head_dim overflows ({heads}·{head_dim})"))?;
    let [b, s, e] = match a.hidden.shape.dims() {
        [b, s, e] => [b.clone(), s.clone(), e.clone()],
        _ => return Err(format!("hidden {} must be [B, S, E]", a.hidden)),
    };
    let mut named = vec![("hidden", a.hidden), ("qkv_w", a.qkv_w), ("out_w", a.out_w)];
    named.extend(a.bias.iter().flat_map(|(qb, ob)| [("qkv_b", *qb), ("out_b", *ob)]));
    same_float(&named)?;
    expect_dims("qkv_w", a.qkv_w, "[E, 3·H·D]", &[e.clone(), Dim::Static(hd3)])?;
    expect_dims("out_w", a.out_w, "[H·D, E]", &[Dim::Static(hd), e.clone()])?;
    if let Some((qkv_b, out_b)) = a.bias {
        expect_dims("qkv_b", qkv_b, "[3·H·D]", &[Dim::Static(hd3)])?;
        expect_dims("out_b", out_b, "[E]", std::slice::from_ref(&e))?;
    }
    expect_dims("mask", a.mask, "[B, S]", &[b.clone(), s.clone()])?;
    if a.mask.dtype == DType::C64 {
        return Err(format!("mask {} must be real or Bool", a.mask));
    }
    Ok([b, s, e])
}

/// True unless both are static and `have < need`.
fn at_least(have: &Dim, need: &Dim) -> bool {
    match (have, need) {
        (Dim::Static(h), Dim::Static(n)) => h >= n,
        _ => true,
    }
}

/// Checks a RoPE table for `s` positions of which `half` entries per row are read: rank 1
/// holds `s·half` values back to back, rank ≥ 2 has rows of width ≥ `half` (leading dims
/// flattened into ≥ `s` rows).
fn check_rope_table(what: &str, t: &TensorType, s: &Dim, half: usize) -> Result<(), String> {
    let dims = t.shape.dims();
    let ok = match dims {
        [] => false,
        [n] => match s {
            Dim::Static(s) => s.checked_mul(half).is_some_and(|need| at_least(n, &Dim::Static(need))),
            Dim::Sym(_) => true,
        },
        [lead @ .., w] => {
            let rows = match Shape(lead.to_vec()).numel() {
                Some(r) => Dim::Static(r),
                None if lead.len() == 1 => lead[0].clone(),
                None => Dim::sym("rows"),
            };
            at_least(w, &Dim::Static(half)) && at_least(&rows, s)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {t} must hold {s} rows of at least {half} entries (head_dim/2)"))
    }
}

impl OpDef for FusedAttentionBlock {
    fn arity(&self) -> Arity {
        Arity::Exact(4 + 2 * self.has_bias as usize + 2 * self.has_rope as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (hidden, qkv_w, out_w, mask, rest) = match inputs {
            [hidden, qkv_w, out_w, mask, rest @ ..] => (hidden, qkv_w, out_w, mask, rest),
            _ => return Err(format!("needs at least 4 inputs, got {}", inputs.len())),
        };
        let (bias, rope) = match (self.has_bias, self.has_rope, rest) {
            (false, false, []) => (None, None),
            (true, false, [qb, ob]) => (Some((qb, ob)), None),
            (false, true, [cos, sin]) => (None, Some((cos, sin))),
            (true, true, [qb, ob, cos, sin]) => (Some((qb, ob)), Some((cos, sin))),
            _ => return Err(format!("{} inputs do not match has_bias/has_rope", inputs.len())),
        };
        let operands = AttentionOperands { hidden, qkv_w, out_w, mask, bias };
        let [_, s, _] = check_attention(self.num_heads, self.head_dim, &operands)?;
        if let Some((cos, sin)) = rope {
            if self.head_dim % 2 != 0 {
                return Err(format!("RoPE needs an even head_dim, got {}", self.head_dim));
            }
            same_float(&[("hidden", hidden), ("rope_cos", cos), ("rope_sin", sin)])?;
            if cos.shape != sin.shape {
                return Err(format!("rope_cos {cos} and rope_sin {sin} must have one shape"));
            }
            check_rope_table("rope_cos", cos, &s, self.head_dim / 2)?;
        }
        Ok(vec![hidden.clone()])
    }
}

impl OpDef for FusedTransformerLayer {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.has_bias { 14 } else { 10 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        // (weights, optional biases) in the order of OPS.md's two input lists.
        let (hidden, qkv_w, out_w, ln, fc1_w, fc2_w, mask, biases) = match (self.has_bias, inputs) {
            (true, [hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask]) => {
                (hidden, qkv_w, out_w, [ln1_g, ln1_b, ln2_g, ln2_b], fc1_w, fc2_w, mask, Some([qkv_b, out_b, fc1_b, fc2_b]))
            }
            (false, [hidden, qkv_w, out_w, ln1_g, ln1_b, fc1_w, fc2_w, ln2_g, ln2_b, mask]) => {
                (hidden, qkv_w, out_w, [ln1_g, ln1_b, ln2_g, ln2_b], fc1_w, fc2_w, mask, None)
            }
            _ => return Err(format!("{} inputs do not match has_bias = {}", inputs.len(), self.has_bias)),
        };
        check_eps(self.eps1)?;
        check_eps(self.eps2)?;
        let bias = biases.map(|[qkv_b, out_b, _, _]| (qkv_b, out_b));
        let operands = AttentionOperands { hidden, qkv_w, out_w, mask, bias };
        let [_, _, e] = check_attention(self.num_heads, self.head_dim, &operands)?;
        let i = self.intermediate_size;
        if i == 0 {
            return Err("intermediate_size must be at least 1".into());
        }
        let names = ["ln1_g", "ln1_b", "ln2_g", "ln2_b"];
        let mut named: Vec<(&str, &TensorType)> = vec![("hidden", hidden), ("fc1_w", fc1_w), ("fc2_w", fc2_w)];
        named.extend(names.into_iter().zip(ln));
        if let Some([_, _, fc1_b, fc2_b]) = biases {
            named.extend([("fc1_b", fc1_b), ("fc2_b", fc2_b)]);
        }
        same_float(&named)?;
        for (name, t) in names.into_iter().zip(ln) {
            expect_dims(name, t, "[E]", std::slice::from_ref(&e))?;
        }
        expect_dims("fc1_w", fc1_w, "[E, I]", &[e.clone(), Dim::Static(i)])?;
        expect_dims("fc2_w", fc2_w, "[I, E]", &[Dim::Static(i), e.clone()])?;
        if let Some([_, _, fc1_b, fc2_b]) = biases {
            expect_dims("fc1_b", fc1_b, "[I]", &[Dim::Static(i)])?;
            expect_dims("fc2_b", fc2_b, "[E]", std::slice::from_ref(&e))?;
        }
        Ok(vec![hidden.clone()])
    }
}

/// Output extent of one spatial axis; sizes that stay equal (`s = 1`, `2p = d·(k−1)`) pass
/// symbolic dims through, anything else needs a static input extent.
fn conv_extent(input: &Dim, k: usize, s: usize, p: usize, d: usize) -> Result<Dim, String> {
    let (k, s, p, d) = (k as u128, s as u128, p as u128, d as u128);
    let span = d * (k - 1) + 1;
    if s == 1 && 2 * p + 1 == span {
        return Ok(input.clone());
    }
    let n = match input {
        Dim::Static(n) => *n as u128,
        Dim::Sym(sym) => {
            return Err(format!(
                "spatial dim {sym} is symbolic; kernel {k}, stride {s}, padding {p}, dilation {d} need a static size"
            ))
        }
    };
    if n + 2 * p < span {
        return Err(format!("the dilated kernel ({span}) exceeds the padded input ({})", n + 2 * p));
    }
    usize::try_from((n + 2 * p - span) / s + 1)
        .map(Dim::Static)
        .map_err(|_| "the output extent overflows".to_string())
}

impl FusedConvBiasAct {
    /// `(stride, padding, dilation)` of spatial axis `i`, with the defaults filled in.
    fn geometry(&self, i: usize) -> (usize, usize, usize) {
        let s = self.stride.get(i).copied().unwrap_or(1);
        let p = self.padding.get(i).copied().unwrap_or(0);
        let d = self.dilation.get(i).copied().unwrap_or(1);
        (s, p, d)
    }

    fn check_attrs(&self) -> Result<(), String> {
        let bad = self.kernel_size.len() != 2
            || self.stride.len() > 2
            || self.padding.len() > 2
            || self.dilation.len() > 2
            || self.kernel_size.iter().chain(&self.stride).chain(&self.dilation).any(|&v| v == 0)
            || self.groups == 0;
        if bad {
            return Err(format!(
                "bad conv geometry: kernel_size {:?} (2 entries), stride {:?}, padding {:?}, dilation {:?} \
                 (at most 2 each; kernel, stride, dilation and groups ({}) at least 1)",
                self.kernel_size, self.stride, self.padding, self.dilation, self.groups
            ));
        }
        Ok(())
    }
}

impl OpDef for FusedConvBiasAct {
    fn arity(&self) -> Arity {
        Arity::Exact(if self.has_residual { 4 } else { 3 })
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        self.check_attrs()?;
        let (x, w, bias, residual) = match inputs {
            [x, w, bias] => (x, w, bias, None),
            [x, w, bias, residual] => (x, w, bias, Some(residual)),
            _ => return Err(format!("needs 3 or 4 inputs, got {}", inputs.len())),
        };
        let mut named = vec![("x", x), ("w", w), ("bias", bias)];
        named.extend(residual.map(|r| ("residual", r)));
        let dtype = same_float(&named)?;
        let ([n, c_in, h, wd], [c_out, c_in_g, kh, kw]) = match (x.shape.dims(), w.shape.dims()) {
            ([n, c, h, wd], [o, i, kh, kw]) => ([n, c, h, wd], [o, i, kh, kw]),
            _ => return Err(format!("conv needs x [N, C_in, H, W] and w [C_out, C_in/groups, kH, kW], got {x} and {w}")),
        };
        let g = self.groups;
        let kernel = [Dim::Static(self.kernel_size[0]), Dim::Static(self.kernel_size[1])];
        if !dims_agree(kh, &kernel[0]) || !dims_agree(kw, &kernel[1]) {
            return Err(format!("w {w} does not have kernel_size {:?}", self.kernel_size));
        }
        if let (Dim::Static(ci), Dim::Static(cig)) = (c_in, c_in_g) {
            if cig.checked_mul(g) != Some(*ci) {
                return Err(format!("x {x} has {ci} channels but w {w} takes {g}·{cig} (groups·w.dim(1))"));
            }
        }
        if let Dim::Static(co) = c_out {
            if co % g != 0 {
                return Err(format!("C_out {co} of w {w} is not divisible by groups {g}"));
            }
        }
        expect_dims("bias", bias, "[C_out]", std::slice::from_ref(c_out))?;
        let mut out = vec![n.clone(), c_out.clone()];
        for (i, input) in [h, wd].into_iter().enumerate() {
            let (s, p, d) = self.geometry(i);
            out.push(conv_extent(input, self.kernel_size[i], s, p, d)?);
        }
        if let Some(r) = residual {
            expect_dims("residual", r, "[N, C_out, H_o, W_o]", &out)?;
        }
        Ok(vec![TensorType::new(dtype, Shape(out))])
    }
}

/// Builders for the layer-level fusions.
impl crate::Graph {
    /// Fused self-attention; `has_bias` and `has_rope` follow the optional operand pairs
    /// (`(qkv_b, out_b)` and `(rope_cos, rope_sin)`).
    #[allow(clippy::too_many_arguments)]
    pub fn fused_attention_block(
        &mut self,
        num_heads: usize,
        head_dim: usize,
        hidden: ValueId,
        qkv_w: ValueId,
        out_w: ValueId,
        mask: ValueId,
        bias: Option<(ValueId, ValueId)>,
        rope: Option<(ValueId, ValueId)>,
    ) -> crate::Result<ValueId> {
        let mut inputs = vec![hidden, qkv_w, out_w, mask];
        inputs.extend(bias.iter().flat_map(|&(a, b)| [a, b]));
        inputs.extend(rope.iter().flat_map(|&(a, b)| [a, b]));
        let attrs = FusedAttentionBlock { num_heads, head_dim, has_bias: bias.is_some(), has_rope: rope.is_some() };
        self.add1(attrs, &inputs)
    }

    /// A BERT-style encoder layer; `inputs` in the order [`FusedTransformerLayer`] lists
    /// for `attrs.has_bias`.
    pub fn fused_transformer_layer(&mut self, attrs: FusedTransformerLayer, inputs: &[ValueId]) -> crate::Result<ValueId> {
        self.add1(attrs, inputs)
    }

    /// `act(conv(x, w) + bias [+ residual])`; `attrs.has_residual` is set from `residual`.
    pub fn fused_conv_bias_act(
        &mut self,
        mut attrs: FusedConvBiasAct,
        x: ValueId,
        w: ValueId,
        bias: ValueId,
        residual: Option<ValueId>,
    ) -> crate::Result<ValueId> {
        attrs.has_residual = residual.is_some();
        let mut inputs = vec![x, w, bias];
        inputs.extend(residual);
        self.add1(attrs, &inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    fn sym(dims: &[Dim]) -> TensorType {
        TensorType::new(DType::F32, Shape(dims.to_vec()))
    }

    fn attention_graph(with_bias: bool) -> (Graph, Vec<ValueId>) {
        let mut g = Graph::new();
        let hidden = g.input("h", sym(&["B".into(), "S".into(), 384.into()]));
        let qkv_w = g.param("qkv_w", f32s(&[384, 1152]));
        let qkv_b = g.param("qkv_b", f32s(&[1152]));
        let out_w = g.param("out_w", f32s(&[384, 384]));
        let out_b = g.param("out_b", f32s(&[384]));
        let e = g.param("e", f32s(&[384]));
        let fc1_w = g.param("fc1_w", f32s(&[384, 1536]));
        let fc1_b = g.param("fc1_b", f32s(&[1536]));
        let fc2_w = g.param("fc2_w", f32s(&[1536, 384]));
        let mask = g.input("mask", TensorType::new(DType::Bool, Shape(vec!["B".into(), "S".into()])));
        let inputs = if with_bias {
            vec![hidden, qkv_w, qkv_b, out_w, out_b, e, e, fc1_w, fc1_b, fc2_w, e, e, e, mask]
        } else {
            vec![hidden, qkv_w, out_w, e, e, fc1_w, fc2_w, e, e, mask]
        };
        (g, inputs)
    }

    fn layer(has_bias: bool) -> FusedTransformerLayer {
        let activation = ActivationKind::Gelu;
        FusedTransformerLayer { num_heads: 6, head_dim: 64, intermediate_size: 1536, eps1: 1e-12, eps2: 1e-12, activation, has_bias }
    }

    #[test]
    fn attention_block_checks_projections_mask_and_rope() {
        let (mut g, v) = attention_graph(true);
        let (hidden, qkv_w, qkv_b, out_w, out_b, mask) = (v[0], v[1], v[2], v[3], v[4], v[13]);
        let y = g.fused_attention_block(6, 64, hidden, qkv_w, out_w, mask, Some((qkv_b, out_b)), None).unwrap();
        assert_eq!(g.ty(y), g.ty(hidden));
        let e = g.fused_attention_block(4, 64, hidden, qkv_w, out_w, mask, None, None).unwrap_err().to_string();
        assert!(e.contains("qkv_w f32[384, 1152] must be [E, 3·H·D] = [384, 768]"), "{e}");
        let cos = g.input("cos", sym(&["S".into(), 64.into()]));
        let y = g.fused_attention_block(6, 64, hidden, qkv_w, out_w, mask, None, Some((cos, cos))).unwrap();
        assert_eq!(g.ty(y), g.ty(hidden));
        let narrow = g.input("narrow", f32s(&[128, 16]));
        let e = g.fused_attention_block(6, 64, hidden, qkv_w, out_w, mask, None, Some((narrow, narrow)));
        assert!(e.unwrap_err().to_string().contains("at least 32 entries"));
        let e = g.fused_attention_block(6, 64, hidden, qkv_w, out_w, qkv_b, None, None).unwrap_err().to_string();
        assert!(e.contains("mask f32[1152] must be [B, S]"), "{e}");
    }

    #[test]
    fn transformer_layer_takes_14_or_10_inputs() {
        for has_bias in [true, false] {
            let (mut g, inputs) = attention_graph(has_bias);
            let y = g.fused_transformer_layer(layer(has_bias), &inputs).unwrap();
            assert_eq!(g.ty(y), g.ty(inputs[0]));
        }
        let (mut g, mut inputs) = attention_graph(true);
        inputs.swap(7, 9); // fc1_w <-> fc2_w
        let e = g.fused_transformer_layer(layer(true), &inputs).unwrap_err().to_string();
        assert!(e.contains("fc1_w f32[1536, 384] must be [E, I] = [384, 1536]"), "{e}");
        let (mut g, inputs) = attention_graph(false);
        assert!(g.fused_transformer_layer(layer(true), &inputs).unwrap_err().to_string().contains("takes 14"));
    }

    fn conv(k: usize, s: usize, p: usize) -> FusedConvBiasAct {
        FusedConvBiasAct {
            kernel_size: vec![k, k],
            stride: vec![s, s],
            padding: vec![p, p],
            dilation: vec![],
            groups: 1,
            activation: Some(ActivationKind::Relu),
            has_residual: false,
        }
    }

    #[test]
    fn conv_bias_act_computes_extents() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["N".into(), 64.into(), 56.into(), 56.into()]));
        let w = g.param("w", f32s(&[128, 64, 3, 3]));
        let b = g.param("b", f32s(&[128]));
        let y = g.fused_conv_bias_act(conv(3, 2, 1), x, w, b, None).unwrap();
        assert_eq!(g.ty(y), &sym(&["N".into(), 128.into(), 28.into(), 28.into()]));
        // Missing stride entries are 1.
        let attrs = FusedConvBiasAct { stride: vec![2], ..conv(3, 2, 1) };
        let y1 = g.fused_conv_bias_act(attrs, x, w, b, None).unwrap();
        assert_eq!(g.ty(y1), &sym(&["N".into(), 128.into(), 28.into(), 56.into()]));
        let r = g.input("r", sym(&["N".into(), 128.into(), 28.into(), 28.into()]));
        let y2 = g.fused_conv_bias_act(conv(3, 2, 1), x, w, b, Some(r)).unwrap();
        assert_eq!(g.node(y2.node).inputs.len(), 4);
        let e = g.fused_conv_bias_act(conv(3, 1, 1), x, w, b, Some(r)).unwrap_err().to_string();
        assert!(e.contains("residual"), "{e}");
        // Same-size convs keep symbolic extents; others need static ones.
        let xs = g.input("xs", sym(&["N".into(), 64.into(), "H".into(), "W".into()]));
        let y3 = g.fused_conv_bias_act(conv(3, 1, 1), xs, w, b, None).unwrap();
        assert_eq!(g.ty(y3).shape.dims()[2], Dim::sym("H"));
        assert!(g.fused_conv_bias_act(conv(3, 2, 1), xs, w, b, None).unwrap_err().to_string().contains("symbolic"));
        let e = g.fused_conv_bias_act(conv(5, 1, 1), x, w, b, None).unwrap_err().to_string();
        assert!(e.contains("does not have kernel_size [5, 5]"), "{e}");
        let mut grouped = conv(3, 1, 1);
        grouped.groups = 3;
        assert!(g.fused_conv_bias_act(grouped, x, w, b, None).unwrap_err().to_string().contains("groups"));
    }
}
