//! Launches of `Attention` and the rotary embeddings ([`crate::source::attention`]).
//!
//! Attention: one block per `(batch, head)` and run of up to [`MAX_WARPS`] query rows, a
//! warp per row; dynamic shared memory holds the block's query rows, one key and one value
//! tile, the tile's weights and the rows' running sums, all `float`:
//! `4·(warps·d + KT·(d + 1) + KT·dv + warps·KT + warps·dv)` bytes (about 42 KiB for
//! `d = dv = 128` and 8 warps); past the default 48 KiB the kernel opts in to the device's
//! larger limit.

use crate::engine::{numel, CudaEngine};
use crate::launch::{self, broadcast, Param};
use crate::memory::DevMem;
use crate::rows::{extent, ptr};
use crate::source::attention::{self as src, Masking, KEY_TILE, MAX_WARPS};
use cudarc::driver::{result as cu, sys};
use rlx_ir::ops::attention::{Attention, MaskKind, RopeStyle};
use rlx_ir::Op;
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

/// `Attention`: inputs `(q, k, v)` and the mask or bias of a `Custom` / `Bias` mask.
pub fn attention(e: &CudaEngine, op: &Op, a: &Attention, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    if !(2..=4).contains(&q.dims.len()) {
        return Err(format!("q {:?} must be [B, H, S, D], [B, S, H·D] or [S, H·D]", q.dims));
    }
    let heads = a.num_heads;
    let kv = a.kv_heads_of_dims(k.dims).max(1);
    let batch = if q.dims.len() >= 3 { q.dims[0] } else { 1 };
    let (qs, s_q, d) = layout(q.dims, heads);
    let (ks, s_k, _) = layout(k.dims, kv);
    let (vs, _, dv) = layout(v.dims, kv);
    let (os, _, _) = layout(out.dims, heads);
    let masking = match a.mask_kind {
        MaskKind::None | MaskKind::Causal | MaskKind::SlidingWindow(_) => Masking::Ranges,
        MaskKind::Custom => Masking::Keys(ins[3].dtype),
        MaskKind::Bias => Masking::Bias(ins[3].dtype),
    };
    let mask = match a.mask_kind {
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
    let args = AttnArgs {
        q: qs,
        k: ks,
        v: vs,
        o: os,
        mask,
        heads: heads as i64,
        group: (heads / kv).max(1) as i64,
        s_q: s_q as i64,
        s_k: s_k as i64,
        d: d as i64,
        dv: dv as i64,
        window: if let MaskKind::SlidingWindow(w) = a.mask_kind { w as i64 } else { 0 },
        causal: matches!(a.mask_kind, MaskKind::Causal | MaskKind::SlidingWindow(_)) as i32,
        // The default scale in f64, then rounded, as the CPU takes it.
        scale: a.score_scale.map_or(1.0 / (a.head_dim as f64).sqrt(), f64::from) as f32,
        softcap: a.attn_logit_softcap.unwrap_or(0.0),
    };
    if numel(out.dims) == 0 {
        return Ok(());
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
