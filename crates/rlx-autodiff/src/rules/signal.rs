//! VJPs of the signal and complex family (OPS.md §17, §22). C64 cotangents follow OPS.md
//! §23.2 item 16: the gradient w.r.t. the real pair `(re, im)`, so a complex-linear map's VJP
//! is its conjugate transpose and the 2N real-block layout needs nothing special.

use super::linalg::{add, mm, mul, neg, scale, sub};
use super::matmul::swap_last;
use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::ops::shape::PadMode;
use rlx_ir::ops::signal::{FftNorm, LogMelBackward};
use rlx_ir::{DType, Dim, Op, OpKind, Shape, ValueId};
use rlx_opt::decompose::build::scalar;

pub const KINDS: &[OpKind] = &[
    OpKind::Fft,
    OpKind::FftButterflyStage,
    OpKind::LogMel,
    OpKind::LogMelBackward,
    OpKind::PartitionedConv,
    OpKind::ComplexNormSq,
    OpKind::ComplexNormSqBackward,
    OpKind::Conjugate,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Fft(f) => fft(f.inverse, f.norm, v),
        Op::FftButterflyStage(b) => butterfly(b.stage, v),
        Op::LogMel(m) => {
            let (s, w) = (v.inputs[0], v.inputs[1]);
            v.ct(0).and_then(|dy| Ok(vec![Some(v.g.log_mel_backward(s, w, dy, m.per_frame_floor)?), None]))
        }
        Op::LogMelBackward(m) => log_mel_backward(m, v),
        Op::PartitionedConv(p) => partitioned_conv(p.block, v),
        Op::ComplexNormSq(_) => {
            let z = v.inputs[0];
            v.ct(0).and_then(|dy| Ok(vec![Some(v.g.complex_norm_sq_backward(z, dy)?)]))
        }
        Op::ComplexNormSqBackward(_) => complex_norm_sq_backward(v),
        Op::Conjugate(_) => v.ct(0).and_then(|dy| Ok(vec![Some(v.g.conjugate(dy)?)])),
        _ => return None,
    })
}

/// `y = c·F·x` has the VJP `c·Fᴴ·ȳ`: the transform the other way with the same scale `c`,
/// i.e. `inverse` flipped and `Backward ↔ Forward` swapped (`Ortho`, `Unscaled` stay).
fn fft(inverse: bool, norm: FftNorm, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let dy = v.ct(0)?;
    let norm = match norm {
        FftNorm::Backward => FftNorm::Forward,
        FftNorm::Forward => FftNorm::Backward,
        n => n,
    };
    Ok(vec![Some(v.g.fft(dy, !inverse, norm)?)])
}

/// Linear in `state` (OPS.md §17): per butterfly, with the swap undone (`t̄`, `b̄` the top and
/// bottom cotangents), `s̄[i0] = t̄ + b̄`, `s̄[i1] = conj(w)·(t̄ − b̄)`; gated-off pairs pass
/// their cotangents through. Gates, swaps and twiddles get none (OPS.md §17).
fn butterfly(stage: u32, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (state, gate, rev, tw_re, tw_im) = (v.inputs[0], v.inputs[1], v.inputs[2], v.inputs[3], v.inputs[4]);
    let dy = v.ct(0)?;
    let g = &mut *v.g;
    let ty = g.ty(state).clone();
    let n = ty.static_dim(1).map_err(|msg| AdError::Rule { op: "FftButterflyStage", msg })?;
    let m = 1usize << stage;
    let groups = n / (2 * m);
    let batch = ty.shape.dim(0).clone();
    let split = Shape(vec![batch, Dim::Static(groups), Dim::Static(2), Dim::Static(m), Dim::Static(2)]);
    let per = Shape::of(&[groups, 1, m, 1]);
    let y = g.reshape_to(dy, &split)?;
    let y0 = g.narrow(y, 2, 0, 1)?;
    let y1 = g.narrow(y, 2, 1, 1)?;
    let [gate, rev, wr, wi] = [gate, rev, tw_re, tw_im].map(|x| g.reshape_to(x, &per));
    let (gate, rev, wr, wi) = (gate?, rev?, wr?, wi?);
    let zero = scalar(g, ty.dtype, 0.0)?;
    let half = scalar(g, ty.dtype, 0.5)?;
    let on = g.compare(CmpOp::Ne, gate, zero)?;
    let swapped = g.compare(CmpOp::Ge, rev, half)?;
    let top = g.select(swapped, y1, y0)?;
    let bot = g.select(swapped, y0, y1)?;
    let sum = add(g, top, bot)?;
    let s0 = g.select(on, sum, y0)?;
    let d = sub(g, top, bot)?;
    let dr = g.narrow(d, 4, 0, 1)?;
    let di = g.narrow(d, 4, 1, 1)?;
    let (a, b) = (mul(g, wr, dr)?, mul(g, wi, di)?);
    let re = add(g, a, b)?;
    let (a, b) = (mul(g, wr, di)?, mul(g, wi, dr)?);
    let im = sub(g, a, b)?;
    let rotated = g.concat(&[re, im], 4)?;
    let s1 = g.select(on, rotated, y1)?;
    let ds = g.concat(&[s0, s1], 2)?;
    Ok(vec![Some(g.reshape_to(ds, &ty.shape)?), None, None, None, None])
}

