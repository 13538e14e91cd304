//! `Gather(axis 0)` of rank-2 keys and of values by the same rows → `Attention` → the
//! `Attention` with those rows as its `kv_rows` input, reading K and V in place (a pooled KV
//! cache: no copy of each step's rows).

use super::Site;
use rlx_ir::{IrError, NodeId, Op, ValueId};

/// Matches at an `Attention` without `kv_rows` whose K and V are each read from one gather
/// along axis 0 by the same indices, of rank-2 tables, each gather read by it alone.
pub(super) fn fuse(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    let node = s.src.node(root);
    let Op::Attention(a) = &node.op else { return Ok(None) };
    if a.kv_rows_input(node.inputs.len()).is_some() || s.src.ty(node.inputs[0]).rank() != 2 {
        return Ok(None);
    }
    let (Some((k, rows)), Some((v, v_rows))) = (gathered(s, node.inputs[1]), gathered(s, node.inputs[2])) else { return Ok(None) };
    if rows != v_rows {
        return Ok(None);
    }
    let mut inputs = s.map([node.inputs[0], k, v]).to_vec();
    inputs.extend(node.inputs.get(3).map(|&m| s.rw.map(m)));
    inputs.push(s.rw.map(rows));
    let op = Op::Attention(a.clone());
    Ok(s.rw.graph().add1(op, &inputs).ok())
}

/// `(table, indices)` when `v` is a `Gather` along axis 0 of a rank-2 table, read once.
fn gathered(s: &Site, v: ValueId) -> Option<(ValueId, ValueId)> {
    let node = s.node(v);
    let Op::Gather(g) = &node.op else { return None };
    (g.axis == 0 && s.uses.single(v) && s.src.ty(node.inputs[0]).rank() == 2).then_some((node.inputs[0], node.inputs[1]))
}

#[cfg(test)]
mod tests {
    use crate::claims::{Claim, Claims};
    use crate::fuse::tests::assert_fuses;
    use rlx_ir::{DType, Op, OpKind};

    const CLAIMS: &[OpKind] = &[OpKind::Attention];

    const ATTENTION: &str = "Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:Bias,score_scale:None,attn_logit_softcap:None)";

    /// The inputs of [`pooled`]: q `[T, 8]`, pools `[32, 8]`, two row indices `[U]`, bias `[T, U]`.
    const INPUTS: &str = r#"%0 = Input(name:"q",ty:(dtype:F32,shape:["T",8]))()
            %1 = Param(name:"k",ty:(dtype:F32,shape:[32,8]))()
            %2 = Param(name:"v",ty:(dtype:F32,shape:[32,8]))()
            %3 = Input(name:"rows",ty:(dtype:I64,shape:["U"]))()
            %4 = Input(name:"other",ty:(dtype:I64,shape:["U"]))()
            %5 = Input(name:"bias",ty:(dtype:F32,shape:["T","U"]))()"#;

    /// A decode step over the pools of [`INPUTS`]: keys gathered by `rows`, values from
    /// `v_table` by `v_rows`.
    fn pooled(v_table: &str, v_rows: &str) -> String {
        format!(
            r#"{INPUTS}
            %6 = Gather(axis:0)(%1, %3)
            %7 = Gather(axis:0)({v_table}, {v_rows})
            %8 = {ATTENTION}(%0, %6, %7, %5)
            return %8"#
        )
    }

    #[test]
    fn gathers_of_keys_and_values_by_one_index_become_kv_rows() {
        assert_fuses(
            &pooled("%2", "%3"),
            CLAIMS,
            &format!(
                r#"{INPUTS}
            %6 = {ATTENTION}(%0, %1, %2, %5, %3)
            return %6"#
            ),
        );
    }

    #[test]
    fn gathers_by_different_indices_stay() {
        let src = pooled("%2", "%4");
        assert_fuses(&src, CLAIMS, &src);
    }

    /// Claims `Attention` without `kv_rows` only, as the device backends do.
    struct NoRows;

    impl Claims for NoRows {
        fn kinds(&self) -> &[OpKind] {
            CLAIMS
        }

        fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
            match op {
                Op::Attention(a) if a.kv_rows_input(inputs.len()).is_none() => Claim::Native,
                _ => Claim::No,
            }
        }
    }

    #[test]
    fn backends_that_do_not_claim_kv_rows_keep_the_gathers() {
        let src = pooled("%2", "%3");
        assert_fuses(&src, &NoRows, &src);
    }
}
