//! Image-geometry ops: `AffineGrid` (a `MatMul` of an import-time base grid by `theta`),
//! `GridSample`, `DeformConv` and `RoiAlign` (gathers at computed cells, weighted), `Col2Im` and `MaxUnpool` (scatters at
//! import-time positions).

use super::conv::add_channel_bias;
use super::elementwise::{act, bin, bin_scalar, cast_to, select};
use super::shape::{expand_to, reshape_static};
use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::tensor::MAX_ELEMENTS;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ops::index::{GatherElements, ScatterElements, ScatterNd, ScatterReduction};
use rlx_ir::ops::matmul::MatMul;
use rlx_ir::ops::reduce::{Reduce, ReduceOp};
use rlx_ir::ops::shape::{Concat, Narrow, Pad, PadMode, Transpose};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[("AffineGrid", affine_grid), ("GridSample", grid_sample), ("DeformConv", deform_conv), ("RoiAlign", roi_align), ("Col2Im", col2im), ("MaxUnpool", max_unpool)];

/// Non-negative integers of an import-time input, checked against a size limit.
fn sizes(cx: &Cx<'_>, v: ValueId, what: &str) -> OpResult<Vec<usize>> {
    let values = cx.const_ints(v, what)?;
    values.iter().map(|&x| usize::try_from(x).ok().filter(|&x| x as u64 <= MAX_ELEMENTS).ok_or_else(|| OpError::Invalid(format!("{what} {values:?}")))).collect()
}

/// `AffineGrid(theta [N, k, k+1], size)`: the normalized coordinates of every output cell
/// (x fastest, then y, z), with a trailing 1, times `thetaᵀ`; out `[N, spatial…, k]`.
fn affine_grid(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let theta = n.input(0)?;
    let size = sizes(cx, n.input(1)?, "size")?;
    let td = cx.dims(theta)?;
    let k = size.len().checked_sub(2).filter(|k| (2..=3).contains(k)).ok_or_else(|| OpError::Invalid(format!("size {size:?} needs 4 or 5 entries")))?;
    if td != [size[0], k, k + 1] {
        return invalid(format!("theta {td:?} must be [{}, {k}, {}]", size[0], k + 1));
    }
    let align = n.int("align_corners", 0) != 0;
    let spatial = &size[2..];
    let coord = |i: usize, extent: usize| -> f64 {
        if align {
            if extent > 1 { -1.0 + 2.0 * i as f64 / (extent - 1) as f64 } else { 0.0 }
        } else {
            (2.0 * i as f64 + 1.0) / extent as f64 - 1.0
        }
    };
    let cells: usize = spatial.iter().product();
    let mut base = Vec::with_capacity(cells * (k + 1));
    for flat in 0..cells {
        let mut rest = flat;
        let mut idx = vec![0; k];
        for a in (0..k).rev() {
            idx[a] = rest % spatial[a];
            rest /= spatial[a];
        }
        base.extend((0..k).rev().map(|a| coord(idx[a], spatial[a])));
        base.push(1.0);
    }
    let batch = size[0];
    let base: Vec<f64> = (0..batch).flat_map(|_| base.iter().copied()).collect();
    let base = cx.values(cx.dtype(theta), &[batch, cells, k + 1], &base)?;
    let tt = cx.add1(Transpose { perm: vec![0, 2, 1] }, &[theta])?;
    let grid = cx.add1(MatMul {}, &[base, tt])?;
    let mut dims = vec![batch];
    dims.extend_from_slice(spatial);
    dims.push(k);
    Ok(vec![reshape_static(cx, grid, &dims)?])
}

/// Scatter-adds `updates [N, C, K·L]` into a zero `[N, C, cells]` at the constant flat
/// positions `targets [K·L]` (shared by every `N` and `C`).
fn scatter_cells(cx: &mut Cx<'_>, updates: ValueId, targets: &[usize], cells: usize) -> OpResult<ValueId> {
    let ud = cx.dims(updates)?;
    let (nb, c) = (ud[0], ud[1]);
    let idx: Vec<f64> = (0..nb * c).flat_map(|_| targets.iter().map(|&t| t as f64)).collect();
    let idx = cx.values(DType::I64, &[nb, c, targets.len()], &idx)?;
    let zeros = cx.values(cx.dtype(updates), &[nb, c, cells], &vec![0.0; nb * c * cells])?;
    cx.add1(ScatterElements { axis: 2, reduction: ScatterReduction::Add }, &[zeros, idx, updates])
}

