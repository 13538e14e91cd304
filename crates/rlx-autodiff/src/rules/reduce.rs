//! VJPs of reductions and scans (OPS.md §8).

use super::Vjp;
use crate::Result;
use rlx_ir::ops::elementwise::{BinaryOp, CmpOp};
use rlx_ir::ops::index::ScatterReduction;
use rlx_ir::ops::reduce::{CumsumBackward, Reduce, ReduceOp};
use rlx_ir::{DType, Dim, Graph, Op, OpKind, Shape, ValueId};
use rlx_opt::decompose::build::{scalar, vector};

pub const KINDS: &[OpKind] =
    &[OpKind::Reduce, OpKind::Cumsum, OpKind::CumsumBackward, OpKind::CumMax, OpKind::TopK, OpKind::Sort];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Reduce(r) => reduce(r, v),
        Op::Cumsum(c) => cumsum(c, v),
        Op::CumsumBackward(c) => cumsum_backward(c, v),
        Op::CumMax(c) => cum_max(c.axis, c.exclusive, v),
        Op::TopK(_) => top_k(v),
        Op::Sort(s) => sort(s.axis, s.descending, v),
        _ => return None,
    })
}

/// `x` of the reduced value broadcast back over the reduced axes of `like`.
fn spread(g: &mut Graph, r: &Reduce, y: ValueId, like: ValueId) -> Result<ValueId> {
    let shape = g.ty(like).shape.clone();
    let kept = Shape(
        shape.dims().iter().enumerate().map(|(i, d)| if r.axes.contains(&i) { Dim::Static(1) } else { d.clone() }).collect(),
    );
    let y = if r.keep_dim { y } else { g.reshape_to(y, &kept)? };
    Ok(g.expand_to(y, &shape)?)
}

/// Sum: `ȳ` spread; Mean: divided by the count; Max/Min: shared evenly among the elements
/// equal to the extremum (as JAX); Prod: `ȳ·∏_{j≠i} x_j`, zero-safe (see [`prod_of_others`]).
fn reduce(r: &Reduce, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, y, dy) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let dtype = g.ty(x).dtype;
    let dx = match r.op {
        ReduceOp::Sum => spread(g, r, dy, x)?,
        ReduceOp::Mean => {
            let n = count(g, r, x)?;
            let s = g.binary(BinaryOp::Div, dy, n)?;
            spread(g, r, s, x)?
        }
        ReduceOp::Max | ReduceOp::Min => {
            let ys = spread(g, r, y, x)?;
            let hit = g.compare(CmpOp::Eq, x, ys)?;
            let mask = g.cast(hit, dtype)?;
            let ties = g.reduce(ReduceOp::Sum, mask, &r.axes, r.keep_dim)?;
            let share = g.binary(BinaryOp::Div, dy, ties)?;
            let share = spread(g, r, share, x)?;
            g.binary(BinaryOp::Mul, share, mask)?
        }
        ReduceOp::Prod => {
            let others = prod_of_others(g, r, x)?;
            let dy = spread(g, r, dy, x)?;
            g.binary(BinaryOp::Mul, dy, others)?
        }
    };
    Ok(vec![Some(dx)])
}

/// `∏_{j≠i} x_j` over the reduced axes of `r` for every element `i` (conjugated for C64),
/// from exclusive products from both sides as JAX and OPS.md §8 do: exact where some `x_j` is
/// zero, where `y/x` would be NaN. The reduced axes are moved last and flattened.
fn prod_of_others(g: &mut Graph, r: &Reduce, x: ValueId) -> Result<ValueId> {
    let ty = g.ty(x).clone();
    let rank = ty.rank();
    let (reduced, kept): (Vec<usize>, Vec<usize>) = (0..rank).partition(|a| r.axes.contains(a));
    let perm: Vec<usize> = kept.iter().chain(&reduced).copied().collect();
    let moved = perm.iter().enumerate().any(|(i, &a)| i != a);
    let xt = if moved { g.transpose(x, &perm)? } else { x };
    let dims: Vec<Dim> = perm.iter().map(|&a| ty.shape.dim(a).clone()).collect();
    let n = reduced.iter().try_fold(1usize, |n, &a| {
        ty.shape.dim(a).as_static().map(|d| n * d).ok_or_else(|| crate::AdError::Rule {
            op: "Reduce",
            msg: format!("Prod over the symbolic axis {a} of {ty} needs a concrete size"),
        })
    })?;
    let flat = Shape(dims[..kept.len()].iter().cloned().chain([Dim::Static(n)]).collect());
    let xf = g.reshape_to(xt, &flat)?;
    let last = kept.len();
    let before = g.cum_prod(xf, last as i32, true)?;
    let rev = g.reverse(xf, &[last])?;
    let after = g.cum_prod(rev, last as i32, true)?;
    let after = g.reverse(after, &[last])?;
    let mut others = g.binary(BinaryOp::Mul, before, after)?;
    if ty.dtype == DType::C64 {
        others = g.conjugate(others)?;
    }
    let others = g.reshape_to(others, &Shape(dims))?;
    if !moved {
        return Ok(others);
    }
    let mut inv = vec![0; rank];
    for (i, &a) in perm.iter().enumerate() {
        inv[a] = i;
    }
    Ok(g.transpose(others, &inv)?)
}

