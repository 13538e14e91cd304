//! Convolutions and pooling: `Conv`, `ConvTranspose`, `MaxPool`, `AveragePool`, `LpPool`,
//! the global pools and `LRN`. ONNX's explicit or automatic (`SAME_*`) padding may be asymmetric; rlx's
//! windows pad symmetrically, so uneven pads become a `Pad` (or a crop) around the window op.
//! 1-D windows run as 2-D ones over a unit height.

use super::elementwise::{act, bin, bin_scalar, select};
use super::shape::{expand_to, reshape_static};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::conv::{Conv, Conv3d, ConvTranspose2d, ConvTranspose3d, Im2Col, Pool};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ops::reduce::{Reduce, ReduceOp};
use rlx_ir::ops::shape::{Narrow, Pad, PadMode};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("Conv", conv),
    ("ConvTranspose", conv_transpose),
    ("MaxPool", |cx, n| pool(cx, n, PoolKind::Max)),
    ("AveragePool", |cx, n| pool(cx, n, PoolKind::Average)),
    ("LpPool", |cx, n| pool(cx, n, PoolKind::Lp)),
    ("GlobalAveragePool", |cx, n| global(cx, n, ReduceOp::Mean)),
    ("GlobalMaxPool", |cx, n| global(cx, n, ReduceOp::Max)),
    ("LRN", lrn),
];

/// A window's per-axis geometry with ONNX's padding resolved to `[begin, end]` pairs.
/// The largest kernel extent, stride, dilation or pad accepted: far past any real model, and
/// small enough that the window arithmetic cannot overflow.
const MAX_WINDOW_ATTR: usize = 1 << 24;

/// The most kernel offsets times output cells a pooling window may unroll into.
const MAX_UNROLLED_CELLS: usize = 1 << 24;

struct Geometry {
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    pads: Vec<[usize; 2]>,
}

fn per_axis(n: &OnnxNode<'_, '_>, name: &str, s: usize, default: usize) -> OpResult<Vec<usize>> {
    match n.ints(name) {
        Some(v) if v.len() == s => v.iter().map(|&x| usize::try_from(x).map_err(|_| OpError::Invalid(format!("{name} {v:?}")))).collect(),
        Some(v) => invalid(format!("{name} {v:?} needs {s} entries")),
        None => Ok(vec![default; s]),
    }
}

/// Resolves `pads` / `auto_pad` for input spatial extents `spatial`.
fn geometry(n: &OnnxNode<'_, '_>, kernel: Vec<usize>, spatial: &[usize], ceil: bool) -> OpResult<Geometry> {
    let s = kernel.len();
    let stride = per_axis(n, "strides", s, 1)?;
    let dilation = per_axis(n, "dilations", s, 1)?;
    if stride.contains(&0) || dilation.contains(&0) || kernel.contains(&0) {
        return invalid("kernel, strides and dilations must be positive");
    }
    if kernel.iter().chain(&stride).chain(&dilation).any(|&v| v > MAX_WINDOW_ATTR) {
        return invalid(format!("kernel {kernel:?}, strides {stride:?} or dilations {dilation:?} above {MAX_WINDOW_ATTR}"));
    }
    let auto = n.string("auto_pad", "NOTSET");
    let mut pads = vec![[0usize; 2]; s];
    match auto.as_str() {
        "NOTSET" => {
            if let Some(p) = n.ints("pads") {
                if p.len() != 2 * s || p.iter().any(|&v| v < 0 || v as u64 > MAX_WINDOW_ATTR as u64) {
                    return invalid(format!("pads {p:?} need {} entries in [0, {MAX_WINDOW_ATTR}]", 2 * s));
                }
                for i in 0..s {
                    pads[i] = [p[i] as usize, p[i + s] as usize];
                }
            }
        }
        "VALID" => {}
        "SAME_UPPER" | "SAME_LOWER" => {
            for i in 0..s {
                let out = spatial[i].div_ceil(stride[i]);
                let span = (kernel[i] - 1) * dilation[i] + 1;
                let total = ((out.saturating_sub(1)) * stride[i] + span).saturating_sub(spatial[i]);
                let small = total / 2;
                pads[i] = if auto == "SAME_UPPER" { [small, total - small] } else { [total - small, small] };
            }
        }
        a => return invalid(format!("auto_pad `{a}`")),
    }
    if ceil {
        for i in 0..s {
            let span = (kernel[i] - 1) * dilation[i] + 1;
            let padded = spatial[i] + pads[i][0] + pads[i][1];
            if padded < span {
                continue;
            }
            let mut out = (padded - span).div_ceil(stride[i]) + 1;
            if (out - 1) * stride[i] >= spatial[i] + pads[i][0] {
                out -= 1;
            }
            pads[i][1] += ((out - 1) * stride[i] + span).saturating_sub(padded);
        }
    }
    Ok(Geometry { kernel, stride, dilation, pads })
}

