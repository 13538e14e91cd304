//! VJPs of the shape family (OPS.md §9): each moves the cotangent back the way the data came.

use super::elementwise::back_to;
use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::shape::{Narrow, PadMode, Slice};
use rlx_ir::{Dim, Graph, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Reshape,
    OpKind::Transpose,
    OpKind::Narrow,
    OpKind::Slice,
    OpKind::Concat,
    OpKind::Expand,
    OpKind::Reverse,
    OpKind::Pad,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    let dy = match v.ct(0) {
        Ok(d) => d,
        Err(e) => return Some(Err(e)),
    };
    let x = v.inputs[0];
    let g = &mut *v.g;
    let one = |r: Result<ValueId>| r.map(|d| vec![Some(d)]);
    Some(match op {
        Op::Reshape(_) => {
            let shape = g.ty(x).shape.clone();
            one(g.reshape_to(dy, &shape).map_err(Into::into))
        }
        Op::Transpose(t) => {
            let mut inv = vec![0; t.perm.len()];
            for (i, &p) in t.perm.iter().enumerate() {
                inv[p] = i;
            }
            one(g.transpose(dy, &inv).map_err(Into::into))
        }
        Op::Narrow(n) => one(narrow(g, n, dy, x)),
        Op::Slice(s) => one(slice(g, s, dy, x)),
        Op::Concat(c) => concat(g, c.axis, dy, v.inputs),
        Op::Expand(_) => one(back_to(g, dy, x)),
        Op::Reverse(r) => one(g.reverse(dy, &r.axes).map_err(Into::into)),
        Op::Pad(p) => one(pad(g, &p.pads, &p.mode, dy)),
        _ => return None,
    })
}

/// The static extent of `axis` of `x`, or an error naming `op`.
fn extent(g: &Graph, x: ValueId, axis: usize, op: &'static str) -> Result<usize> {
    let ty = g.ty(x);
    ty.shape.dim(axis).as_static().ok_or_else(|| AdError::Rule {
        op,
        msg: format!("the gradient needs a static extent on axis {axis} of {ty}"),
    })
}

/// `ct` zero-padded by `[before, after]` on `axis`.
fn pad_axis(g: &mut Graph, ct: ValueId, axis: usize, before: usize, after: usize) -> Result<ValueId> {
    if before == 0 && after == 0 {
        return Ok(ct);
    }
    let mut pads = vec![[0, 0]; g.ty(ct).rank()];
    pads[axis] = [before, after];
    Ok(g.pad(ct, &pads, PadMode::Constant(0.0))?)
}

/// The window's cotangent placed back at `start` in zeros.
fn narrow(g: &mut Graph, n: &Narrow, dy: ValueId, x: ValueId) -> Result<ValueId> {
    let d = extent(g, x, n.axis, "Narrow")?;
    pad_axis(g, dy, n.axis, n.start, d - n.start - n.len)
}

/// `x̄[start + j·step] = ȳ[j]`: each cotangent row followed by `step − 1` zero rows, then
/// shifted to `start`; a negative step is the positive one on the reversed axis.
fn slice(g: &mut Graph, s: &Slice, dy: ValueId, x: ValueId) -> Result<ValueId> {
    let d = extent(g, x, s.axis, "Slice")?;
    let (start, step) = if s.step < 0 { (d - 1 - s.start, s.step.unsigned_abs() as usize) } else { (s.start, s.step as usize) };
    let mut dims = g.ty(dy).shape.dims().to_vec();
    dims.insert(s.axis + 1, Dim::Static(1));
    let rows = g.reshape_to(dy, &Shape(dims.clone()))?;
    let spaced = pad_axis(g, rows, s.axis + 1, 0, step - 1)?;
    dims.remove(s.axis + 1);
    dims[s.axis] = Dim::Static(s.len * step);
    let flat = g.reshape_to(spaced, &Shape(dims))?;
    let end = start + s.len * step;
    let placed = if end > d {
        let cut = g.narrow(flat, s.axis, 0, d - start)?;
        pad_axis(g, cut, s.axis, start, 0)?
    } else {
        pad_axis(g, flat, s.axis, start, d - end)?
    };
    if s.step < 0 {
        Ok(g.reverse(placed, &[s.axis])?)
    } else {
        Ok(placed)
    }
}

/// Each operand gets its own span of the cotangent.
fn concat(g: &mut Graph, axis: usize, dy: ValueId, inputs: &[ValueId]) -> Result<Vec<Option<ValueId>>> {
    let mut at = 0;
    let mut out = Vec::with_capacity(inputs.len());
    for &x in inputs {
        let len = extent(g, x, axis, "Concat")?;
        out.push(Some(g.narrow(dy, axis, at, len)?));
        at += len;
    }
    Ok(out)
}

/// Constant padding: the cotangent of the original cells. Reflect / Replicate / Circular fold
/// padded cells back onto their sources and have no rule yet.
fn pad(g: &mut Graph, pads: &[[usize; 2]], mode: &PadMode, dy: ValueId) -> Result<ValueId> {
    if !matches!(mode, PadMode::Constant(_)) {
        return Err(AdError::Rule { op: "Pad", msg: format!("no gradient rule for {mode:?} padding") });
    }
    let mut ct = dy;
    for (axis, &[before, after]) in pads.iter().enumerate() {
        if before + after > 0 {
            let d = extent(g, ct, axis, "Pad")?;
            ct = g.narrow(ct, axis, before, d - before - after)?;
        }
    }
    Ok(ct)
}