/// `Col2Im(input [N, C·∏block, L], image_shape, block_shape)`: every column entry added to
/// its image cell; out `[N, C, image…]`.
fn col2im(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let image = sizes(cx, n.input(1)?, "image_shape")?;
    let block = sizes(cx, n.input(2)?, "block_shape")?;
    let s = image.len();
    if block.len() != s || block.contains(&0) {
        return invalid(format!("block_shape {block:?} must have the {s} entries of image_shape"));
    }
    let per = |name: &str, default: usize, len: usize| -> OpResult<Vec<usize>> {
        match n.ints(name) {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len && v.iter().all(|&x| x >= 0) => Ok(v.iter().map(|&x| x as usize).collect()),
            Some(v) => invalid(format!("{name} {v:?}")),
        }
    };
    let dil = per("dilations", 1, s)?;
    let stride = per("strides", 1, s)?;
    let pads = per("pads", 0, 2 * s)?;
    let padded: Vec<usize> = (0..s).map(|i| image[i] + pads[i] + pads[i + s]).collect();
    let mut out = Vec::with_capacity(s);
    for i in 0..s {
        let span = dil[i] * (block[i] - 1) + 1;
        if padded[i] < span || stride[i] == 0 {
            return invalid(format!("block {block:?} does not fit the padded image {padded:?}"));
        }
        out.push((padded[i] - span) / stride[i] + 1);
    }
    let xd = cx.dims(x)?;
    let (kcount, lcount): (usize, usize) = (block.iter().product(), out.iter().product());
    if xd.len() != 3 || xd[1] % kcount != 0 || xd[2] != lcount {
        return invalid(format!("input {xd:?} must be [N, C·{kcount}, {lcount}]"));
    }
    let c = xd[1] / kcount;
    let unravel = |mut flat: usize, dims: &[usize]| -> Vec<usize> {
        let mut idx = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            idx[a] = flat % dims[a];
            flat /= dims[a];
        }
        idx
    };
    let mut targets = Vec::with_capacity(kcount * lcount);
    for kf in 0..kcount {
        let kk = unravel(kf, &block);
        for lf in 0..lcount {
            let ll = unravel(lf, &out);
            targets.push((0..s).fold(0, |acc, i| acc * padded[i] + ll[i] * stride[i] + kk[i] * dil[i]));
        }
    }
    let updates = reshape_static(cx, x, &[xd[0], c, kcount * lcount])?;
    let cells: usize = padded.iter().product();
    let y = scatter_cells(cx, updates, &targets, cells)?;
    let mut dims = vec![xd[0], c];
    dims.extend_from_slice(&padded);
    let mut y = reshape_static(cx, y, &dims)?;
    for i in 0..s {
        if pads[i] + pads[i + s] > 0 {
            y = cx.add1(Narrow { axis: 2 + i, start: pads[i], len: image[i] }, &[y])?;
        }
    }
    Ok(vec![y])
}

/// `MaxUnpool(x, indices[, output_shape])`: `x` written at the flat positions of `indices`
/// into zeros of the pooling's input shape, padded with zeros at the end to `output_shape`.
fn max_unpool(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    let xd = cx.dims(x)?;
    let s = xd.len().checked_sub(2).filter(|&s| s >= 1).ok_or_else(|| OpError::Invalid(format!("input {xd:?} needs spatial axes")))?;
    let kernel = n.ints("kernel_shape").filter(|k| k.len() == s).ok_or_else(|| OpError::Invalid("kernel_shape is required".into()))?;
    let stride = n.ints("strides").unwrap_or_else(|| vec![1; s]);
    let pads = n.ints("pads").unwrap_or_else(|| vec![0; 2 * s]);
    let mut inferred = xd[..2].to_vec();
    for i in 0..s {
        let d = (xd[2 + i] as i64 - 1) * stride.get(i).copied().unwrap_or(1) - pads.get(i).copied().unwrap_or(0) - pads.get(i + s).copied().unwrap_or(0) + kernel[i];
        inferred.push(usize::try_from(d).map_err(|_| OpError::Invalid(format!("output extent {d}")))?);
    }
    let total: usize = inferred.iter().product();
    let count: usize = xd.iter().product();
    let zeros = cx.values(cx.dtype(x), &[total], &vec![0.0; total])?;
    let flat_idx = reshape_static(cx, idx, &[count, 1])?;
    let flat_x = reshape_static(cx, x, &[count])?;
    let y = cx.add1(ScatterNd { reduction: ScatterReduction::None }, &[zeros, flat_idx, flat_x])?;
    let y = reshape_static(cx, y, &inferred)?;
    let Some(shape) = n.opt_input(2) else { return Ok(vec![y]) };
    let dims = sizes(cx, shape, "output_shape")?;
    if dims.len() != inferred.len() || dims.iter().zip(&inferred).any(|(d, i)| d < i) {
        return invalid(format!("output_shape {dims:?} is smaller than the unpooled {inferred:?}"));
    }
    let pads = dims.iter().zip(&inferred).map(|(d, i)| [0, d - i]).collect();
    Ok(vec![cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[y])?])
}

