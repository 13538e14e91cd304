//! Decompositions of the index family (OPS.md §9, §22): every ONNX-style gather and scatter
//! becomes arithmetic on linearized I64 indices feeding the primitives `Gather` and
//! `ScatterAdd`. Gather and ScatterAdd are primitives.
//!
//! Index tuples are linearized against static extents (the addressed axes of the data
//! must be static) after wrapping negatives (`i + dim` where `i < 0`). The decompositions
//! do not re-check each component's range: an out-of-range component that still lands
//! inside the data reads or writes another cell instead of failing like the native kernels.
//!
//! Scatter reductions: `Add` is `data + ScatterAdd(..)`. `None` keeps, per cell, the last
//! update in index order (OPS.md's rule for duplicates); finding it compares every pair of
//! updates (`U × U` booleans), so it needs a static update count. `Mul`, `Max` and `Min`
//! have no decomposition into the primitives; a backend must claim them.

use super::shape::{index_vector, static_extent};
use rlx_ir::ops::elementwise::{BinaryOp, CmpOp};
use rlx_ir::ops::index::{GatherBackward, ScatterReduction};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::ops::shape::{Reshape, TargetDim};
use rlx_ir::{norm_axis, DType, Dim, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

pub const KINDS: &[OpKind] =
    &[OpKind::GatherNd, OpKind::GatherElements, OpKind::ScatterNd, OpKind::ScatterElements, OpKind::GatherBackward];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::GatherNd(a) => gather_nd(g, x[0], x[1], a.batch_dims),
        Op::GatherElements(a) => gather_elements(g, x[0], x[1], a.axis),
        Op::ScatterNd(a) if expressible(a.reduction) => scatter_nd(g, x[0], x[1], x[2], a.reduction),
        Op::ScatterElements(a) if expressible(a.reduction) => scatter_elements(g, x[0], x[1], x[2], a.axis, a.reduction),
        Op::GatherBackward(a) => gather_backward(g, x[0], x[1], a),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// The scatter reductions the primitives can express.
fn expressible(r: ScatterReduction) -> bool {
    matches!(r, ScatterReduction::None | ScatterReduction::Add)
}

fn invalid(msg: String) -> IrError {
    IrError::Invalid(msg)
}

fn i64_constant(g: &mut Graph, dims: &[usize], values: &[i64]) -> Result<ValueId, IrError> {
    let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    g.constant(TensorType::of(DType::I64, dims), data)
}

fn i64_scalar(g: &mut Graph, v: i64) -> Result<ValueId, IrError> {
    i64_constant(g, &[], &[v])
}

/// `x` reshaped to a target whose entries may name symbols.
fn reshape_dims(g: &mut Graph, x: ValueId, dims: Vec<TargetDim>) -> Result<ValueId, IrError> {
    g.add1(Reshape { new_shape: dims }, &[x])
}

/// The static extents of `dims`, or an error naming `op` and the shape.
fn all_static(dims: &[Dim], op: &str, what: &str, shape: &Shape) -> Result<Vec<usize>, IrError> {
    dims.iter()
        .map(|d| d.as_static())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| invalid(format!("{op} decomposes only when {what} of {shape} are static")))
}

/// Index values as I64 with negatives wrapped: `i + Where(i < 0, extent, 0)`.
fn wrapped(g: &mut Graph, idx: ValueId, extent: usize) -> Result<ValueId, IrError> {
    let i = if g.ty(idx).dtype == DType::I64 { idx } else { g.cast(idx, DType::I64)? };
    let zero = i64_scalar(g, 0)?;
    let n = i64_scalar(g, extent as i64)?;
    let neg = g.compare(CmpOp::Lt, i, zero)?;
    let shift = g.select(neg, n, zero)?;
    g.binary(BinaryOp::Add, i, shift)
}

/// `x · c` (skipped for `c = 1`).
fn scaled(g: &mut Graph, x: ValueId, c: usize) -> Result<ValueId, IrError> {
    if c == 1 {
        return Ok(x);
    }
    let c = i64_scalar(g, c as i64)?;
    g.binary(BinaryOp::Mul, x, c)
}

/// Row-major linear offsets of the index tuples `idx [.., k]` into a block of `extents`
/// (`k` of them): `Σ_j wrap(idx[.., j])·Π extents[j+1..]`, shaped `idx[:-1]`.
fn linear_tuples(g: &mut Graph, idx: ValueId, extents: &[usize]) -> Result<ValueId, IrError> {
    let ty = g.ty(idx).clone();
    let last = ty.rank() - 1;
    let lead = Shape(ty.shape.0[..last].to_vec());
    let mut lin: Option<ValueId> = None;
    for (j, &e) in extents.iter().enumerate() {
        let c = g.narrow(idx, last, j, 1)?;
        let c = g.reshape_to(c, &lead)?;
        let c = wrapped(g, c, e)?;
        let c = scaled(g, c, extents[j + 1..].iter().product())?;
        lin = Some(match lin {
            None => c,
            Some(l) => g.binary(BinaryOp::Add, l, c)?,
        });
    }
    lin.ok_or_else(|| invalid("index tuples must not be empty".into()))
}

