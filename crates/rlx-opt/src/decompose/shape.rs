//! Decompositions of the shape family (OPS.md §9): strided slices, reversal and padding
//! become `Narrow`, `Gather` with constant index vectors, `Concat` and constant fills;
//! `KvAppend` becomes its functional form. Reshape, Transpose, Narrow, Concat and Expand
//! are primitives.

use rlx_ir::ops::shape::{KvAppend, Pad, PadMode, Slice};
use rlx_ir::{DType, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::Slice, OpKind::Reverse, OpKind::Pad, OpKind::KvAppend];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::Slice(a) => slice(g, x[0], a),
        Op::Reverse(a) => reverse(g, x[0], &a.axes),
        Op::Pad(a) => pad(g, x[0], a),
        Op::KvAppend(_) if x.len() == 3 => Err(IrError::Invalid(
            "KvAppend with a run-time position has no functional form: the backend must claim it and write the cache in place".into(),
        )),
        Op::KvAppend(a) => kv_append(g, x[0], x[1], a),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// A constant I64 vector.
pub(super) fn index_vector(g: &mut Graph, values: &[i64]) -> Result<ValueId, IrError> {
    let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    g.constant(TensorType::of(DType::I64, &[values.len()]), data)
}

/// The static extent of `axis` of `x`, or an error saying which op needs it.
pub(super) fn static_extent(g: &Graph, x: ValueId, axis: usize, op: &str) -> Result<usize, IrError> {
    g.ty(x).static_dim(axis).map_err(|e| IrError::Invalid(format!("{op} decomposes only over static extents: {e}")))
}

/// `step = 1` → `Narrow`; `step = −1` → `Narrow` + `Reverse`; any other step → `Gather`
/// with the constant index vector `start + j·step`.
fn slice(g: &mut Graph, x: ValueId, a: &Slice) -> Result<ValueId, IrError> {
    if a.len == 0 {
        return g.narrow(x, a.axis, 0, 0);
    }
    match a.step {
        1 => g.narrow(x, a.axis, a.start, a.len),
        -1 => {
            let part = g.narrow(x, a.axis, a.start + 1 - a.len, a.len)?;
            g.reverse(part, &[a.axis])
        }
        step => {
            let at: Vec<i64> = (0..a.len as i64).map(|j| a.start as i64 + j * step).collect();
            let idx = index_vector(g, &at)?;
            g.gather(x, idx, a.axis)
        }
    }
}

/// One `Gather` with the constant indices `d−1, …, 0` per flipped axis of extent > 1.
fn reverse(g: &mut Graph, x: ValueId, axes: &[usize]) -> Result<ValueId, IrError> {
    let mut cur = x;
    for &axis in axes {
        let d = static_extent(g, x, axis, "Reverse")?;
        if d > 1 {
            let idx = index_vector(g, &(0..d as i64).rev().collect::<Vec<_>>())?;
            cur = g.gather(cur, idx, axis)?;
        }
    }
    Ok(cur)
}

/// For one axis of extent `d` padded `[before, after]` in a non-constant mode: the source
/// index of each output position (what the CPU kernel reads).
fn pad_indices(d: usize, before: usize, after: usize, mode: &PadMode) -> Vec<i64> {
    let (d, b) = (d as i64, before as i64);
    (0..(before + after) as i64 + d)
        .map(|o| {
            let i = o - b;
            match mode {
                _ if (0..d).contains(&i) => i,
                PadMode::Reflect => if i < 0 { -i } else { 2 * (d - 1) - i },
                PadMode::Circular => i.rem_euclid(d),
                PadMode::Replicate => i.clamp(0, d - 1),
                PadMode::Constant(_) => unreachable!("constant pads concatenate fills"),
            }
        })
        .collect()
}

/// Axis by axis: `Constant` concatenates expanded fills around the tensor; the other modes
/// `Gather` the padded axis with a constant index vector.
fn pad(g: &mut Graph, x: ValueId, a: &Pad) -> Result<ValueId, IrError> {
    let mut cur = x;
    for (axis, &[before, after]) in a.pads.iter().enumerate() {
        if before == 0 && after == 0 {
            continue;
        }
        let d = static_extent(g, x, axis, "Pad")?;
        cur = match a.mode {
            PadMode::Constant(v) => {
                let mut parts = Vec::with_capacity(3);
                for (n, is_before) in [(before, true), (after, false)] {
                    if n > 0 {
                        let fill = filled(g, cur, axis, n, v)?;
                        parts.push((is_before, fill));
                    }
                }
                let mut list: Vec<ValueId> = parts.iter().filter(|p| p.0).map(|p| p.1).collect();
                list.push(cur);
                list.extend(parts.iter().filter(|p| !p.0).map(|p| p.1));
                g.concat(&list, axis)?
            }
            _ => {
                let idx = index_vector(g, &pad_indices(d, before, after, &a.mode))?;
                g.gather(cur, idx, axis)?
            }
        };
    }
    Ok(cur)
}

