//! Self-attention over the KV cache as llama.cpp's CPU backend computes it by default (f16
//! cache, no flash attention), so that rlx's logits follow llama.cpp's closely: keys and
//! values are rounded to f16 into a cache of one head per KV head (grouped-query heads share
//! it, never copied), the queries are rounded to f16 for the scores, the scaled and masked
//! scores go through an f32 softmax, and the weights are rounded to f16 before they meet the
//! values. Every product itself accumulates in f32.

use super::Builder;
use crate::error::Result;
use rlx_ir::ops::attention::Attention;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::{DType, ValueId};
use rlx_runtime::Tensor;

/// Head layout of one attention layer.
pub(super) struct Heads {
    /// Query heads.
    pub q: usize,
    /// Key/value heads, each shared by `q / kv` query heads.
    pub kv: usize,
    pub dim: usize,
}

impl Builder<'_> {
    /// `softmax(softcap(α·q·kᵀ) + mask)·v` (`α`, softcap from `attn`) for `q [S, H·D]` and this
    /// step's `k`, `v [S, H_kv·D]`,
    /// written into the caches `{prefix}k_cache` / `{prefix}v_cache` (`[H_kv, capacity, D]`
    /// F16) at `pos`; returns `[S, H·D]`.
    pub(super) fn cached_attention(
        &mut self,
        prefix: &str,
        (q, k, v): (ValueId, ValueId, ValueId),
        (pos, mask): (ValueId, ValueId),
        (heads, attn): (&Heads, &Attention),
        capacity: usize,
    ) -> Result<ValueId> {
        let (hkv, group, d) = (heads.kv as i64, (heads.q / heads.kv) as i64, heads.dim as i64);
        let k = self.cache_f16(&format!("{prefix}k_cache"), k, pos, heads, capacity)?;
        let v = self.cache_f16(&format!("{prefix}v_cache"), v, pos, heads, capacity)?;
        let q = self.through_f16(q)?;
        let q = self.g.reshape(q, &[-1, hkv, group, d])?;
        let q = self.g.transpose(q, &[1, 2, 0, 3])?;
        let kt = self.g.transpose(k, &[0, 1, 3, 2])?;
        let scores = self.g.matmul(q, kt)?;
        let scores = self.scale(scores, attn.scale())?;
        let scores = match attn.attn_logit_softcap {
            Some(cap) => self.softcap(scores, cap)?,
            None => scores,
        };
        let scores = self.g.binary(BinaryOp::Add, scores, mask)?;
        let weights = self.g.softmax(scores, -1)?;
        let weights = self.through_f16(weights)?;
        let o = self.g.matmul(weights, v)?;
        let o = self.g.transpose(o, &[2, 0, 1, 3])?;
        Ok(self.g.reshape(o, &[-1, hkv * group * d])?)
    }

    /// `x` rounded to f16 and back.
    fn through_f16(&mut self, x: ValueId) -> Result<ValueId> {
        let h = self.g.cast(x, DType::F16)?;
        Ok(self.g.cast(h, DType::F32)?)
    }

    /// Writes this step's keys or values `x [S, H_kv·D]`, rounded to f16, into the cache
    /// `name` at `pos` and returns the whole cache as F32 `[H_kv, 1, capacity, D]` (the 1
    /// broadcasts over each KV head's query group).
    fn cache_f16(&mut self, name: &str, x: ValueId, pos: ValueId, heads: &Heads, capacity: usize) -> Result<ValueId> {
        let x = self.g.cast(x, DType::F16)?;
        let x = self.g.reshape(x, &[-1, heads.kv as i64, heads.dim as i64])?;
        let x = self.g.transpose(x, &[1, 0, 2])?;
        let cache = self.param(name, Tensor::zeros(DType::F16, &[heads.kv, capacity, heads.dim]));
        let cache = self.g.kv_append_at(cache, x, pos, 1)?;
        let cache = self.g.cast(cache, DType::F32)?;
        Ok(self.g.reshape(cache, &[heads.kv as i64, 1, capacity as i64, heads.dim as i64])?)
    }
}