/// The output extents of `g`'s windows over the (already padded) spatial extents `padded`;
/// an error where a window is larger than the input.
fn window_out(padded: &[usize], g: &Geometry) -> OpResult<Vec<usize>> {
    (0..g.kernel.len())
        .map(|i| padded[i].checked_sub((g.kernel[i] - 1) * g.dilation[i] + 1).map(|r| r / g.stride[i] + 1))
        .collect::<Option<_>>()
        .ok_or_else(|| OpError::Invalid(format!("the window {:?} (dilations {:?}) is larger than the padded input {padded:?}", g.kernel, g.dilation)))
}

/// The kernel offsets a window op unrolls into strided slices, refused where they times the
/// `out` cells exceed [`MAX_UNROLLED_CELLS`].
fn unrolled_offsets(g: &Geometry, out: &[usize]) -> OpResult<usize> {
    let (offsets, cells) = (g.kernel.iter().product::<usize>(), out.iter().product::<usize>());
    if offsets.checked_mul(cells).is_none_or(|n| n > MAX_UNROLLED_CELLS) {
        return invalid(format!("a pooling window of {offsets} offsets over {cells} output cells is too large to unroll"));
    }
    Ok(offsets)
}

/// Pads `x`'s spatial axes by the uneven part of `g.pads` (all of it when `all`), returning
/// the symmetric part left for the window op.
fn pre_pad(cx: &mut Cx<'_>, x: ValueId, g: &Geometry, fill: f64, all: bool) -> OpResult<(ValueId, Vec<usize>)> {
    let even = g.pads.iter().all(|[a, b]| a == b);
    if even && !all {
        return Ok((x, g.pads.iter().map(|p| p[0]).collect()));
    }
    let mut pads = vec![[0, 0], [0, 0]];
    pads.extend(g.pads.iter().copied());
    if pads.iter().all(|p| p == &[0, 0]) {
        return Ok((x, vec![0; g.pads.len()]));
    }
    let y = cx.add1(Pad { pads, mode: PadMode::Constant(fill) }, &[x])?;
    Ok((y, vec![0; g.pads.len()]))
}

/// `[N, C, W]` → `[N, C, 1, W]` for 1-D windows.
fn lift_1d(cx: &mut Cx<'_>, x: ValueId) -> OpResult<ValueId> {
    let d = cx.dims(x)?;
    reshape_static(cx, x, &[d[0], d[1], 1, d[2]])
}

fn conv(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let mut y = conv_values(cx, n, n.input(0)?, n.input(1)?)?;
    if let Some(b) = n.opt_input(2) {
        y = add_channel_bias(cx, y, b)?;
    }
    Ok(vec![y])
}