/// How `GridSample` reads between input cells.
#[derive(Clone, Copy, PartialEq)]
enum Sampling {
    Nearest,
    Linear,
    Cubic,
}

/// Keys' cubic convolution weights (a = −0.75) of the four cells around a point `t` past
/// the first of the middle two.
fn cubic_weights(cx: &mut Cx<'_>, t: ValueId) -> OpResult<Vec<ValueId>> {
    const A: f64 = -0.75;
    let far = |cx: &mut Cx<'_>, d: ValueId| -> OpResult<ValueId> {
        let p = bin_scalar(cx, BinaryOp::Mul, d, A)?;
        let p = bin_scalar(cx, BinaryOp::Add, p, -5.0 * A)?;
        let p = bin(cx, BinaryOp::Mul, p, d)?;
        let p = bin_scalar(cx, BinaryOp::Add, p, 8.0 * A)?;
        let p = bin(cx, BinaryOp::Mul, p, d)?;
        bin_scalar(cx, BinaryOp::Add, p, -4.0 * A)
    };
    let near = |cx: &mut Cx<'_>, d: ValueId| -> OpResult<ValueId> {
        let p = bin_scalar(cx, BinaryOp::Mul, d, A + 2.0)?;
        let p = bin_scalar(cx, BinaryOp::Add, p, -(A + 3.0))?;
        let p = bin(cx, BinaryOp::Mul, p, d)?;
        let p = bin(cx, BinaryOp::Mul, p, d)?;
        bin_scalar(cx, BinaryOp::Add, p, 1.0)
    };
    let t1 = bin_scalar(cx, BinaryOp::Add, t, 1.0)?;
    let one_minus = bin_scalar(cx, BinaryOp::Mul, t, -1.0)?;
    let one_minus = bin_scalar(cx, BinaryOp::Add, one_minus, 1.0)?;
    let two_minus = bin_scalar(cx, BinaryOp::Add, one_minus, 1.0)?;
    Ok(vec![far(cx, t1)?, near(cx, t)?, near(cx, one_minus)?, far(cx, two_minus)?])
}

/// `v` reflected off `[lo, hi]` until inside, as ONNX's reference does it.
fn reflect(cx: &mut Cx<'_>, v: ValueId, lo: f64, hi: f64) -> OpResult<ValueId> {
    let span = hi - lo;
    let side = |cx: &mut Cx<'_>, dx: ValueId, near: f64, far: f64| -> OpResult<ValueId> {
        let q = bin_scalar(cx, BinaryOp::Div, dx, span)?;
        let n = act(cx, ActivationKind::Floor, q)?;
        let whole = bin_scalar(cx, BinaryOp::Mul, n, span)?;
        let r = bin(cx, BinaryOp::Sub, dx, whole)?;
        let half = bin_scalar(cx, BinaryOp::Mul, n, 0.5)?;
        let half_floor = act(cx, ActivationKind::Floor, half)?;
        let even = cx.add1(Compare { op: CmpOp::Eq }, &[half, half_floor])?;
        let dir = if far > near { 1.0 } else { -1.0 };
        let from_near = bin_scalar(cx, BinaryOp::Mul, r, dir)?;
        let from_near = bin_scalar(cx, BinaryOp::Add, from_near, near)?;
        let from_far = bin_scalar(cx, BinaryOp::Mul, r, -dir)?;
        let from_far = bin_scalar(cx, BinaryOp::Add, from_far, far)?;
        select(cx, even, from_near, from_far)
    };
    let neg = bin_scalar(cx, BinaryOp::Mul, v, -1.0)?;
    let below_dx = bin_scalar(cx, BinaryOp::Add, neg, lo)?;
    let above_dx = bin_scalar(cx, BinaryOp::Add, v, -hi)?;
    let below = side(cx, below_dx, lo, hi)?;
    let above = side(cx, above_dx, hi, lo)?;
    let lo_c = cx.scalar(cx.dtype(v), lo)?;
    let hi_c = cx.scalar(cx.dtype(v), hi)?;
    let is_below = cx.add1(Compare { op: CmpOp::Lt }, &[v, lo_c])?;
    let is_above = cx.add1(Compare { op: CmpOp::Gt }, &[v, hi_c])?;
    let rest = select(cx, is_above, above, v)?;
    select(cx, is_below, below, rest)
}

