//! Shape ONNX ops: the reshape family (`Reshape`, `Flatten`, `Squeeze`, `Unsqueeze`),
//! `Transpose`, `Concat`, `Split`, `Slice`, `Expand`, `Tile`, `Pad`, depth/space moves, and the
//! shape-derived constants (`Shape`, `Size`, `Constant`, `ConstantOfShape`, `Range`, `Trilu`,
//! `EyeLike`).

use super::elementwise::{bin, select};
use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::tensor::{checked_dims, dtype, from_f64s, type_name};
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::reduce::Cumsum;
use rlx_ir::ops::shape::{Concat, Expand, Narrow, Pad, PadMode, Reshape, Slice, TargetDim, Transpose};
use rlx_ir::{broadcast, DType, Dim, Shape, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("Reshape", reshape),
    ("Flatten", flatten),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
    ("Transpose", transpose),
    ("Concat", concat),
    ("Split", split),
    ("Slice", slice),
    ("Expand", expand),
    ("Tile", tile),
    ("Pad", pad),
    ("DepthToSpace", depth_to_space),
    ("SpaceToDepth", space_to_depth),
    ("Shape", shape),
    ("Size", size),
    ("Constant", constant),
    ("ConstantOfShape", constant_of_shape),
    ("Range", range),
    ("Trilu", trilu),
    ("EyeLike", eye_like),
    ("CenterCropPad", center_crop_pad),
];

/// Reshapes `x` to `dims` (which may hold symbols).
pub(super) fn reshape_dims(cx: &mut Cx<'_>, x: ValueId, dims: &[Dim]) -> OpResult<ValueId> {
    if cx.ty(x).shape.dims() == dims {
        return Ok(x);
    }
    cx.add1(Reshape { new_shape: dims.iter().map(TargetDim::from).collect() }, &[x])
}

/// Reshapes `x` to static `dims`.
pub(super) fn reshape_static(cx: &mut Cx<'_>, x: ValueId, dims: &[usize]) -> OpResult<ValueId> {
    reshape_dims(cx, x, &dims.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>())
}

pub(super) fn transpose_to(cx: &mut Cx<'_>, x: ValueId, perm: &[usize]) -> OpResult<ValueId> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x);
    }
    cx.add1(Transpose { perm: perm.to_vec() }, &[x])
}

/// Broadcasts `x` to `shape`.
pub(super) fn expand_to(cx: &mut Cx<'_>, x: ValueId, shape: &Shape) -> OpResult<ValueId> {
    if &cx.ty(x).shape == shape {
        return Ok(x);
    }
    cx.add1(Expand { target_shape: shape.dims().iter().map(TargetDim::from).collect() }, &[x])
}

/// Axes given as an attribute before `since`, as an optional input from `since` on.
pub(super) fn axes_arg(cx: &Cx<'_>, n: &OnnxNode<'_, '_>, since: i64, input: usize) -> OpResult<Option<Vec<i64>>> {
    if n.opset < since {
        Ok(n.ints("axes"))
    } else {
        n.opt_input(input).map(|v| cx.const_ints(v, "axes")).transpose()
    }
}

fn reshape(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let target = if n.opset < 5 { n.ints("shape").unwrap_or_default() } else { cx.const_ints(n.input(1)?, "shape")? };
    let allow_zero = n.int("allowzero", 0) != 0;
    let in_dims = cx.ty(x).shape.0;
    let mut new_shape = Vec::with_capacity(target.len());
    for (i, &t) in target.iter().enumerate() {
        new_shape.push(match t {
            0 if !allow_zero => match in_dims.get(i) {
                Some(d) => TargetDim::from(d),
                None => return invalid(format!("shape {target:?} copies dim {i}, which the input lacks")),
            },
            t => TargetDim::Size(t),
        });
    }
    Ok(vec![cx.add1(Reshape { new_shape }, &[x])?])
}

fn flatten(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let rank = dims.len();
    let axis = n.int("axis", 1);
    let axis = if axis < 0 { axis + rank as i64 } else { axis };
    if !(0..=rank as i64).contains(&axis) {
        return invalid(format!("axis {axis} is out of range for rank {rank}"));
    }
    let (a, b) = dims.split_at(axis as usize);
    Ok(vec![reshape_static(cx, x, &[a.iter().product(), b.iter().product()])?])
}