/// `CumMax`: each `ȳ_i` goes to the last position `j ≤ i` (`j < i` when exclusive) holding the
/// running maximum `y_i` (OPS.md §8, the index `torch.cummax` returns). Built on the
/// `[.., L(i), L(j), ..]` grid the decomposition uses: `j*(i) = max{j : mask ∧ x_j = y_i}`,
/// then `x̄_j = Σ_i ȳ_i·[j = j*(i)]`; NaN prefixes and the empty exclusive prefix pass none.
fn cum_max(axis: i32, exclusive: bool, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, y, dy) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let ty = g.ty(x).clone();
    let rank = ty.rank();
    let axis = rlx_ir::norm_axis(axis as i64, rank).map_err(|msg| crate::AdError::Rule { op: "CumMax", msg })?;
    let l = ty.shape.dim(axis).as_static().ok_or_else(|| crate::AdError::Rule {
        op: "CumMax",
        msg: format!("the scanned axis {axis} of {ty} needs a concrete size"),
    })?;
    let positions: Vec<f64> = (0..l).map(|k| k as f64).collect();
    let iota = vector(g, ty.dtype, &positions)?;
    let trailing = std::iter::repeat_n(Dim::Static(1), rank - axis - 1);
    let j = g.reshape_to(iota, &Shape(std::iter::once(Dim::Static(l)).chain(trailing.clone()).collect()))?;
    let i = g.reshape_to(iota, &Shape([Dim::Static(l), Dim::Static(1)].into_iter().chain(trailing).collect()))?;
    let mask = g.compare(if exclusive { CmpOp::Gt } else { CmpOp::Ge }, i, j)?;
    let xj = unsqueeze(g, x, axis)?;
    let yi = unsqueeze(g, y, axis + 1)?;
    let hit = g.compare(CmpOp::Eq, xj, yi)?;
    let none = scalar(g, ty.dtype, -1.0)?;
    let cand = g.select(hit, j, none)?;
    let cand = g.select(mask, cand, none)?;
    let last = g.reduce(ReduceOp::Max, cand, &[axis + 1], true)?;
    let pick = g.compare(CmpOp::Eq, j, last)?;
    let dyi = unsqueeze(g, dy, axis + 1)?;
    let zero = scalar(g, ty.dtype, 0.0)?;
    let share = g.select(pick, dyi, zero)?;
    Ok(vec![Some(g.reduce(ReduceOp::Sum, share, &[axis], false)?)])
}

/// `x` with a unit axis inserted at `at`.
fn unsqueeze(g: &mut Graph, x: ValueId, at: usize) -> Result<ValueId> {
    let mut dims = g.ty(x).shape.0.clone();
    dims.insert(at, Dim::Static(1));
    Ok(g.reshape_to(x, &Shape(dims))?)
}

/// The number of elements each output of `r` reduces, in `x`'s dtype: a scalar when the
/// reduced axes are static, else a sum of ones over them (the size is known only at run time).
fn count(g: &mut Graph, r: &Reduce, x: ValueId) -> Result<ValueId> {
    let ty = g.ty(x).clone();
    let sizes: Option<Vec<usize>> = r.axes.iter().map(|&a| ty.shape.dim(a).as_static()).collect();
    match sizes {
        Some(sizes) => Ok(scalar(g, ty.dtype, sizes.iter().product::<usize>() as f64)?),
        None => {
            let ones = crate::reverse::ones_like(g, x)?;
            Ok(g.reduce(ReduceOp::Sum, ones, &r.axes, r.keep_dim)?)
        }
    }
}

/// `CumsumBackward(ȳ)`: the reverse running sum.
fn cumsum(c: &rlx_ir::ops::reduce::Cumsum, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let dy = v.ct(0)?;
    Ok(vec![Some(v.g.add1(CumsumBackward { axis: c.axis, exclusive: c.exclusive }, &[dy])?)])
}

/// `CumsumBackward` is linear: its VJP is the forward running sum of the cotangent.
fn cumsum_backward(c: &CumsumBackward, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let ct = v.ct(0)?;
    let d = v.g.add1(rlx_ir::ops::reduce::Cumsum { axis: c.axis, exclusive: c.exclusive }, &[ct])?;
    Ok(vec![Some(d)])
}

/// `ȳ` scattered to the positions `perm` read along `axis` (zeros elsewhere).
fn scatter_back(v: &mut Vjp, perm: ValueId, dy: ValueId, axis: usize) -> Result<ValueId> {
    let zeros = crate::reverse::zeros_like(v.g, v.inputs[0])?;
    Ok(v.g.scatter_elements(zeros, perm, dy, axis as i32, ScatterReduction::Add)?)
}

/// Values: `ȳ` back to the positions the indices output names, on the last axis; the
/// indices carry none.
fn top_k(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (idx, dy) = (v.outputs[1], v.ct(0)?);
    let axis = v.g.ty(v.inputs[0]).rank() - 1;
    Ok(vec![Some(scatter_back(v, idx, dy, axis)?)])
}

/// `x̄[perm[i]] = ȳ[i]` along `axis`, `perm` the stable `ArgSort` the kernel applies.
fn sort(axis: usize, descending: bool, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let dy = v.ct(0)?;
    let perm = v.g.arg_sort(v.inputs[0], axis, descending)?;
    Ok(vec![Some(scatter_back(v, perm, dy, axis)?)])
}
