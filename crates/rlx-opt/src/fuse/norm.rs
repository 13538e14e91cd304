//! `Add(x, residual) → LayerNorm / RmsNorm` over the last axis → `FusedResidualLN` /
//! `FusedResidualRmsNorm`. The fused ops output only the normalized value, so the sum must
//! have no other reader.

use super::Site;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::{IrError, NodeId, Op, ValueId};

pub(super) fn fuse_layer_norm(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    let node = s.src.node(root);
    let Op::LayerNorm(ln) = &node.op else { return Ok(None) };
    let (axis, eps) = (ln.axis, ln.eps);
    let Some([x, residual, gamma, beta]) = residual_then_norm(s, root, axis) else { return Ok(None) };
    Ok(s.rw.graph().fused_residual_ln(x, residual, None, gamma, beta, eps).ok())
}

pub(super) fn fuse_rms_norm(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    let node = s.src.node(root);
    let Op::RmsNorm(rms) = &node.op else { return Ok(None) };
    if rms.flatten_leading {
        return Ok(None);
    }
    let (axis, eps) = (rms.axis, rms.eps);
    let Some([x, residual, gamma, beta]) = residual_then_norm(s, root, axis) else { return Ok(None) };
    Ok(s.rw.graph().fused_residual_rms_norm(x, residual, None, gamma, beta, eps).ok())
}

/// The rebuilt `[x, residual, gamma, beta]` when norm node `root` normalizes the last axis
/// of `x + residual`, a sum read by nothing else; `x` is the operand with the sum's shape.
fn residual_then_norm(s: &Site, root: NodeId, axis: i32) -> Option<[ValueId; 4]> {
    let node = s.src.node(root);
    let sum = node.inputs[0];
    let rank = s.src.ty(sum).rank() as i32;
    let add = s.node(sum);
    let is_add = matches!(&add.op, Op::Binary(b) if b.op == BinaryOp::Add);
    if !is_add || !s.uses.single(sum) || !(axis == -1 || axis == rank - 1) {
        return None;
    }
    let (a, b) = (add.inputs[0], add.inputs[1]);
    let full = |v: ValueId| s.src.ty(v).shape == s.src.ty(sum).shape;
    let (x, residual) = if full(a) { (a, b) } else if full(b) { (b, a) } else { return None };
    Some(s.map([x, residual, node.inputs[1], node.inputs[2]]))
}

#[cfg(test)]
mod tests {
    use crate::fuse::tests::assert_fuses;
    use rlx_ir::OpKind;

    const CLAIMS: &[OpKind] = &[OpKind::FusedResidualLN, OpKind::FusedResidualRmsNorm];

    #[test]
    fn sum_then_layer_norm_becomes_one_node() {
        assert_fuses(
            r#"%0 = Input(name:"r",ty:(dtype:F32,shape:[6]))()
            %1 = Input(name:"x",ty:(dtype:F32,shape:["B",4,6]))()
            %2 = Param(name:"g",ty:(dtype:F32,shape:[6]))()
            %3 = Param(name:"b",ty:(dtype:F32,shape:[6]))()
            %4 = Binary(op:Add)(%0, %1)
            %5 = LayerNorm(axis:2,eps:0.00001)(%4, %2, %3)
            return %5"#,
            CLAIMS,
            r#"%0 = Input(name:"r",ty:(dtype:F32,shape:[6]))()
            %1 = Input(name:"x",ty:(dtype:F32,shape:["B",4,6]))()
            %2 = Param(name:"g",ty:(dtype:F32,shape:[6]))()
            %3 = Param(name:"b",ty:(dtype:F32,shape:[6]))()
            %4 = FusedResidualLN(has_bias:false,eps:0.00001)(%1, %0, %2, %3)
            return %4"#,
        );
    }

    #[test]
    fn sum_then_rms_norm_becomes_one_node() {
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,6]))()
            %1 = Input(name:"r",ty:(dtype:F32,shape:[2,6]))()
            %2 = Param(name:"g",ty:(dtype:F32,shape:[6]))()
            %3 = Binary(op:Add)(%0, %1)
            %4 = RmsNorm(axis:-1,eps:0.000001)(%3, %2, %2)
            return %4"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,6]))()
            %1 = Input(name:"r",ty:(dtype:F32,shape:[2,6]))()
            %2 = Param(name:"g",ty:(dtype:F32,shape:[6]))()
            %3 = FusedResidualRmsNorm(has_bias:false,eps:0.000001)(%0, %1, %2, %2)
            return %3"#,
        );
    }

    #[test]
    fn a_sum_read_again_or_a_middle_axis_stays() {
        // Pre-norm residual stream: the sum feeds the norm and the next residual add.
        let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,6]))()
            %1 = Input(name:"r",ty:(dtype:F32,shape:[2,6]))()
            %2 = Param(name:"g",ty:(dtype:F32,shape:[6]))()
            %3 = Binary(op:Add)(%0, %1)
            %4 = LayerNorm(axis:-1,eps:0.00001)(%3, %2, %2)
            %5 = Binary(op:Add)(%3, %4)
            %6 = Param(name:"h",ty:(dtype:F32,shape:[2]))()
            %7 = Binary(op:Add)(%0, %1)
            %8 = LayerNorm(axis:0,eps:0.00001)(%7, %6, %6)
            return %5, %8"#;
        assert_fuses(src, CLAIMS, src);
    }
}
