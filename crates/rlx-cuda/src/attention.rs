//! Launches of `Attention` and the rotary embeddings ([`crate::source::attention`]).
//!
//! Attention: one block per `(batch, head)` and run of up to [`MAX_WARPS`] query rows, a
//! warp per row; dynamic shared memory holds the block's query rows, one key and one value
//! tile, the tile's weights and the rows' running sums, all `float`:
//! `4·(warps·d + KT·(d + 1) + KT·dv + warps·KT + warps·dv)` bytes (about 42 KiB for
//! `d = dv = 128` and 8 warps); past the default 48 KiB the kernel opts in to the device's
//! larger limit.

use crate::cudnn;
use crate::engine::{numel, CudaEngine};
use crate::launch::{self, broadcast, Param};
use crate::memory::DevMem;
use crate::rows::{extent, ptr};
use crate::source::attention::{self as src, Masking, KEY_TILE, MAX_WARPS};
use crate::source::flash;
use cudarc::driver::{result as cu, sys};
use rlx_ir::ops::attention::{Attention, MaskKind, RopeStyle};
use rlx_ir::{DType, Op};
use rlx_runtime::Arg;

type Res = Result<(), String>;

/// The shared memory a block may use without opting in.
const DEFAULT_SHARED: usize = 48 * 1024;

/// The attention kernels' `struct Attn` (its C twin is in [`crate::source::attention`]):
/// field for field the same types in the same order, so the same layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnArgs {
    /// Element strides of batch, head and row of Q, K, V and the output.
    q: [i64; 3],
    k: [i64; 3],
    v: [i64; 3],
    o: [i64; 3],
    /// Strides of the mask or bias over `[B, H, S_q, S_k]`.
    mask: [i64; 4],
    heads: i64,
    group: i64,
    s_q: i64,
    s_k: i64,
    d: i64,
    dv: i64,
    window: i64,
    causal: i32,
    scale: f32,
    softcap: f32,
}

const _: () = assert!(std::mem::size_of::<AttnArgs>() == 200);

/// Of an attention operand of `dims` with `heads` heads: the element strides of batch, head
/// and row, the rows, and the channels per head. Rank 4 is `[B, H, S, D]`, rank 3
/// `[B, S, H·D]`, rank 2 `[S, H·D]`.
fn layout(dims: &[usize], heads: usize) -> ([i64; 3], usize, usize) {
    let i = |v: usize| v as i64;
    match *dims {
        [_, h, s, d] => ([i(h * s * d), i(s * d), i(d)], s, d),
        [_, s, w] => ([i(s * w), i(w / heads), i(w)], s, w / heads),
        [s, w] => ([0, i(w / heads), i(w)], s, w / heads),
        _ => ([0; 3], 0, 0),
    }
}

/// The geometry of attention over `q`, `k`, `v` and the output (or its gradient) `o`, of
/// `dims` each, with `heads` query heads: the kernels' arguments and the batch.
fn geometry(heads: usize, dims: [&[usize]; 4], kv: usize, mask: MaskKind, scale: f32, softcap: f32) -> (AttnArgs, usize) {
    let batch = if dims[0].len() >= 3 { dims[0][0] } else { 1 };
    let (qs, s_q, d) = layout(dims[0], heads);
    let (ks, s_k, _) = layout(dims[1], kv);
    let (vs, _, dv) = layout(dims[2], kv);
    let (os, _, _) = layout(dims[3], heads);
    let args = AttnArgs {
        q: qs,
        k: ks,
        v: vs,
        o: os,
        mask: [0; 4],
        heads: heads as i64,
        group: (heads / kv).max(1) as i64,
        s_q: s_q as i64,
        s_k: s_k as i64,
        d: d as i64,
        dv: dv as i64,
        window: if let MaskKind::SlidingWindow(w) = mask { w as i64 } else { 0 },
        causal: matches!(mask, MaskKind::Causal | MaskKind::SlidingWindow(_)) as i32,
        scale,
        softcap,
    };
    (args, batch)
}

/// The logit scale: `given`, or `1/√head_dim` computed in f64 and then rounded, as the CPU
/// takes it.
pub(crate) fn score_scale(given: Option<f32>, head_dim: usize) -> f32 {
    given.map_or(1.0 / (head_dim as f64).sqrt(), f64::from) as f32
}