/// One axis's taps: `(cell index as F32, weight)` pairs, weights zero where `zeros` padding
/// leaves the input.
type AxisTaps = Vec<(ValueId, Option<ValueId>)>;

/// `GridSample(x [N, C, in…], grid [N, out…, k])`: per output cell, the input read at the
/// grid's normalized point (`grid[…, 0]` along the last axis); every combination of the axes'
/// taps is a `GatherElements` of flat cell indices, weighted and summed.
fn grid_sample(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, grid) = (n.input(0)?, n.input(1)?);
    let xd = cx.dims(x)?;
    let gd = cx.dims(grid)?;
    let k = xd.len().checked_sub(2).filter(|&k| k >= 1).ok_or_else(|| OpError::Invalid(format!("input {xd:?} needs spatial axes")))?;
    if gd.len() != k + 2 || gd[0] != xd[0] || gd[k + 1] != k {
        return invalid(format!("grid {gd:?} must be [{}, out…, {k}] for input {xd:?}", xd[0]));
    }
    let sampling = match n.string("mode", if n.opset >= 20 { "linear" } else { "bilinear" }).as_str() {
        "nearest" => Sampling::Nearest,
        "linear" | "bilinear" => Sampling::Linear,
        "cubic" | "bicubic" => Sampling::Cubic,
        m => return invalid(format!("mode `{m}`")),
    };
    let padding = n.string("padding_mode", "zeros");
    if !["zeros", "border", "reflection"].contains(&padding.as_str()) {
        return invalid(format!("padding_mode `{padding}`"));
    }
    let align = n.int("align_corners", 0) != 0;
    let (nb, c) = (xd[0], xd[1]);
    let q: usize = gd[1..=k].iter().product();
    let work = DType::F32;
    let g = cast_to(cx, grid, work)?;
    let g = reshape_static(cx, g, &[nb, q, k])?;
    let mut taps_per_axis: Vec<AxisTaps> = Vec::with_capacity(k);
    for a in 0..k {
        let len = xd[2 + a] as f64;
        let comp = cx.add1(Narrow { axis: 2, start: k - 1 - a, len: 1 }, &[g])?;
        let comp = reshape_static(cx, comp, &[nb, q])?;
        let p = bin_scalar(cx, BinaryOp::Add, comp, 1.0)?;
        let mut p = if align { bin_scalar(cx, BinaryOp::Mul, p, (len - 1.0) / 2.0)? } else {
            let p = bin_scalar(cx, BinaryOp::Mul, p, len / 2.0)?;
            bin_scalar(cx, BinaryOp::Add, p, -0.5)?
        };
        if sampling == Sampling::Nearest {
            p = act(cx, ActivationKind::Round, p)?;
        }
        let (lo, hi) = if align { (0.0, len - 1.0) } else { (-0.5, len - 0.5) };
        if padding == "border" {
            let lo_c = cx.scalar(work, lo)?;
            let hi_c = cx.scalar(work, hi)?;
            let out_lo = cx.add1(Compare { op: CmpOp::Lt }, &[p, lo_c])?;
            let out_hi = cx.add1(Compare { op: CmpOp::Gt }, &[p, hi_c])?;
            let clamped = bin_scalar(cx, BinaryOp::Max, p, 0.0)?;
            let clamped = bin_scalar(cx, BinaryOp::Min, clamped, len - 1.0)?;
            let p1 = select(cx, out_hi, clamped, p)?;
            p = select(cx, out_lo, clamped, p1)?;
        } else if padding == "reflection" {
            p = reflect(cx, p, lo, hi)?;
        }
        taps_per_axis.push(axis_taps(cx, p, len, sampling, &padding, (lo, hi))?);
    }
    let cells: usize = xd[2..].iter().product();
    let flat_x = reshape_static(cx, x, &[nb, c, cells])?;
    let total = gather_taps(cx, flat_x, &xd[2..], &taps_per_axis, q)?;
    let mut dims = vec![nb, c];
    dims.extend_from_slice(&gd[1..=k]);
    Ok(vec![reshape_static(cx, total, &dims)?])
}

