//! Decompositions of the fused family (OPS.md §19 and the two DiT backward ops of §22): each
//! fused op unfused into the ops it stands for. Norms, attention and RoPE stay whole
//! (`LayerNorm`, `RmsNorm`, their input gradients, `Attention`, `Rope`); their own families
//! lower them further when a backend does not claim them.

use super::build::{scalar, unbroadcast};
use rlx_ir::ops::attention::{Attention, MaskKind, Rope, RopeStyle};
use rlx_ir::ops::conv::Conv;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::fused::{
    AdaLayerNorm, AdaLayerNormBackward, AdaNormKind, BatchElementwiseRegion, ChainStep, ElementwiseRegion,
    FusedAttentionBlock, FusedConvBiasAct, FusedResidualLN, FusedResidualRmsNorm, FusedSwiGLU, FusedTransformerLayer, Operand,
    RegionPrologue, TransformRegion,
};
use rlx_ir::ops::norm::{LayerNormBackwardInput, RmsNormBackwardInput};
use rlx_ir::{DType, Dim, Graph, IrError, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::ElementwiseRegion,
    OpKind::TransformRegion,
    OpKind::BatchElementwiseRegion,
    OpKind::FusedSwiGLU,
    OpKind::FusedMatMulBiasAct,
    OpKind::FusedConvBiasAct,
    OpKind::FusedResidualLN,
    OpKind::FusedResidualRmsNorm,
    OpKind::FusedAttentionBlock,
    OpKind::FusedTransformerLayer,
    OpKind::AdaLayerNorm,
    OpKind::GatedResidual,
    OpKind::AdaLayerNormBackward,
    OpKind::GatedResidualBackward,
];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let one = |r: Result<ValueId, IrError>| r.map(|v| vec![v]);
    Some(match op {
        Op::ElementwiseRegion(r) => one(elementwise_region(g, r, x)),
        Op::TransformRegion(r) => one(transform_region(g, r, x)),
        Op::BatchElementwiseRegion(r) => one(batch_region(g, r, x)),
        Op::FusedSwiGLU(a) => one(swiglu(g, a, x[0])),
        Op::FusedMatMulBiasAct(a) => one(matmul_bias_act(g, x[0], x[1], Some(x[2]), a.activation)),
        Op::FusedConvBiasAct(a) => one(conv_bias_act(g, a, x)),
        Op::FusedResidualLN(a) => one(residual_ln(g, a, x)),
        Op::FusedResidualRmsNorm(a) => one(residual_rms(g, a, x)),
        Op::FusedAttentionBlock(a) => one(attention_block(g, a, x)),
        Op::FusedTransformerLayer(a) => one(transformer_layer(g, a, x)),
        Op::AdaLayerNorm(a) => one(ada_layer_norm(g, a, x)),
        Op::GatedResidual(_) => one(gated_residual(g, x)),
        Op::AdaLayerNormBackward(a) => ada_layer_norm_backward(g, a, x),
        Op::GatedResidualBackward(_) => gated_residual_backward(g, x),
        _ => return None,
    })
}

/// `x [N, C, H, W]` → `[N, C, 2H, 2W]` by nearest neighbour: `Reshape [N, C, H, 1, W, 1]`,
/// `Expand [N, C, H, 2, W, 2]`, `Reshape`.
fn resize_nearest_2x(g: &mut Graph, x: ValueId) -> Result<ValueId, IrError> {
    let [n, c, h, w] = match g.ty(x).shape.dims() {
        [n, c, h, w] => [n.clone(), c.clone(), h.clone(), w.clone()],
        _ => return Err(IrError::Invalid(format!("ResizeNearest2x needs an NCHW operand, got {}", g.ty(x)))),
    };
    let (hs, ws) = match (h.as_static(), w.as_static()) {
        (Some(h), Some(w)) => (h, w),
        _ => return Err(IrError::Invalid(format!("ResizeNearest2x needs static H and W, got {}", g.ty(x)))),
    };
    let one = Dim::Static(1);
    let two = Dim::Static(2);
    let split = g.reshape_to(x, &Shape(vec![n.clone(), c.clone(), h.clone(), one.clone(), w.clone(), one]))?;
    let wide = g.expand_to(split, &Shape(vec![n.clone(), c.clone(), h, two.clone(), w, two]))?;
    g.reshape_to(wide, &Shape(vec![n, c, Dim::Static(2 * hs), Dim::Static(2 * ws)]))
}

