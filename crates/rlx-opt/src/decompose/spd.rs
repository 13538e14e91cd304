//! Decomposition of the spd family's one linear op: `BiMap` (`W·X·Wᵀ`) into `MatMul` and
//! `Transpose` (OPS.md §16). The other spd ops need an eigensolver, which the IR has no
//! primitive for.

use rlx_ir::{Graph, IrError, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::BiMap];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    match op {
        Op::BiMap(_) => Some(bi_map(g, x[0], x[1]).map(|v| vec![v])),
        _ => None,
    }
}

/// `(W·X)·Wᵀ`.
fn bi_map(g: &mut Graph, w: ValueId, x: ValueId) -> Result<ValueId, IrError> {
    let wx = g.matmul(w, x)?;
    let wt = g.transpose(w, &[1, 0])?;
    g.matmul(wx, wt)
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn bimap_is_two_matmuls_and_a_transpose() {
        let out = lower_text(
            r#"%0 = Param(name:"w",ty:(dtype:F64,shape:[3,5]))()
            %1 = Input(name:"x",ty:(dtype:F64,shape:[5,5]))()
            %2 = BiMap()(%0, %1)
            return %2"#,
            OpKind::BiMap,
            &[],
        );
        assert_eq!((count(&out, OpKind::MatMul), count(&out, OpKind::Transpose)), (2, 1), "{out}");
    }
}