/// `Attention`: inputs `(q, k, v)` and the mask or bias of a `Custom` / `Bias` mask. f16/bf16
/// heads of 16 to 128 channels (a multiple of 16) masked by position or by a key mask run the
/// tensor-core kernels ([`crate::source::flash`]) where [`flash_takes`] them; the rest the
/// scalar kernel.
pub fn attention(e: &CudaEngine, op: &Op, a: &Attention, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    if !(2..=4).contains(&q.dims.len()) {
        return Err(format!("q {:?} must be [B, H, S, D], [B, S, H·D] or [S, H·D]", q.dims));
    }
    let heads = a.num_heads;
    let kv = a.kv_heads_of_dims(k.dims).max(1);
    let scale = score_scale(a.score_scale, a.head_dim);
    let (mut args, batch) = geometry(heads, [q.dims, k.dims, v.dims, out.dims], kv, a.mask_kind, scale, a.attn_logit_softcap.unwrap_or(0.0));
    let (s_q, s_k, d, dv) = (args.s_q as usize, args.s_k as usize, args.d as usize, args.dv as usize);
    let masking = match a.mask_kind {
        MaskKind::None | MaskKind::Causal | MaskKind::SlidingWindow(_) => Masking::Ranges,
        MaskKind::Custom => Masking::Keys(ins[3].dtype),
        MaskKind::Bias => Masking::Bias(ins[3].dtype),
    };
    args.mask = match a.mask_kind {
        MaskKind::Custom => {
            let s = broadcast(ins[3].dims, &[batch, s_k]);
            [s[0], 0, 0, s[1]]
        }
        MaskKind::Bias => {
            let s = broadcast(ins[3].dims, &[batch, heads, s_q, s_k]);
            [s[0], s[1], s[2], s[3]]
        }
        _ => [0; 4],
    };
    if numel(out.dims) == 0 {
        return Ok(());
    }
    let key_mask = match masking {
        Masking::Ranges => Some(None),
        Masking::Keys(m) => Some(Some(m)),
        Masking::Bias(_) => None,
    };
    if masking == Masking::Ranges && fused_forward(e, &args, batch, &[q, k, v, out], None)? {
        return Ok(());
    }
    if let (Some(mask), true) = (key_mask, flash_takes(q.dtype, &args, &[q, k, v, out])) {
        let f = e.kernel(flash::forward(q.dtype, d, false, mask), op, &[q.dtype; 3])?;
        let kmask = if mask.is_some() { ptr(ins[3]) } else { Param::Ptr(0) };
        let mut params = vec![ptr(out), ptr(q), ptr(k), ptr(v), Param::Ptr(0), Param::Ptr(0), Param::Ptr(0), Param::I64(0), kmask, Param::Attn(Box::new(args))];
        return flash_launch(e, f, (batch * heads, s_q.div_ceil(flash::FWD_ROWS)), (flash::forward_shared(d), d), &mut params);
    }
    let dtypes: Vec<_> = ins.iter().map(|a| a.dtype).collect();
    let f = e.kernel(src::attention(q.dtype, masking), op, &dtypes)?;
    let warps = (s_q as u32).clamp(1, MAX_WARPS);
    let w = warps as usize;
    let floats = w * d + KEY_TILE * (d + 1) + KEY_TILE * dv + w * KEY_TILE + w * dv;
    let shared = 4 * floats;
    if shared > DEFAULT_SHARED {
        allow_shared(e, f, shared, (d, dv))?;
    }
    let blocks = extent(batch * heads * s_q.div_ceil(w))?;
    let extra = if a.mask_kind.takes_input() { ptr(ins[3]) } else { Param::Ptr(0) };
    let mut params = vec![ptr(out), ptr(q), ptr(k), ptr(v), extra, Param::Attn(Box::new(args))];
    launch::grid(&e.gpu, f, (blocks, 1, 1), (warps * 32, 1, 1), shared as u32, &mut params)
}