fn normalized(axes: &[i64], rank: usize) -> OpResult<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = rlx_ir::norm_axis(a, rank).map_err(OpError::Invalid)?;
        if out.contains(&a) {
            return invalid(format!("axes {axes:?} repeat an axis"));
        }
        out.push(a);
    }
    Ok(out)
}

fn squeeze(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.ty(x).shape.0;
    let axes = match axes_arg(cx, n, 13, 1)? {
        Some(a) => normalized(&a, dims.len())?,
        None => (0..dims.len()).filter(|&i| dims[i] == Dim::Static(1)).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| dims[a].as_static().is_some_and(|d| d != 1)) {
        return invalid(format!("axis {a} has extent {}, not 1", dims[a]));
    }
    let kept: Vec<Dim> = dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d.clone()).collect();
    Ok(vec![reshape_dims(cx, x, &kept)?])
}

fn unsqueeze(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.ty(x).shape.0;
    let axes = axes_arg(cx, n, 13, 1)?.ok_or_else(|| OpError::Invalid("axes are required".into()))?;
    let out_rank = dims.len() + axes.len();
    let axes = normalized(&axes, out_rank)?;
    let mut rest = dims.into_iter();
    let out: Vec<Dim> = (0..out_rank).map(|i| if axes.contains(&i) { Dim::Static(1) } else { rest.next().unwrap_or(Dim::Static(1)) }).collect();
    Ok(vec![reshape_dims(cx, x, &out)?])
}

fn transpose(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let perm = match n.ints("perm") {
        Some(p) => normalized(&p, rank)?,
        None => (0..rank).rev().collect(),
    };
    Ok(vec![transpose_to(cx, x, &perm)?])
}

fn concat(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let xs = n.present_inputs();
    let Some(&first) = xs.first() else { return invalid("needs at least one input") };
    let axis = n.axis(n.int("axis", 0), cx.rank(first))?;
    let nonempty: Vec<ValueId> = xs.iter().copied().filter(|&x| cx.ty(x).shape.dim(axis) != &Dim::Static(0)).collect();
    let xs = if nonempty.is_empty() { vec![first] } else { nonempty };
    if xs.len() == 1 {
        return Ok(xs);
    }
    Ok(vec![cx.add1(Concat { axis }, &xs)?])
}

fn split(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let axis = n.axis(n.int("axis", 0), rank)?;
    let extent = cx.ty(x).static_dim(axis).map_err(OpError::Unsupported)?;
    let outputs = n.proto.output.len();
    let given = if n.opset < 13 { n.ints("split") } else { n.opt_input(1).map(|v| cx.const_ints(v, "split")).transpose()? };
    let sizes: Vec<usize> = match given {
        Some(s) => s.iter().map(|&v| usize::try_from(v).map_err(|_| OpError::Invalid(format!("negative split {v}")))).collect::<OpResult<_>>()?,
        None => {
            let parts = if n.opset >= 18 { n.int("num_outputs", outputs as i64) as usize } else { outputs };
            if parts == 0 {
                return invalid("splits into zero parts");
            }
            let chunk = extent.div_ceil(parts);
            (0..parts).map(|i| chunk.min(extent.saturating_sub(i * chunk))).collect()
        }
    };
    if sizes.iter().sum::<usize>() != extent {
        return invalid(format!("split sizes {sizes:?} do not add up to extent {extent}"));
    }
    let mut start = 0;
    let mut outs = Vec::with_capacity(sizes.len());
    for len in sizes {
        outs.push(cx.add1(Narrow { axis, start, len }, &[x])?);
        start += len;
    }
    Ok(outs)
}

