//! Decode's attention ([`crate::source::decode`]): one query row per `(batch, head)` against
//! the whole KV cache, split over enough blocks to fill the device; the general kernel
//! ([`crate::attention`]) gives such a row one warp.

use crate::engine::{numel, CudaEngine};
use crate::gpu::Gpu;
use crate::launch::{self, broadcast, Param};
use crate::memory::DevMem;
use crate::rows::{extent, ptr};
use crate::source::decode::{self as src, MAX_SPLITS, PER_LANE, WARPS};
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::Op;
use rlx_runtime::{Arg, Result};
use std::sync::Arc;

/// f32 partial results the scratch holds (`B·H·splits·(2 + D)`), and row counters.
const PARTIAL: usize = 1 << 20;
const COUNTS: usize = 1 << 14;
/// Fewest keys per block.
const CHUNK: usize = 32;

/// The scratch of kernels that split a row over blocks (this attention, the arg-extrema of
/// long rows): partial results, and per-row counters left at zero.
pub struct Scratch {
    partial: DevMem,
    count: DevMem,
}

impl Scratch {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Scratch> {
        Ok(Scratch { partial: DevMem::zeroed(gpu, PARTIAL * 4)?, count: DevMem::zeroed(gpu, COUNTS * 4)? })
    }

    /// Room for `pairs` partial `(value, index)` pairs of 8 bytes each and counters for
    /// `rows`: the pairs' value and index arrays and the counters, or `None` where they do not fit.
    pub(crate) fn pairs(&self, pairs: usize, rows: usize) -> Option<(u64, u64, u64)> {
        (pairs * 16 <= PARTIAL * 4 && rows <= COUNTS).then(|| (self.partial.ptr, self.partial.ptr + (pairs * 8) as u64, self.count.ptr))
    }
}

/// Of an attention operand of `dims` with `heads` heads: the element strides of batch, head
/// and row, the rows, and the channels per head (`[B, H, S, D]`, `[B, S, H·D]` or `[S, H·D]`).
fn layout(dims: &[usize], heads: usize) -> Option<([i64; 3], usize, usize)> {
    let i = |v: usize| v as i64;
    Some(match *dims {
        [_, h, s, d] => ([i(h * s * d), i(s * d), i(d)], s, d),
        [_, s, w] => ([i(s * w), i(w / heads), i(w)], s, w / heads),
        [s, w] => ([0, i(w / heads), i(w)], s, w / heads),
        _ => return None,
    })
}

/// `Attention` through the split kernel, or `None` where it does not apply: more than one
/// query row, a mask that hides keys (causal, sliding, custom), heads not a multiple of 32
/// channels up to 256, values narrower or wider than keys.
pub fn attention(e: &CudaEngine, op: &Op, a: &Attention, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Option<std::result::Result<(), String>> {
    let (q, k, v) = (ins[0], ins[1], ins[2]);
    let bias = match a.mask_kind {
        MaskKind::None => None,
        MaskKind::Bias => Some(ins[3]),
        _ => return None,
    };
    let heads = a.num_heads;
    let kv = a.kv_heads_of_dims(k.dims).max(1);
    let (qs, s_q, d) = layout(q.dims, heads)?;
    let (ks, s_k, _) = layout(k.dims, kv)?;
    let (vs, _, dv) = layout(v.dims, kv)?;
    let (os, _, _) = layout(out.dims, heads)?;
    if s_q != 1 || d != dv || d % 32 != 0 || d > 32 * PER_LANE || s_k == 0 || numel(out.dims) == 0 {
        return None;
    }
    let batch = if q.dims.len() >= 3 { q.dims[0] } else { 1 };
    let rows = batch * heads;
    let fits = |splits: usize| rows * splits * (d + 2) <= PARTIAL;
    let mut chunk = CHUNK;
    while !fits(s_k.div_ceil(chunk)) || s_k.div_ceil(chunk) > MAX_SPLITS {
        chunk *= 2;
    }
    if rows > COUNTS {
        return None;
    }
    let splits = s_k.div_ceil(chunk);
    let mask = match bias {
        Some(m) => {
            let s = broadcast(m.dims, &[batch, heads, 1, s_k]);
            [s[0], s[1], s[3]]
        }
        None => [0; 3],
    };
    let source = src::attention(q.dtype, bias.map(|m| m.dtype))?;
    Some((|| {
        let f = e.gpu.kernels.function(&e.gpu, &source).map_err(|err| format!("{}: {err}", op.kind()))?;
        let s = &e.decode;
        let mut params = vec![ptr(out), ptr(q), ptr(k), ptr(v), bias.map_or(Param::Ptr(0), ptr)];
        params.extend([qs[0], qs[1], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os[0], os[1], mask[0], mask[1], mask[2]].map(Param::I64));
        params.extend([heads, (heads / kv).max(1), s_k, d, chunk].map(|x| Param::I64(x as i64)));
        params.extend([
            Param::F32(crate::attention::score_scale(a.score_scale, a.head_dim)),
            Param::F32(a.attn_logit_softcap.unwrap_or(0.0)),
            Param::Ptr(s.partial.ptr),
            Param::Ptr(s.count.ptr),
        ]);
        launch::grid(&e.gpu, f, (extent(rows)?, extent(splits)?, 1), (32 * WARPS as u32, 1, 1), 0, &mut params)
    })())
}