/// The convolution of `x` by `w` per `n`'s attributes, without a bias.
pub(super) fn conv_values(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, x: ValueId, w: ValueId) -> OpResult<ValueId> {
    let xd = cx.dims(x)?;
    let wd = cx.dims(w)?;
    let s = xd.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or_else(|| OpError::Unsupported(format!("{}-D input", xd.len())))?;
    let kernel = wd[2..].to_vec();
    let g = geometry(n, kernel, &xd[2..], false)?;
    let groups = n.int("group", 1) as usize;
    let (xp, padding) = pre_pad(cx, x, &g, 0.0, false)?;
    let y = match s {
        1 => {
            let x2 = lift_1d(cx, xp)?;
            let w2 = lift_1d(cx, w)?;
            let attrs = Conv { kernel_size: vec![1, g.kernel[0]], stride: vec![1, g.stride[0]], padding: vec![0, padding[0]], dilation: vec![1, g.dilation[0]], groups };
            let y = cx.add1(attrs, &[x2, w2])?;
            let yd = cx.dims(y)?;
            reshape_static(cx, y, &[yd[0], yd[1], yd[3]])?
        }
        2 => cx.add1(Conv { kernel_size: g.kernel.clone(), stride: g.stride.clone(), padding, dilation: g.dilation.clone(), groups }, &[xp, w])?,
        _ => {
            let arr = |v: &[usize]| [v[0], v[1], v[2]];
            cx.add1(Conv3d { stride: arr(&g.stride), padding: arr(&padding), dilation: arr(&g.dilation), groups }, &[xp, w])?
        }
    };
    Ok(y)
}

/// `y + b` with `b [C]` on the channel axis.
pub(super) fn add_channel_bias(cx: &mut Cx<'_>, y: ValueId, b: ValueId) -> OpResult<ValueId> {
    let rank = cx.rank(y);
    let c = cx.dims(b)?.iter().product();
    let mut dims = vec![1; rank];
    dims[1] = c;
    let b = reshape_static(cx, b, &dims)?;
    bin(cx, BinaryOp::Add, y, b)
}

