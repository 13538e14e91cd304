//! The parts of a layer that differ in how a file stores them: the attention's input
//! projections (separate `attn_q/k/v` or Phi-3's fused `attn_qkv`), and the feed-forward
//! (gate and up apart, Phi-3's `ffn_up` holding both halves, or a mixture of experts).

use super::{Builder, LlamaConfig, Moe, Stored};
use crate::error::{ModelError, Result};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::quant::{DequantGroupedMatMul, QuantScheme};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, ValueId};

impl Builder<'_> {
    /// Layer `l`'s queries, keys and values of `a [S, d]`, biases added where the variant
    /// has them. A fused `attn_qkv` (`[q + 2·kv, d]`) is one product whose columns are split.
    pub(super) fn qkv(
        &mut self,
        c: &LlamaConfig,
        l: usize,
        a: ValueId,
    ) -> Result<(ValueId, ValueId, ValueId)> {
        let p = |n: &str| format!("blk.{l}.{n}");
        let bias = c.variant.qkv_bias;
        if self.w.has(&p("attn_qkv.weight")) {
            let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
            let qkv = self.linear(&p("attn_qkv.weight"), a)?;
            let qkv = self.bias(bias, &p("attn_qkv.bias"), qkv)?;
            return Ok((
                self.g.narrow(qkv, 1, 0, q)?,
                self.g.narrow(qkv, 1, q, kv)?,
                self.g.narrow(qkv, 1, q + kv, kv)?,
            ));
        }
        let q = self.linear(&p("attn_q.weight"), a)?;
        let k = self.linear(&p("attn_k.weight"), a)?;
        let v = self.linear(&p("attn_v.weight"), a)?;
        Ok((
            self.bias(bias, &p("attn_q.bias"), q)?,
            self.bias(bias, &p("attn_k.bias"), k)?,
            self.bias(bias, &p("attn_v.bias"), v)?,
        ))
    }

    /// Layer `l`'s feed-forward of `f [S, d]`: `down(act(gate·f) ⊙ up·f)`, with the gate the
    /// first half of `ffn_up` when the file has no `ffn_gate` (Phi-3), or the experts'.
    pub(super) fn feed_forward(
        &mut self,
        c: &LlamaConfig,
        l: usize,
        f: ValueId,
    ) -> Result<ValueId> {
        let p = |n: &str| format!("blk.{l}.{n}");
        let var = &c.variant;
        if let Some(moe) = &var.moe {
            return self.experts(moe, l, f);
        }
        let (gate, up) = if self.w.has(&p("ffn_gate.weight")) {
            let gate = self.linear(&p("ffn_gate.weight"), f)?;
            let gate = self.bias(var.ffn_bias, &p("ffn_gate.bias"), gate)?;
            let up = self.linear(&p("ffn_up.weight"), f)?;
            (gate, self.bias(var.ffn_bias, &p("ffn_up.bias"), up)?)
        } else {
            let both = self.linear(&p("ffn_up.weight"), f)?;
            (
                self.g.narrow(both, 1, 0, c.d_ff)?,
                self.g.narrow(both, 1, c.d_ff, c.d_ff)?,
            )
        };
        let gate = self.g.activation(var.ffn_act, gate)?;
        let h = self.g.binary(BinaryOp::Mul, gate, up)?;
        let down = self.linear(&p("ffn_down.weight"), h)?;
        self.bias(var.ffn_bias, &p("ffn_down.bias"), down)
    }

    /// The mixture of experts of layer `l` on `x [S, d]`: router softmax, the `used` best
    /// experts per token with their weights renormalised, and for each of the `used` choices
    /// every token's row through its chosen expert's SwiGLU, summed so weighted.
    fn experts(&mut self, m: &Moe, l: usize, x: ValueId) -> Result<ValueId> {
        let p = |n: &str| format!("blk.{l}.{n}");
        let router = self.linear(&p("ffn_gate_inp.weight"), x)?;
        let router = self.cast(router, DType::F32)?;
        let probs = self.g.softmax(router, -1)?;
        let best = self.g.top_k(probs, m.used)?;
        let total = self.g.reduce(ReduceOp::Sum, best[0], &[1], true)?;
        let weights = self.g.binary(BinaryOp::Div, best[0], total)?;
        let mut sum = None;
        for slot in 0..m.used {
            let ids = self.g.narrow(best[1], 1, slot, 1)?;
            let ids = self.g.reshape(ids, &[-1])?;
            let gate = self.expert(&p("ffn_gate_exps.weight"), x, ids)?;
            let up = self.expert(&p("ffn_up_exps.weight"), x, ids)?;
            let gate = self.g.activation(ActivationKind::Silu, gate)?;
            let h = self.g.binary(BinaryOp::Mul, gate, up)?;
            let out = self.expert(&p("ffn_down_exps.weight"), h, ids)?;
            let weight = self.g.narrow(weights, 1, slot, 1)?;
            let weight = self.cast(weight, self.dtype)?;
            let out = self.g.binary(BinaryOp::Mul, out, weight)?;
            sum = Some(match sum {
                Some(s) => self.g.binary(BinaryOp::Add, s, out)?,
                None => out,
            });
        }
        sum.ok_or_else(|| {
            ModelError::Unsupported(format!("layer {l}: a mixture of experts that uses none"))
        })
    }

    /// `x[i] · W[ids[i]]ᵀ` for the `[E, n, k]` expert stack `name`: ggml blocks multiplied
    /// as they lie (`DequantGroupedMatMul`), float experts held as `[E, k, n]`.
    fn expert(&mut self, name: &str, x: ValueId, ids: ValueId) -> Result<ValueId> {
        match self.w.get(name)? {
            Stored::Blocks { ty, shape } => {
                let (ty, shape) = (*ty, shape.clone());
                let &[e, n, k] = shape.as_slice() else {
                    return Err(ModelError::Unsupported(format!("tensor `{name}`: {ty:?} blocks of shape {shape:?}, expected [experts, n, k]")));
                };
                let row = ty
                    .row_bytes(k)
                    .map_err(|e| ModelError::Unsupported(format!("tensor `{name}`: {e}")))?;
                let stack = self.blocks(name, ty)?;
                let stack = self.g.reshape(stack, &[e as i64, n as i64, row as i64])?;
                let x = self.cast(x, DType::F32)?;
                let y = self.g.dequant_grouped_matmul(
                    DequantGroupedMatMul {
                        scheme: QuantScheme::Gguf(ty),
                        out_dim: None,
                    },
                    x,
                    stack,
                    ids,
                )?;
                self.cast(y, self.dtype)
            }
            Stored::F32(_) if self.declared(name).is_some() => {
                let stack = self.declared(name).ok_or_else(|| {
                    ModelError::Unsupported(format!("tensor `{name}` is not declared"))
                })?;
                Ok(self.g.grouped_matmul(x, stack, ids)?)
            }
            Stored::F32(t) => {
                let &[e, n, k] = t.shape() else {
                    return Err(ModelError::Unsupported(format!(
                        "tensor `{name}`: shape {:?}, expected [experts, n, k]",
                        t.shape()
                    )));
                };
                let src = t.as_slice::<f32>()?;
                let mut kn = vec![0f32; e * n * k];
                for (slab, out) in src.chunks_exact(n * k).zip(kn.chunks_exact_mut(n * k)) {
                    for (j, row) in slab.chunks_exact(k).enumerate() {
                        for (i, &v) in row.iter().enumerate() {
                            out[i * n + j] = v;
                        }
                    }
                }
                let stack = self.held(rlx_runtime::Tensor::from_vec(kn, &[e, k, n])?)?;
                let stack = self.param(name, stack);
                Ok(self.g.grouped_matmul(x, stack, ids)?)
            }
            Stored::Random { .. } => Err(ModelError::Unsupported(format!(
                "tensor `{name}`: random expert weights are not made"
            ))),
        }
    }
}