/// `v` in `like`'s dtype, broadcast to `like`'s shape with `n` cells on `axis`.
fn filled(g: &mut Graph, like: ValueId, axis: usize, n: usize, v: f64) -> Result<ValueId, IrError> {
    let ty = g.ty(like).clone();
    let scalar = g.constant(TensorType::of(DType::F64, &[]), v.to_le_bytes().to_vec())?;
    let scalar = if ty.dtype == DType::F64 { scalar } else { g.cast(scalar, ty.dtype)? };
    let mut dims = ty.shape.0.clone();
    dims[axis] = n.into();
    g.expand_to(scalar, &Shape(dims))
}

/// `Concat(Narrow(cache, axis, 0, pos), row)`: the functional form, which does not write
/// the cache (the runtime must store the result back for the append to persist).
fn kv_append(g: &mut Graph, cache: ValueId, row: ValueId, a: &KvAppend) -> Result<ValueId, IrError> {
    if a.pos == 0 {
        return Ok(row);
    }
    let prefix = g.narrow(cache, a.axis, 0, a.pos)?;
    g.concat(&[prefix, row], a.axis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decompose::PRIMITIVES;

    /// Legalizes `g` for a backend claiming only the primitives, checks that `kind` is gone
    /// and the result verifies, and returns its text.
    fn lowered(g: &Graph, kind: OpKind) -> String {
        let (legal, _) = crate::legalize(g, "test", PRIMITIVES).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&legal).unwrap();
        let text = legal.to_string();
        assert!(!legal.nodes().iter().any(|n| n.op.kind() == kind), "{kind} survived:\n{text}");
        assert_eq!(legal.ty(legal.outputs()[0]), g.ty(g.outputs()[0]));
        text
    }

    fn graph(ty: &str, build: impl FnOnce(&mut Graph, ValueId) -> ValueId) -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::parse(ty).unwrap());
        let y = build(&mut g, x);
        g.set_outputs(vec![y]).unwrap();
        g
    }

    #[test]
    fn slice_by_step() {
        let t = lowered(&graph("f32[B, 13]", |g, x| g.slice(x, 1, 2, 5, 1).unwrap()), OpKind::Slice);
        assert!(t.contains("Narrow(axis:1,start:2,len:5)(%0) : f32[B, 5]"), "{t}");
        let t = lowered(&graph("f32[B, 13]", |g, x| g.slice(x, 1, 12, 13, -1).unwrap()), OpKind::Slice);
        assert!(t.contains("Gather(axis:1)"), "{t}"); // Narrow, then Reverse lowered to Gather
        let t = lowered(&graph("f32[B, 13]", |g, x| g.slice(x, 1, 11, 4, -3).unwrap()), OpKind::Slice);
        assert!(t.contains("Gather(axis:1)") && !t.contains("Narrow"), "{t}");
        lowered(&graph("f32[3]", |g, x| g.slice(x, 0, 7, 0, 2).unwrap()), OpKind::Slice);
    }

    #[test]
    fn reverse_needs_static_axes() {
        let t = lowered(&graph("i32[2, 3, 4]", |g, x| g.reverse(x, &[0, 2]).unwrap()), OpKind::Reverse);
        assert_eq!(t.matches("Gather").count(), 2, "{t}");
        let g = graph("f32[B, 3]", |g, x| g.reverse(x, &[0]).unwrap());
        let e = crate::legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("Reverse decomposes only over static extents"), "{e}");
    }

    #[test]
    fn pad_every_mode() {
        for mode in [PadMode::Constant(-2.0), PadMode::Reflect, PadMode::Replicate, PadMode::Circular] {
            let g = graph("f16[B, 3, 4]", |g, x| g.pad(x, &[[0, 0], [1, 2], [0, 3]], mode.clone()).unwrap());
            let t = lowered(&g, OpKind::Pad);
            let want = if mode == PadMode::Constant(-2.0) { "Concat(axis:2)" } else { "Gather(axis:2)" };
            assert!(t.contains(want), "{t}");
        }
    }

    #[test]
    fn kv_append_is_concat_of_narrow() {
        let mut g = Graph::new();
        let cache = g.input("cache", TensorType::parse("f16[2, 16, 8]").unwrap());
        let row = g.input("row", TensorType::parse("f16[2, 1, 8]").unwrap());
        let y = g.kv_append(cache, row, 1, 5).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let t = lowered(&g, OpKind::KvAppend);
        assert!(t.contains("Narrow(axis:1,start:0,len:5)(%0)") && t.contains("Concat(axis:1)(%2, %1) : f16[2, 6, 8]"), "{t}");
    }
}