/// `ConvTranspose`: uneven or `output_shape`-derived padding is applied as a crop of the
/// unpadded result; an `output_shape` beyond the natural extent adds zeros (before the bias).
fn conv_transpose(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let xd = cx.dims(x)?;
    let wd = cx.dims(w)?;
    let s = xd.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or_else(|| OpError::Unsupported(format!("{}-D input", xd.len())))?;
    if wd.len() != xd.len() {
        return invalid(format!("weight dims {wd:?} for input dims {xd:?}"));
    }
    let kernel = wd[2..].to_vec();
    let stride = per_axis(n, "strides", s, 1)?;
    let dilation = per_axis(n, "dilations", s, 1)?;
    let out_pad = per_axis(n, "output_padding", s, 0)?;
    let all = || kernel.iter().chain(&stride).chain(&dilation).chain(&xd[2..]);
    if all().any(|&v| v == 0 || v > MAX_WINDOW_ATTR) || out_pad.iter().any(|&v| v > MAX_WINDOW_ATTR) {
        return invalid(format!("input extents {:?}, kernel {kernel:?}, strides {stride:?}, dilations {dilation:?} must be in [1, {MAX_WINDOW_ATTR}]", &xd[2..]));
    }
    let groups = n.int("group", 1) as usize;
    let full: Vec<usize> = (0..s).map(|i| (xd[2 + i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 + out_pad[i]).collect();
    let auto = n.string("auto_pad", "NOTSET");
    let mut pads = vec![[0usize; 2]; s];
    let mut grow = vec![[0usize; 2]; s];
    if let Some(shape) = n.ints("output_shape") {
        if shape.len() < s || shape.iter().any(|&v| v < 0 || v as u64 > MAX_WINDOW_ATTR as u64) {
            return invalid(format!("output_shape {shape:?} needs {s} extents in [0, {MAX_WINDOW_ATTR}]"));
        }
        let shape = &shape[shape.len() - s..];
        for i in 0..s {
            let total = full[i] as i64 - shape[i];
            let small = total / 2;
            let pair = if auto == "SAME_LOWER" { [total - small, small] } else { [small, total - small] };
            pads[i] = pair.map(|p| p.max(0) as usize);
            grow[i] = pair.map(|p| (-p).max(0) as usize);
        }
    } else if auto == "SAME_UPPER" || auto == "SAME_LOWER" {
        for i in 0..s {
            let total = full[i].saturating_sub(xd[2 + i] * stride[i]);
            let small = total / 2;
            pads[i] = if auto == "SAME_UPPER" { [small, total - small] } else { [total - small, small] };
        }
    } else if let Some(p) = n.ints("pads") {
        if p.len() != 2 * s || p.iter().any(|&v| v < 0 || v as u64 > MAX_WINDOW_ATTR as u64) {
            return invalid(format!("pads {p:?} need {} entries in [0, {MAX_WINDOW_ATTR}]", 2 * s));
        }
        for i in 0..s {
            pads[i] = [p[i] as usize, p[i + s] as usize];
        }
    }
    let zero = vec![0; s];
    let lifted = s == 1;
    let (xx, ww) = if lifted { (lift_1d(cx, x)?, lift_1d(cx, w)?) } else { (x, w) };
    let mut y = match s {
        1 | 2 => {
            let one = |v: &[usize], pad: usize| if lifted { vec![pad, v[0]] } else { v.to_vec() };
            let attrs = ConvTranspose2d {
                kernel_size: one(&kernel, 1),
                stride: one(&stride, 1),
                padding: one(&zero, 0),
                dilation: one(&dilation, 1),
                output_padding: one(&out_pad, 0),
                groups,
            };
            cx.add1(attrs, &[xx, ww])?
        }
        _ => {
            let arr = |v: &[usize]| [v[0], v[1], v[2]];
            cx.add1(ConvTranspose3d { stride: arr(&stride), padding: [0; 3], dilation: arr(&dilation), output_padding: arr(&out_pad), groups }, &[xx, ww])?
        }
    };
    if lifted {
        let yd = cx.dims(y)?;
        y = reshape_static(cx, y, &[yd[0], yd[1], yd[3]])?;
    }
    for (i, [b, e]) in pads.iter().enumerate() {
        if b + e > 0 {
            let len = full[i].checked_sub(b + e).ok_or_else(|| OpError::Invalid("pads exceed the output".into()))?;
            y = cx.add1(Narrow { axis: 2 + i, start: *b, len }, &[y])?;
        }
    }
    if grow.iter().any(|g| g != &[0, 0]) {
        let mut all = vec![[0, 0], [0, 0]];
        all.extend(grow);
        y = cx.add1(Pad { pads: all, mode: PadMode::Constant(0.0) }, &[y])?;
    }
    if let Some(b) = n.opt_input(2) {
        y = add_channel_bias(cx, y, b)?;
    }
    Ok(vec![y])
}

#[derive(Clone, Copy, PartialEq)]
enum PoolKind {
    Max,
    Average,
    Lp,
}

/// The lowest value of `dt`, the fill for max pooling's padding.
fn lowest(dt: DType) -> f64 {
    match dt {
        DType::I8 => i8::MIN as f64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => 0.0,
        DType::I16 => i16::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => f64::NEG_INFINITY,
    }
}

fn pool(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, kind: PoolKind) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let xd = cx.dims(x)?;
    let s = xd.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or_else(|| OpError::Unsupported(format!("{}-D input", xd.len())))?;
    let kernel = per_axis(n, "kernel_shape", s, 0)?;
    let ceil = n.int("ceil_mode", 0) != 0;
    let g = geometry(n, kernel.clone(), &xd[2..], ceil)?;
    if n.proto.output.len() > 1 && !n.proto.output[1].is_empty() {
        if kind != PoolKind::Max {
            return invalid("only MaxPool has an Indices output");
        }
        let (y, i) = max_with_indices(cx, x, &g, n.int("storage_order", 0) != 0)?;
        return Ok(vec![y, i]);
    }
    let explicit = geometry(n, kernel, &xd[2..], false)?.pads;
    let (x, lifted) = if s == 1 { (lift_1d(cx, x)?, true) } else { (x, false) };
    let (g, explicit) = if lifted {
        let g = Geometry { kernel: vec![1, g.kernel[0]], stride: vec![1, g.stride[0]], dilation: vec![1, g.dilation[0]], pads: vec![[0, 0], g.pads[0]] };
        (g, vec![[0, 0], explicit[0]])
    } else {
        (g, explicit)
    };
    let window = |op: ReduceOp, padding: Vec<usize>| Pool { kind: op, kernel_size: g.kernel.clone(), stride: g.stride.clone(), padding };
    let dt = cx.dtype(x);
    let dilated = g.dilation.iter().any(|&d| d != 1);
    let y = match kind {
        _ if dilated => dilated_pool(cx, n, x, &g, &explicit, kind)?,
        PoolKind::Max => {
            let (xp, padding) = pre_pad(cx, x, &g, lowest(dt), false)?;
            cx.add1(window(ReduceOp::Max, padding), &[xp])?
        }
        PoolKind::Lp => {
            let p = n.int("p", 2) as f64;
            let a = act(cx, ActivationKind::Abs, x)?;
            let ap = bin_scalar(cx, BinaryOp::Pow, a, p)?;
            let (xp, padding) = pre_pad(cx, ap, &g, 0.0, false)?;
            let s = cx.add1(window(ReduceOp::Sum, padding), &[xp])?;
            bin_scalar(cx, BinaryOp::Pow, s, 1.0 / p)?
        }
        PoolKind::Average => {
            let include_pad = n.int("count_include_pad", 0) != 0;
            let (xp, _) = pre_pad(cx, x, &g, 0.0, true)?;
            let total = cx.add1(window(ReduceOp::Sum, vec![0; g.kernel.len()]), &[xp])?;
            let count = cell_counts(cx, &cx.dims(x)?, &g, &explicit, include_pad)?;
            let count = cx.add1(rlx_ir::ops::elementwise::Cast { to: dt }, &[count])?;
            bin(cx, BinaryOp::Div, total, count)?
        }
    };
    let y = if lifted {
        let yd = cx.dims(y)?;
        reshape_static(cx, y, &[yd[0], yd[1], yd[3]])?
    } else {
        y
    };
    Ok(vec![y])
}

/// Pooling with dilated windows: every kernel offset is a strided `Slice` of the explicitly
/// padded input, combined with `Max` or summed.
fn dilated_pool(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, x: ValueId, g: &Geometry, explicit: &[[usize; 2]], kind: PoolKind) -> OpResult<ValueId> {
    let dt = cx.dtype(x);
    let source = match kind {
        PoolKind::Lp => {
            let a = act(cx, ActivationKind::Abs, x)?;
            bin_scalar(cx, BinaryOp::Pow, a, n.int("p", 2) as f64)?
        }
        _ => x,
    };
    let fill = if kind == PoolKind::Max { lowest(dt) } else { 0.0 };
    let (xp, _) = pre_pad(cx, source, g, fill, true)?;
    let total = strided_windows(cx, xp, g, if kind == PoolKind::Max { BinaryOp::Max } else { BinaryOp::Add })?;
    match kind {
        PoolKind::Max => Ok(total),
        PoolKind::Lp => bin_scalar(cx, BinaryOp::Pow, total, 1.0 / n.int("p", 2) as f64),
        PoolKind::Average => {
            let include_pad = n.int("count_include_pad", 0) != 0;
            let dims = cx.dims(x)?;
            let mask = count_mask(cx, &dims, g, explicit, include_pad)?;
            let count = strided_windows(cx, mask, g, BinaryOp::Add)?;
            let count = cx.add1(rlx_ir::ops::elementwise::Cast { to: dt }, &[count])?;
            bin(cx, BinaryOp::Div, total, count)
        }
    }
}

/// Combines, with `op`, the cells of every window of the padded `x`: 2-D float windows as an
/// `Im2Col` reduced over its columns, others as strided slices at every kernel offset.
fn strided_windows(cx: &mut Cx<'_>, x: ValueId, g: &Geometry, op: BinaryOp) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let spatial = g.kernel.len();
    let out = window_out(&dims[2..], g)?;
    if spatial == 2 && cx.dtype(x).is_float() {
        let planes = reshape_static(cx, x, &[dims[0] * dims[1], 1, dims[2], dims[3]])?;
        let cols = cx.add1(Im2Col { kernel_size: g.kernel.clone(), stride: g.stride.clone(), padding: vec![0, 0], dilation: g.dilation.clone() }, &[planes])?;
        let reduce = if op == BinaryOp::Max { ReduceOp::Max } else { ReduceOp::Sum };
        let r = cx.add1(Reduce { op: reduce, axes: vec![1], keep_dim: false }, &[cols])?;
        return reshape_static(cx, r, &[dims[0], dims[1], out[0], out[1]]);
    }
    let offsets = unrolled_offsets(g, &out)?;
    let mut acc: Option<ValueId> = None;
    for flat in 0..offsets {
        let mut rest = flat;
        let mut v = x;
        for i in (0..spatial).rev() {
            let k = rest % g.kernel[i];
            rest /= g.kernel[i];
            v = cx.add1(rlx_ir::ops::shape::Slice { axis: 2 + i, start: k * g.dilation[i], len: out[i], step: g.stride[i] as i64 }, &[v])?;
        }
        acc = Some(match acc {
            Some(a) => bin(cx, op, a, v)?,
            None => v,
        });
    }
    acc.ok_or_else(|| OpError::Invalid("empty window".into()))
}

/// How many cells each average-pool window counts: input cells, plus the `explicit` padding
/// when `include_pad` (never the cells `ceil_mode` adds), as a `[1, 1, out…]` F32 tensor.
fn cell_counts(cx: &mut Cx<'_>, xd: &[usize], g: &Geometry, explicit: &[[usize; 2]], include_pad: bool) -> OpResult<ValueId> {
    let mask = count_mask(cx, xd, g, explicit, include_pad)?;
    cx.add1(Pool { kind: ReduceOp::Sum, kernel_size: g.kernel.clone(), stride: g.stride.clone(), padding: vec![0; g.kernel.len()] }, &[mask])
}

/// `[1, 1, padded…]` F32: 1 on the cells an average counts, 0 on the others.
fn count_mask(cx: &mut Cx<'_>, xd: &[usize], g: &Geometry, explicit: &[[usize; 2]], include_pad: bool) -> OpResult<ValueId> {
    let spatial = &xd[2..];
    let mut dims = vec![1, 1];
    dims.extend_from_slice(spatial);
    let count: usize = spatial.iter().product();
    let ones = cx.values(DType::F32, &dims, &vec![1.0; count])?;
    let mask = if include_pad {
        let mut pads = vec![[0, 0], [0, 0]];
        pads.extend(explicit.iter().copied());
        let inner = cx.add1(Pad { pads, mode: PadMode::Constant(1.0) }, &[ones])?;
        let extra: Vec<[usize; 2]> = g.pads.iter().zip(explicit).map(|(a, b)| [0, a[1] - b[1]]).collect();
        let mut pads = vec![[0, 0], [0, 0]];
        pads.extend(extra);
        cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[inner])?
    } else {
        let mut pads = vec![[0, 0], [0, 0]];
        pads.extend(g.pads.iter().copied());
        cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[ones])?
    };
    Ok(mask)
}

