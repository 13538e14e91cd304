//! `FusedResidualLN` / `FusedResidualRmsNorm`: a norm over the last axis of
//! `x + residual [+ bias]`.

use super::Scratch;
use crate::kernels::elementwise::binary;
use crate::kernels::norm::{self, lane_sum};
use crate::kernels::PAR_MIN;
use crate::view::{broadcast_strides, for_each_broadcast, In, Out};
use rayon::prelude::*;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::fused::{FusedResidualLN, FusedResidualRmsNorm};
use rlx_ir::ops::norm::{LayerNorm, RmsNorm};
use rlx_ir::DType;

/// Rows one task takes.
const ROWS_PER_TASK: usize = 8;

/// Which normalization follows the sum.
#[derive(Clone, Copy)]
enum Norm {
    Layer,
    Rms,
}

/// Inputs `(x, residual [, bias], gamma, beta)`: `x [.., D]`, `residual` broadcasting to it,
/// the vectors `[D]`. In f32 (with `residual` ending in `D`) each row is summed, its
/// statistics taken and normalized in one visit, the sum held in the output row.
pub fn residual_layer_norm(a: &FusedResidualLN, ins: &[In], out: &mut Out) -> Result<(), String> {
    residual_norm(Norm::Layer, a.has_bias, a.eps, ins, out)
}

/// As [`residual_layer_norm`], with the RMS normalization of OPS.md §6.
pub fn residual_rms_norm(a: &FusedResidualRmsNorm, ins: &[In], out: &mut Out) -> Result<(), String> {
    residual_norm(Norm::Rms, a.has_bias, a.eps, ins, out)
}

fn residual_norm(kind: Norm, has_bias: bool, eps: f32, ins: &[In], out: &mut Out) -> Result<(), String> {
    let (x, residual) = (ins[0], ins[1]);
    let bias = has_bias.then(|| ins[2]);
    let (gamma, beta) = (ins[ins.len() - 2], ins[ins.len() - 1]);
    let d = *x.dims.last().ok_or("x needs a feature axis")?;
    let f32s = ins.iter().all(|i| i.dtype == DType::F32);
    if !f32s || residual.dims.last() != Some(&d) || d == 0 {
        return unfused(kind, eps, x, residual, bias, gamma, beta, out);
    }
    let offsets = residual_rows(x.dims, residual.dims);
    let (xs, rs, g, b) = (x.get::<f32>(), residual.get::<f32>(), gamma.get::<f32>(), beta.get::<f32>());
    let bias = bias.map(|v| v.get::<f32>());
    let task = |(t, ys): (usize, &mut [f32])| {
        for (i, y) in ys.chunks_exact_mut(d).enumerate() {
            let row = t * ROWS_PER_TASK + i;
            let (xr, rr) = (&xs[row * d..(row + 1) * d], &rs[offsets[row]..offsets[row] + d]);
            y.iter_mut().zip(xr).zip(rr).for_each(|((y, &x), &r)| *y = x + r);
            if let Some(bias) = bias {
                y.iter_mut().zip(bias).for_each(|(y, &b)| *y += b);
            }
            normalize(kind, eps, y, g, b);
        }
    };
    let y = out.get::<f32>();
    if y.len() < PAR_MIN {
        y.chunks_mut(ROWS_PER_TASK * d).enumerate().for_each(task);
    } else {
        y.par_chunks_mut(ROWS_PER_TASK * d).enumerate().for_each(task);
    }
    Ok(())
}

/// The element offset of the residual row that each row of `x` adds (NumPy broadcasting
/// of the leading dims).
fn residual_rows(x: &[usize], residual: &[usize]) -> Vec<usize> {
    let d = x[x.len() - 1];
    let lead = &x[..x.len() - 1];
    let strides = broadcast_strides(&residual[..residual.len() - 1], lead);
    let mut offsets = vec![0; lead.iter().product()];
    for_each_broadcast(lead, [&strides], |row, [r]| offsets[row] = r * d);
    offsets
}

/// `y ← norm(y)·γ + β` in place, the statistics summed over eight lanes ([`lane_sum`]).
fn normalize(kind: Norm, eps: f32, y: &mut [f32], gamma: &[f32], beta: &[f32]) {
    let d = y.len() as f32;
    match kind {
        Norm::Layer => {
            let mean = lane_sum(y, |v| v) / d;
            let var = lane_sum(y, |v| (v - mean) * (v - mean)) / d;
            let r = 1.0 / (var + eps).sqrt();
            y.iter_mut().zip(gamma).zip(beta).for_each(|((y, &g), &b)| *y = (*y - mean) * r * g + b);
        }
        Norm::Rms => {
            let r = 1.0 / (lane_sum(y, |v| v * v) / d + eps).sqrt();
            y.iter_mut().zip(gamma).zip(beta).for_each(|((y, &g), &b)| *y = *y * r * g + b);
        }
    }
}

/// The `Add` kernels, then the `LayerNorm` / `RmsNorm` kernel.
#[allow(clippy::too_many_arguments)]
fn unfused(kind: Norm, eps: f32, x: In, residual: In, bias: Option<In>, gamma: In, beta: In, out: &mut Out) -> Result<(), String> {
    let mut sum = Scratch::new(x.dtype, x.dims);
    binary(BinaryOp::Add, x, residual, &mut sum.as_out())?;
    if let Some(bias) = bias {
        let mut biased = Scratch::new(x.dtype, x.dims);
        binary(BinaryOp::Add, sum.as_in(), bias, &mut biased.as_out())?;
        sum = biased;
    }
    let ins = [sum.as_in(), gamma, beta];
    let mut outs = [Out { dtype: out.dtype, dims: out.dims, bytes: &mut *out.bytes }];
    match kind {
        Norm::Layer => norm::layer_norm(&LayerNorm { axis: -1, eps }, &ins, &mut outs),
        Norm::Rms => norm::rms_norm(&RmsNorm { axis: -1, eps, flatten_leading: false }, &ins, &mut outs),
    }
}