fn slice(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let (starts, ends, axes, steps) = if n.opset < 10 {
        (n.ints("starts").unwrap_or_default(), n.ints("ends").unwrap_or_default(), n.ints("axes"), None)
    } else {
        let get = |i: usize, what: &str| n.opt_input(i).map(|v| cx.const_ints(v, what)).transpose();
        (get(1, "starts")?.unwrap_or_default(), get(2, "ends")?.unwrap_or_default(), get(3, "axes")?, get(4, "steps")?)
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return invalid("starts, ends, axes and steps differ in length");
    }
    let axes = normalized(&axes, rank)?;
    let mut y = x;
    for (((&start, &end), &axis), &step) in starts.iter().zip(&ends).zip(&axes).zip(&steps) {
        let dim = cx.ty(y).static_dim(axis).map_err(OpError::Unsupported)? as i64;
        if step == 0 {
            return invalid("step 0");
        }
        let clamp = |v: i64, lo: i64, hi: i64| {
            let v = if v < 0 { v.saturating_add(dim) } else { v };
            v.clamp(lo, hi)
        };
        let (first, len) = if step > 0 {
            let (s, e) = (clamp(start, 0, dim), clamp(end, 0, dim));
            (s, if e > s { (e - s + step - 1) / step } else { 0 })
        } else {
            let (s, e) = (clamp(start, 0, dim - 1), clamp(end, -1, dim - 1));
            (s, if s > e { (s - e + (-step) - 1) / (-step) } else { 0 })
        };
        let (first, len) = (first.max(0) as usize, len as usize);
        y = if len == 0 {
            cx.add1(Narrow { axis, start: 0, len: 0 }, &[y])?
        } else if step == 1 {
            if first == 0 && len as i64 == dim {
                y
            } else {
                cx.add1(Narrow { axis, start: first, len }, &[y])?
            }
        } else {
            cx.add1(Slice { axis, start: first, len, step }, &[y])?
        };
    }
    Ok(vec![y])
}

/// `Expand`: NumPy broadcasting of the input against the shape (either side may be 1).
fn expand(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let target = cx.const_ints(n.input(1)?, "shape")?;
    let target = Shape(checked_dims(&target).map_err(OpError::Invalid)?.into_iter().map(Dim::Static).collect());
    let out = broadcast(&cx.ty(x).shape, &target).map_err(OpError::Invalid)?;
    Ok(vec![expand_to(cx, x, &out)?])
}

/// `Tile`: `x [d…]` → `[1, d]…` expanded to `[r, d]…`, flattened pairwise.
fn tile(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let reps = cx.const_ints(n.input(1)?, "repeats")?;
    if reps.len() != dims.len() {
        return invalid(format!("repeats {reps:?} must have one entry per axis of {dims:?}"));
    }
    let reps = checked_dims(&reps).map_err(OpError::Invalid)?;
    let pairs: Vec<usize> = dims.iter().flat_map(|&d| [1, d]).collect();
    let spread = reshape_static(cx, x, &pairs)?;
    let wide: Vec<usize> = dims.iter().zip(&reps).flat_map(|(&d, &r)| [r, d]).collect();
    let wide = expand_to(cx, spread, &Shape::of(&wide))?;
    let out: Vec<usize> = dims.iter().zip(&reps).map(|(d, r)| d * r).collect();
    Ok(vec![reshape_static(cx, wide, &out)?])
}

/// `Pad`: negative pads crop (`Narrow`), positive ones grow (`Pad`).
fn pad(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let rank = cx.rank(x);
    let dt = cx.dtype(x);
    let (pads, value) = if n.opset < 11 {
        (n.ints("pads").unwrap_or_default(), n.float("value", 0.0) as f64)
    } else {
        let pads = cx.const_ints(n.input(1)?, "pads")?;
        let value = match n.opt_input(2) {
            Some(v) => cx.const_f64s(v).and_then(|c| c.first().copied()).ok_or_else(|| OpError::Unsupported("constant_value must be known at import".into()))?,
            None => 0.0,
        };
        (pads, value)
    };
    let axes = match n.opt_input(3) {
        Some(v) => normalized(&cx.const_ints(v, "axes")?, rank)?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return invalid(format!("pads {pads:?} need two entries per padded axis ({})", axes.len()));
    }
    let mode = match n.string("mode", "constant").as_str() {
        "constant" => PadMode::Constant(value),
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Replicate,
        "wrap" => PadMode::Circular,
        m => return invalid(format!("mode `{m}`")),
    };
    let mut y = x;
    let mut grow = vec![[0usize; 2]; rank];
    for (i, &a) in axes.iter().enumerate() {
        let (before, after) = (pads[i], pads[i + axes.len()]);
        if before < 0 || after < 0 {
            let dim = cx.ty(y).static_dim(a).map_err(OpError::Unsupported)? as i64;
            let start = (-before).max(0);
            let len = (dim - start - (-after).max(0)).max(0);
            y = cx.add1(Narrow { axis: a, start: start as usize, len: len as usize }, &[y])?;
        }
        grow[a] = [before.max(0) as usize, after.max(0) as usize];
    }
    if grow.iter().all(|p| p == &[0, 0]) {
        return Ok(vec![y]);
    }
    let mode = match mode {
        PadMode::Constant(v) if dt == DType::Bool => PadMode::Constant(f64::from(v != 0.0)),
        m => m,
    };
    Ok(vec![cx.add1(Pad { pads: grow, mode }, &[y])?])
}