fn global(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, op: ReduceOp) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let axes: Vec<usize> = (2..cx.rank(x)).collect();
    Ok(vec![cx.add1(Reduce { op, axes, keep_dim: true }, &[x])?])
}

/// `LRN`: `x / (bias + α/size · Σ x²)^β`, the sum over `size` neighbouring channels, taken as
/// a sum pool over the channel axis of `[N, 1, C, rest]`.
fn lrn(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let size = usize::try_from(n.int("size", 0)).ok().filter(|&s| s > 0).ok_or_else(|| OpError::Invalid("size must be positive".into()))?;
    if dims.len() < 2 {
        return invalid(format!("LRN needs [N, C, ...], got {dims:?}"));
    }
    let rest: usize = dims[2..].iter().product();
    let sq = bin(cx, BinaryOp::Mul, x, x)?;
    let sq = reshape_static(cx, sq, &[dims[0], 1, dims[1], rest])?;
    let pads = vec![[0, 0], [0, 0], [(size - 1) / 2, size / 2], [0, 0]];
    let sq = cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[sq])?;
    let sum = cx.add1(Pool { kind: ReduceOp::Sum, kernel_size: vec![size, 1], stride: vec![1, 1], padding: vec![0, 0] }, &[sq])?;
    let sum = reshape_static(cx, sum, &dims)?;
    let scaled = bin_scalar(cx, BinaryOp::Mul, sum, n.float("alpha", 1e-4) as f64 / size as f64)?;
    let base = bin_scalar(cx, BinaryOp::Add, scaled, n.float("bias", 1.0) as f64)?;
    let denom = bin_scalar(cx, BinaryOp::Pow, base, n.float("beta", 0.75) as f64)?;
    Ok(vec![bin(cx, BinaryOp::Div, x, denom)?])
}