/// The taps of pixel-space positions `p` along an axis of `len` cells; `(lo, hi)` is the
/// range `reflection` padding reflects off.
fn axis_taps(cx: &mut Cx<'_>, p: ValueId, len: f64, sampling: Sampling, padding: &str, (lo, hi): (f64, f64)) -> OpResult<AxisTaps> {
    let work = DType::F32;
    let (base, weights) = match sampling {
        Sampling::Nearest => (p, vec![None]),
        Sampling::Linear | Sampling::Cubic => {
            let f = act(cx, ActivationKind::Floor, p)?;
            let t = bin(cx, BinaryOp::Sub, p, f)?;
            if sampling == Sampling::Linear {
                let w0 = bin_scalar(cx, BinaryOp::Mul, t, -1.0)?;
                let w0 = bin_scalar(cx, BinaryOp::Add, w0, 1.0)?;
                (f, vec![Some(w0), Some(t)])
            } else {
                let f = bin_scalar(cx, BinaryOp::Add, f, -1.0)?;
                (f, cubic_weights(cx, t)?.into_iter().map(Some).collect())
            }
        }
    };
    let mut taps = Vec::with_capacity(weights.len());
    for (j, w) in weights.into_iter().enumerate() {
        let i = if j == 0 { base } else { bin_scalar(cx, BinaryOp::Add, base, j as f64)? };
        let (i, w) = match padding {
            "zeros" => {
                let lo_c = cx.scalar(work, 0.0)?;
                let hi_c = cx.scalar(work, len - 1.0)?;
                let ge = cx.add1(Compare { op: CmpOp::Ge }, &[i, lo_c])?;
                let le = cx.add1(Compare { op: CmpOp::Le }, &[i, hi_c])?;
                let ge = cast_to(cx, ge, work)?;
                let le = cast_to(cx, le, work)?;
                let inside = bin(cx, BinaryOp::Mul, ge, le)?;
                let w = match w {
                    Some(w) => bin(cx, BinaryOp::Mul, w, inside)?,
                    None => inside,
                };
                (i, Some(w))
            }
            "reflection" => {
                let r = reflect(cx, i, lo, hi)?;
                (act(cx, ActivationKind::Floor, r)?, w)
            }
            _ => (i, w),
        };
        let i = bin_scalar(cx, BinaryOp::Max, i, 0.0)?;
        let i = bin_scalar(cx, BinaryOp::Min, i, len - 1.0)?;
        taps.push((i, w));
    }
    Ok(taps)
}

/// `Σ` over every combination of the axes' taps of `x [N, C, cells]` at the combined flat
/// cell index, times the taps' weights: `[N, C, q]`.
fn gather_taps(cx: &mut Cx<'_>, flat_x: ValueId, spatial: &[usize], taps_per_axis: &[AxisTaps], q: usize) -> OpResult<ValueId> {
    let xd = cx.dims(flat_x)?;
    let (nb, c) = (xd[0], xd[1]);
    let combos: usize = taps_per_axis.iter().map(Vec::len).product();
    let mut total: Option<ValueId> = None;
    for combo in 0..combos {
        let mut rest = combo;
        let mut index: Option<ValueId> = None;
        let mut weight: Option<ValueId> = None;
        for (a, taps) in taps_per_axis.iter().enumerate() {
            let (i, w) = taps[rest % taps.len()];
            rest /= taps.len();
            let stride: usize = spatial[a + 1..].iter().product();
            let part = bin_scalar(cx, BinaryOp::Mul, i, stride as f64)?;
            index = Some(match index {
                Some(acc) => bin(cx, BinaryOp::Add, acc, part)?,
                None => part,
            });
            if let Some(w) = w {
                weight = Some(match weight {
                    Some(acc) => bin(cx, BinaryOp::Mul, acc, w)?,
                    None => w,
                });
            }
        }
        let index = index.ok_or_else(|| OpError::Invalid("no spatial axes".into()))?;
        let index = cast_to(cx, index, DType::I64)?;
        let index = reshape_static(cx, index, &[nb, 1, q])?;
        let index = expand_to(cx, index, &rlx_ir::Shape::of(&[nb, c, q]))?;
        let mut v = cx.add1(GatherElements { axis: 2 }, &[flat_x, index])?;
        if let Some(w) = weight {
            let w = reshape_static(cx, w, &[nb, 1, q])?;
            let w = cast_to(cx, w, cx.dtype(flat_x))?;
            v = bin(cx, BinaryOp::Mul, v, w)?;
        }
        total = Some(match total {
            Some(acc) => bin(cx, BinaryOp::Add, acc, v)?,
            None => v,
        });
    }
    total.ok_or_else(|| OpError::Invalid("no taps".into()))
}

