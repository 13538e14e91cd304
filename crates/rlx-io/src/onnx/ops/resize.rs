//! `Resize` (and the older `Upsample`) as one interpolation per resized axis: the weights each
//! output position gives the input positions depend only on the shapes and attributes, so they
//! are computed at import — nearest neighbour becomes a `Gather` of constant indices, linear and
//! cubic (with or without antialiasing) a `MatMul` with a constant `[in, out]` weight matrix.

use super::elementwise::select;
use super::matmul::matmul_nd;
use super::shape::transpose_to;
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::index::Gather;
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[("Resize", resize), ("Upsample", upsample)];

/// How one output position reads the input along an axis.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// Attributes shared by every resized axis.
struct Setup {
    mode: Mode,
    transform: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
    /// The fill of positions outside the crop of `tf_crop_and_resize`.
    extrapolation: f64,
}

/// The `(input index, weight)` taps of each output position along one axis.
type Taps = Vec<Vec<(usize, f64)>>;

/// The `(input index, weight)` taps of each output position, and whether it lies outside the
/// crop (`tf_crop_and_resize`, filled with the extrapolation value).
fn axis_taps(s: &Setup, input: usize, output: usize, scale: f64, roi: (f64, f64)) -> OpResult<(Taps, Vec<bool>)> {
    let out_f = scale * input as f64;
    let mut taps = Vec::with_capacity(output);
    let mut outside = Vec::with_capacity(output);
    for y in 0..output {
        let yf = y as f64;
        let x = match s.transform.as_str() {
            "align_corners" => if out_f == 1.0 { 0.0 } else { yf * (input as f64 - 1.0) / (out_f - 1.0) },
            "asymmetric" => yf / scale,
            "tf_crop_and_resize" => {
                let span = roi.1 - roi.0;
                let base = if out_f == 1.0 { span * (input as f64 - 1.0) / 2.0 } else { yf * span * (input as f64 - 1.0) / (out_f - 1.0) };
                base + roi.0 * (input as f64 - 1.0)
            }
            "pytorch_half_pixel" => if out_f == 1.0 { -0.5 } else { (yf + 0.5) / scale - 0.5 },
            "half_pixel" => (yf + 0.5) / scale - 0.5,
            "half_pixel_symmetric" => {
                let center = input as f64 / 2.0;
                center * (1.0 - output as f64 / out_f) + (yf + 0.5) / scale - 0.5
            }
            t => return invalid(format!("coordinate_transformation_mode `{t}`")),
        };
        outside.push(s.transform == "tf_crop_and_resize" && (x < 0.0 || x > input as f64 - 1.0));
        let ratio = if x.fract() == 0.0 { 1.0 } else { x - x.floor() };
        let mut coeffs = coefficients(s, ratio, scale)?;
        let idx = neighbours(x, coeffs.len(), input);
        if s.exclude_outside {
            for (c, &i) in coeffs.iter_mut().zip(&idx) {
                if i < 0 || i >= input as i64 {
                    *c = 0.0;
                }
            }
            let sum: f64 = coeffs.iter().sum();
            coeffs.iter_mut().for_each(|c| *c /= sum);
        }
        let clamp = |i: i64| i.clamp(0, input as i64 - 1) as usize;
        taps.push(idx.iter().zip(&coeffs).map(|(&i, &c)| (clamp(i), c)).collect());
    }
    Ok((taps, outside))
}