fn depth_to_space(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let [b, c, h, w]: [usize; 4] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("input must be NCHW".into()))?;
    let bs = n.int("blocksize", 0) as usize;
    if bs == 0 || c % (bs * bs) != 0 {
        return invalid(format!("blocksize {bs} must divide the {c} channels into squares"));
    }
    let c2 = c / (bs * bs);
    let (split, perm) = if n.string("mode", "DCR") == "CRD" {
        ([b, c2, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([b, bs, bs, c2, h, w], [0, 3, 4, 1, 5, 2])
    };
    let y = reshape_static(cx, x, &split)?;
    let y = transpose_to(cx, y, &perm)?;
    Ok(vec![reshape_static(cx, y, &[b, c2, h * bs, w * bs])?])
}

fn space_to_depth(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let [b, c, h, w]: [usize; 4] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("input must be NCHW".into()))?;
    let bs = n.int("blocksize", 0) as usize;
    if bs == 0 || h % bs != 0 || w % bs != 0 {
        return invalid(format!("blocksize {bs} must divide {h}×{w}"));
    }
    let y = reshape_static(cx, x, &[b, c, h / bs, bs, w / bs, bs])?;
    let perm = if n.string("mode", "DCR") == "CRD" { [0, 1, 3, 5, 2, 4] } else { [0, 3, 5, 1, 2, 4] };
    let y = transpose_to(cx, y, &perm)?;
    Ok(vec![reshape_static(cx, y, &[b, c * bs * bs, h / bs, w / bs])?])
}

fn shape(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let r = dims.len() as i64;
    let norm = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = norm(n.int("start", 0));
    let end = norm(n.int("end", r));
    let picked: Vec<i64> = dims[start..end.max(start)].iter().map(|&d| d as i64).collect();
    Ok(vec![cx.ints(&picked)?])
}

fn size(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let count: usize = cx.dims(n.input(0)?)?.iter().product();
    Ok(vec![cx.bytes(DType::I64, &[], (count as i64).to_le_bytes().to_vec())?])
}

fn constant(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    if let Some(t) = n.tensor("value")? {
        return Ok(vec![cx.bytes(t.dtype, &t.dims, t.bytes)?]);
    }
    let v = if let Some(a) = n.attr("value_float") {
        cx.scalar(DType::F32, a.f as f64)?
    } else if let Some(a) = n.attr("value_int") {
        cx.bytes(DType::I64, &[], a.i.to_le_bytes().to_vec())?
    } else if let Some(f) = n.floats("value_floats") {
        cx.values(DType::F32, &[f.len()], &f.iter().map(|&v| v as f64).collect::<Vec<_>>())?
    } else if let Some(i) = n.ints("value_ints") {
        cx.ints(&i)?
    } else {
        return unsupported("only tensor, float and int values (no strings or sparse tensors)");
    };
    Ok(vec![v])
}

fn constant_of_shape(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let dims = checked_dims(&cx.const_ints(n.input(0)?, "shape")?).map_err(OpError::Invalid)?;
    let (dt, one) = match n.tensor("value")? {
        Some(t) if t.numel() == 1 => (t.dtype, t.bytes),
        Some(t) => return invalid(format!("value must hold one element, has {}", t.numel())),
        None => (DType::F32, 0f32.to_le_bytes().to_vec()),
    };
    let scalar = cx.bytes(dt, &[], one)?;
    Ok(vec![expand_to(cx, scalar, &Shape::of(&dims))?])
}

