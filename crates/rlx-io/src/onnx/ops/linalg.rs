//! `Det` onto rlx's `Det`, one `[M, M]` matrix at a time for batched inputs.

use super::shape::reshape_static;
use super::{invalid, Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::linalg::Det;
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[("Det", det)];

/// `Det(x [*, M, M])` → `[*]`.
fn det(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let r = dims.len();
    if r < 2 || dims[r - 1] != dims[r - 2] {
        return invalid(format!("Det needs square matrices in the last two axes, got {dims:?}"));
    }
    let m = dims[r - 1];
    let batch: usize = dims[..r - 2].iter().product();
    if r == 2 {
        return Ok(vec![cx.add1(Det {}, &[x])?]);
    }
    let flat = reshape_static(cx, x, &[batch, m, m])?;
    let mut dets = Vec::with_capacity(batch);
    for b in 0..batch {
        let one = cx.add1(Narrow { axis: 0, start: b, len: 1 }, &[flat])?;
        let one = reshape_static(cx, one, &[m, m])?;
        let d = cx.add1(Det {}, &[one])?;
        dets.push(reshape_static(cx, d, &[1])?);
    }
    let all = if dets.len() == 1 { dets[0] } else { cx.add1(Concat { axis: 0 }, &dets)? };
    Ok(vec![reshape_static(cx, all, &dims[..r - 2])?])
}
