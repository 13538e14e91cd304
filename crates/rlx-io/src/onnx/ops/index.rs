//! Gathers and scatters (`Gather`, `GatherElements`, `GatherND`, `ScatterElements`,
//! `Scatter`, `ScatterND`, the cache update `TensorScatter`), `OneHot` and `ReverseSequence`,
//! onto rlx's index ops.

use super::elementwise::{bin, cast_to, select};
use super::shape::{expand_to, reshape_static};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::elementwise::{BinaryOp, CmpOp, Compare};
use rlx_ir::ops::index::{Gather, GatherElements, GatherNd, ScatterElements, ScatterNd, ScatterReduction};
use rlx_ir::ops::shape::Narrow;
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("Gather", gather),
    ("GatherElements", |cx, n| {
        let axis = n.axis(n.int("axis", 0), cx.rank(n.input(0)?))? as i32;
        Ok(vec![cx.add1(GatherElements { axis }, &[n.input(0)?, n.input(1)?])?])
    }),
    ("GatherND", |cx, n| {
        let batch_dims = n.int("batch_dims", 0) as i32;
        Ok(vec![cx.add1(GatherNd { batch_dims }, &[n.input(0)?, n.input(1)?])?])
    }),
    ("ScatterElements", scatter_elements),
    ("Scatter", scatter_elements),
    ("ScatterND", |cx, n| {
        let reduction = reduction(n)?;
        Ok(vec![cx.add1(ScatterNd { reduction }, &[n.input(0)?, n.input(1)?, n.input(2)?])?])
    }),
    ("OneHot", one_hot),
    ("TensorScatter", tensor_scatter),
    ("ReverseSequence", reverse_sequence),
];

fn reduction(n: &OnnxNode<'_, '_>) -> OpResult<ScatterReduction> {
    Ok(match n.string("reduction", "none").as_str() {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" => ScatterReduction::Max,
        "min" => ScatterReduction::Min,
        r => return invalid(format!("reduction `{r}`")),
    })
}

/// `i < 0 ? i + extent : i`, the ONNX reading of negative indices.
fn wrap_negative(cx: &mut Cx<'_>, idx: ValueId, extent: usize) -> OpResult<ValueId> {
    let dt = cx.dtype(idx);
    if let Some(values) = cx.const_f64s(idx) {
        if values.iter().all(|&v| v >= 0.0) {
            return Ok(idx);
        }
    }
    let zero = cx.scalar(dt, 0.0)?;
    let neg = cx.add1(Compare { op: CmpOp::Lt }, &[idx, zero])?;
    let ext = cx.scalar(dt, extent as f64)?;
    let shifted = bin(cx, BinaryOp::Add, idx, ext)?;
    select(cx, neg, shifted, idx)
}

fn gather(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let data = n.input(0)?;
    let axis = n.axis(n.int("axis", 0), cx.rank(data))?;
    let extent = cx.ty(data).static_dim(axis).map_err(OpError::Unsupported)?;
    let idx = wrap_negative(cx, n.input(1)?, extent)?;
    Ok(vec![cx.add1(Gather { axis }, &[data, idx])?])
}

fn scatter_elements(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let data = n.input(0)?;
    let axis = n.axis(n.int("axis", 0), cx.rank(data))? as i32;
    let reduction = reduction(n)?;
    Ok(vec![cx.add1(ScatterElements { axis, reduction }, &[data, n.input(1)?, n.input(2)?])?])
}

/// `OneHot`: positions `0..depth` on a new axis compared with the (wrapped) indices.
fn one_hot(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let indices = n.input(0)?;
    let depth = cx.const_f64s(n.input(1)?).and_then(|d| d.first().copied()).ok_or_else(|| OpError::Unsupported("depth must be known at import".into()))?;
    if !(depth >= 1.0 && depth <= crate::onnx::tensor::MAX_ELEMENTS as f64) {
        return invalid(format!("depth {depth}"));
    }
    let depth = depth as usize;
    let values = n.input(2)?;
    let dims = cx.dims(indices)?;
    let axis = n.axis(n.int("axis", -1), dims.len() + 1)?;
    let idx = cast_to(cx, indices, DType::I64)?;
    let idx = wrap_negative(cx, idx, depth)?;
    let mut idx_dims = dims.clone();
    idx_dims.insert(axis, 1);
    let idx = reshape_static(cx, idx, &idx_dims)?;
    let mut iota_dims = vec![1; dims.len() + 1];
    iota_dims[axis] = depth;
    let iota = cx.values(DType::I64, &iota_dims, &(0..depth).map(|i| i as f64).collect::<Vec<_>>())?;
    let hit = cx.add1(Compare { op: CmpOp::Eq }, &[idx, iota])?;
    let off = cx.add1(Narrow { axis: 0, start: 0, len: 1 }, &[values])?;
    let on = cx.add1(Narrow { axis: 0, start: 1, len: 1 }, &[values])?;
    let off = reshape_static(cx, off, &[])?;
    let on = reshape_static(cx, on, &[])?;
    Ok(vec![select(cx, hit, on, off)?])
}

