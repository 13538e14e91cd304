//! Convolutions and pooling: `Conv`, `ConvTranspose`, `MaxPool`, `AveragePool`, `LpPool` and
//! the global pools. ONNX's explicit or automatic (`SAME_*`) padding may be asymmetric; rlx's
//! windows pad symmetrically, so uneven pads become a `Pad` (or a crop) around the window op.
//! 1-D windows run as 2-D ones over a unit height.

use super::elementwise::{act, bin, bin_scalar};
use super::shape::reshape_static;
use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::conv::{Conv, Conv3d, ConvTranspose2d, ConvTranspose3d, Pool};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
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
];

/// A window's per-axis geometry with ONNX's padding resolved to `[begin, end]` pairs.
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
    let auto = n.string("auto_pad", "NOTSET");
    let mut pads = vec![[0usize; 2]; s];
    match auto.as_str() {
        "NOTSET" => {
            if let Some(p) = n.ints("pads") {
                if p.len() != 2 * s || p.iter().any(|&v| v < 0) {
                    return invalid(format!("pads {p:?} need {} non-negative entries", 2 * s));
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
    let (x, w) = (n.input(0)?, n.input(1)?);
    let xd = cx.dims(x)?;
    let wd = cx.dims(w)?;
    let s = xd.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or_else(|| OpError::Unsupported(format!("{}-D input", xd.len())))?;
    let kernel = wd[2..].to_vec();
    let g = geometry(n, kernel, &xd[2..], false)?;
    let groups = n.int("group", 1) as usize;
    let (xp, padding) = pre_pad(cx, x, &g, 0.0, false)?;
    let mut y = match s {
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
    if let Some(b) = n.opt_input(2) {
        y = add_channel_bias(cx, y, b)?;
    }
    Ok(vec![y])
}

/// `y + b` with `b [C]` on the channel axis.
fn add_channel_bias(cx: &mut Cx<'_>, y: ValueId, b: ValueId) -> OpResult<ValueId> {
    let rank = cx.rank(y);
    let c = cx.dims(b)?.iter().product();
    let mut dims = vec![1; rank];
    dims[1] = c;
    let b = reshape_static(cx, b, &dims)?;
    bin(cx, BinaryOp::Add, y, b)
}

/// `ConvTranspose`: uneven or `output_shape`-derived padding is applied as a crop of the
/// unpadded result.
fn conv_transpose(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, w) = (n.input(0)?, n.input(1)?);
    let xd = cx.dims(x)?;
    let wd = cx.dims(w)?;
    let s = xd.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or_else(|| OpError::Unsupported(format!("{}-D input", xd.len())))?;
    let kernel = wd[2..].to_vec();
    let stride = per_axis(n, "strides", s, 1)?;
    let dilation = per_axis(n, "dilations", s, 1)?;
    let out_pad = per_axis(n, "output_padding", s, 0)?;
    let groups = n.int("group", 1) as usize;
    let full: Vec<usize> = (0..s).map(|i| (xd[2 + i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 + out_pad[i]).collect();
    let auto = n.string("auto_pad", "NOTSET");
    let mut pads = vec![[0usize; 2]; s];
    if let Some(shape) = n.ints("output_shape") {
        let shape = &shape[shape.len().saturating_sub(s)..];
        for i in 0..s {
            let total = full[i].checked_sub(shape[i] as usize).ok_or_else(|| OpError::Invalid(format!("output_shape {shape:?} exceeds the full extent")))?;
            let small = total / 2;
            pads[i] = if auto == "SAME_LOWER" { [total - small, small] } else { [small, total - small] };
        }
    } else if auto == "SAME_UPPER" || auto == "SAME_LOWER" {
        for i in 0..s {
            let total = full[i].saturating_sub(xd[2 + i] * stride[i]);
            let small = total / 2;
            pads[i] = if auto == "SAME_UPPER" { [small, total - small] } else { [total - small, small] };
        }
    } else if let Some(p) = n.ints("pads") {
        if p.len() != 2 * s || p.iter().any(|&v| v < 0) {
            return invalid(format!("pads {p:?}"));
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
    if n.proto.output.len() > 1 && !n.proto.output[1].is_empty() {
        return unsupported("the Indices output");
    }
    let xd = cx.dims(x)?;
    let s = xd.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or_else(|| OpError::Unsupported(format!("{}-D input", xd.len())))?;
    let kernel = per_axis(n, "kernel_shape", s, 0)?;
    let ceil = n.int("ceil_mode", 0) != 0;
    let g = geometry(n, kernel.clone(), &xd[2..], ceil)?;
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

/// Combines, with `op`, the strided slices of the padded `x` at every offset of the window.
fn strided_windows(cx: &mut Cx<'_>, x: ValueId, g: &Geometry, op: BinaryOp) -> OpResult<ValueId> {
    let dims = cx.dims(x)?;
    let spatial = g.kernel.len();
    let out: Vec<usize> = (0..spatial).map(|i| (dims[2 + i] - (g.kernel[i] - 1) * g.dilation[i] - 1) / g.stride[i] + 1).collect();
    let offsets: usize = g.kernel.iter().product();
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