/// ONNX GatherND: linear offsets of the tuples (plus each batch's base) into `data`
/// flattened to `[batches·block, rest..]`, then one `Gather` on axis 0.
fn gather_nd(g: &mut Graph, data: ValueId, idx: ValueId, batch_dims: i32) -> Result<ValueId, IrError> {
    let (dty, ity) = (g.ty(data).clone(), g.ty(idx).clone());
    let q = ity.rank();
    let b = if batch_dims < 0 { (batch_dims + q as i32) as usize } else { batch_dims as usize };
    let k = static_extent(g, idx, q - 1, "GatherNd")?;
    let lead = all_static(&dty.shape.0[..b + k], "GatherNd", "the batch and indexed axes", &dty.shape)?;
    let block: usize = lead[b..].iter().product();
    let mut lin = linear_tuples(g, idx, &lead[b..])?;
    if b > 0 {
        let batches: usize = lead[..b].iter().product();
        let mut dims = lead[..b].to_vec();
        dims.resize(q - 1, 1);
        let base: Vec<i64> = (0..batches).map(|i| (i * block) as i64).collect();
        let base = i64_constant(g, &dims, &base)?;
        lin = g.binary(BinaryOp::Add, lin, base)?;
    }
    let rows = lead[..b].iter().product::<usize>() * block;
    let target = std::iter::once(TargetDim::Size(rows as i64)).chain(dty.shape.0[b + k..].iter().map(TargetDim::from)).collect();
    let flat = reshape_dims(g, data, target)?;
    g.gather(flat, lin, 0)
}

/// Flat offsets into `data` of `i with coord(axis) := wrap(idx[i])` for every position `i`
/// of `idx`, shaped as `idx`: the wrapped index times the axis stride, plus one constant
/// `iota·stride` per other axis (broadcast).
fn element_offsets(g: &mut Graph, data: ValueId, idx: ValueId, axis: i32, op: &str) -> Result<(ValueId, Vec<usize>), IrError> {
    let (dty, ity) = (g.ty(data).clone(), g.ty(idx).clone());
    let axis = norm_axis(axis as i64, dty.rank()).map_err(invalid)?;
    let dd = all_static(&dty.shape.0, op, "the extents", &dty.shape)?;
    let id = all_static(&ity.shape.0, op, "the index extents", &ity.shape)?;
    let stride = |a: usize| dd[a + 1..].iter().product::<usize>();
    let w = wrapped(g, idx, dd[axis])?;
    let mut lin = scaled(g, w, stride(axis))?;
    for a in (0..dd.len()).filter(|&a| a != axis && id[a] > 1) {
        let mut dims = vec![1; dd.len()];
        dims[a] = id[a];
        let iota: Vec<i64> = (0..id[a]).map(|j| (j * stride(a)) as i64).collect();
        let iota = i64_constant(g, &dims, &iota)?;
        lin = g.binary(BinaryOp::Add, lin, iota)?;
    }
    Ok((lin, dd))
}

/// `np.take_along_axis`: a `Gather` from the flattened data at the element offsets.
fn gather_elements(g: &mut Graph, data: ValueId, idx: ValueId, axis: i32) -> Result<ValueId, IrError> {
    let (lin, dd) = element_offsets(g, data, idx, axis, "GatherElements")?;
    let flat = g.reshape(data, &[dd.iter().product::<usize>() as i64])?;
    g.gather(flat, lin, 0)
}

