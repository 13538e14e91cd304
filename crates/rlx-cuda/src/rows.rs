//! Launches of the row kernels ([`crate::source::rows`]): softmax, the norms (plain, 2-D and
//! fused with a residual), the arg-extrema, the running scans and the sparse cross-entropy.
//!
//! A tensor is seen as `[outer, n, inner]` around the kernel's axis; each of the
//! `outer·inner` rows gets a warp (rows of up to [`SHORT`] elements, [`WARPS`] to a block)
//! or a block of its own (longer rows). Rows of no element launch nothing.

use crate::engine::{numel, CudaEngine};
use crate::launch::{self, contiguous, Param, Walk};
use crate::memory::DevMem;
use crate::source::rows::{self as src, Norm, Scan, ROW_THREADS};
use rlx_ir::Op;
use rlx_runtime::Arg;

type Res = Result<(), String>;

/// Rows of at most this many elements take one warp each.
const SHORT: usize = 1024;
/// Warps (rows) per block for short rows.
const WARPS: u32 = 8;
/// The fewest rows one split of a norm's parameter gradient takes (64 per warp).
const PARAM_SPLIT: usize = 512;

/// The device address of an operand.
pub(crate) fn ptr(a: Arg<'_, DevMem>) -> Param {
    Param::Ptr(a.buf.at(a.offset))
}

/// `dims` around `axis`: `(outer, n, inner)`.
fn lanes(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
}

/// A grid extent, or an error when it passes CUDA's limit.
pub(crate) fn extent(blocks: usize) -> Result<u32, String> {
    u32::try_from(blocks).ok().filter(|&b| b < i32::MAX as u32).ok_or_else(|| format!("{blocks} blocks exceed a CUDA grid"))
}

/// Launches a row kernel over `rows` rows of `n` elements: `params` end with `per_warp`,
/// which this adds.
fn over_rows(e: &CudaEngine, f: cudarc::driver::sys::CUfunction, rows: usize, n: usize, mut params: Vec<Param>) -> Res {
    if rows == 0 {
        return Ok(());
    }
    let (lanes, per_warp) = row_lanes(n);
    let (grid, threads) = if per_warp { (rows.div_ceil(WARPS as usize), WARPS * 32) } else { (rows, lanes) };
    params.push(Param::I32(per_warp as i32));
    launch::grid(&e.gpu, f, (extent(grid)?, 1, 1), (threads, 1, 1), 0, &mut params)
}

/// The threads that share a row of `n` elements, and whether they are one warp of a block
/// of [`WARPS`] rows (short rows) rather than the whole block.
fn row_lanes(n: usize) -> (u32, bool) {
    if n <= SHORT {
        (32, true)
    } else if n <= 8192 {
        (256, false)
    } else {
        (ROW_THREADS, false)
    }
}

/// Whether rows of `n` elements of `d` at these operands can take [`src::norm_held`]: f32 /
/// f16 / bf16, `n` a multiple of 4 within what the launch's lanes hold, every operand on its
/// vector's size.
fn held(d: rlx_ir::DType, n: usize, operands: &[Arg<'_, DevMem>]) -> bool {
    let lanes = row_lanes(n).0 as usize;
    let align = 4 * d.size() as u64;
    matches!(d, rlx_ir::DType::F32 | rlx_ir::DType::F16 | rlx_ir::DType::BF16)
        && n % 4 == 0
        && n <= 4 * src::VECS * lanes
        && operands.iter().all(|a| a.buf.at(a.offset) % align == 0)
}

/// `Softmax` along `axis` (Python-style) of `x` into `out`.
pub fn softmax(e: &CudaEngine, op: &Op, axis: i32, x: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Res {
    let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(axis as i64, x.dims.len())?);
    if n == 0 {
        return Ok(());
    }
    let f = e.kernel(src::softmax(x.dtype), op, &[x.dtype])?;
    over_rows(e, f, outer * inner, n, vec![ptr(out), ptr(x), Param::I64((outer * inner) as i64), Param::I64(n as i64), Param::I64(inner as i64)])
}

/// `LayerNorm` / `LayerNorm2d` (axis 1) / `RmsNorm` along `axis`: inputs `(x, gamma, beta)`.
pub fn norm(e: &CudaEngine, op: &Op, kind: Norm, axis: i32, eps: f32, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    let x = ins[0];
    let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(axis as i64, x.dims.len())?);
    if n == 0 {
        return Ok(());
    }
    let rows = outer * inner;
    if inner == 1 && held(x.dtype, n, &[x, ins[1], ins[2], out]) {
        let f = e.kernel(src::norm_held(kind, x.dtype, false), op, &[x.dtype])?;
        let params = vec![ptr(out), ptr(x), ptr(ins[1]), ptr(ins[2]), Param::I64(rows as i64), Param::I64(n as i64), Param::F32(eps)];
        return over_rows(e, f, rows, n, params);
    }
    let f = e.kernel(src::norm(kind, x.dtype), op, &[x.dtype])?;
    let params = vec![ptr(out), ptr(x), ptr(ins[1]), ptr(ins[2]), Param::I64(rows as i64), Param::I64(n as i64), Param::I64(inner as i64), Param::F32(eps)];
    over_rows(e, f, rows, n, params)
}