/// `y = x * ir` (full): `x̄[n] = Σ_m ir[m]·ȳ[n+m]` and `īr[m] = Σ_{lead,n} x[n]·ȳ[n+m]`, both
/// correlations computed as `PartitionedConv` with a reversed operand and a `Narrow`. For
/// `īr` the rows of `x`, zero-padded to the output length `S`, and of `ȳ` are laid end to
/// end, so one 1-D correlation sums over the leading axes (lags below `M` never cross rows).
fn partitioned_conv(block: usize, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, ir, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let g = &mut *v.g;
    let rank = g.ty(x).rank();
    let taps = g.ty(ir).static_dim(0).map_err(|msg| AdError::Rule { op: "PartitionedConv", msg })?;
    let len = g.ty(x).static_dim(rank - 1).map_err(|msg| AdError::Rule { op: "PartitionedConv", msg })?;
    let dx = if v.wanted[0] {
        let flipped = g.reverse(ir, &[0])?;
        let full = g.partitioned_conv(dy, flipped, block)?;
        Some(g.narrow(full, rank - 1, taps - 1, len)?)
    } else {
        None
    };
    let dir = if v.wanted[1] {
        let mut pads = vec![[0, 0]; rank];
        pads[rank - 1] = [0, taps - 1];
        let padded = g.pad(x, &pads, PadMode::Constant(0.0))?;
        let xs = g.reshape(padded, &[-1])?;
        let ys = g.reshape(dy, &[-1])?;
        let total = g.ty(xs).static_dim(0).map_err(|msg| AdError::Rule { op: "PartitionedConv", msg })?;
        let flipped = g.reverse(xs, &[0])?;
        let full = g.partitioned_conv(ys, flipped, block)?;
        Some(g.narrow(full, 0, total - 1, taps)?)
    } else {
        None
    };
    Ok(vec![dx, dir])
}

/// `2·g·z`: w.r.t. `z` the same map on the cotangent (`2·g·c`); w.r.t. `g`,
/// `2·(z_re·c_re + z_im·c_im) = 2·Re(conj(z)·c)`.
fn complex_norm_sq_backward(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (z, gr, c) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let g = &mut *v.g;
    let dz = g.complex_norm_sq_backward(c, gr)?;
    let dg = if v.wanted[1] {
        let zc = g.conjugate(z)?;
        let p = mul(g, zc, c)?;
        let re = g.cast(p, DType::F32)?;
        Some(scale(g, re, 2.0)?)
    } else {
        None
    };
    Ok(vec![Some(dz), dg])
}

