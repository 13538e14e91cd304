//! `Narrow`s of the two halves of one last axis → `Activation(Silu)` of the gate half →
//! `Mul` with the other half `[→ Cast]` → `FusedSwiGLU`.

use super::Site;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{IrError, NodeId, Op, ValueId};

/// Matches at the float `Cast` that ends the pattern, or at the `Mul` when no cast follows.
pub(super) fn fuse(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    let node = s.src.node(root);
    let (product, cast_to) = match &node.op {
        Op::Cast(c) if c.to.is_float() && s.uses.single(node.inputs[0]) => (node.inputs[0], Some(c.to)),
        Op::Binary(b) if b.op == BinaryOp::Mul && !feeds_float_cast(s, root) => (root.into(), None),
        _ => return Ok(None),
    };
    let Some((x, gate_first)) = gated_halves(s, product) else { return Ok(None) };
    let [x] = s.map([x]);
    Ok(s.rw.graph().fused_swiglu(x, gate_first, cast_to).ok())
}

/// Whether `id`'s only reader is a cast to a float dtype, which then ends the pattern instead.
fn feeds_float_cast(s: &Site, id: NodeId) -> bool {
    s.uses.sole_reader(id).is_some_and(|r| matches!(&s.src.node(r).op, Op::Cast(c) if c.to.is_float()))
}

/// `(x, gate_first)` when `product` is `silu(gate)·up` (either operand order) with `gate` and
/// `up` the two halves of `x`'s last axis, each read only by this pattern.
fn gated_halves(s: &Site, product: ValueId) -> Option<(ValueId, bool)> {
    let node = s.node(product);
    if !matches!(&node.op, Op::Binary(b) if b.op == BinaryOp::Mul) {
        return None;
    }
    let (a, b) = (node.inputs[0], node.inputs[1]);
    [(a, b), (b, a)].into_iter().find_map(|(act, up)| {
        let silu = s.node(act);
        if !matches!(&silu.op, Op::Activation(k) if k.kind == ActivationKind::Silu) || !s.uses.single(act) {
            return None;
        }
        let (x, gate_start) = half(s, silu.inputs[0])?;
        let (x_up, up_start) = half(s, up)?;
        (x == x_up && gate_start != up_start).then_some((x, gate_start == 0))
    })
}

/// `(x, start)` when `v` is a `Narrow` read once that takes the first or second half of
/// `x`'s (static) last axis.
fn half(s: &Site, v: ValueId) -> Option<(ValueId, usize)> {
    let node = s.node(v);
    let Op::Narrow(n) = &node.op else { return None };
    let x = s.src.ty(node.inputs[0]);
    let last = x.rank().checked_sub(1)?;
    let width = x.static_dim(last).ok()?;
    let halves = n.axis == last && 2 * n.len == width && (n.start == 0 || n.start == n.len);
    (halves && s.uses.single(v)).then_some((node.inputs[0], n.start))
}

#[cfg(test)]
mod tests {
    use crate::fuse::tests::assert_fuses;
    use rlx_ir::OpKind;

    const CLAIMS: &[OpKind] = &[OpKind::FusedSwiGLU];

    #[test]
    fn gated_halves_become_one_node() {
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["T",8]))()
            %1 = Narrow(axis:1,start:0,len:4)(%0)
            %2 = Narrow(axis:1,start:4,len:4)(%0)
            %3 = Activation(kind:Silu)(%2)
            %4 = Binary(op:Mul)(%1, %3)
            return %4"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["T",8]))()
            %1 = FusedSwiGLU(cast_to:None,gate_first:false)(%0)
            return %1"#,
        );
    }

    #[test]
    fn gate_first_with_a_trailing_cast() {
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,3,6]))()
            %1 = Narrow(axis:2,start:0,len:3)(%0)
            %2 = Activation(kind:Silu)(%1)
            %3 = Narrow(axis:2,start:3,len:3)(%0)
            %4 = Binary(op:Mul)(%2, %3)
            %5 = Cast(to:F16)(%4)
            return %5"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,3,6]))()
            %1 = FusedSwiGLU(cast_to:Some(F16),gate_first:true)(%0)
            return %1"#,
        );
    }

    #[test]
    fn other_gates_and_slices_stay() {
        // Sigmoid is no SwiGLU gate; the second pair are not halves of the last axis.
        let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[4,8]))()
            %1 = Narrow(axis:1,start:0,len:4)(%0)
            %2 = Narrow(axis:1,start:4,len:4)(%0)
            %3 = Activation(kind:Sigmoid)(%2)
            %4 = Binary(op:Mul)(%1, %3)
            %5 = Narrow(axis:0,start:0,len:2)(%0)
            %6 = Narrow(axis:0,start:2,len:2)(%0)
            %7 = Activation(kind:Silu)(%6)
            %8 = Binary(op:Mul)(%5, %7)
            return %4, %8"#;
        assert_fuses(src, CLAIMS, src);
    }
}