/// Replays `chain` over `inputs` (NumPy broadcasting, which the region's modulo reads equal).
fn replay(g: &mut Graph, chain: &[ChainStep], inputs: &[ValueId]) -> Result<ValueId, IrError> {
    let mut steps: Vec<ValueId> = Vec::with_capacity(chain.len());
    for step in chain {
        let at = |o: Operand| match o {
            Operand::Input(i) => inputs[i as usize],
            Operand::Step(j) => steps[j as usize],
        };
        let v = match *step {
            ChainStep::Activation(kind, a) => g.activation(kind, at(a))?,
            ChainStep::Cast(to, a) => g.cast(at(a), to)?,
            ChainStep::Binary(op, a, b) => g.binary(op, at(a), at(b))?,
            ChainStep::Compare(op, a, b) => g.compare(op, at(a), at(b))?,
            ChainStep::Where(c, t, f) => g.select(at(c), at(t), at(f))?,
        };
        steps.push(v);
    }
    steps.last().copied().ok_or_else(|| IrError::Invalid("the region chain is empty".into()))
}

/// Each step as a standalone op, the prologue input upsampled first; inputs the chain does not
/// read still set the output shape, so the result is expanded to it if needed.
fn elementwise_region(g: &mut Graph, r: &ElementwiseRegion, x: &[ValueId]) -> Result<ValueId, IrError> {
    let out = g.infer(&r.clone().into(), x)?.remove(0);
    let mut inputs = x.to_vec();
    if r.prologue == RegionPrologue::ResizeNearest2x {
        let p = r.prologue_input as usize;
        inputs[p] = resize_nearest_2x(g, inputs[p])?;
    }
    let y = replay(g, &r.chain, &inputs)?;
    if g.ty(y).shape == out.shape {
        Ok(y)
    } else {
        g.expand_to(y, &out.shape)
    }
}

/// One `ResizeNearest2x` per step, all on input 0.
fn transform_region(g: &mut Graph, r: &TransformRegion, x: &[ValueId]) -> Result<ValueId, IrError> {
    r.steps.iter().try_fold(x[0], |v, _| resize_nearest_2x(g, v))
}

/// One `ElementwiseRegion` per slice, concatenated on axis 0.
fn batch_region(g: &mut Graph, r: &BatchElementwiseRegion, x: &[ValueId]) -> Result<ValueId, IrError> {
    let prologue = (r.prologue == RegionPrologue::ResizeNearest2x).then_some(0);
    let slices =
        x.iter().map(|&s| g.elementwise_region(r.chain.clone(), &[s], prologue)).collect::<Result<Vec<_>, _>>()?;
    if slices.len() == 1 {
        Ok(slices[0])
    } else {
        g.concat(&slices, 0)
    }
}

/// `silu(gate)·up` over two `Narrow`s of the last axis, then the optional `Cast`.
fn swiglu(g: &mut Graph, a: &FusedSwiGLU, x: ValueId) -> Result<ValueId, IrError> {
    let t = g.ty(x).clone();
    let axis = t.rank() - 1;
    let n = t.static_dim(axis).map_err(IrError::Invalid)? / 2;
    let first = g.narrow(x, axis, 0, n)?;
    let second = g.narrow(x, axis, n, n)?;
    let (gate, up) = if a.gate_first { (first, second) } else { (second, first) };
    let act = g.activation(ActivationKind::Silu, gate)?;
    let y = g.binary(BinaryOp::Mul, act, up)?;
    match a.cast_to {
        Some(d) if d != t.dtype => g.cast(y, d),
        _ => Ok(y),
    }
}

