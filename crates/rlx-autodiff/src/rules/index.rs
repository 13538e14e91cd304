//! VJPs of gathers and scatters (OPS.md §9): a gather's gradient scatter-adds, a scatter's
//! gathers. Index operands get none.

use super::Vjp;
use crate::reverse::zeros_like;
use crate::{AdError, Result};
use rlx_ir::ops::index::ScatterReduction;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Gather,
    OpKind::GatherBackward,
    OpKind::GatherElements,
    OpKind::GatherNd,
    OpKind::ScatterAdd,
    OpKind::ScatterElements,
    OpKind::ScatterNd,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Gather(a) => gather(a.axis, v),
        Op::GatherBackward(a) => gather_backward(a.axis, v),
        Op::GatherElements(a) => gather_elements(a.axis, v),
        Op::GatherNd(a) => gather_nd(a.batch_dims, v),
        Op::ScatterAdd(_) => scatter_add(v),
        Op::ScatterElements(a) => scatter_elements(a.axis, a.reduction, v),
        Op::ScatterNd(a) => scatter_nd(a.reduction, v),
        _ => return None,
    })
}

/// `tablē = GatherBackward(ȳ, indices)`: `ȳ` summed into the rows it was read from.
fn gather(axis: usize, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (table, idx, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let shape = v.g.ty(table).shape.clone();
    Ok(vec![Some(v.g.gather_backward(dy, idx, axis as i32, shape)?), None])
}

/// `GatherBackward` is linear in `ȳ`; its adjoint gathers the rows back.
fn gather_backward(axis: i32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (idx, ct) = (v.inputs[1], v.ct(0)?);
    let rank = v.g.ty(v.outputs[0]).rank() as i32;
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    Ok(vec![Some(v.g.gather(ct, idx, axis)?), None])
}

/// `ScatterAdd` reads `updates[u]` into row `idx[u]`: `updates̄[u] = ct[idx[u]]`.
fn scatter_add(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (idx, ct) = (v.inputs[1], v.ct(0)?);
    Ok(vec![Some(v.g.gather(ct, idx, 0)?), None])
}

/// `datā` = `ȳ` added at the read positions of zeros.
fn gather_elements(axis: i32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (data, idx, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let zeros = zeros_like(v.g, data)?;
    Ok(vec![Some(v.g.scatter_elements(zeros, idx, dy, axis, ScatterReduction::Add)?), None])
}

/// `datā` = `ȳ` added at the read tuples of zeros (no batch dims).
fn gather_nd(batch_dims: i32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    if batch_dims != 0 {
        return Err(AdError::Rule { op: "GatherNd", msg: format!("no gradient rule for batch_dims {batch_dims} yet") });
    }
    let (data, idx, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let zeros = zeros_like(v.g, data)?;
    Ok(vec![Some(v.g.scatter_nd(zeros, idx, dy, ScatterReduction::Add)?), None])
}

/// Overwrite: `datā` is `ȳ` with the written cells zeroed, `updates̄` reads them; Add:
/// `datā = ȳ`. Mul/Max/Min depend on which value won and have no rule yet.
fn scatter_elements(axis: i32, reduction: ScatterReduction, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (idx, updates, ct) = (v.inputs[1], v.inputs[2], v.ct(0)?);
    let ddata = match reduction {
        ScatterReduction::None => {
            let zeros = zeros_like(v.g, updates)?;
            v.g.scatter_elements(ct, idx, zeros, axis, ScatterReduction::None)?
        }
        ScatterReduction::Add => ct,
        r => return Err(AdError::Rule { op: "ScatterElements", msg: format!("no gradient rule for reduction {r:?} yet") }),
    };
    let dupd = v.g.gather_elements(ct, idx, axis)?;
    Ok(vec![Some(ddata), None, Some(dupd)])
}

/// As [`scatter_elements`] with index tuples.
fn scatter_nd(reduction: ScatterReduction, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (idx, updates, ct) = (v.inputs[1], v.inputs[2], v.ct(0)?);
    let ddata = match reduction {
        ScatterReduction::None => {
            let zeros = zeros_like(v.g, updates)?;
            v.g.scatter_nd(ct, idx, zeros, ScatterReduction::None)?
        }
        ScatterReduction::Add => ct,
        r => return Err(AdError::Rule { op: "ScatterNd", msg: format!("no gradient rule for reduction {r:?} yet") }),
    };
    let dupd = v.g.gather_nd(ct, idx, 0)?;
    Ok(vec![Some(ddata), None, Some(dupd)])
}
