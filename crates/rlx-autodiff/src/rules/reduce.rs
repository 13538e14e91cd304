//! VJPs of reductions and scans (OPS.md §8).

use super::Vjp;
use crate::Result;
use rlx_ir::ops::elementwise::{BinaryOp, CmpOp};
use rlx_ir::ops::index::ScatterReduction;
use rlx_ir::ops::reduce::{CumsumBackward, Reduce, ReduceOp};
use rlx_ir::{Dim, Graph, Op, OpKind, Shape, ValueId};
use rlx_opt::decompose::build::scalar;

pub const KINDS: &[OpKind] = &[OpKind::Reduce, OpKind::Cumsum, OpKind::CumsumBackward, OpKind::TopK, OpKind::Sort];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Reduce(r) => reduce(r, v),
        Op::Cumsum(c) => cumsum(c, v),
        Op::CumsumBackward(c) => cumsum_backward(c, v),
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
/// equal to the extremum (as JAX); Prod: `ȳ·y/x` (undefined where `x = 0`).
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
            let t = g.binary(BinaryOp::Mul, dy, y)?;
            let t = spread(g, r, t, x)?;
            g.binary(BinaryOp::Div, t, x)?
        }
    };
    Ok(vec![Some(dx)])
}

/// The number of elements each output of `r` reduces, in `x`'s dtype: a constant scalar where
/// the reduced axes are static, else a sum of ones counted at run time (shaped like `y`).
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