/// The interpolation coefficients for the fractional position `ratio` (ONNX reference order).
fn coefficients(s: &Setup, ratio: f64, scale: f64) -> OpResult<Vec<f64>> {
    let a = s.cubic_a;
    Ok(match s.mode {
        Mode::Nearest => {
            if ratio == 1.0 {
                return Ok(vec![0.0, 1.0]);
            }
            let up = match s.nearest.as_str() {
                "round_prefer_floor" => ratio > 0.5,
                "round_prefer_ceil" => ratio >= 0.5,
                "floor" => false,
                "ceil" => true,
                m => return invalid(format!("nearest_mode `{m}`")),
            };
            vec![f64::from(u8::from(!up)), f64::from(u8::from(up))]
        }
        Mode::Linear if s.antialias => {
            let sc = scale.min(1.0);
            let start = (-1.0 / sc).floor() as i64 + 1;
            let c: Vec<f64> = (start..start + 2 - 2 * start).map(|i| (1.0 - ((i as f64 - ratio) * sc).abs()).clamp(0.0, 1.0)).collect();
            normalized(c)
        }
        Mode::Linear => vec![1.0 - ratio, ratio],
        Mode::Cubic if s.antialias => {
            let sc = scale.min(1.0);
            let kernel = |x: f64| {
                let x = x.abs();
                if x <= 1.0 {
                    (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                } else if x < 2.0 {
                    a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                } else {
                    0.0
                }
            };
            let start = (-2.0 / sc).floor() as i64 + 1;
            normalized((start..2 - start).map(|i| kernel(sc * (i as f64 - ratio))).collect())
        }
        Mode::Cubic => {
            let (r, q) = (ratio, 1.0 - ratio);
            vec![
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
            ]
        }
    })
}

fn normalized(c: Vec<f64>) -> Vec<f64> {
    let sum: f64 = c.iter().sum();
    c.into_iter().map(|v| v / sum).collect()
}

/// The `n` positions nearest to `x` (ties to the smaller), ascending, among those of the input
/// padded by `⌈n/2⌉` on both sides; indices may fall outside `[0, input)`.
fn neighbours(x: f64, n: usize, input: usize) -> Vec<i64> {
    let pad = n.div_ceil(2) as i64;
    let limit = input as i64 + 2 * pad;
    let xp = x + pad as f64;
    let centre = xp.floor() as i64;
    let mut cands: Vec<i64> = ((centre - n as i64 - 1).max(0)..(centre + n as i64 + 2).min(limit)).collect();
    cands.sort_by(|&a, &b| (xp - a as f64).abs().total_cmp(&(xp - b as f64).abs()).then(a.cmp(&b)));
    cands.truncate(n);
    cands.sort_unstable();
    cands.into_iter().map(|i| i - pad).collect()
}

/// Resizes axis `axis` of `x` to `output` positions.
fn resize_axis(cx: &mut Cx<'_>, x: ValueId, axis: usize, s: &Setup, scale: f64, output: usize, roi: (f64, f64)) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let input = dims[axis];
    let (taps, outside) = axis_taps(s, input, output, scale, roi)?;
    let dt = cx.dtype(x);
    let y = if s.mode == Mode::Nearest {
        let idx: Vec<f64> = taps.iter().map(|t| t.iter().find(|(_, w)| *w != 0.0).map_or(0, |(i, _)| *i) as f64).collect();
        let idx = cx.values(DType::I64, &[output], &idx)?;
        cx.add1(Gather { axis }, &[x, idx])?
    } else {
        if !dt.is_float() {
            return Err(OpError::Unsupported(format!("{dt} input with interpolating modes")));
        }
        let mut w = vec![0.0; input * output];
        for (o, t) in taps.iter().enumerate() {
            for &(i, c) in t {
                w[i * output + o] += c;
            }
        }
        let rank = dims.len();
        let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
        perm.push(axis);
        let mut inv = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let moved = transpose_to(cx, x, &perm)?;
        let w = cx.values(dt, &[input, output], &w)?;
        let y = matmul_nd(cx, moved, w)?;
        transpose_to(cx, y, &inv)?
    };
    if !outside.iter().any(|&o| o) {
        return Ok(y);
    }
    let mut mask_dims = vec![1; dims.len()];
    mask_dims[axis] = output;
    let mask: Vec<f64> = outside.iter().map(|&o| f64::from(u8::from(o))).collect();
    let mask = cx.values(DType::Bool, &mask_dims, &mask)?;
    let fill = cx.scalar(dt, s.extrapolation)?;
    select(cx, mask, fill, y)
}

fn setup(n: &OnnxNode<'_, '_>, default_transform: &str, default_nearest: &str) -> OpResult<Setup> {
    let mode = match n.string("mode", "nearest").as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" | "trilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => return invalid(format!("mode `{m}`")),
    };
    Ok(Setup {
        mode,
        transform: n.string("coordinate_transformation_mode", default_transform),
        nearest: n.string("nearest_mode", default_nearest),
        cubic_a: n.float("cubic_coeff_a", -0.75) as f64,
        exclude_outside: n.int("exclude_outside", 0) != 0,
        antialias: n.int("antialias", 0) != 0,
        extrapolation: n.float("extrapolation_value", 0.0) as f64,
    })
}