/// `act(x·w [+ bias])`; the bias broadcasts over the rows.
fn matmul_bias_act(
    g: &mut Graph,
    x: ValueId,
    w: ValueId,
    bias: Option<ValueId>,
    act: Option<ActivationKind>,
) -> Result<ValueId, IrError> {
    let mut y = g.matmul(x, w)?;
    if let Some(b) = bias {
        y = g.binary(BinaryOp::Add, y, b)?;
    }
    match act {
        Some(kind) => g.activation(kind, y),
        None => Ok(y),
    }
}

/// `act(conv(x, w) + bias[c] [+ residual])`: `Conv`, the bias reshaped to `[1, C, 1, 1]` and
/// broadcast by `Add`, the optional residual `Add` and `Activation`.
fn conv_bias_act(g: &mut Graph, a: &FusedConvBiasAct, x: &[ValueId]) -> Result<ValueId, IrError> {
    let conv = Conv {
        kernel_size: a.kernel_size.clone(),
        stride: a.stride.clone(),
        padding: a.padding.clone(),
        dilation: a.dilation.clone(),
        groups: a.groups,
    };
    let y = g.conv(x[0], x[1], conv)?;
    let c = g.ty(x[2]).shape.dims()[0].clone();
    let bias = g.reshape_to(x[2], &Shape(vec![Dim::Static(1), c, Dim::Static(1), Dim::Static(1)]))?;
    let mut y = g.binary(BinaryOp::Add, y, bias)?;
    if a.has_residual {
        y = g.binary(BinaryOp::Add, y, x[3])?;
    }
    match a.activation {
        Some(kind) => g.activation(kind, y),
        None => Ok(y),
    }
}

/// `x + residual [+ bias]` and the `(gamma, beta)` that follow, from the fused residual norms'
/// operand lists.
fn residual_sum(g: &mut Graph, has_bias: bool, x: &[ValueId]) -> Result<(ValueId, ValueId, ValueId), IrError> {
    let mut s = g.binary(BinaryOp::Add, x[0], x[1])?;
    if has_bias {
        s = g.binary(BinaryOp::Add, s, x[2])?;
    }
    let k = 2 + usize::from(has_bias);
    Ok((s, x[k], x[k + 1]))
}

fn residual_ln(g: &mut Graph, a: &FusedResidualLN, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (s, gamma, beta) = residual_sum(g, a.has_bias, x)?;
    g.layer_norm(s, gamma, beta, -1, a.eps)
}

fn residual_rms(g: &mut Graph, a: &FusedResidualRmsNorm, x: &[ValueId]) -> Result<ValueId, IrError> {
    let (s, gamma, beta) = residual_sum(g, a.has_bias, x)?;
    g.rms_norm(s, gamma, beta, -1, a.eps)
}

/// Self-attention on the rank-3 `[B, S, H·D]` layout that `Rope` and `Attention` both read, so
/// no head split or transpose is needed: `qkv = hidden·qkv_w (+ qkv_b)`, three `Narrow`s of the
/// last axis, NeoX `Rope` on `q` and `k`, `Attention` with the `Custom` padding mask,
/// `·out_w (+ out_b)`.
fn attention(
    g: &mut Graph,
    heads: usize,
    head_dim: usize,
    [hidden, qkv_w, out_w, mask]: [ValueId; 4],
    bias: Option<(ValueId, ValueId)>,
    rope: Option<(ValueId, ValueId)>,
) -> Result<ValueId, IrError> {
    let hd = heads * head_dim;
    let qkv = matmul_bias_act(g, hidden, qkv_w, bias.map(|b| b.0), None)?;
    let mut q = g.narrow(qkv, 2, 0, hd)?;
    let mut k = g.narrow(qkv, 2, hd, hd)?;
    let v = g.narrow(qkv, 2, 2 * hd, hd)?;
    if let Some((cos, sin)) = rope {
        let attrs = Rope { head_dim, n_rot: head_dim, style: RopeStyle::NeoX };
        q = g.rope(attrs.clone(), q, cos, sin)?;
        k = g.rope(attrs, k, cos, sin)?;
    }
    let dtype = g.ty(mask).dtype;
    let mask = if dtype.is_float() || dtype == DType::Bool { mask } else { g.cast(mask, DType::F32)? };
    let att = g.attention(Attention::new(heads, head_dim, MaskKind::Custom), q, k, v, Some(mask))?;
    matmul_bias_act(g, att, out_w, bias.map(|b| b.1), None)
}

