//! VJPs of attention and the rotary embeddings (OPS.md §7): `AttentionBackward(All)` and
//! `RopeBackward` (§22). `AxialRope2d` and the attention backward ops (second order) go
//! through their decompositions.

use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::attention::*;
use rlx_ir::{NodeId, Op, OpKind, ValueId};
use std::collections::HashMap;

pub const KINDS: &[OpKind] = &[OpKind::Attention, OpKind::Rope, OpKind::RopeBackward];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Attention(a) => attention(a, op, v),
        Op::Rope(r) => rotate(Op::RopeBackward(RopeBackward { head_dim: r.head_dim, n_rot: r.n_rot, style: r.style }), v),
        Op::RopeBackward(r) => rotate(Op::Rope(Rope { head_dim: r.head_dim, n_rot: r.n_rot, style: r.style }), v),
        _ => return None,
    })
}

/// `dQ, dK, dV` from `AttentionBackward{wrt}` for a single wanted operand, else from
/// `AttentionBackwardAll` (scores and softmax recomputed once). The backward kinds know no
/// `score_scale`, softcap, `v_head_dim` or grouped KV heads, and give no bias gradient (OPS.md
/// §7): with any of those, or `kv_rows`, the VJP is taken through the decomposition (whose KV
/// repeat sums each group's gradients, and whose gathers scatter them back to the rows read).
/// A Custom mask gets none.
fn attention(a: &Attention, op: &Op, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let grouped = a.kv_heads(v.g.ty(v.inputs[1])) != a.num_heads;
    let rows = a.kv_rows_input(v.inputs.len()).is_some();
    let plain = !grouped && !rows && a.score_scale.is_none() && a.attn_logit_softcap.is_none() && a.v_head_dim.is_none_or(|d| d == a.head_dim);
    if !plain || (a.mask_kind == MaskKind::Bias && v.wants(3)) {
        return through_decomposition(op, v);
    }
    let (num_heads, head_dim, mask_kind) = (a.num_heads, a.head_dim, a.mask_kind);
    let mut ins = vec![v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?];
    ins.extend(v.inputs.get(3));
    let mut grads = vec![None; v.inputs.len()];
    let wanted: Vec<usize> = (0..3).filter(|&i| v.wants(i)).collect();
    if let [only] = wanted[..] {
        let wrt = [AttentionBwdWrt::Query, AttentionBwdWrt::Key, AttentionBwdWrt::Value][only];
        grads[only] = Some(v.g.add1(AttentionBackward { num_heads, head_dim, mask_kind, wrt }, &ins)?);
    } else if !wanted.is_empty() {
        let node = v.g.add(AttentionBackwardAll { num_heads, head_dim, mask_kind }, &ins)?;
        for i in wanted {
            grads[i] = Some(ValueId::new(node, i as u32));
        }
    }
    Ok(grads)
}

/// A rotation's VJP is the inverse rotation (`Rope` ↔ `RopeBackward`, both linear in their
/// first operand); the `cos`/`sin` tables get none (OPS.md §7).
fn rotate(inverse: Op, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let ct = v.ct(0)?;
    let dx = v.g.add1(inverse, &[ct, v.inputs[1], v.inputs[2]])?;
    Ok(vec![Some(dx), None, None])
}

/// The VJP of `op` through its rlx-opt decomposition: the forward is expanded again into
/// `v.g` (recomputed) and the rules of the ops it expands into run back to the operands.
/// An operand used twice gets its whole cotangent at its first position.
fn through_decomposition(op: &Op, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let start = v.g.len();
    let outs = rlx_opt::decompose::decompose(op, v.g, v.inputs).ok_or_else(|| AdError::NoRule(vec![op.kind()]))??;
    let (operands, operand_wanted) = (v.inputs, v.wanted);
    let wanted_operand = |x: ValueId| operands.iter().zip(operand_wanted).any(|(&o, &w)| o == x && w);
    let mut live = vec![false; v.g.len() - start];
    for i in start..v.g.len() {
        live[i - start] = v.g.nodes()[i].inputs.iter().any(|&x| wanted_operand(x) || (x.node.index() >= start && live[x.node.index() - start]));
    }
    let mut cts: HashMap<ValueId, ValueId> = outs.iter().zip(v.cts).filter_map(|(&o, c)| Some((o, (*c)?))).collect();
    for i in (start..v.g.len()).rev() {
        let id = NodeId(i as u32);
        let node = v.g.node(id).clone();
        let outputs: Vec<ValueId> = (0..node.outputs.len() as u32).map(|o| ValueId::new(id, o)).collect();
        let out_cts: Vec<Option<ValueId>> = outputs.iter().map(|o| cts.get(o).copied()).collect();
        if !live[i - start] || out_cts.iter().all(Option::is_none) {
            continue;
        }
        let wanted: Vec<bool> = node
            .inputs
            .iter()
            .map(|&x| {
                let reached = wanted_operand(x) || (x.node.index() >= start && live[x.node.index() - start]);
                reached && v.g.ty(x).dtype.is_float()
            })
            .collect();
        let mut inner = Vjp { g: &mut *v.g, inputs: &node.inputs, outputs: &outputs, cts: &out_cts, wanted: &wanted };
        let in_cts = super::vjp(&node.op, &mut inner).unwrap_or_else(|| Err(AdError::NoRule(vec![node.op.kind()])))?;
        for ((&x, ct), want) in node.inputs.iter().zip(in_cts).zip(&wanted) {
            let Some(ct) = ct.filter(|_| *want) else { continue };
            let total = match cts.get(&x) {
                Some(&acc) => v.g.binary(rlx_ir::ops::elementwise::BinaryOp::Add, acc, ct)?,
                None => ct,
            };
            cts.insert(x, total);
        }
    }
    Ok(operands
        .iter()
        .enumerate()
        .map(|(i, x)| cts.get(x).copied().filter(|_| operand_wanted[i] && !operands[..i].contains(x)))
        .collect())
}