/// `DeformConv(x, w, offset[, B, mask])` (2-D): each kernel tap reads `x` bilinearly (zero
/// outside) at its regular position plus its learned offset, scaled by the mask; the sampled
/// columns `[N, C·kH·kW, oH·oW]` then meet the weights in one `MatMul` per group.
fn deform_conv(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, w, offset) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let (xd, wd, od) = (cx.dims(x)?, cx.dims(w)?, cx.dims(offset)?);
    if xd.len() != 4 || wd.len() != 4 || od.len() != 4 {
        return unsupported(format!("DeformConv of {}-D input", xd.len().saturating_sub(2)));
    }
    let (nb, c, oc) = (xd[0], xd[1], wd[0]);
    let (kh, kw) = (wd[2], wd[3]);
    let group = n.int("group", 1).max(1) as usize;
    let offset_group = n.int("offset_group", 1).max(1) as usize;
    let ints = |name: &str, default: Vec<i64>| n.ints(name).unwrap_or(default);
    let (stride, dil, pads) = (ints("strides", vec![1, 1]), ints("dilations", vec![1, 1]), ints("pads", vec![0; 4]));
    if stride.len() != 2 || dil.len() != 2 || pads.len() != 4 || c % group != 0 || c % offset_group != 0 || oc % group != 0 || wd[1] * group != c {
        return invalid(format!("DeformConv geometry: x {xd:?}, w {wd:?}, group {group}, offset_group {offset_group}"));
    }
    let (oh, ow) = (od[2], od[3]);
    let k = kh * kw;
    if od[1] != offset_group * k * 2 || od[0] != nb {
        return invalid(format!("offset {od:?} must be [{nb}, {}, oH, oW]", offset_group * k * 2));
    }
    let q = oh * ow;
    let work = DType::F32;
    let offset = cast_to(cx, offset, work)?;
    let offset = reshape_static(cx, offset, &[nb, offset_group * k * 2, q])?;
    let mask = match n.opt_input(4) {
        Some(m) => {
            let m = cast_to(cx, m, cx.dtype(x))?;
            Some(reshape_static(cx, m, &[nb, offset_group * k, 1, q])?)
        }
        None => None,
    };
    let flat_x = reshape_static(cx, x, &[nb, c, xd[2] * xd[3]])?;
    let cg = c / offset_group;
    let mut groups = Vec::with_capacity(offset_group);
    for g in 0..offset_group {
        let xg = cx.add1(Narrow { axis: 1, start: g * cg, len: cg }, &[flat_x])?;
        let mut cols = Vec::with_capacity(k);
        for tap in 0..k {
            let (i, j) = (tap / kw, tap % kw);
            let mut taps = Vec::with_capacity(2);
            for (a, (regular, extent)) in [(i, xd[2]), (j, xd[3])].into_iter().enumerate() {
                let base: Vec<f64> = (0..q)
                    .map(|cell| {
                        let o = if a == 0 { cell / ow } else { cell % ow };
                        (o as i64 * stride[a] - pads[a] + regular as i64 * dil[a]) as f64
                    })
                    .collect();
                let base = cx.values(work, &[1, q], &base)?;
                let row = (g * k + tap) * 2 + a;
                let d = cx.add1(Narrow { axis: 1, start: row, len: 1 }, &[offset])?;
                let d = reshape_static(cx, d, &[nb, q])?;
                let p = bin(cx, BinaryOp::Add, d, base)?;
                taps.push(axis_taps(cx, p, extent as f64, Sampling::Linear, "zeros", (0.0, extent as f64 - 1.0))?);
            }
            let v = gather_taps(cx, xg, &xd[2..], &taps, q)?;
            let mut v = reshape_static(cx, v, &[nb, cg, 1, q])?;
            if let Some(m) = mask {
                let mt = cx.add1(Narrow { axis: 1, start: g * k + tap, len: 1 }, &[m])?;
                v = bin(cx, BinaryOp::Mul, v, mt)?;
            }
            cols.push(v);
        }
        groups.push(cx.add1(Concat { axis: 2 }, &cols)?);
    }
    let cols = if groups.len() == 1 { groups[0] } else { cx.add1(Concat { axis: 1 }, &groups)? };
    let (ci, co) = (c / group, oc / group);
    let mut outs = Vec::with_capacity(group);
    for g in 0..group {
        let cg = cx.add1(Narrow { axis: 1, start: g * ci, len: ci }, &[cols])?;
        let cg = reshape_static(cx, cg, &[nb, ci * k, q])?;
        let wg = cx.add1(Narrow { axis: 0, start: g * co, len: co }, &[w])?;
        let wg = reshape_static(cx, wg, &[1, co, ci * k])?;
        let wg = expand_to(cx, wg, &rlx_ir::Shape::of(&[nb, co, ci * k]))?;
        outs.push(cx.add1(MatMul {}, &[wg, cg])?);
    }
    let y = if outs.len() == 1 { outs[0] } else { cx.add1(Concat { axis: 1 }, &outs)? };
    let mut y = reshape_static(cx, y, &[nb, oc, oh, ow])?;
    if let Some(b) = n.opt_input(3) {
        y = add_channel_bias(cx, y, b)?;
    }
    Ok(vec![y])
}