/// Resizes every axis with a scale other than 1 (or an output size other than the input's).
fn apply(cx: &mut Cx<'_>, x: ValueId, s: &Setup, scales: &[f64], sizes: &[usize], roi: &[f64]) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let rank = dims.len();
    let mut y = x;
    for axis in 0..rank {
        let r = (roi.get(axis).copied().unwrap_or(0.0), roi.get(rank + axis).copied().unwrap_or(1.0));
        if scales[axis] == 1.0 && sizes[axis] == dims[axis] && s.transform != "tf_crop_and_resize" {
            continue;
        }
        y = resize_axis(cx, y, axis, s, scales[axis], sizes[axis], r)?;
    }
    Ok(y)
}

fn resize(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let rank = dims.len();
    let default_transform = if n.opset < 11 { "asymmetric" } else { "half_pixel" };
    let s = setup(n, default_transform, "round_prefer_floor")?;
    let (roi_in, scales_in, sizes_in) = if n.opset < 11 { (None, n.opt_input(1), None) } else { (n.opt_input(1), n.opt_input(2), n.opt_input(3)) };
    let known = |cx: &Cx<'_>, v: ValueId, what: &str| cx.const_f64s(v).ok_or_else(|| OpError::Unsupported(format!("{what} must be known at import")));
    let axes: Vec<usize> = match n.ints("axes") {
        Some(a) => a.iter().map(|&v| n.axis(v, rank)).collect::<OpResult<_>>()?,
        None => (0..rank).collect(),
    };
    let mut roi = [vec![0.0; rank], vec![1.0; rank]].concat();
    if let Some(r) = roi_in.map(|v| known(cx, v, "roi")).transpose()?.filter(|r| !r.is_empty()) {
        if r.len() != 2 * axes.len() {
            return invalid(format!("roi {r:?} needs two entries per axis"));
        }
        for (i, &a) in axes.iter().enumerate() {
            roi[a] = r[i];
            roi[rank + a] = r[axes.len() + i];
        }
    }
    let mut scales = vec![1.0; rank];
    let mut sizes = dims.clone();
    let given_sizes = sizes_in.map(|v| known(cx, v, "sizes")).transpose()?.filter(|v| !v.is_empty());
    if let Some(sz) = given_sizes {
        if sz.len() != axes.len() {
            return invalid(format!("sizes {sz:?} need one entry per axis"));
        }
        for (i, &a) in axes.iter().enumerate() {
            scales[a] = sz[i] / dims[a] as f64;
            sizes[a] = sz[i] as usize;
        }
        let policy = n.string("keep_aspect_ratio_policy", "stretch");
        if policy != "stretch" {
            let picked = axes.iter().map(|&a| scales[a]);
            let scale = if policy == "not_larger" { picked.fold(f64::INFINITY, f64::min) } else { picked.fold(0.0, f64::max) };
            for &a in &axes {
                scales[a] = scale;
                sizes[a] = (scale * dims[a] as f64 + 0.5) as usize;
            }
        }
    } else {
        let sc = scales_in.map(|v| known(cx, v, "scales")).transpose()?.ok_or_else(|| OpError::Invalid("needs scales or sizes".into()))?;
        if sc.len() != axes.len() {
            return invalid(format!("scales {sc:?} need one entry per axis"));
        }
        for (i, &a) in axes.iter().enumerate() {
            scales[a] = sc[i];
            sizes[a] = (sc[i] * dims[a] as f64) as usize;
        }
    }
    Ok(vec![apply(cx, x, &s, &scales, &sizes, &roi)?])
}

/// `Upsample` (opsets 7–9): scales as an attribute (7) or input (9), asymmetric coordinates,
/// nearest rounding down.
fn upsample(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let s = setup(n, "asymmetric", "floor")?;
    let scales: Vec<f64> = match n.floats("scales") {
        Some(f) => f.iter().map(|&v| v as f64).collect(),
        None => cx.const_f64s(n.input(1)?).ok_or_else(|| OpError::Unsupported("scales must be known at import".into()))?,
    };
    if scales.len() != dims.len() {
        return invalid(format!("scales {scales:?} need one entry per axis"));
    }
    let sizes: Vec<usize> = dims.iter().zip(&scales).map(|(&d, &sc)| (sc * d as f64) as usize).collect();
    let roi = [vec![0.0; dims.len()], vec![1.0; dims.len()]].concat();
    Ok(vec![apply(cx, x, &s, &scales, &sizes, &roi)?])
}
