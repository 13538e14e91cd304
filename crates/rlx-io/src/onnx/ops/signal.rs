//! Signal processing: the window generators `HannWindow`, `HammingWindow` and
//! `BlackmanWindow` (cosine sums over the positions `0..size`, built from a running sum of ones
//! and rlx's `Cos`); `DFT` and `STFT` on rlx's `Fft` over re/im planes (one-sided spectra cut,
//! one-sided inverses completed by conjugate symmetry); `MelWeightMatrix` as an import-time
//! constant.

use super::elementwise::{act, bin, bin_scalar, cast_to};
use super::shape::{reshape_static, transpose_to};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::tensor::dtype;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::index::Gather;
use rlx_ir::ops::reduce::Cumsum;
use rlx_ir::ops::shape::{Concat, Narrow, Pad, PadMode, Slice};
use rlx_ir::ops::signal::{Fft, FftNorm};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("HannWindow", |cx, n| window(cx, n, &[0.5, -0.5])),
    ("HammingWindow", |cx, n| window(cx, n, &[25.0 / 46.0, -21.0 / 46.0])),
    ("BlackmanWindow", |cx, n| window(cx, n, &[0.42, -0.5, 0.08])),
    ("DFT", dft),
    ("STFT", stft),
    ("MelWeightMatrix", mel_weight_matrix),
];

/// `Σ_k a_k·cos(2πk·i/N)` for `i < size`, `N = size` when `periodic` (default) else `size − 1`.
fn window(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, coeffs: &[f64]) -> OpResult<Vec<ValueId>> {
    let size = cx.const_ints(n.input(0)?, "size")?.first().copied().unwrap_or(-1);
    let size = usize::try_from(size).map_err(|_| OpError::Invalid(format!("size {size}")))?;
    if size > 1 << 24 {
        return invalid(format!("size {size}"));
    }
    let out = dtype(n.int("output_datatype", 1) as i32).ok_or_else(|| OpError::Unsupported("output_datatype".into()))?;
    let periodic = n.int("periodic", 1) != 0;
    let denom = if periodic { size as f64 } else { size.saturating_sub(1).max(1) as f64 };
    let ones = cx.values(DType::F64, &[size], &vec![1.0; size])?;
    let i = cx.add1(Cumsum { axis: 0, exclusive: true }, &[ones])?;
    let mut acc = cx.values(DType::F64, &[size], &vec![coeffs[0]; size])?;
    for (k, &a) in coeffs.iter().enumerate().skip(1) {
        let phase = bin_scalar(cx, BinaryOp::Mul, i, 2.0 * std::f64::consts::PI * k as f64 / denom)?;
        let c = act(cx, ActivationKind::Cos, phase)?;
        let term = bin_scalar(cx, BinaryOp::Mul, c, a)?;
        acc = bin(cx, BinaryOp::Add, acc, term)?;
    }
    Ok(vec![cx.add1(rlx_ir::ops::elementwise::Cast { to: out }, &[acc])?])
}

/// A scalar operand that must be known at import.
fn const_scalar(cx: &Cx<'_>, v: ValueId, what: &str) -> OpResult<i64> {
    match cx.const_ints(v, what)?[..] {
        [x] => Ok(x),
        ref other => invalid(format!("{what} must be a scalar, got {} values", other.len())),
    }
}

/// A positive length that must be known at import.
fn const_len(cx: &Cx<'_>, v: ValueId, what: &str) -> OpResult<usize> {
    let x = const_scalar(cx, v, what)?;
    usize::try_from(x).ok().filter(|&x| x > 0 && x <= 1 << 24).ok_or_else(|| OpError::Invalid(format!("{what} {x} must be positive")))
}

/// A signal `[.., c]` (`c` = 1 real, 2 complex) with the transform along `axis`, as planes
/// `[rest.., 2, N]` in F32 or F64; also the original axis order of those planes' axes.
fn to_planes(cx: &mut Cx<'_>, x: ValueId, axis: usize) -> OpResult<(ValueId, Vec<usize>)> {
    let dims = cx.dims(x)?;
    let r = dims.len();
    let c = dims[r - 1];
    if c != 1 && c != 2 {
        return invalid(format!("the last axis holds {c} values, not 1 (real) or 2 (complex)"));
    }
    let order: Vec<usize> = (0..r - 1).filter(|&a| a != axis).chain([r - 1, axis]).collect();
    let x = match cx.dtype(x) {
        DType::F64 => x,
        _ => cast_to(cx, x, DType::F32)?,
    };
    let mut p = transpose_to(cx, x, &order)?;
    if c == 1 {
        let mut pads = vec![[0, 0]; r];
        pads[r - 2] = [0, 1];
        p = cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[p])?;
    }
    Ok((p, order))
}