/// `rows [K, rest..]` with `updates [U, rest..]` combined in at the rows `at [U]`:
/// `Add` → `rows + ScatterAdd(updates, at)`; `None` → the last update per row wins.
fn scatter_rows(g: &mut Graph, rows: ValueId, at: ValueId, updates: ValueId, r: ScatterReduction) -> Result<ValueId, IrError> {
    let rty = g.ty(rows).clone();
    let k = rty.shape.dim(0).clone();
    if r == ScatterReduction::Add {
        let sum = g.scatter_add(updates, at, k)?;
        return g.binary(BinaryOp::Add, rows, sum);
    }
    let u = g
        .ty(at)
        .static_dim(0)
        .map_err(|e| invalid(format!("Scatter with reduction None decomposes only for a static update count: {e}")))?;
    // later[u, v] = (v > u) ∧ at[v] = at[u]: update u is overwritten by a later one.
    let iota: Vec<i64> = (0..u as i64).collect();
    let col = i64_constant(g, &[u, 1], &iota)?;
    let row = i64_constant(g, &[1, u], &iota)?;
    let after = g.compare(CmpOp::Gt, row, col)?;
    let at_col = g.reshape(at, &[u as i64, 1])?;
    let at_row = g.reshape(at, &[1, u as i64])?;
    let same = g.compare(CmpOp::Eq, at_col, at_row)?;
    let later = g.select(same, after, same)?;
    let later = g.cast(later, DType::F32)?;
    let overwritten = g.reduce(ReduceOp::Sum, later, &[1], false)?;
    let zero_f = g.constant(TensorType::of(DType::F32, &[]), 0f32.to_le_bytes().to_vec())?;
    let last = g.compare(CmpOp::Eq, overwritten, zero_f)?;
    // winner[row] = 1 + the update that lands last on it, 0 if none does.
    let ids: Vec<i64> = (1..=u as i64).collect();
    let ids = index_vector(g, &ids)?;
    let zero = i64_scalar(g, 0)?;
    let ids = g.select(last, ids, zero)?;
    let winner = g.scatter_add(ids, at, k)?;
    let one = i64_scalar(g, 1)?;
    let pick = g.binary(BinaryOp::Sub, winner, one)?;
    let pick = g.binary(BinaryOp::Max, pick, zero)?;
    let written = g.gather(updates, pick, 0)?;
    let hit = g.compare(CmpOp::Gt, winner, zero)?;
    let mut mask = vec![TargetDim::from(rty.shape.dim(0))];
    mask.resize(rty.rank(), TargetDim::Size(1));
    let hit = reshape_dims(g, hit, mask)?;
    g.select(hit, written, rows)
}

/// ONNX ScatterND on `data` viewed as `[block, rest..]` rows, one row per index tuple.
fn scatter_nd(g: &mut Graph, data: ValueId, idx: ValueId, updates: ValueId, r: ScatterReduction) -> Result<ValueId, IrError> {
    let dty = g.ty(data).clone();
    let k = static_extent(g, idx, g.ty(idx).rank() - 1, "ScatterNd")?;
    let lead = all_static(&dty.shape.0[..k], "ScatterNd", "the indexed axes", &dty.shape)?;
    let rest: Vec<TargetDim> = dty.shape.0[k..].iter().map(TargetDim::from).collect();
    let lin = linear_tuples(g, idx, &lead)?;
    let lin = g.reshape(lin, &[-1])?;
    let rows = reshape_dims(g, data, [vec![TargetDim::Size(lead.iter().product::<usize>() as i64)], rest.clone()].concat())?;
    let upd = reshape_dims(g, updates, [vec![TargetDim::Size(-1)], rest].concat())?;
    let out = scatter_rows(g, rows, lin, upd, r)?;
    g.reshape_to(out, &dty.shape)
}

/// ONNX ScatterElements on `data` flattened to single-element rows.
fn scatter_elements(g: &mut Graph, data: ValueId, idx: ValueId, updates: ValueId, axis: i32, r: ScatterReduction) -> Result<ValueId, IrError> {
    let (lin, dd) = element_offsets(g, data, idx, axis, "ScatterElements")?;
    let lin = g.reshape(lin, &[-1])?;
    let rows = g.reshape(data, &[dd.iter().product::<usize>() as i64])?;
    let upd = g.reshape(updates, &[-1])?;
    let out = scatter_rows(g, rows, lin, upd, r)?;
    g.reshape(out, &dd.iter().map(|&d| d as i64).collect::<Vec<_>>())
}