fn attention_block(g: &mut Graph, a: &FusedAttentionBlock, x: &[ValueId]) -> Result<ValueId, IrError> {
    let mut rest = x[4..].iter().copied();
    let mut pair = |on: bool| if on { rest.next().zip(rest.next()) } else { None };
    let bias = pair(a.has_bias);
    let rope = pair(a.has_rope);
    attention(g, a.num_heads, a.head_dim, [x[0], x[1], x[2], x[3]], bias, rope)
}

/// `h1 = LayerNorm(hidden + attn(hidden))`, `out = LayerNorm(h1 + act(h1·fc1_w + fc1_b)·fc2_w + fc2_b)`.
fn transformer_layer(g: &mut Graph, a: &FusedTransformerLayer, x: &[ValueId]) -> Result<ValueId, IrError> {
    // Operands in a common order: weights, then the optional biases.
    let (hidden, qkv_w, out_w, [ln1_g, ln1_b, ln2_g, ln2_b], fc1_w, fc2_w, mask, biases) = if a.has_bias {
        (x[0], x[1], x[3], [x[5], x[6], x[11], x[12]], x[7], x[9], x[13], Some([x[2], x[4], x[8], x[10]]))
    } else {
        (x[0], x[1], x[2], [x[3], x[4], x[7], x[8]], x[5], x[6], x[9], None)
    };
    let att = attention(g, a.num_heads, a.head_dim, [hidden, qkv_w, out_w, mask], biases.map(|b| (b[0], b[1])), None)?;
    let s1 = g.binary(BinaryOp::Add, hidden, att)?;
    let h1 = g.layer_norm(s1, ln1_g, ln1_b, -1, a.eps1)?;
    let f = matmul_bias_act(g, h1, fc1_w, biases.map(|b| b[2]), Some(a.activation))?;
    let f = matmul_bias_act(g, f, fc2_w, biases.map(|b| b[3]), None)?;
    let s2 = g.binary(BinaryOp::Add, h1, f)?;
    g.layer_norm(s2, ln2_g, ln2_b, -1, a.eps2)
}

/// `[D]` vectors of ones and zeros in `x`'s dtype, `D` its last dim (an `Expand` of a scalar,
/// so a symbolic `D` works too): the identity affine of the DiT norms.
fn identity_affine(g: &mut Graph, x: ValueId) -> Result<(ValueId, ValueId), IrError> {
    let t = g.ty(x).clone();
    let d = Shape(vec![t.shape.dims().last().cloned().unwrap_or(Dim::Static(1))]);
    let one = scalar(g, t.dtype, 1.0)?;
    let zero = scalar(g, t.dtype, 0.0)?;
    Ok((g.expand_to(one, &d)?, g.expand_to(zero, &d)?))
}

/// `norm(x)` over the last axis without an affine.
fn plain_norm(g: &mut Graph, norm: AdaNormKind, eps: f32, x: ValueId) -> Result<ValueId, IrError> {
    let (ones, zeros) = identity_affine(g, x)?;
    match norm {
        AdaNormKind::LayerNorm => g.layer_norm(x, ones, zeros, -1, eps),
        AdaNormKind::RmsNorm => g.rms_norm(x, ones, zeros, -1, eps),
    }
}

/// `1 + scale`.
fn one_plus(g: &mut Graph, scale: ValueId) -> Result<ValueId, IrError> {
    let one = scalar(g, g.ty(scale).dtype, 1.0)?;
    g.binary(BinaryOp::Add, scale, one)
}

