//! `MatMul(x, w) → Add(bias) [→ Activation]` → `FusedMatMulBiasAct(x, w, bias)`.

use super::Site;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::{IrError, NodeId, Op, ValueId};

/// Matches at the `Activation` that ends the pattern, or at the `Add` when no activation
/// follows it.
pub(super) fn fuse(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    let node = s.src.node(root);
    let (sum, act) = match &node.op {
        Op::Activation(a) if s.uses.single(node.inputs[0]) => (node.inputs[0], Some(a.kind)),
        Op::Binary(b) if b.op == BinaryOp::Add && !feeds_activation(s, root) => (root.into(), None),
        _ => return Ok(None),
    };
    let Some(parts) = product_plus_bias(s, sum) else { return Ok(None) };
    let [x, w, bias] = s.map(parts);
    Ok(s.rw.graph().fused_matmul_bias_act(x, w, bias, act).ok())
}

/// Whether `id`'s only reader is an `Activation`, which then ends the pattern instead.
fn feeds_activation(s: &Site, id: NodeId) -> bool {
    s.uses.sole_reader(id).is_some_and(|r| matches!(s.src.node(r).op, Op::Activation(_)))
}

/// `[x, w, bias]` when `sum` is `MatMul(x, w) + bias` (either operand order) with the product
/// read only by the add, `w` a matrix and `bias` a vector as long as `w`'s rows.
fn product_plus_bias(s: &Site, sum: ValueId) -> Option<[ValueId; 3]> {
    let node = s.node(sum);
    if !matches!(&node.op, Op::Binary(b) if b.op == BinaryOp::Add) {
        return None;
    }
    let (a, b) = (node.inputs[0], node.inputs[1]);
    [(a, b), (b, a)].into_iter().find_map(|(product, bias)| {
        let mm = s.node(product);
        let (w, bias_ty) = (s.src.ty(*mm.inputs.get(1)?), s.src.ty(bias));
        let is_bias = w.rank() == 2 && bias_ty.rank() == 1 && bias_ty.shape.dims()[0] == w.shape.dims()[1];
        (matches!(mm.op, Op::MatMul(_)) && s.uses.single(product) && is_bias).then(|| [mm.inputs[0], mm.inputs[1], bias])
    })
}

#[cfg(test)]
mod tests {
    use crate::fuse::tests::assert_fuses;
    use rlx_ir::OpKind;

    const CLAIMS: &[OpKind] = &[OpKind::FusedMatMulBiasAct];

    #[test]
    fn product_bias_and_activation_become_one_node() {
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = MatMul()(%0, %1)
            %4 = Binary(op:Add)(%2, %3)
            %5 = Activation(kind:Gelu)(%4)
            return %5"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = FusedMatMulBiasAct(activation:Some(Gelu))(%0, %1, %2)
            return %3"#,
        );
    }

    #[test]
    fn a_sum_read_twice_keeps_its_activation_apart() {
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = MatMul()(%0, %1)
            %4 = Binary(op:Add)(%3, %2)
            %5 = Activation(kind:Relu)(%4)
            return %5, %4"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = FusedMatMulBiasAct(activation:None)(%0, %1, %2)
            %4 = Activation(kind:Relu)(%3)
            return %4, %3"#,
        );
    }

    #[test]
    fn shared_products_and_non_vector_addends_stay() {
        // The product is also an output; the second add's operand is a full matrix.
        let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = MatMul()(%0, %1)
            %4 = Binary(op:Add)(%3, %2)
            %5 = Input(name:"y",ty:(dtype:F32,shape:[3,4]))()
            %6 = MatMul()(%0, %1)
            %7 = Binary(op:Add)(%6, %5)
            return %4, %3, %7"#;
        assert_fuses(src, CLAIMS, src);
    }
}