/// Max pooling with ONNX's `Indices`: every kernel offset's strided slice of the padded input
/// replaces the running maximum where strictly greater (the first maximum wins), its flat
/// input positions (`n·C·∏H + c·∏H +` row-major cell, or column-major with `storage_order`)
/// replacing the running index.
fn max_with_indices(cx: &mut Cx<'_>, x: ValueId, g: &Geometry, column_major: bool) -> OpResult<(ValueId, ValueId)> {
    let xd = cx.dims(x)?;
    let (xp, _) = pre_pad(cx, x, g, lowest(cx.dtype(x)), true)?;
    let pd = cx.dims(xp)?;
    let s = g.kernel.len();
    let spatial = &xd[2..];
    let out = window_out(&pd[2..], g)?;
    let cells: usize = out.iter().product();
    let offsets = unrolled_offsets(g, &out)?;
    let mut out_dims = vec![1, 1];
    out_dims.extend_from_slice(&out);
    let unravel = |mut flat: usize, dims: &[usize]| -> Vec<usize> {
        let mut idx = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            idx[a] = flat % dims[a];
            flat /= dims[a];
        }
        idx
    };
    let mut best: Option<(ValueId, ValueId)> = None;
    for flat in 0..offsets {
        let k = unravel(flat, &g.kernel);
        let mut v = xp;
        for i in 0..s {
            v = cx.add1(rlx_ir::ops::shape::Slice { axis: 2 + i, start: k[i] * g.dilation[i], len: out[i], step: g.stride[i] as i64 }, &[v])?;
        }
        let positions: Vec<f64> = (0..cells)
            .map(|c| {
                let o = unravel(c, &out);
                let at: Vec<usize> = (0..s).map(|i| (o[i] * g.stride[i] + k[i] * g.dilation[i]).saturating_sub(g.pads[i][0]).min(spatial[i].saturating_sub(1))).collect();
                let axes: Vec<usize> = if column_major { (0..s).rev().collect() } else { (0..s).collect() };
                axes.iter().fold(0, |acc, &i| acc * spatial[i] + at[i]) as f64
            })
            .collect();
        let pos = cx.values(DType::I64, &out_dims, &positions)?;
        best = Some(match best {
            None => (v, expand_to(cx, pos, &cx.ty(v).shape)?),
            Some((bv, bi)) => {
                let wins = cx.add1(Compare { op: CmpOp::Gt }, &[v, bv])?;
                (select(cx, wins, v, bv)?, select(cx, wins, pos, bi)?)
            }
        });
    }
    let (y, within) = best.ok_or_else(|| OpError::Invalid("empty window".into()))?;
    let plane: usize = spatial.iter().product();
    let mut base_dims = vec![xd[0], xd[1]];
    base_dims.extend(vec![1; s]);
    let base: Vec<f64> = (0..xd[0] * xd[1]).map(|p| (p * plane) as f64).collect();
    let base = cx.values(DType::I64, &base_dims, &base)?;
    Ok((y, bin(cx, BinaryOp::Add, within, base)?))
}