/// `norm(x)·(1 + scale) + shift`; the modulation broadcasts over the sequence.
fn ada_layer_norm(g: &mut Graph, a: &AdaLayerNorm, x: &[ValueId]) -> Result<ValueId, IrError> {
    let n = plain_norm(g, a.norm, a.eps, x[0])?;
    let s = one_plus(g, x[1])?;
    let y = g.binary(BinaryOp::Mul, n, s)?;
    g.binary(BinaryOp::Add, y, x[2])
}

/// `x + gate·y`.
fn gated_residual(g: &mut Graph, x: &[ValueId]) -> Result<ValueId, IrError> {
    let gy = g.binary(BinaryOp::Mul, x[2], x[1])?;
    g.binary(BinaryOp::Add, x[0], gy)
}

/// `dshift = unbroadcast(ȳ)`, `dscale = unbroadcast(ȳ·x̂)`, `dx` = the norm's input gradient
/// (identity affine) of `ȳ·(1 + scale)`.
fn ada_layer_norm_backward(g: &mut Graph, a: &AdaLayerNormBackward, x: &[ValueId]) -> Result<Vec<ValueId>, IrError> {
    let [x, scale, shift, dy] = [x[0], x[1], x[2], x[3]];
    let xhat = plain_norm(g, a.norm, a.eps, x)?;
    let dy_xhat = g.binary(BinaryOp::Mul, dy, xhat)?;
    let scale_shape = g.ty(scale).shape.clone();
    let dscale = unbroadcast(g, dy_xhat, &scale_shape)?;
    let shift_shape = g.ty(shift).shape.clone();
    let dshift = unbroadcast(g, dy, &shift_shape)?;
    let s = one_plus(g, scale)?;
    let gy = g.binary(BinaryOp::Mul, dy, s)?;
    let (ones, zeros) = identity_affine(g, x)?;
    let dx = match a.norm {
        AdaNormKind::LayerNorm => {
            g.layer_norm_backward_input(LayerNormBackwardInput { axis: -1, eps: a.eps }, x, ones, gy)?
        }
        AdaNormKind::RmsNorm => {
            g.rms_norm_backward_input(RmsNormBackwardInput { axis: -1, eps: a.eps }, x, ones, zeros, gy)?
        }
    };
    Ok(vec![dx, dscale, dshift])
}