/// `Range`: `start + delta·[0, 1, …, count)` with the count from the constant operands.
fn range(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (start, limit, delta) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let dt = cx.dtype(start);
    let scalar = |cx: &Cx<'_>, v: ValueId, what: &str| -> OpResult<f64> {
        cx.const_f64s(v).and_then(|c| c.first().copied()).ok_or_else(|| OpError::Unsupported(format!("{what} must be known at import")))
    };
    let (s, l, d) = (scalar(cx, start, "start")?, scalar(cx, limit, "limit")?, scalar(cx, delta, "delta")?);
    if d == 0.0 {
        return invalid("delta is 0");
    }
    let count = ((l - s) / d).ceil().max(0.0);
    if count > crate::onnx::tensor::MAX_ELEMENTS as f64 {
        return invalid(format!("{count} elements"));
    }
    let count = count as usize;
    let ones = cx.bytes(dt, &[count], from_f64s(dt, &vec![1.0; count]))?;
    let steps = cx.add1(Cumsum { axis: 0, exclusive: true }, &[ones])?;
    let scaled = bin(cx, BinaryOp::Mul, steps, delta)?;
    Ok(vec![bin(cx, BinaryOp::Add, scaled, start)?])
}

/// `Trilu`: keeps the upper (or lower) triangle from diagonal `k` of the last two axes.
fn trilu(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    if dims.len() < 2 {
        return invalid("input needs at least two axes");
    }
    let k = match n.opt_input(1) {
        Some(v) => cx.const_ints(v, "k")?.first().copied().unwrap_or(0),
        None => 0,
    };
    let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let upper = n.int("upper", 1) != 0;
    let keep: Vec<f64> = (0..rows * cols)
        .map(|p| {
            let (i, j) = ((p / cols) as i64, (p % cols) as i64);
            f64::from(u8::from(if upper { j - i >= k } else { j - i <= k }))
        })
        .collect();
    let mask = cx.values(DType::Bool, &[rows, cols], &keep)?;
    let zero = cx.scalar(cx.dtype(x), 0.0)?;
    Ok(vec![select(cx, mask, x, zero)?])
}

fn eye_like(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let [rows, cols]: [usize; 2] = cx.dims(x)?.try_into().map_err(|_| OpError::Invalid("input must be 2-D".into()))?;
    let dt = match n.attr("dtype") {
        Some(a) => dtype(a.i as i32).ok_or_else(|| OpError::Unsupported(format!("dtype {}", type_name(a.i as i32))))?,
        None => cx.dtype(x),
    };
    let k = n.int("k", 0);
    let values: Vec<f64> = (0..rows * cols).map(|p| f64::from(u8::from((p % cols) as i64 - (p / cols) as i64 == k))).collect();
    Ok(vec![cx.values(dt, &[rows, cols], &values)?])
}

/// `CenterCropPad`: each listed axis cropped or zero-padded to its target, centred (the extra
/// cell goes to the end).
fn center_crop_pad(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dims = cx.dims(x)?;
    let target = checked_dims(&cx.const_ints(n.input(1)?, "shape")?).map_err(OpError::Invalid)?;
    let axes = match n.ints("axes") {
        Some(a) => normalized(&a, dims.len())?,
        None => (0..dims.len()).collect(),
    };
    if axes.len() != target.len() {
        return invalid(format!("shape {target:?} needs one entry per axis {axes:?}"));
    }
    let mut y = x;
    let mut pads = vec![[0usize; 2]; dims.len()];
    for (&a, &t) in axes.iter().zip(&target) {
        let d = dims[a];
        if t < d {
            y = cx.add1(Narrow { axis: a, start: (d - t) / 2, len: t }, &[y])?;
        } else if t > d {
            let before = (t - d) / 2;
            pads[a] = [before, t - d - before];
        }
    }
    if pads.iter().any(|p| p != &[0, 0]) {
        y = cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[y])?;
    }
    Ok(vec![y])
}