/// `LayerNormBackwardInput` / `RmsNormBackwardInput` along `axis`: inputs `(x, γ, ȳ)`.
pub fn norm_backward_input(e: &CudaEngine, op: &Op, kind: Norm, axis: i32, eps: f32, [x, gamma, dy]: [Arg<'_, DevMem>; 3], out: Arg<'_, DevMem>) -> Res {
    let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(axis as i64, x.dims.len())?);
    if n == 0 {
        return Ok(());
    }
    let f = e.kernel(src::norm_backward_input(kind, x.dtype), op, &[x.dtype])?;
    let rows = outer * inner;
    let params = vec![ptr(out), ptr(x), ptr(gamma), ptr(dy), Param::I64(rows as i64), Param::I64(n as i64), Param::I64(inner as i64), Param::F32(eps)];
    over_rows(e, f, rows, n, params)
}

/// The `[n]` parameter gradients of a norm along `axis`: `Σ ȳ·x̂` over the other axes for
/// `Some(kind)` (`dγ`, from each row's statistics, computed first into scratch), `Σ ȳ` for
/// `None` (`dβ`). The rows split until the device holds about four blocks per
/// multiprocessor; the splits' partials fold in a fixed order.
#[allow(clippy::too_many_arguments)]
pub fn norm_backward_params(e: &CudaEngine, op: &Op, kind: Option<Norm>, axis: i32, eps: f32, x: Arg<'_, DevMem>, dy: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Res {
    let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(axis as i64, x.dims.len())?);
    let rows = outer * inner;
    if n == 0 {
        return Ok(());
    }
    let gpu = &e.gpu;
    let acc = if x.dtype == rlx_ir::DType::F64 { 8 } else { 4 };
    let long = |v: usize| Param::I64(v as i64);
    let stats = match kind {
        Some(kind) if rows > 0 => {
            let stats = DevMem::zeroed(gpu, 2 * rows * acc).map_err(|err| err.to_string())?;
            let f = e.kernel(src::norm_stats(kind, x.dtype), op, &[x.dtype])?;
            over_rows(e, f, rows, n, vec![Param::Ptr(stats.at(0)), ptr(x), long(rows), long(n), long(inner), Param::F32(eps)])?;
            Some(stats)
        }
        _ => None,
    };
    let tiles = n.div_ceil(32);
    let want = (4 * e.split.sms()).div_ceil(tiles);
    let parts = want.clamp(1, (rows / PARAM_SPLIT).max(1)).min(65535);
    let chunk = rows.div_ceil(parts).max(1);
    let parts = rows.div_ceil(chunk).max(1);
    let scratch = if parts > 1 { Some(DevMem::zeroed(gpu, parts * n * acc).map_err(|err| err.to_string())?) } else { None };
    let at = |m: &Option<DevMem>| Param::Ptr(m.as_ref().map_or(0, |m| m.at(0)));
    let f = e.kernel(src::norm_backward_params(x.dtype), op, &[x.dtype])?;
    let mut params = vec![ptr(out), ptr(x), ptr(dy), at(&stats), at(&scratch), long(rows), long(n), long(inner), long(chunk)];
    launch::grid(gpu, f, (extent(tiles)?, parts as u32, 1), (256, 1, 1), 0, &mut params)?;
    if let Some(scratch) = scratch {
        let f = e.kernel(crate::source::reduce::combine(rlx_ir::ops::reduce::ReduceOp::Sum, x.dtype), op, &[x.dtype])?;
        let mut params = vec![ptr(out), Param::Ptr(scratch.at(0)), long(n), long(parts), long(rows)];
        launch::elementwise(gpu, f, n, &mut params)?;
    }
    // The scratch is freed on the stream, after the kernels that read it.
    Ok(())
}