/// Planes back to the signal layout, `order` as `to_planes` gave it, in `dt`.
fn from_planes(cx: &mut Cx<'_>, p: ValueId, order: &[usize], dt: DType) -> OpResult<ValueId> {
    let mut back = vec![0; order.len()];
    for (i, &a) in order.iter().enumerate() {
        back[a] = i;
    }
    let y = transpose_to(cx, p, &back)?;
    cast_to(cx, y, dt)
}

/// The last axis of `x` cut or zero-padded to `len`.
fn fit(cx: &mut Cx<'_>, x: ValueId, len: usize) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let axis = dims.len() - 1;
    match dims[axis] {
        n if n == len => Ok(x),
        n if n > len => cx.add1(Narrow { axis, start: 0, len }, &[x]),
        n => {
            let mut pads = vec![[0, 0]; dims.len()];
            pads[axis] = [0, len - n];
            cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[x])
        }
    }
}

/// `Fft` over planes `[rest.., 2, N]`.
fn fft_planes(cx: &mut Cx<'_>, p: ValueId, inverse: bool) -> OpResult<ValueId> {
    let dims = cx.dims(p)?;
    let (rest, n) = (&dims[..dims.len() - 2], dims[dims.len() - 1]);
    let block = reshape_static(cx, p, &[rest, &[2 * n]].concat())?;
    let y = cx.add1(Fft { inverse, norm: FftNorm::Backward }, &[block])?;
    reshape_static(cx, y, &dims)
}

/// Planes `[rest.., 2, H]` of a one-sided spectrum completed to `len` bins by
/// `X[len − k] = conj(X[k])`.
fn hermitian(cx: &mut Cx<'_>, p: ValueId, len: usize) -> OpResult<ValueId> {
    let half = len / 2 + 1;
    let p = fit(cx, p, half)?;
    let mirrored = len - half;
    if mirrored == 0 {
        return Ok(p);
    }
    let axis = cx.rank(p) - 1;
    let m = cx.add1(Slice { axis, start: mirrored, len: mirrored, step: -1 }, &[p])?;
    let sign = cx.values(cx.dtype(p), &[2, 1], &[1.0, -1.0])?;
    let conj = bin(cx, BinaryOp::Mul, m, sign)?;
    cx.add1(Concat { axis }, &[p, conj])
}

/// The transform of `x` along `axis` to `len` points: forward (one-sided or full) or inverse
/// (complex, or real from a one-sided spectrum).
fn transform(cx: &mut Cx<'_>, x: ValueId, axis: usize, len: usize, inverse: bool, onesided: bool) -> OpResult<ValueId> {
    let dt = cx.dtype(x);
    let (p, order) = to_planes(cx, x, axis)?;
    let y = match (inverse, onesided) {
        (false, _) => {
            let p = fit(cx, p, len)?;
            let y = fft_planes(cx, p, false)?;
            if onesided {
                fit(cx, y, len / 2 + 1)?
            } else {
                y
            }
        }
        (true, false) => {
            let p = fit(cx, p, len)?;
            fft_planes(cx, p, true)?
        }
        (true, true) => {
            let full = hermitian(cx, p, len)?;
            let y = fft_planes(cx, full, true)?;
            let axis = cx.rank(y) - 2;
            cx.add1(Narrow { axis, start: 0, len: 1 }, &[y])?
        }
    };
    from_planes(cx, y, &order, dt)
}

/// `DFT`: the axis an attribute (opset 17, default 1) or an input (opset 20, default −2),
/// `dft_length` an optional input; both must be known at import.
fn dft(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let r = dims.len();
    if r < 2 {
        return invalid(format!("input {dims:?} needs a signal axis and the re/im axis"));
    }
    let raw = if n.opset >= 20 {
        n.opt_input(2).map(|a| const_scalar(cx, a, "axis")).transpose()?.unwrap_or(-2)
    } else {
        n.int("axis", 1)
    };
    let axis = n.axis(raw, r)?;
    if axis == r - 1 {
        return invalid(format!("axis {raw} is the re/im axis"));
    }
    let (inverse, onesided) = (n.int("inverse", 0) != 0, n.int("onesided", 0) != 0);
    let len = match n.opt_input(1) {
        Some(l) => const_len(cx, l, "dft_length")?,
        None if inverse && onesided => 2 * dims[axis].saturating_sub(1),
        None => dims[axis],
    };
    if len == 0 {
        return invalid(format!("a one-sided inverse of {} bins has no length", dims[axis]));
    }
    Ok(vec![transform(cx, x, axis, len, inverse, onesided)?])
}