/// `dx = ȳ`, `dy = ȳ·gate`, `dgate = unbroadcast(ȳ·y)`.
fn gated_residual_backward(g: &mut Graph, x: &[ValueId]) -> Result<Vec<ValueId>, IrError> {
    let [y, gate, dy] = [x[1], x[2], x[3]];
    let d_y = g.binary(BinaryOp::Mul, dy, gate)?;
    let dy_y = g.binary(BinaryOp::Mul, dy, y)?;
    let gate_shape = g.ty(gate).shape.clone();
    let dgate = unbroadcast(g, dy_y, &gate_shape)?;
    Ok(vec![dy, d_y, dgate])
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn swiglu_narrows_the_halves_and_casts() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["T",14]))()
            %1 = FusedSwiGLU(cast_to:Some(F16),gate_first:true)(%0)
            return %1"#,
            OpKind::FusedSwiGLU,
            &[],
        );
        assert_eq!(count(&out, OpKind::Narrow), 2);
        assert_eq!(count(&out, OpKind::Cast), 1);
    }

    #[test]
    fn matmul_bias_act_is_three_ops() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,7]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[7]))()
            %3 = FusedMatMulBiasAct(activation:Some(Gelu))(%0, %1, %2)
            %4 = FusedMatMulBiasAct(activation:None)(%0, %1, %2)
            return %3, %4"#,
            OpKind::FusedMatMulBiasAct,
            &[],
        );
        assert_eq!(count(&out, OpKind::MatMul), 2);
        assert_eq!(count(&out, OpKind::Activation), 1);
    }

    #[test]
    fn residual_norms_keep_the_norm() {
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3,8]))()
            %1 = Input(name:"r",ty:(dtype:F32,shape:[3,8]))()
            %2 = Param(name:"g",ty:(dtype:F32,shape:[8]))()
            %3 = FusedResidualLN(has_bias:true,eps:0.00001)(%0, %1, %2, %2, %2)
            %4 = FusedResidualRmsNorm(has_bias:false,eps:0.000001)(%3, %1, %2, %2)
            return %4"#,
            OpKind::FusedResidualLN,
            &[],
        );
        assert_eq!(count(&out, OpKind::LayerNorm), 1);
        assert_eq!(count(&out, OpKind::RmsNorm), 1);
        assert_eq!(count(&out, OpKind::Binary), 3);
    }

    #[test]
    fn attention_block_with_bias_and_rope() {
        let out = lower_text(
            r#"%0 = Input(name:"h",ty:(dtype:F32,shape:["B","S",12]))()
            %1 = Input(name:"mask",ty:(dtype:I32,shape:["B","S"]))()
            %2 = Param(name:"qkv_w",ty:(dtype:F32,shape:[12,36]))()
            %3 = Param(name:"qkv_b",ty:(dtype:F32,shape:[36]))()
            %4 = Param(name:"out_w",ty:(dtype:F32,shape:[12,12]))()
            %5 = Param(name:"out_b",ty:(dtype:F32,shape:[12]))()
            %6 = Input(name:"cos",ty:(dtype:F32,shape:["S",2]))()
            %7 = FusedAttentionBlock(num_heads:3,head_dim:4,has_bias:true,has_rope:true)(%0, %2, %4, %1, %3, %5, %6, %6)
            %8 = FusedAttentionBlock(num_heads:3,head_dim:4,has_bias:false,has_rope:false)(%7, %2, %4, %1)
            return %8"#,
            OpKind::FusedAttentionBlock,
            &[],
        );
        assert_eq!(count(&out, OpKind::Attention), 2);
        assert_eq!(count(&out, OpKind::Rope), 2);
        assert_eq!(count(&out, OpKind::MatMul), 4);
        // The integer mask becomes a float one, once per block.
        assert_eq!(count(&out, OpKind::Cast), 2);
    }

    #[test]
    fn transformer_layer_with_and_without_bias() {
        for has_bias in [true, false] {
            let operands = if has_bias {
                "%0, %2, %3, %4, %5, %6, %6, %7, %8, %9, %6, %6, %6, %1"
            } else {
                "%0, %2, %4, %6, %6, %7, %9, %6, %6, %1"
            };
            let src = format!(
                r#"%0 = Input(name:"h",ty:(dtype:F32,shape:["B","S",8]))()
                %1 = Input(name:"mask",ty:(dtype:Bool,shape:["B","S"]))()
                %2 = Param(name:"qkv_w",ty:(dtype:F32,shape:[8,24]))()
                %3 = Param(name:"qkv_b",ty:(dtype:F32,shape:[24]))()
                %4 = Param(name:"out_w",ty:(dtype:F32,shape:[8,8]))()
                %5 = Param(name:"out_b",ty:(dtype:F32,shape:[8]))()
                %6 = Param(name:"e",ty:(dtype:F32,shape:[8]))()
                %7 = Param(name:"fc1_w",ty:(dtype:F32,shape:[8,16]))()
                %8 = Param(name:"fc1_b",ty:(dtype:F32,shape:[16]))()
                %9 = Param(name:"fc2_w",ty:(dtype:F32,shape:[16,8]))()
                %10 = FusedTransformerLayer(num_heads:2,head_dim:4,intermediate_size:16,eps1:0.00001,eps2:0.00001,activation:Gelu,has_bias:{has_bias})({operands})
                return %10"#
            );
            let out = lower_text(&src, OpKind::FusedTransformerLayer, &[]);
            assert_eq!(count(&out, OpKind::LayerNorm), 2);
            assert_eq!(count(&out, OpKind::Attention), 1);
            assert_eq!(count(&out, OpKind::MatMul), 4);
            assert_eq!(count(&out, OpKind::Binary), 2 + 4 * usize::from(has_bias));
        }
    }

    #[test]
    fn dit_modulation_and_its_gradients() {
        for norm in ["LayerNorm", "RmsNorm"] {
            let src = format!(
                r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",5,8]))()
                %1 = Input(name:"scale",ty:(dtype:F32,shape:["B",1,8]))()
                %2 = Input(name:"shift",ty:(dtype:F32,shape:[8]))()
                %3 = AdaLayerNorm(norm:{norm},eps:0.000001)(%0, %1, %1)
                %4 = GatedResidual()(%0, %3, %1)
                %5 = AdaLayerNormBackward(norm:{norm},eps:0.000001)(%0, %2, %2, %4)
                %6 = GatedResidualBackward()(%0, %3, %1, %4)
                return %4, %5, %5.1, %5.2, %6, %6.1, %6.2"#
            );
            let out = lower_text(&src, OpKind::AdaLayerNorm, &[]);
            for kind in [OpKind::GatedResidual, OpKind::AdaLayerNormBackward, OpKind::GatedResidualBackward] {
                assert_eq!(count(&out, kind), 0, "{out}");
            }
            let grad = if norm == "LayerNorm" { OpKind::LayerNormBackwardInput } else { OpKind::RmsNormBackwardInput };
            assert_eq!(count(&out, grad), 1);
            // dscale and dshift of the [8] modulation sum over both leading axes; dgate over S.
            assert_eq!(count(&out, OpKind::Reduce), 3);
        }
    }

    #[test]
    fn regions_replay_their_steps() {
        let out = lower_text(
            r#"%0 = Input(name:"low",ty:(dtype:F32,shape:["N",2,3,5]))()
            %1 = Input(name:"skip",ty:(dtype:F32,shape:["N",2,6,10]))()
            %2 = Constant(ty:(dtype:F32,shape:[1]),data:[0,0,0,63])()
            %3 = ElementwiseRegion(chain:[Binary(Add,Input(0),Input(1)),Binary(Mul,Step(0),Input(2)),Compare(Gt,Step(1),Input(2)),Where(Step(2),Step(1),Input(2)),Activation(Tanh,Step(3)),Cast(BF16,Step(4))],num_inputs:3,scalar_input_mask:4,input_modulus:(0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:ResizeNearest2x,prologue_input:0)(%0, %1, %2)
            %4 = TransformRegion(steps:[ResizeNearest2x(Input(0)),ResizeNearest2x(Step(0))],num_inputs:1)(%0)
            %5 = Input(name:"s0",ty:(dtype:F32,shape:[1,2,3,5]))()
            %6 = Input(name:"s1",ty:(dtype:F32,shape:[3,2,3,5]))()
            %7 = BatchElementwiseRegion(chain:[Activation(Sigmoid,Input(0))],num_batch_inputs:2,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:ResizeNearest2x,prologue_input:0)(%5, %6)
            return %3, %4, %7"#,
            OpKind::ElementwiseRegion,
            &[],
        );
        assert_eq!(count(&out, OpKind::TransformRegion) + count(&out, OpKind::BatchElementwiseRegion), 0);
        // One upsampling in the region, two in the transform, one per batch slice.
        assert_eq!(count(&out, OpKind::Expand), 5);
        assert_eq!(count(&out, OpKind::Concat), 1);
    }

    #[test]
    fn region_output_follows_an_unread_input() {
        // The chain reads only the scalar, yet the region's output has the shape of input 0.
        let out = lower_text(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[4,3]))()
            %1 = Constant(ty:(dtype:F32,shape:[1]),data:[0,0,128,63])()
            %2 = ElementwiseRegion(chain:[Activation(Exp,Input(1))],num_inputs:2,scalar_input_mask:2,input_modulus:(0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0, %1)
            return %2"#,
            OpKind::ElementwiseRegion,
            &[],
        );
        assert_eq!(count(&out, OpKind::Expand), 1);
    }

    #[test]
    fn every_fused_kind_of_the_ir_sample_lowers() {
        let g = rlx_ir::text::parse(include_str!("../../../rlx-ir/tests/data/fused.rlx")).unwrap();
        let out = lower(&g, &[]);
        for kind in super::KINDS {
            assert_eq!(count(&out, *kind), 0, "{kind} left in\n{out}");
        }
    }
}