/// One axis of `RoiAlign`'s sample points: `(low cell, weight)` and `(high cell, weight)` as
/// `[R, P·sr]` F32 values, with ONNX's reference clamping (points beyond `[−1, extent]` weigh 0).
fn roi_axis(cx: &mut Cx<'_>, start: ValueId, bin_size: ValueId, pooled: usize, sr: usize, extent: usize) -> OpResult<[(ValueId, ValueId); 2]> {
    let work = DType::F32;
    let frac: Vec<f64> = (0..pooled * sr).map(|k| (k / sr) as f64 + ((k % sr) as f64 + 0.5) / sr as f64).collect();
    let frac = cx.values(work, &[1, pooled * sr], &frac)?;
    let step = bin(cx, BinaryOp::Mul, bin_size, frac)?;
    let p = bin(cx, BinaryOp::Add, start, step)?;
    let lo_c = cx.scalar(work, -1.0)?;
    let hi_c = cx.scalar(work, extent as f64)?;
    let ge = cx.add1(Compare { op: CmpOp::Ge }, &[p, lo_c])?;
    let le = cx.add1(Compare { op: CmpOp::Le }, &[p, hi_c])?;
    let ge = cast_to(cx, ge, work)?;
    let le = cast_to(cx, le, work)?;
    let valid = bin(cx, BinaryOp::Mul, ge, le)?;
    let p = bin_scalar(cx, BinaryOp::Max, p, 0.0)?;
    let low = act(cx, ActivationKind::Floor, p)?;
    let last = cx.scalar(work, extent as f64 - 1.0)?;
    let top = cx.add1(Compare { op: CmpOp::Ge }, &[low, last])?;
    let low = select(cx, top, last, low)?;
    let next = bin_scalar(cx, BinaryOp::Add, low, 1.0)?;
    let high = select(cx, top, last, next)?;
    let frac = bin(cx, BinaryOp::Sub, p, low)?;
    let zero = cx.scalar(work, 0.0)?;
    let l = select(cx, top, zero, frac)?;
    let h = bin_scalar(cx, BinaryOp::Mul, l, -1.0)?;
    let h = bin_scalar(cx, BinaryOp::Add, h, 1.0)?;
    let wl = bin(cx, BinaryOp::Mul, h, valid)?;
    let wh = bin(cx, BinaryOp::Mul, l, valid)?;
    Ok([(low, wl), (high, wh)])
}