/// `FusedResidualLN` / `FusedResidualRmsNorm` over the last axis: inputs `(x, residual
/// [, bias], gamma, beta)`, the residual broadcasting to `x`.
pub fn residual_norm(e: &CudaEngine, op: &Op, kind: Norm, has_bias: bool, eps: f32, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    let (x, res) = (ins[0], ins[1]);
    let r = x.dims.len();
    let n = *x.dims.last().ok_or("x needs a feature axis")?;
    if n == 0 {
        return Ok(());
    }
    // The residual's element stride along each leading axis of x (right-aligned, 0 where it
    // broadcasts), and along the feature axis.
    let (rd, own) = (res.dims, contiguous(res.dims));
    let shift = r as isize - rd.len() as isize;
    let stride = |axis: usize| -> i64 {
        let k = axis as isize - shift;
        if k < 0 || rd[k as usize] == 1 {
            0
        } else {
            own[k as usize]
        }
    };
    let lead = &x.dims[..r - 1];
    let walk = Walk::new(lead, &[(0..r - 1).map(stride).collect()])?;
    let bias = if has_bias { ptr(ins[2]) } else { Param::Ptr(0) };
    let (gamma, beta) = (ins[ins.len() - 2], ins[ins.len() - 1]);
    let rows = numel(lead);
    let mut operands = vec![x, res, gamma, beta, out];
    operands.extend(has_bias.then(|| ins[2]));
    if stride(r - 1) == 1 && held(x.dtype, n, &operands) {
        let f = e.kernel(src::norm_held(kind, x.dtype, true), op, &[x.dtype])?;
        let params = vec![ptr(out), ptr(x), ptr(res), bias, ptr(gamma), ptr(beta), Param::I64(rows as i64), Param::I64(n as i64), Param::Walk(Box::new(walk)), Param::F32(eps)];
        return over_rows(e, f, rows, n, params);
    }
    let f = e.kernel(src::residual_norm(kind, x.dtype), op, &[x.dtype])?;
    let params = vec![
        ptr(out),
        ptr(x),
        ptr(res),
        bias,
        ptr(gamma),
        ptr(beta),
        Param::I64(rows as i64),
        Param::I64(n as i64),
        Param::Walk(Box::new(walk)),
        Param::I64(stride(r - 1)),
        Param::F32(eps),
    ];
    over_rows(e, f, rows, n, params)
}

