//! `RotaryEmbedding` (opset 23) lowered to slices, products and a concat: the cos/sin rows
//! gathered by `position_ids` (or given per batch and position), the first
//! `rotary_embedding_dim` channels of each head rotated as halves or interleaved pairs, the
//! rest passed through. rlx's `Rope` reads one table row per sequence index for all batch
//! items, which position ids per batch item do not fit, so this is its decomposition.

use super::elementwise::bin;
use super::shape::reshape_static;
use super::{invalid, Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::index::Gather;
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[("RotaryEmbedding", rotary_embedding)];

fn narrow(cx: &mut Cx<'_>, x: ValueId, start: usize, len: usize) -> OpResult<ValueId> {
    let axis = cx.rank(x) - 1;
    cx.add1(Narrow { axis, start, len }, &[x])
}

/// The cos or sin table as `[B, S, half]`.
fn table(cx: &mut Cx<'_>, cache: ValueId, positions: Option<ValueId>, b: usize, s: usize, half: usize, what: &str) -> OpResult<ValueId> {
    let t = match positions {
        Some(p) => cx.add1(Gather { axis: 0 }, &[cache, p])?,
        None => cache,
    };
    let d = cx.dims(t)?;
    if d != [b, s, half] {
        return invalid(format!("{what} gives a [{}] table for [{b}, {s}, {half}] (batch, sequence, rotary_embedding_dim/2)", d.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")));
    }
    Ok(t)
}

fn rotary_embedding(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x0 = n.input(0)?;
    let xd = cx.dims(x0)?;
    // Work on `[B, H, S, D]` (4-D input as given) or `[B, S, H, D]` (3-D input split into heads);
    // `seq` is the sequence axis.
    let (x, b, s, d, seq) = match xd[..] {
        [b, _, s, d] => (x0, b, s, d, 2),
        [b, s, hidden] => {
            let h = n.int("num_heads", 0);
            if h <= 0 || hidden % h as usize != 0 {
                return invalid(format!("num_heads {h} must divide the hidden size {hidden} of a 3-D input"));
            }
            let h = h as usize;
            (reshape_static(cx, x0, &[b, s, h, hidden / h])?, b, s, hidden / h, 1)
        }
        _ => return invalid(format!("X must be 3-D or 4-D, got {xd:?}")),
    };
    let rd = match n.int("rotary_embedding_dim", 0) {
        0 => d,
        r if r > 0 && r as usize <= d && r % 2 == 0 => r as usize,
        r => return invalid(format!("rotary_embedding_dim {r} must be even and at most the head size {d}")),
    };
    let half = rd / 2;
    let positions = n.opt_input(3);
    let cos = table(cx, n.input(1)?, positions, b, s, half, "cos_cache")?;
    let sin = table(cx, n.input(2)?, positions, b, s, half, "sin_cache")?;
    let interleaved = n.int("interleaved", 0) != 0;
    // Tables broadcast over the heads axis, with a trailing pair axis when interleaved.
    let mut tdims = if seq == 2 { vec![b, 1, s, half] } else { vec![b, s, 1, half] };
    if interleaved {
        tdims.push(1);
    }
    let cos = reshape_static(cx, cos, &tdims)?;
    let sin = reshape_static(cx, sin, &tdims)?;
    let shape4 = cx.dims(x)?;
    let rotated = narrow(cx, x, 0, rd)?;
    let (x1, x2) = if interleaved {
        let mut pairs = shape4.clone();
        pairs[3] = half;
        pairs.push(2);
        let p = reshape_static(cx, rotated, &pairs)?;
        (narrow(cx, p, 0, 1)?, narrow(cx, p, 1, 1)?)
    } else {
        (narrow(cx, rotated, 0, half)?, narrow(cx, rotated, half, half)?)
    };
    let term = |cx: &mut Cx<'_>, a: ValueId, t: ValueId| bin(cx, BinaryOp::Mul, a, t);
    let (c1, s2) = (term(cx, x1, cos)?, term(cx, x2, sin)?);
    let real = bin(cx, BinaryOp::Sub, c1, s2)?;
    let (s1, c2) = (term(cx, x1, sin)?, term(cx, x2, cos)?);
    let imag = bin(cx, BinaryOp::Add, s1, c2)?;
    let last = cx.rank(real) - 1;
    let mut y = cx.add1(Concat { axis: last }, &[real, imag])?;
    if interleaved {
        let mut dims = shape4.clone();
        dims[3] = rd;
        y = reshape_static(cx, y, &dims)?;
    }
    if rd < d {
        let rest = narrow(cx, x, rd, d - rd)?;
        y = cx.add1(Concat { axis: 3 }, &[y, rest])?;
    }
    Ok(vec![reshape_static(cx, y, &xd)?])
}