/// `ScatterAdd` along axis 0 of `ȳ` with the index axes moved to the front and flattened,
/// then the table axis moved back to `axis`.
fn gather_backward(g: &mut Graph, dy: ValueId, idx: ValueId, a: &GatherBackward) -> Result<ValueId, IrError> {
    let table = &a.table_shape;
    let axis = norm_axis(a.axis as i64, table.rank()).map_err(invalid)?;
    let q = g.ty(idx).rank();
    let r = table.rank();
    // ȳ is table[:axis] ++ idx.shape ++ table[axis+1:]; bring idx.shape to the front.
    let front: Vec<usize> = (axis..axis + q).chain(0..axis).chain(axis + q..r - 1 + q).collect();
    let moved = if front.iter().enumerate().all(|(i, &p)| i == p) { dy } else { g.transpose(dy, &front)? };
    let others: Vec<TargetDim> = (0..r).filter(|&i| i != axis).map(|i| TargetDim::from(table.dim(i))).collect();
    let rows = reshape_dims(g, moved, [vec![TargetDim::Size(-1)], others].concat())?;
    let flat_idx = g.reshape(idx, &[-1])?;
    let summed = g.scatter_add(rows, flat_idx, table.dim(axis).clone())?;
    if axis == 0 {
        return Ok(summed);
    }
    let back: Vec<usize> = (1..=axis).chain([0]).chain(axis + 1..r).collect();
    g.transpose(summed, &back)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decompose::PRIMITIVES;

    fn lowered(g: &Graph, kind: OpKind) -> String {
        let (legal, _) = crate::legalize(g, "test", PRIMITIVES).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&legal).unwrap();
        let text = legal.to_string();
        assert!(!legal.nodes().iter().any(|n| n.op.kind() == kind), "{kind} survived:\n{text}");
        for (a, b) in legal.outputs().iter().zip(g.outputs()) {
            assert_eq!(legal.ty(*a), g.ty(*b));
        }
        text
    }

    fn graph(types: &[&str], build: impl FnOnce(&mut Graph, &[ValueId]) -> ValueId) -> Graph {
        let mut g = Graph::new();
        let xs: Vec<ValueId> = types.iter().enumerate().map(|(i, t)| g.input(&format!("x{i}"), TensorType::parse(t).unwrap())).collect();
        let y = build(&mut g, &xs);
        g.set_outputs(vec![y]).unwrap();
        g
    }

    #[test]
    fn gather_nd_linearizes() {
        let g = graph(&["f32[4, 5, S]", "i32[B, 2]"], |g, x| g.gather_nd(x[0], x[1], 0).unwrap());
        let t = lowered(&g, OpKind::GatherNd);
        assert!(t.contains("Reshape(new_shape:[20,\"S\"])") && t.contains("Gather(axis:0)"), "{t}");
        let g = graph(&["f32[3, 5, 7]", "i64[3, 2, 1]"], |g, x| g.gather_nd(x[0], x[1], 1).unwrap());
        lowered(&g, OpKind::GatherNd);
        let g = graph(&["f32[B, 5]", "i64[B, 1]"], |g, x| g.gather_nd(x[0], x[1], 1).unwrap());
        let e = crate::legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("GatherNd decomposes only when the batch and indexed axes"), "{e}");
    }

    #[test]
    fn element_ops_linearize() {
        let g = graph(&["f32[3, 7]", "i32[3, 4]"], |g, x| g.gather_elements(x[0], x[1], -1).unwrap());
        lowered(&g, OpKind::GatherElements);
        for r in [ScatterReduction::Add, ScatterReduction::None] {
            let g = graph(&["f32[3, 7]", "i32[3, 4]", "f32[3, 4]"], |g, x| g.scatter_elements(x[0], x[1], x[2], 0, r).unwrap());
            lowered(&g, OpKind::ScatterElements);
        }
        let g = graph(&["f32[3, 7]", "i32[3, 4]", "f32[3, 4]"], |g, x| {
            g.scatter_elements(x[0], x[1], x[2], 0, ScatterReduction::Max).unwrap()
        });
        let e = crate::legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("cannot run ScatterElements"), "{e}");
    }

    #[test]
    fn scatter_nd_add_and_none() {
        let g = graph(&["f32[4, 5, D]", "i64[U, 2]", "f32[U, D]"], |g, x| g.scatter_nd(x[0], x[1], x[2], ScatterReduction::Add).unwrap());
        let t = lowered(&g, OpKind::ScatterNd);
        assert!(t.contains("ScatterAdd(out_dim:20)"), "{t}");
        let g = graph(&["i8[4, 5]", "i64[3, 1]", "i8[3, 5]"], |g, x| g.scatter_nd(x[0], x[1], x[2], ScatterReduction::None).unwrap());
        lowered(&g, OpKind::ScatterNd);
    }

    #[test]
    fn gather_backward_every_axis() {
        let g = graph(&["f32[B, 64]", "i32[B]"], |g, x| g.gather_backward(x[0], x[1], 0, Shape::of(&[100, 64])).unwrap());
        let t = lowered(&g, OpKind::GatherBackward);
        assert!(t.contains("ScatterAdd(out_dim:100)") && !t.contains("Transpose"), "{t}");
        let g = graph(&["f32[4, 2, 3, 6]", "i32[2, 3]"], |g, x| {
            g.gather_backward(x[0], x[1], -2, Shape::of(&[4, 5, 6])).unwrap()
        });
        let t = lowered(&g, OpKind::GatherBackward);
        assert!(t.contains("Transpose(perm:[1,2,0,3])") && t.contains("Transpose(perm:[1,0,2])"), "{t}");
    }
}
