//! `Conv(x, w) → Add(bias [1, C, 1, 1]) [→ Add(residual)] [→ Activation]` →
//! `FusedConvBiasAct(x, w, bias [C] [, residual])`, the tail of a ResNet block.

use super::Site;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::fused::FusedConvBiasAct;
use rlx_ir::{Dim, IrError, NodeId, Op, Shape, ValueId};

/// The source values a fused conv is built from.
struct Parts {
    x: ValueId,
    w: ValueId,
    bias: ValueId,
    residual: Option<ValueId>,
    activation: Option<ActivationKind>,
    attrs: FusedConvBiasAct,
    /// The `Add` of the bias, which tells two patterns over one conv apart.
    bias_add: NodeId,
}

/// Matches at the node that ends the longest pattern: the `Activation`, else the residual
/// `Add`, else the bias `Add`. A conv whose sum is another conv's residual (a ResNet block's
/// projection shortcut) fuses on its own.
pub(super) fn fuse(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    let Some(p) = pattern(s, root) else { return Ok(None) };
    if p.activation.is_none() && s.uses.sole_reader(root).and_then(|r| pattern(s, r)).is_some_and(|q| q.bias_add == p.bias_add) {
        return Ok(None);
    }
    let c = s.src.ty(p.w).shape.dims()[0].clone();
    let [x, w, bias] = s.map([p.x, p.w, p.bias]);
    let residual = p.residual.map(|r| s.rw.map(r));
    let g = s.rw.graph();
    let bias = g.reshape_to(bias, &Shape(vec![c]))?;
    let attrs = FusedConvBiasAct { activation: p.activation, ..p.attrs };
    Ok(g.fused_conv_bias_act(attrs, x, w, bias, residual).ok())
}

/// The pattern ending at `root`, if one does.
fn pattern(s: &Site, root: NodeId) -> Option<Parts> {
    let node = s.src.node(root);
    if let Op::Activation(a) = &node.op {
        let v = node.inputs[0];
        let mut p = s.uses.single(v).then(|| sum(s, v.node)).flatten()?;
        p.activation = Some(a.kind);
        return Some(p);
    }
    sum(s, root)
}

/// `conv + bias`, or that plus a residual of the conv's type (either operand order).
fn sum(s: &Site, id: NodeId) -> Option<Parts> {
    if let Some(p) = conv_plus_bias(s, id) {
        return Some(p);
    }
    let [a, b] = add_operands(s, id)?;
    [(a, b), (b, a)].into_iter().find_map(|(inner, residual)| {
        let mut p = s.uses.single(inner).then(|| conv_plus_bias(s, inner.node)).flatten()?;
        (s.src.ty(residual) == s.src.ty(inner)).then_some(())?;
        p.residual = Some(residual);
        Some(p)
    })
}

/// `Conv(x, w) + bias` with the conv read only by the add and `bias` one value per output
/// channel (`[1, C, 1, 1]`, `[C, 1, 1]`) in the conv's dtype.
fn conv_plus_bias(s: &Site, id: NodeId) -> Option<Parts> {
    let [a, b] = add_operands(s, id)?;
    [(a, b), (b, a)].into_iter().find_map(|(y, bias)| {
        let conv = s.node(y);
        let Op::Conv(c) = &conv.op else { return None };
        let (yt, bt) = (s.src.ty(y), s.src.ty(bias));
        let channel = yt.shape.dims().get(1)?;
        let per_channel = bias_dims_per_channel(bt.shape.dims(), channel);
        let fits = s.uses.single(y) && yt.rank() == 4 && bt.dtype == yt.dtype && per_channel;
        fits.then(|| Parts {
            x: conv.inputs[0],
            w: conv.inputs[1],
            bias,
            residual: None,
            activation: None,
            bias_add: id,
            attrs: FusedConvBiasAct {
                kernel_size: c.kernel_size.clone(),
                stride: c.stride.clone(),
                padding: c.padding.clone(),
                dilation: c.dilation.clone(),
                groups: c.groups,
                activation: None,
                has_residual: false,
            },
        })
    })
}