/// Second order of `LogMelBackward` in closed form, the floor and its mask held constant as
/// the op holds them. Per frame, with `p = re² + im²` (bins below `n_bins`), `E = W·p`,
/// `k` the op's mask and `a = k·ȳ/(4·ln10·E)` (so the op is `2·re·(Wᵀa)`, `2·im·(Wᵀa)`), and
/// `q = 2·(re·c_re + im·c_im)` for the cotangent `c`: `ȳ̄ = k·(W·q)/(4·ln10·E)`;
/// `re̅ = 2·c_re·(Wᵀa) + 2·re·(Wᵀ·Ē)` with `Ē = −(W·q)·a/E` (`im̅` alike). Filters: none.
fn log_mel_backward(m: &LogMelBackward, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    use ActivationKind::{Log, Recip};
    let (s, w, dy, c) = (v.inputs[0], v.inputs[1], v.inputs[2], v.ct(0)?);
    let g = &mut *v.g;
    let ty = g.ty(s).clone();
    let (dtype, last) = (ty.dtype, ty.rank() - 1);
    let f = ty.static_dim(last).map_err(|msg| AdError::Rule { op: "LogMelBackward", msg })? / 2;
    let bins = g.ty(w).static_dim(1).map_err(|msg| AdError::Rule { op: "LogMelBackward", msg })?;
    let re = g.narrow(s, last, 0, bins)?;
    let im = g.narrow(s, last, f, bins)?;
    let c_re = g.narrow(c, last, 0, bins)?;
    let c_im = g.narrow(c, last, f, bins)?;
    let wt = swap_last(g, w)?;
    let (rr, ii) = (mul(g, re, re)?, mul(g, im, im)?);
    let p = add(g, rr, ii)?;
    let e = mm(g, p, wt)?;
    let tiny = scalar(g, dtype, 1e-10)?;
    let e_safe = g.binary(BinaryOp::Max, e, tiny)?;
    let ln = g.activation(Log, e_safe)?;
    let log10 = scale(g, ln, 1.0 / std::f64::consts::LN_10)?;
    let axes: &[usize] = if m.per_frame_floor { &[last] } else { &[last - 1, last] };
    let top = g.reduce(ReduceOp::Max, log10, axes, true)?;
    let eight = scalar(g, dtype, 8.0)?;
    let floor = sub(g, top, eight)?;
    let above = sub(g, log10, floor)?;
    let margin = scalar(g, dtype, 1e-6)?;
    let unclamped = g.compare(CmpOp::Gt, above, margin)?;
    let live = g.compare(CmpOp::Gt, e, tiny)?;
    let (zero, one) = (scalar(g, dtype, 0.0)?, scalar(g, dtype, 1.0)?);
    let k = g.select(live, one, zero)?;
    let k = g.select(unclamped, k, zero)?;
    let inv_e = g.activation(Recip, e_safe)?;
    let gain = mul(g, k, inv_e)?;
    let gain = scale(g, gain, 0.25 / std::f64::consts::LN_10)?;
    let dyc = g.cast(dy, dtype)?;
    let a = mul(g, gain, dyc)?;
    let dp = mm(g, a, w)?;
    let (x1, x2) = (mul(g, re, c_re)?, mul(g, im, c_im)?);
    let q = add(g, x1, x2)?;
    let q = scale(g, q, 2.0)?;
    let wq = mm(g, q, wt)?;
    let d_dy = mul(g, gain, wq)?;
    let d_dy = g.cast(d_dy, g.ty(dy).dtype)?;
    let ebar = mul(g, wq, a)?;
    let ebar = mul(g, ebar, inv_e)?;
    let ebar = neg(g, ebar)?;
    let pbar = mm(g, ebar, w)?;
    let mut halves = Vec::with_capacity(2);
    for (x, cx) in [(re, c_re), (im, c_im)] {
        let t1 = mul(g, cx, dp)?;
        let t2 = mul(g, x, pbar)?;
        let t = add(g, t1, t2)?;
        let t = scale(g, t, 2.0)?;
        let mut pads = vec![[0, 0]; ty.rank()];
        pads[last] = [0, f - bins];
        halves.push(g.pad(t, &pads, PadMode::Constant(0.0))?);
    }
    let ds = g.concat(&halves, last)?;
    Ok(vec![Some(ds), None, Some(d_dy)])
}