/// `RoiAlign(x, rois [R, 4], batch_indices [R])` with a fixed `sampling_ratio`: `sr×sr`
/// bilinear samples per output bin, averaged or maxed; out `[R, C, output_height, output_width]`.
fn roi_align(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, rois, batch) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let xd = cx.dims(x)?;
    let rd = cx.dims(rois)?;
    if xd.len() != 4 || rd.len() != 2 || rd[1] != 4 {
        return invalid(format!("RoiAlign needs x [N, C, H, W] and rois [R, 4], got {xd:?} and {rd:?}"));
    }
    let sr = usize::try_from(n.int("sampling_ratio", 0)).ok().filter(|&s| s > 0).ok_or_else(|| OpError::Unsupported("sampling_ratio 0 (adaptive, from the roi sizes)".into()))?;
    let (ph, pw) = (n.int("output_height", 1).max(1) as usize, n.int("output_width", 1).max(1) as usize);
    let max_mode = match n.string("mode", "avg").as_str() {
        "avg" => false,
        "max" => true,
        m => return invalid(format!("mode `{m}`")),
    };
    let half_pixel = n.string("coordinate_transformation_mode", "half_pixel") == "half_pixel";
    let scale = n.float("spatial_scale", 1.0) as f64;
    let (r, c, h, w) = (rd[0], xd[1], xd[2], xd[3]);
    let work = DType::F32;
    let rois = cast_to(cx, rois, work)?;
    let rois = bin_scalar(cx, BinaryOp::Mul, rois, scale)?;
    let rois = bin_scalar(cx, BinaryOp::Add, rois, if half_pixel { -0.5 } else { 0.0 })?;
    let col = |cx: &mut Cx<'_>, i: usize| cx.add1(Narrow { axis: 1, start: i, len: 1 }, &[rois]);
    let (x1, y1, x2, y2) = (col(cx, 0)?, col(cx, 1)?, col(cx, 2)?, col(cx, 3)?);
    let mut size_w = bin(cx, BinaryOp::Sub, x2, x1)?;
    let mut size_h = bin(cx, BinaryOp::Sub, y2, y1)?;
    if !half_pixel {
        size_w = bin_scalar(cx, BinaryOp::Max, size_w, 1.0)?;
        size_h = bin_scalar(cx, BinaryOp::Max, size_h, 1.0)?;
    }
    let bin_h = bin_scalar(cx, BinaryOp::Div, size_h, ph as f64)?;
    let bin_w = bin_scalar(cx, BinaryOp::Div, size_w, pw as f64)?;
    let ys = roi_axis(cx, y1, bin_h, ph, sr, h)?;
    let xs = roi_axis(cx, x1, bin_w, pw, sr, w)?;
    let batch = cast_to(cx, batch, DType::I64)?;
    let planes = cx.add1(rlx_ir::ops::index::Gather { axis: 0 }, &[x, batch])?;
    let planes = reshape_static(cx, planes, &[r, c, h * w])?;
    let (qy, qx) = (ph * sr, pw * sr);
    let q = qy * qx;
    let mut acc: Option<ValueId> = None;
    for (yi, yw) in ys {
        for &(xi, xw) in &xs {
            let yi = reshape_static(cx, yi, &[r, qy, 1])?;
            let xi = reshape_static(cx, xi, &[r, 1, qx])?;
            let row = bin_scalar(cx, BinaryOp::Mul, yi, w as f64)?;
            let idx = bin(cx, BinaryOp::Add, row, xi)?;
            let idx = cast_to(cx, idx, DType::I64)?;
            let idx = reshape_static(cx, idx, &[r, 1, q])?;
            let idx = expand_to(cx, idx, &rlx_ir::Shape::of(&[r, c, q]))?;
            let yw = reshape_static(cx, yw, &[r, qy, 1])?;
            let xw = reshape_static(cx, xw, &[r, 1, qx])?;
            let wt = bin(cx, BinaryOp::Mul, yw, xw)?;
            let wt = reshape_static(cx, wt, &[r, 1, q])?;
            let wt = cast_to(cx, wt, cx.dtype(x))?;
            let v = cx.add1(GatherElements { axis: 2 }, &[planes, idx])?;
            let v = bin(cx, BinaryOp::Mul, v, wt)?;
            acc = Some(match acc {
                Some(a) => bin(cx, if max_mode { BinaryOp::Max } else { BinaryOp::Add }, a, v)?,
                None => v,
            });
        }
    }
    let acc = acc.ok_or_else(|| OpError::Invalid("no samples".into()))?;
    let acc = reshape_static(cx, acc, &[r, c, ph, sr, pw, sr])?;
    let op = if max_mode { ReduceOp::Max } else { ReduceOp::Mean };
    Ok(vec![cx.add1(Reduce { op, axes: vec![3, 5], keep_dim: false }, &[acc])?])
}