/// Whether a bias of `dims` holds one value per channel `c` of an NCHW output.
fn bias_dims_per_channel(dims: &[Dim], c: &Dim) -> bool {
    let one = Dim::Static(1);
    match dims {
        [n, ch, h, w] => [n, h, w].iter().all(|&d| *d == one) && ch == c,
        [ch, h, w] => [h, w].iter().all(|&d| *d == one) && ch == c,
        _ => false,
    }
}

/// The operands of `id` when it is a binary `Add`.
fn add_operands(s: &Site, id: NodeId) -> Option<[ValueId; 2]> {
    let node = s.src.node(id);
    matches!(&node.op, Op::Binary(b) if b.op == BinaryOp::Add).then(|| [node.inputs[0], node.inputs[1]])
}

#[cfg(test)]
mod tests {
    use crate::fuse::tests::assert_fuses;
    use rlx_ir::OpKind;

    const CLAIMS: &[OpKind] = &[OpKind::FusedConvBiasAct, OpKind::ElementwiseRegion];
    const HEAD: &str = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,4,9,9]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[6,2,3,3]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[1,6,1,1]))()
            %3 = Conv(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2)(%0, %1)"#;

    #[test]
    fn conv_bias_residual_and_relu_become_one_node() {
        assert_fuses(
            &format!(
                r#"{HEAD}
            %4 = Binary(op:Add)(%2, %3)
            %5 = Input(name:"r",ty:(dtype:F32,shape:[1,6,5,5]))()
            %6 = Binary(op:Add)(%5, %4)
            %7 = Activation(kind:Relu)(%6)
            return %7"#
            ),
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,4,9,9]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[6,2,3,3]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[1,6,1,1]))()
            %3 = Input(name:"r",ty:(dtype:F32,shape:[1,6,5,5]))()
            %4 = Reshape(new_shape:[6])(%2)
            %5 = FusedConvBiasAct(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2,activation:Some(Relu),has_residual:true)(%0, %1, %4, %3)
            return %5"#,
        );
    }

    #[test]
    fn a_projection_shortcut_fuses_on_its_own_and_as_the_residual() {
        // relu((conv(x) + b) + (conv'(x) + b)): the second conv's sum is the first one's
        // residual, and fuses too.
        assert_fuses(
            &format!(
                r#"{HEAD}
            %4 = Binary(op:Add)(%3, %2)
            %5 = Conv(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2)(%0, %1)
            %6 = Binary(op:Add)(%5, %2)
            %7 = Binary(op:Add)(%4, %6)
            %8 = Activation(kind:Relu)(%7)
            return %8"#
            ),
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,4,9,9]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[6,2,3,3]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[1,6,1,1]))()
            %3 = Reshape(new_shape:[6])(%2)
            %4 = FusedConvBiasAct(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2,activation:None,has_residual:false)(%0, %1, %3)
            %5 = Reshape(new_shape:[6])(%2)
            %6 = FusedConvBiasAct(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2,activation:Some(Relu),has_residual:true)(%0, %1, %5, %4)
            return %6"#,
        );
    }

    #[test]
    fn a_bias_add_alone_fuses_and_a_shared_sum_keeps_its_tail() {
        assert_fuses(
            &format!(
                r#"{HEAD}
            %4 = Binary(op:Add)(%3, %2)
            %5 = Activation(kind:Relu)(%4)
            return %5, %4"#
            ),
            &[OpKind::FusedConvBiasAct][..],
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,4,9,9]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[6,2,3,3]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[1,6,1,1]))()
            %3 = Reshape(new_shape:[6])(%2)
            %4 = FusedConvBiasAct(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2,activation:None,has_residual:false)(%0, %1, %3)
            %5 = Activation(kind:Relu)(%4)
            return %5, %4"#,
        );
    }

    #[test]
    fn shared_convs_and_full_addends_stay() {
        // The conv is also an output; the second add's operand is not one value per channel.
        let src = format!(
            r#"{HEAD}
            %4 = Binary(op:Add)(%3, %2)
            %5 = Input(name:"y",ty:(dtype:F32,shape:[1,1,5,5]))()
            %6 = Conv(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2)(%0, %1)
            %7 = Binary(op:Add)(%6, %5)
            return %4, %3, %7"#
        );
        assert_fuses(&src, &[OpKind::FusedConvBiasAct][..], &src);
    }
}