/// `ArgMax` / `ArgMin` along `axis` into I64 indices.
pub fn arg_extreme(e: &CudaEngine, op: &Op, max: bool, axis: usize, x: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Res {
    let (outer, n, inner) = lanes(x.dims, axis);
    let rows = outer * inner;
    if n == 0 && rows > 0 {
        return Err(format!("the axis {axis} of {:?} is empty: no extreme to index", x.dims));
    }
    let f = e.kernel(src::arg_extreme(max, x.dtype), op, &[x.dtype])?;
    let (lanes, per_warp) = row_lanes(n);
    // Few long rows (a vocabulary's logits) split over blocks, as one block reads too slowly.
    let parts = if per_warp || rows == 0 { 1 } else { (2 * e.split.sms() / rows).min(n.div_ceil(LONG_PART)).max(1) };
    let scratch = e.decode.pairs(rows * parts, rows).filter(|_| parts > 1);
    let (vs, is, count) = scratch.unwrap_or((0, 0, 0));
    let chunk = if scratch.is_some() { n.div_ceil(parts) } else { n };
    let mut params = vec![ptr(out), ptr(x), Param::I64(rows as i64), Param::I64(n as i64), Param::I64(inner as i64), Param::I64(chunk as i64), Param::Ptr(vs), Param::Ptr(is), Param::Ptr(count)];
    if scratch.is_none() {
        return over_rows(e, f, rows, n, params);
    }
    params.push(Param::I32(0));
    launch::grid(&e.gpu, f, (extent(rows)?, n.div_ceil(chunk) as u32, 1), (lanes, 1, 1), 0, &mut params)
}

/// The fewest elements of a row an arg-extreme block takes when rows split.
const LONG_PART: usize = 8192;

/// The running folds along `axis` (Python-style): `Cumsum`, `CumProd`, `CumMax`, and
/// `CumsumBackward` (`reverse`).
#[allow(clippy::too_many_arguments)]
pub fn scan(e: &CudaEngine, op: &Op, kind: Scan, axis: i32, exclusive: bool, reverse: bool, x: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Res {
    let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(axis as i64, x.dims.len())?);
    let f = e.kernel(src::scan(kind, x.dtype), op, &[x.dtype])?;
    let count = outer * inner;
    let mut params = vec![
        ptr(out),
        ptr(x),
        Param::I64(count as i64),
        Param::I64(n as i64),
        Param::I64(inner as i64),
        Param::I32(exclusive as i32),
        Param::I32(reverse as i32),
    ];
    launch::elementwise(&e.gpu, f, if n == 0 { 0 } else { count }, &mut params)
}

/// `SoftmaxCrossEntropyWithLogits` of `logits [.., C]` against integer `labels [..]`; a bad
/// label is reported through the engine's reports.
pub fn sparse_cross_entropy(e: &CudaEngine, op: &Op, ignore: Option<i64>, logits: Arg<'_, DevMem>, labels: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Res {
    let n = *logits.dims.last().ok_or("logits need a class axis")?;
    let rows = numel(labels.dims);
    let f = e.kernel(src::sparse_cross_entropy(logits.dtype, labels.dtype), op, &[logits.dtype, labels.dtype])?;
    let params = vec![
        ptr(out),
        ptr(logits),
        ptr(labels),
        Param::I64(rows as i64),
        Param::I64(n as i64),
        Param::I32(ignore.is_some() as i32),
        Param::I64(ignore.unwrap_or(0)),
        Param::Ptr(e.reports()),
    ];
    over_rows(e, f, rows, n, params)
}

/// `SoftmaxCrossEntropyBackward` over `(logits [.., n], labels [..], d_loss [..])` into `out`
/// shaped as the logits.
pub fn sparse_cross_entropy_backward(e: &CudaEngine, op: &Op, ignore: Option<i64>, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    let (logits, labels, dl) = (ins[0], ins[1], ins[2]);
    let n = *logits.dims.last().ok_or("logits need a class axis")?;
    let rows = numel(labels.dims);
    if numel(dl.dims) != rows || rows * n != numel(logits.dims) {
        return Err(format!("logits {:?}, labels {:?} and d_loss {:?} disagree on the rows", logits.dims, labels.dims, dl.dims));
    }
    let f = e.kernel(src::sparse_cross_entropy_backward(logits.dtype, labels.dtype).filter(|_| dl.dtype == logits.dtype), op, &[logits.dtype, labels.dtype, dl.dtype])?;
    let params = vec![
        ptr(out),
        ptr(logits),
        ptr(labels),
        ptr(dl),
        Param::I64(rows as i64),
        Param::I64(n as i64),
        Param::I32(ignore.is_some() as i32),
        Param::I64(ignore.unwrap_or(0)),
    ];
    over_rows(e, f, rows, n, params)
}