/// `TensorScatter` (opset 24): `update` written into a copy of `past_cache` along `axis`
/// from each batch item's `write_indices` entry on (wrapping in `circular` mode), as a
/// `ScatterElements` whose indices are `write_index[b] + s`.
fn tensor_scatter(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (cache, update) = (n.input(0)?, n.input(1)?);
    let (cd, ud) = (cx.dims(cache)?, cx.dims(update)?);
    let rank = cd.len();
    let axis = n.axis(n.int("axis", -2), rank)?;
    if axis == 0 {
        return invalid("axis must not be the batch axis 0");
    }
    let circular = match n.string("mode", "linear").as_str() {
        "linear" => false,
        "circular" => true,
        m => return invalid(format!("mode `{m}` (linear or circular)")),
    };
    if ud.len() != rank || (0..rank).any(|i| if i == axis { ud[i] > cd[i] } else { ud[i] != cd[i] }) {
        return invalid(format!("update {ud:?} does not fit cache {cd:?} along axis {axis}"));
    }
    let mut iota_dims = vec![1; rank];
    iota_dims[axis] = ud[axis];
    let mut idx = cx.values(DType::I64, &iota_dims, &(0..ud[axis]).map(|i| i as f64).collect::<Vec<_>>())?;
    if let Some(w) = n.opt_input(2) {
        let w = cast_to(cx, w, DType::I64)?;
        let mut w_dims = vec![1; rank];
        w_dims[0] = cd[0];
        let w = reshape_static(cx, w, &w_dims)?;
        idx = bin(cx, BinaryOp::Add, w, idx)?;
    }
    if circular {
        let max = cx.scalar(DType::I64, cd[axis] as f64)?;
        idx = bin(cx, BinaryOp::Mod, idx, max)?;
    }
    let idx = expand_to(cx, idx, &cx.ty(update).shape)?;
    let scatter = ScatterElements { axis: axis as i32, reduction: ScatterReduction::None };
    Ok(vec![cx.add1(scatter, &[cache, idx, update])?])
}

/// `ReverseSequence(x, sequence_lens)`: along `time_axis`, batch entry `b` reads position
/// `len[b] − 1 − t` for `t < len[b]` and `t` after; a `GatherElements` of those positions.
fn reverse_sequence(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let time = n.axis(n.int("time_axis", 0), dims.len())?;
    let batch = n.axis(n.int("batch_axis", 1), dims.len())?;
    if time == batch || dims.len() < 2 {
        return invalid(format!("time_axis and batch_axis must be different axes of {dims:?}"));
    }
    let mut len_dims = vec![1; dims.len()];
    len_dims[batch] = dims[batch];
    let lens = cast_to(cx, n.input(1)?, DType::I64)?;
    let lens = reshape_static(cx, lens, &len_dims)?;
    let mut t_dims = vec![1; dims.len()];
    t_dims[time] = dims[time];
    let t = cx.values(DType::I64, &t_dims, &(0..dims[time]).map(|i| i as f64).collect::<Vec<_>>())?;
    let inside = cx.add1(Compare { op: CmpOp::Lt }, &[t, lens])?;
    let last = bin(cx, BinaryOp::Sub, lens, t)?;
    let one = cx.scalar(DType::I64, 1.0)?;
    let mirrored = bin(cx, BinaryOp::Sub, last, one)?;
    let idx = select(cx, inside, mirrored, t)?;
    let idx = expand_to(cx, idx, &cx.ty(x).shape)?;
    Ok(vec![cx.add1(GatherElements { axis: time as i32 }, &[x, idx])?])
}