/// `STFT`: frames `[B, frames, frame_length, c]` gathered at `frame_step` strides, weighted by
/// the window, then a forward `DFT` along the frame.
fn stft(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let [_, samples, _] = dims[..] else { return invalid(format!("signal {dims:?} must be [batch, length, 1 or 2]")) };
    let step = const_len(cx, n.input(1)?, "frame_step")?;
    let window = n.opt_input(2);
    let len = match (n.opt_input(3), window) {
        (Some(l), _) => const_len(cx, l, "frame_length")?,
        (None, Some(w)) => cx.dims(w)?.first().copied().unwrap_or(0),
        (None, None) => samples,
    };
    if len == 0 || len > samples {
        return invalid(format!("frame_length {len} must lie in 1..={samples}"));
    }
    let frames = (samples - len) / step + 1;
    let starts: Vec<f64> = (0..frames).flat_map(|f| (0..len).map(move |i| (f * step + i) as f64)).collect();
    let idx = cx.values(DType::I64, &[frames, len], &starts)?;
    let mut framed = cx.add1(Gather { axis: 1 }, &[x, idx])?;
    if let Some(w) = window {
        if cx.dims(w)? != [len] {
            return invalid(format!("window {:?} must hold frame_length {len} values", cx.dims(w)?));
        }
        let w = cast_to(cx, w, cx.dtype(x))?;
        let w = reshape_static(cx, w, &[1, 1, len, 1])?;
        framed = bin(cx, BinaryOp::Mul, framed, w)?;
    }
    let onesided = n.int("onesided", 1) != 0;
    Ok(vec![transform(cx, framed, 2, len, false, onesided)?])
}

/// `MelWeightMatrix`: `[dft_length/2 + 1, num_mel_bins]` triangular filters with peak 1 on the
/// HTK mel scale `2595·log10(1 + f/700)`, edges spaced evenly in mel between the two edge
/// frequencies and snapped down to DFT bins. Every input must be known at import.
fn mel_weight_matrix(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let mels = const_len(cx, n.input(0)?, "num_mel_bins")?;
    let dft_len = const_len(cx, n.input(1)?, "dft_length")?;
    let rate = const_len(cx, n.input(2)?, "sample_rate")?;
    let edge = |cx: &Cx<'_>, i: usize, what: &str| -> OpResult<f64> {
        let v = n.input(i)?;
        match cx.const_f64s(v).as_deref() {
            Some(&[x]) => Ok(x),
            Some(_) => invalid(format!("{what} must be a scalar")),
            None => Err(OpError::Unsupported(format!("{what} must be known at import (a constant)"))),
        }
    };
    let (lo, hi) = (edge(cx, 3, "lower_edge_hertz")?, edge(cx, 4, "upper_edge_hertz")?);
    let out = dtype(n.int("output_datatype", 1) as i32).ok_or_else(|| OpError::Unsupported("output_datatype".into()))?;
    let bins = dft_len / 2 + 1;
    let mel = |f: f64| 2595.0 * (f / 700.0).ln_1p() / std::f64::consts::LN_10;
    let (lo_mel, hi_mel) = (mel(lo), mel(hi));
    let step = (hi_mel - lo_mel) / (mels + 2) as f64;
    let mut edges = Vec::with_capacity(mels + 2);
    for i in 0..mels + 2 {
        let hz = 700.0 * ((i as f64 * step + lo_mel) / 2595.0 * std::f64::consts::LN_10).exp_m1();
        let bin = ((dft_len + 1) as f64 * hz / rate as f64).floor();
        if !(0.0..bins as f64).contains(&bin) {
            return invalid(format!("mel edge {hz} Hz falls outside the {bins} spectrogram bins"));
        }
        edges.push(bin as usize);
    }
    let mut w = vec![0.0; bins * mels];
    for m in 0..mels {
        let (left, center, right) = (edges[m], edges[m + 1], edges[m + 2]);
        if center == left {
            w[center * mels + m] = 1.0;
        } else {
            for j in left..=center {
                w[j * mels + m] = (j - left) as f64 / (center - left) as f64;
            }
        }
        for j in center..right {
            w[j * mels + m] = (right - j) as f64 / (right - center) as f64;
        }
    }
    Ok(vec![cx.values(out, &[bins, mels], &w)?])
}