/// Whether the tensor-core kernels take attention of `args` over `tensors` of dtype `dt`:
/// f16/bf16 heads of 16 to 128 channels, a multiple of 16 (as wide for V), some keys, every
/// query row keeping a key (causal with at least as many keys as queries), and rows whose
/// 16-byte chunks are aligned.
fn flash_takes(dt: DType, args: &AttnArgs, tensors: &[Arg<'_, DevMem>]) -> bool {
    let strides = [args.q, args.k, args.v, args.o];
    flash::takes(dt, args.d as usize)
        && args.d == args.dv
        && args.s_k > 0
        && (args.causal == 0 || args.s_q <= args.s_k)
        && (args.s_q as usize).div_ceil(flash::BWD_ROWS) < 65536
        && (args.s_k as usize).div_ceil(flash::BWD_KEYS) < 65536
        && strides.iter().flatten().all(|s| s % 8 == 0)
        && tensors.iter().all(|t| t.buf.at(t.offset) % 16 == 0)
}

/// Launches a flash kernel over `(B·H, blocks)` with its shared memory.
fn flash_launch(e: &CudaEngine, f: sys::CUfunction, (heads, blocks): (usize, usize), (shared, d): (usize, usize), params: &mut [Param]) -> Res {
    if heads == 0 || blocks == 0 {
        return Ok(());
    }
    allow_shared(e, f, shared, (d, d))?;
    let grid = (extent(heads)?, extent(blocks)?, 1);
    launch::grid(&e.gpu, f, grid, (flash::THREADS, 1, 1), shared as u32, params)
}

/// `AttentionBackwardAll` (`wrt` `None`: outputs `dQ, dK, dV`) or `AttentionBackward` of
/// input `wrt` (one output), over `(q, k, v, dy)` with a mask by position: the statistics
/// pass (log-sum-exp and `D = Σ dO∘O` per row, into scratch), then the `dK`/`dV` and the `dQ`
/// kernels, each launched only where its gradient is wanted.
#[allow(clippy::too_many_arguments)]
pub fn backward(e: &CudaEngine, op: &Op, heads: usize, head_dim: usize, mask: MaskKind, wrt: Option<usize>, ins: &[Arg<'_, DevMem>], outs: &[Arg<'_, DevMem>]) -> Res {
    let (q, k, v, dy) = (ins[0], ins[1], ins[2], ins[3]);
    if !(2..=4).contains(&q.dims.len()) {
        return Err(format!("q {:?} must be [B, H, S, D], [B, S, H·D] or [S, H·D]", q.dims));
    }
    let scale = score_scale(None, head_dim);
    let (args, batch) = geometry(heads, [q.dims, k.dims, v.dims, dy.dims], heads, mask, scale, 0.0);
    let grad = |i: usize| match wrt {
        None => outs.get(i).copied(),
        Some(w) if w == i => outs.first().copied(),
        Some(_) => None,
    };
    let (dq, dk, dv) = (grad(0), grad(1), grad(2));
    let mut all = vec![q, k, v, dy];
    all.extend([dq, dk, dv].into_iter().flatten());
    let (s_q, s_k, d) = (args.s_q as usize, args.s_k as usize, args.d as usize);
    let fits = s_q.div_ceil(flash::BWD_ROWS) < 65536 && s_k.div_ceil(flash::BWD_KEYS) < 65536;
    if !flash::takes(q.dtype, d) || args.dv != args.d || !fits || !all.iter().all(|t| t.buf.at(t.offset) % 16 == 0) {
        return Err(format!("the CUDA attention backward takes f16/bf16 heads of 16 to 128 channels (a multiple of 16) with 16-byte aligned rows, not q {:?} of {}", q.dims, q.dtype));
    }
    if fused_backward(e, q.dtype, &args, batch, [q, k, v, dy], [dq, dk, dv], Saved::Recompute)? {
        return Ok(());
    }
    let bh = batch * heads;
    let pad = s_q.div_ceil(flash::BWD_ROWS) * flash::BWD_ROWS;
    let scratch = DevMem::zeroed(&e.gpu, 2 * bh * pad * 4).map_err(|err| err.to_string())?;
    let stats = || [Param::Ptr(scratch.at(0)), Param::Ptr(scratch.at(bh * pad * 4)), Param::I64(pad as i64)];
    let opt = |a: Option<Arg<'_, DevMem>>| a.map_or(Param::Ptr(0), ptr);
    let boxed = || Param::Attn(Box::new(args));
    let dt = [q.dtype; 4];
    let f = e.kernel(flash::forward(q.dtype, d, true, None), op, &dt)?;
    let mut params = vec![Param::Ptr(0), ptr(q), ptr(k), ptr(v), ptr(dy)];
    params.extend(stats());
    params.extend([Param::Ptr(0), boxed()]);
    flash_launch(e, f, (bh, s_q.div_ceil(flash::FWD_ROWS)), (flash::forward_shared(d), d), &mut params)?;
    if dk.is_some() || dv.is_some() {
        let f = e.kernel(flash::key_grads(q.dtype, d), op, &dt)?;
        let mut params = vec![opt(dk), opt(dv), ptr(q), ptr(k), ptr(v), ptr(dy)];
        params.extend(stats());
        params.push(boxed());
        flash_launch(e, f, (bh, s_k.div_ceil(flash::BWD_KEYS)), (flash::key_grads_shared(d), d), &mut params)?;
    }
    if let Some(dq) = dq {
        let f = e.kernel(flash::query_grads(q.dtype, d), op, &dt)?;
        let mut params = vec![ptr(dq), ptr(q), ptr(k), ptr(v), ptr(dy)];
        params.extend(stats());
        params.push(boxed());
        flash_launch(e, f, (bh, s_q.div_ceil(flash::BWD_ROWS)), (flash::query_grads_shared(d), d), &mut params)?;
    }
    // Freed on the stream, after the kernels that read it.
    drop(scratch);
    Ok(())
}

/// cuDNN's plan shape for attention over `args` in `dt`, when its fused kernels take it:
/// f16/bf16, as many key as query heads, heads of at most 256 channels (a multiple of 8, as
/// wide for V), no window or softcap, causal only over square scores, rows of whole 16-byte
/// chunks. `strides`: batch, head and row strides of each operand in [`cudnn::Shape`]'s order.
fn fused_shape(backward: bool, dt: DType, args: &AttnArgs, batch: usize, strides: Vec<[i64; 3]>) -> Option<cudnn::Shape> {
    let takes = matches!(dt, DType::F16 | DType::BF16)
        && args.group == 1
        && args.d == args.dv
        && args.d % 8 == 0
        && args.d <= 256
        && args.window == 0
        && args.softcap == 0.0
        && (args.causal == 0 || args.s_q == args.s_k)
        && args.s_q > 0
        && args.s_k > 0
        && strides.iter().flatten().all(|s| s % 8 == 0);
    takes.then_some(cudnn::Shape {
        backward,
        dtype: dt,
        batch,
        heads: args.heads as usize,
        s_q: args.s_q as usize,
        s_k: args.s_k as usize,
        d: args.d as usize,
        causal: args.causal != 0,
        strides,
    })
}

/// Whether every tensor starts on a 16-byte boundary.
fn aligned(tensors: &[Arg<'_, DevMem>]) -> bool {
    tensors.iter().all(|t| t.buf.at(t.offset) % 16 == 0)
}

/// Offsets of consecutive regions of `sizes` bytes, each 256-byte aligned, and the total.
fn carve(sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut at = 0;
    let offsets = sizes
        .iter()
        .map(|&n| {
            let o = at;
            at += n.div_ceil(256) * 256;
            o
        })
        .collect();
    (offsets, at)
}

/// Attention forward through cuDNN where it takes `(q, k, v, out)` (`Ok(false)`: it does not,
/// and nothing was launched). The rows' log-sum-exp goes to `lse` where given, else to scratch.
fn fused_forward(e: &CudaEngine, args: &AttnArgs, batch: usize, t: &[Arg<'_, DevMem>; 4], lse: Option<Arg<'_, DevMem>>) -> Result<bool, String> {
    let Some(dnn) = e.cudnn() else {
        return Ok(false);
    };
    let Some(shape) = fused_shape(false, t[0].dtype, args, batch, vec![args.q, args.k, args.v, args.o]) else {
        return Ok(false);
    };
    if !aligned(t) || !aligned(lse.as_slice()) || !dnn.takes(&shape) {
        return Ok(false);
    }
    let rows = batch * args.heads as usize * args.s_q as usize;
    let (at, total) = carve(&[if lse.is_some() { 0 } else { rows * 4 }, dnn.workspace(&shape)?]);
    let scratch = DevMem::uninit(&e.gpu, total).map_err(|err| err.to_string())?;
    let ptrs: Vec<_> = t.iter().map(|a| a.buf.at(a.offset)).collect();
    let stats = lse.map_or(scratch.at(at[0]), |l| l.buf.at(l.offset));
    dnn.launch(&shape, &cudnn::Run { ptrs: &ptrs, stats, scale: args.scale }, scratch.at(at[1]), [0, 0])?;
    Ok(true)
}

/// Where cuDNN's backward reads O and the rows' log-sum-exp from: its forward run again into
/// scratch, or what a saving forward kept (O's address and batch, head and row strides, and
/// the log-sum-exp's address).
#[derive(Clone, Copy)]
enum Saved {
    Recompute,
    Kept { o: (sys::CUdeviceptr, [i64; 3]), lse: sys::CUdeviceptr },
}

/// Attention backward through cuDNN where it takes the shapes (`Ok(false)`: it does not, and
/// nothing was launched): O and the log-sum-exp from `saved`, then cuDNN's backward writes dQ,
/// dK and dV (into scratch where a gradient is not wanted).
fn fused_backward(e: &CudaEngine, dt: DType, args: &AttnArgs, batch: usize, t: [Arg<'_, DevMem>; 4], grads: [Option<Arg<'_, DevMem>>; 3], saved: Saved) -> Result<bool, String> {
    let Some(dnn) = e.cudnn() else {
        return Ok(false);
    };
    let (h, s_q, s_k, d) = (args.heads, args.s_q, args.s_k, args.d);
    let packed = |rows: i64| [h * rows * d, rows * d, d];
    let grad_strides = |i: usize, rows: i64| grads[i].map_or(packed(rows), |g| layout(g.dims, h as usize).0);
    let o_strides = match saved {
        Saved::Recompute => packed(s_q),
        Saved::Kept { o, .. } => o.1,
    };
    let fwd = fused_shape(false, dt, args, batch, vec![args.q, args.k, args.v, o_strides]);
    let bwd = fused_shape(true, dt, args, batch, vec![args.q, args.k, args.v, o_strides, args.o, grad_strides(0, s_q), grad_strides(1, s_k), grad_strides(2, s_k)]);
    let (Some(fwd), Some(bwd)) = (fwd, bwd) else {
        return Ok(false);
    };
    let given: Vec<_> = t.iter().copied().chain(grads.iter().flatten().copied()).collect();
    let recompute = matches!(saved, Saved::Recompute);
    if !aligned(&given) || (recompute && !dnn.takes(&fwd)) || !dnn.takes(&bwd) {
        return Ok(false);
    }
    let (bh, elt) = (batch * h as usize, dt.size());
    let (q_elems, k_elems) = (bh * (s_q * d) as usize, bh * (s_k * d) as usize);
    let rows = bh * s_q as usize;
    let missing = |i: usize, n: usize| if grads[i].is_some() { 0 } else { n * elt };
    let kept = |n: usize| if recompute { n } else { 0 };
    let workspace = if recompute { dnn.workspace(&fwd)? } else { 0 }.max(dnn.workspace(&bwd)?);
    let sizes = [kept(q_elems * elt), kept(rows * 4), rows * 4, q_elems * 4, missing(0, q_elems), missing(1, k_elems), missing(2, k_elems), workspace];
    let (at, total) = carve(&sizes);
    let scratch = DevMem::uninit(&e.gpu, total).map_err(|err| err.to_string())?;
    let (row_dot, dq_sum, ws) = (scratch.at(at[2]), scratch.at(at[3]), scratch.at(at[7]));
    let scale = args.scale;
    let ins: Vec<_> = t.iter().map(|a| a.buf.at(a.offset)).collect();
    let (o, stats) = match saved {
        Saved::Recompute => {
            let (o, stats) = (scratch.at(at[0]), scratch.at(at[1]));
            dnn.launch(&fwd, &cudnn::Run { ptrs: &[ins[0], ins[1], ins[2], o], stats, scale }, ws, [0, 0])?;
            (o, stats)
        }
        Saved::Kept { o, lse } => (o.0, lse),
    };
    // SAFETY: `dq_sum` holds `q_elems` f32 of the scratch allocated above on this stream.
    unsafe { cu::memset_d8_async(dq_sum, 0, q_elems * 4, e.gpu.stream) }.map_err(|err| format!("zeroing attention scratch: {err:?}"))?;
    let out = |i: usize| grads[i].map_or(scratch.at(at[4 + i]), |g| g.buf.at(g.offset));
    let ptrs = [ins[0], ins[1], ins[2], o, ins[3], out(0), out(1), out(2)];
    dnn.launch(&bwd, &cudnn::Run { ptrs: &ptrs, stats, scale }, ws, [row_dot, dq_sum])?;
    Ok(true)
}

/// cuDNN's forward and backward shapes for a saved pair ([`crate::saved`]) of `heads` heads of
/// `head_dim` channels over `q`, `k`, `v` (the forward's output and the backward's `dy` as
/// wide as `q`) of dtype `dt`, masked by `mask`; `None` where cuDNN would not take them.
pub(crate) fn saved_shapes(dt: DType, heads: usize, head_dim: usize, mask: MaskKind, [q, k, v]: [&[usize]; 3]) -> Option<(cudnn::Shape, cudnn::Shape)> {
    let scale = score_scale(None, head_dim);
    let (args, batch) = geometry(heads, [q, k, v, q], heads, mask, scale, 0.0);
    let fwd = fused_shape(false, dt, &args, batch, vec![args.q, args.k, args.v, args.o])?;
    let bwd = fused_shape(true, dt, &args, batch, vec![args.q, args.k, args.v, args.o, args.o, args.q, args.k, args.v])?;
    Some((fwd, bwd))
}

/// The forward of a saved pair: `(q, k, v)` into `outs` = `(out, lse)`, the rows'
/// log-sum-exp (f32 `[B, H, S_q]`) kept for the backward.
pub fn saving_forward(e: &CudaEngine, (heads, head_dim, mask): (usize, usize, MaskKind), ins: &[Arg<'_, DevMem>], outs: &[Arg<'_, DevMem>]) -> Res {
    let ([q, k, v], [out, lse]) = (three(ins)?, two(outs)?);
    let scale = score_scale(None, head_dim);
    let (args, batch) = geometry(heads, [q.dims, k.dims, v.dims, out.dims], heads, mask, scale, 0.0);
    if !fused_forward(e, &args, batch, &[q, k, v, out], Some(lse))? {
        return Err(format!("cuDNN does not take the saving attention forward over q {:?} (or is not loaded)", q.dims));
    }
    Ok(())
}

/// The backward of a saved pair: `(q, k, v, dy, o, lse)` into `(dq, dk, dv)`.
pub fn saved_backward(e: &CudaEngine, (heads, head_dim, mask): (usize, usize, MaskKind), ins: &[Arg<'_, DevMem>], outs: &[Arg<'_, DevMem>]) -> Res {
    let [q, k, v, dy, o, lse] = ins else {
        return Err(format!("a saved attention backward takes q, k, v, dy, o and lse, not {} operands", ins.len()));
    };
    let [dq, dk, dv] = three(outs)?;
    let scale = score_scale(None, head_dim);
    let (args, batch) = geometry(heads, [q.dims, k.dims, v.dims, dy.dims], heads, mask, scale, 0.0);
    let saved = Saved::Kept { o: (o.buf.at(o.offset), layout(o.dims, heads).0), lse: lse.buf.at(lse.offset) };
    if !aligned(&[*o, *lse]) || !fused_backward(e, q.dtype, &args, batch, [*q, *k, *v, *dy], [Some(dq), Some(dk), Some(dv)], saved)? {
        return Err(format!("cuDNN does not take the saved attention backward over q {:?}", q.dims));
    }
    Ok(())
}

fn three<'a, 'b>(args: &'b [Arg<'a, DevMem>]) -> Result<[Arg<'a, DevMem>; 3], String> {
    <[Arg<'a, DevMem>; 3]>::try_from(args).map_err(|_| format!("3 operands expected, {} given", args.len()))
}

fn two<'a, 'b>(args: &'b [Arg<'a, DevMem>]) -> Result<[Arg<'a, DevMem>; 2], String> {
    <[Arg<'a, DevMem>; 2]>::try_from(args).map_err(|_| format!("2 operands expected, {} given", args.len()))
}

/// Lets `f` use `bytes` of dynamic shared memory, or says that the device has too little
/// for heads of `d`/`dv` channels.
fn allow_shared(e: &CudaEngine, f: sys::CUfunction, bytes: usize, (d, dv): (usize, usize)) -> Res {
    let most = e
        .gpu
        .ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|err| format!("reading the device's shared memory limit: {err:?}"))?;
    if bytes > most.max(0) as usize {
        return Err(format!("attention over heads of {d} (values {dv}) channels needs {bytes} bytes of shared memory; the device has {most}"));
    }
    // SAFETY: `f` is a loaded kernel of the bound context; the value is within the device's limit.
    unsafe { cu::function::set_function_attribute(f, sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32) }
        .map_err(|err| format!("allowing {bytes} bytes of shared memory: {err:?}"))
}

/// `Rope` / `RopeBackward` (`negate`: the sine negated): inputs `(x, cos, sin)`.
#[allow(clippy::too_many_arguments)]
pub fn rope(e: &CudaEngine, op: &Op, head_dim: usize, n_rot: usize, style: RopeStyle, negate: bool, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    let (x, cos, sin) = (ins[0], ins[1], ins[2]);
    let (seq, width) = match *x.dims {
        [_, s, h, d] => (s, h * d),
        [_, s, w] => (s, w),
        [s, w] => (s, w),
        _ => return Err(format!("x {:?} must be [B, S, H·D], [B, S, H, D] or [S, H·D]", x.dims)),
    };
    let half = n_rot / 2;
    let stride = if cos.dims.len() == 1 { half } else { cos.dims[cos.dims.len() - 1] };
    if seq > 0 && (seq - 1) * stride + half > numel(cos.dims) {
        return Err(format!("the cos/sin tables {:?} have no row for position {} (x is {:?})", cos.dims, seq - 1, x.dims));
    }
    let f = e.kernel(src::rope(x.dtype, cos.dtype), op, &[x.dtype, cos.dtype])?;
    let n = numel(x.dims);
    let mut params = vec![
        ptr(out),
        ptr(x),
        ptr(cos),
        ptr(sin),
        Param::I64(n as i64),
        Param::I64(width as i64),
        Param::I64(seq as i64),
        Param::I64(head_dim as i64),
        Param::I64(n_rot as i64),
        Param::I64(stride as i64),
        Param::I32((style == RopeStyle::GptJ) as i32),
        Param::I32(negate as i32),
    ];
    launch::elementwise(&e.gpu, f, n, &mut params)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention of 8 query heads over `kv` key heads, 64 rows of 64 channels, head-major.
    fn args(mask: MaskKind, kv: usize, softcap: f32) -> AttnArgs {
        let (q, k): (&[usize], &[usize]) = (&[2, 8, 64, 64], &[2, kv, 64, 64]);
        geometry(8, [q, k, k, q], kv, mask, 0.125, softcap).0
    }

    fn shape(dt: DType, a: &AttnArgs) -> Option<cudnn::Shape> {
        fused_shape(false, dt, a, 2, vec![a.q, a.k, a.v, a.o])
    }

    #[test]
    fn cudnn_takes_half_precision_heads_masked_by_position() {
        let causal = shape(DType::BF16, &args(MaskKind::Causal, 8, 0.0)).expect("causal bf16");
        assert!(causal.causal && causal.heads == 8 && causal.d == 64 && causal.strides[0] == [8 * 64 * 64, 64 * 64, 64]);
        assert!(!shape(DType::F16, &args(MaskKind::None, 8, 0.0)).expect("unmasked f16").causal);
        assert!(shape(DType::F32, &args(MaskKind::None, 8, 0.0)).is_none(), "f32 stays on rlx's kernels");
        assert!(shape(DType::BF16, &args(MaskKind::None, 2, 0.0)).is_none(), "grouped key heads");
        assert!(shape(DType::BF16, &args(MaskKind::SlidingWindow(16), 8, 0.0)).is_none(), "a window");
        assert!(shape(DType::BF16, &args(MaskKind::None, 8, 30.0)).is_none(), "a softcap");
    }

    #[test]
    fn scratch_regions_start_on_256_byte_boundaries() {
        assert_eq!(carve(&[4, 0, 300, 256]), (vec![0, 256, 256, 768], 1024));
    }
}
