//! Gathers and scatters. A shared index tensor indexes one axis further in; per-example
//! indices into per-example data are offset by `b·extent` into the data with the batch axis
//! merged into the indexed axis, so one gather or scatter serves every example.

use super::{leading, shifted, Batch};
use crate::{AdError, Result};
use rlx_ir::ops::index::{Gather, GatherBackward, GatherElements, GatherNd, ScatterAdd, ScatterElements};
use rlx_ir::ops::shape::TargetDim;
use rlx_ir::{norm_axis, DType, Dim, Op, OpKind, ValueId};
use rlx_opt::decompose::build::vector;

pub const KINDS: &[OpKind] = &[
    OpKind::Gather,
    OpKind::GatherBackward,
    OpKind::GatherNd,
    OpKind::GatherElements,
    OpKind::ScatterAdd,
    OpKind::ScatterElements,
];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let all: Vec<usize> = (0..b.x.len()).collect();
    match op {
        Op::Gather(g) => Some(gather(b, g.axis)),
        Op::ScatterAdd(s) => Some(scatter_add(b, &s.out_dim)),
        Op::GatherBackward(g) if !b.is_batched(1) => Some((|| {
            let axis = norm_axis(g.axis as i64, g.table_shape.rank()).map_err(|msg| AdError::Rule { op: "GatherBackward", msg })?;
            let mut table_shape = g.table_shape.clone();
            table_shape.0.insert(0, b.size().clone());
            b.apply(GatherBackward { axis: axis as i32 + 1, table_shape }, &[b.x[0], b.x[1]])
        })()),
        Op::GatherElements(g) => leading(b, GatherElements { axis: shifted(g.axis) }, &all),
        Op::ScatterElements(s) => leading(b, ScatterElements { axis: shifted(s.axis), reduction: s.reduction }, &all),
        Op::GatherNd(g) => leading(b, GatherNd { batch_dims: shifted(g.batch_dims) }, &all),
        _ => None,
    }
}


fn gather(b: &mut Batch, axis: usize) -> Result<Vec<ValueId>> {
    if !b.is_batched(1) {
        return b.apply(Gather { axis: axis + 1 }, &[b.x[0], b.x[1]]);
    }
    let table = b.lifted(0)?;
    let table = b.moved(table, 0, axis)?;
    let extent = b.ty(0).shape.dim(axis).clone();
    let mut target: Vec<TargetDim> = b.g.ty(table).shape.dims().iter().map(TargetDim::from).collect();
    target.remove(axis + 1);
    target[axis] = TargetDim::Size(-1);
    let table = b.g.add1(rlx_ir::ops::shape::Reshape { new_shape: target }, &[table])?;
    let idx = offset(b, 1, &extent)?;
    let y = b.apply(Gather { axis }, &[table, idx])?[0];
    Ok(vec![b.moved(y, axis, 0)?])
}

fn scatter_add(b: &mut Batch, out_dim: &Dim) -> Result<Vec<ValueId>> {
    if !b.is_batched(1) {
        let updates = b.moved(b.x[0], 0, 1)?;
        let y = b.apply(ScatterAdd { out_dim: out_dim.clone() }, &[updates, b.x[1]])?[0];
        return Ok(vec![b.moved(y, 1, 0)?]);
    }
    let (Some(n), Some(size)) = (out_dim.as_static(), b.size().as_static()) else {
        return Err(symbolic("ScatterAdd"));
    };
    let updates = b.lifted(0)?;
    let updates = b.folded(updates)?;
    let idx = offset(b, 1, out_dim)?;
    let idx = b.folded(idx)?;
    let y = b.apply(ScatterAdd { out_dim: Dim::Static(n * size) }, &[updates, idx])?[0];
    Ok(vec![b.unfolded(y, out_dim)?])
}

/// Batched index operand `i` plus `b·extent` for example `b`.
fn offset(b: &mut Batch, i: usize, extent: &Dim) -> Result<ValueId> {
    let (Some(n), Some(size)) = (extent.as_static(), b.size().as_static()) else {
        return Err(symbolic("a per-example index"));
    };
    let dtype = b.ty(i).dtype;
    let steps: Vec<f64> = (0..size).map(|k| (k * n) as f64).collect();
    let mut steps = vector(b.g, DType::F64, &steps)?;
    if dtype != DType::F64 {
        steps = b.g.cast(steps, dtype)?;
    }
    let mut shape = vec![size as i64];
    shape.extend(std::iter::repeat_n(1, b.ty(i).rank()));
    let steps = b.g.reshape(steps, &shape)?;
    Ok(b.g.binary(rlx_ir::ops::elementwise::BinaryOp::Add, b.x[i], steps)?)
}

fn symbolic(what: &str) -> AdError {
    AdError::Rule { op: "vmap", msg: format!("{what} needs a static batch size and indexed extent") }
}
