//! Llama-family decoders (Llama, SmolLM2) as rlx graphs, configured and loaded from GGUF files:
//! RMSNorm, rotary embeddings, grouped-query attention, a SwiGLU feed-forward, and an output
//! head tied to the token embedding when the file has no `output.weight`. Weights stay in their
//! GGUF blocks and run through `DequantMatMul`; norms are F32.
//!
//! One graph serves prefill and decode: it reads `tokens [S]` at positions `pos..pos+S`, writes
//! their keys and values into per-layer f16 caches held as graph state (`KvAppend` on a
//! parameter, updated in place by the backend), and attends over the cache under an additive
//! mask. Products round as llama.cpp's CPU backend does (8-bit activation blocks against the
//! 32-value weight types, f16 cache and attention operands; [`attention`]).

mod attention;
mod config;
mod generate;
mod weights;

pub use config::LlamaConfig;
pub use generate::{argmax, sample, Generator, Rng, Sampling, StepTimes};
pub use weights::{Stored, Weights};

use crate::bpe::BpeTokenizer;
use crate::error::{ModelError, Result};
use rlx_io::GgufFile;
use std::path::Path;
use rlx_ir::ops::attention::{Rope, RopeStyle};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::quant::{Activations, DequantMatMul, GgufType, QuantScheme};
use rlx_ir::{DType, Dim, Graph, Shape, TensorType, ValueId};
use rlx_runtime::{CompiledGraph, Session, Tensor};

/// Names of the graph inputs.
pub const TOKENS: &str = "tokens";
/// `[S, n_rot/2]` cos / sin of each token's position times each rotary frequency.
pub const ROPE_COS: &str = "rope_cos";
pub const ROPE_SIN: &str = "rope_sin";
/// `[S, capacity]` additive attention mask: 0 where a token may see a cache slot, −1e9 elsewhere.
pub const MASK: &str = "mask";
/// `[1]` I64: the cache slot of the first token.
pub const POS: &str = "pos";
/// `[R]` I64: the rows of the sequence whose logits are computed (the last one when decoding).
pub const OUT_ROWS: &str = "out_rows";

/// The additive mask value of a hidden cache slot.
const HIDDEN: f32 = -1e9;

/// A decoder graph with its parameter values.
pub struct Llama {
    pub config: LlamaConfig,
    pub graph: Graph,
    /// `[R, vocab]` logits of the `out_rows`.
    pub logits: ValueId,
    /// Every graph parameter's value (weights, then zeroed caches).
    pub params: Vec<(String, Tensor)>,
    /// Cache slots per layer.
    pub capacity: usize,
}

/// What a GGUF file holds for generation: tokenizer, architecture and weights.
pub struct GgufModel {
    pub tokenizer: BpeTokenizer,
    pub config: LlamaConfig,
    pub weights: Weights,
}

impl GgufModel {
    /// Opens `path`; `progress` is called with (tensors read, total) while weights load.
    pub fn open(path: &Path, progress: impl FnMut(usize, usize)) -> Result<GgufModel> {
        let gguf = GgufFile::open(path)?;
        let tokenizer = BpeTokenizer::from_gguf(&gguf)?;
        let config = LlamaConfig::from_gguf(&gguf)?;
        let weights = Weights::from_gguf(&gguf, progress)?;
        Ok(GgufModel { tokenizer, config, weights })
    }
}

/// Builds the graph of `config` over `weights` with caches of `capacity` slots.
struct Builder<'w> {
    g: Graph,
    w: &'w Weights,
    params: Vec<(String, Tensor)>,
}

impl Builder<'_> {
    /// A parameter holding `value` under `name`.
    fn param(&mut self, name: &str, value: Tensor) -> ValueId {
        let v = self.g.param(name, value.ty());
        self.params.push((name.to_string(), value));
        v
    }

    /// An F32 vector weight (norm gains, biases).
    fn vector(&mut self, name: &str) -> Result<ValueId> {
        let t = self.w.f32(name)?;
        Ok(self.param(name, t))
    }

    /// `x [.., k] · Wᵀ` for the `[n, k]` weight `name`: `DequantMatMul` on GGUF blocks, or a
    /// `MatMul` with the F32 weight stored transposed.
    fn linear(&mut self, name: &str, x: ValueId) -> Result<ValueId> {
        match self.w.get(name)? {
            Stored::Blocks { ty, shape, bytes } => {
                let n = shape[0];
                let (ty, bytes) = (*ty, bytes.clone());
                let w = self.param(name, bytes);
                let attrs = DequantMatMul { scheme: QuantScheme::Gguf(ty), out_dim: Some(n), activations: llama_cpp_activations(ty) };
                Ok(self.g.dequant_matmul(attrs, x, &[w])?)
            }
            Stored::F32(t) => {
                let kn = weights::transposed(t).map_err(|e| ModelError::Unsupported(format!("tensor `{name}`: {e}")))?;
                let w = self.param(name, kn);
                Ok(self.g.matmul(x, w)?)
            }
        }
    }

    fn rms_norm(&mut self, name: &str, x: ValueId, eps: f32) -> Result<ValueId> {
        let gamma = self.vector(name)?;
        let d = self.g.ty(gamma).shape.numel().unwrap_or(0);
        let beta = self.g.constant_f32(&[d], &vec![0.0; d])?;
        Ok(self.g.rms_norm(x, gamma, beta, -1, eps)?)
    }
}

impl Llama {
    /// Builds the decoder of `config` over `weights`, with KV caches of `capacity` positions.
    pub fn build(config: &LlamaConfig, weights: &Weights, capacity: usize) -> Result<Llama> {
        let c = config;
        let mut b = Builder { g: Graph::new(), w: weights, params: Vec::new() };
        let s = Dim::sym("S");
        let f32_ty = |dims: Vec<Dim>| TensorType::new(DType::F32, Shape(dims));
        let tokens = b.g.input(TOKENS, TensorType::new(DType::I64, Shape(vec![s.clone()])));
        let cos = b.g.input(ROPE_COS, f32_ty(vec![s.clone(), Dim::Static(c.rope_dim / 2)]));
        let sin = b.g.input(ROPE_SIN, f32_ty(vec![s.clone(), Dim::Static(c.rope_dim / 2)]));
        let mask = b.g.input(MASK, f32_ty(vec![s.clone(), Dim::Static(capacity)]));
        let pos = b.g.input(POS, TensorType::new(DType::I64, Shape(vec![Dim::Static(1)])));
        let out_rows = b.g.input(OUT_ROWS, TensorType::new(DType::I64, Shape(vec![Dim::sym("R")])));

        let table = weights.embedding_table("token_embd.weight")?;
        let table = b.param("token_embd.table", table);
        let mut x = b.g.gather(table, tokens, 0)?;
        let heads = attention::Heads { q: c.heads, kv: c.kv_heads, dim: c.head_dim };
        let rope = Rope { head_dim: c.head_dim, n_rot: c.rope_dim, style: c.rope_style };
        for l in 0..c.layers {
            let p = |n: &str| format!("blk.{l}.{n}");
            let a = b.rms_norm(&p("attn_norm.weight"), x, c.eps)?;
            let q = b.linear(&p("attn_q.weight"), a)?;
            let k = b.linear(&p("attn_k.weight"), a)?;
            let v = b.linear(&p("attn_v.weight"), a)?;
            let q = b.g.rope(rope.clone(), q, cos, sin)?;
            let k = b.g.rope(rope.clone(), k, cos, sin)?;
            let o = b.cached_attention(&p(""), (q, k, v), (pos, mask), &heads, capacity)?;
            let o = b.linear(&p("attn_output.weight"), o)?;
            x = b.g.binary(BinaryOp::Add, x, o)?;
            let f = b.rms_norm(&p("ffn_norm.weight"), x, c.eps)?;
            let gate = b.linear(&p("ffn_gate.weight"), f)?;
            let gate = b.g.activation(ActivationKind::Silu, gate)?;
            let up = b.linear(&p("ffn_up.weight"), f)?;
            let f = b.g.binary(BinaryOp::Mul, gate, up)?;
            let f = b.linear(&p("ffn_down.weight"), f)?;
            x = b.g.binary(BinaryOp::Add, x, f)?;
        }
        let x = b.g.gather(x, out_rows, 0)?;
        let x = b.rms_norm("output_norm.weight", x, c.eps)?;
        let head = if weights.has("output.weight") { "output.weight" } else { "token_embd.weight" };
        let logits = b.linear(head, x)?;
        b.g.set_outputs(vec![logits])?;
        Ok(Llama { config: c.clone(), graph: b.g, logits, params: b.params, capacity })
    }

    /// Compiles the graph on `session` and sets every parameter.
    pub fn compile(&self, session: &Session) -> Result<CompiledGraph> {
        let mut compiled = session.compile(&self.graph)?;
        for (name, value) in &self.params {
            compiled.set_param(name, value.clone())?;
        }
        Ok(compiled)
    }

    /// The inputs of one step: `tokens` at positions `pos..pos + tokens.len()` (each seeing
    /// the cache up to itself), logits for the last `logit_rows` of them.
    pub fn step_inputs(&self, tokens: &[u32], pos: usize, logit_rows: usize) -> Result<Vec<(&'static str, Tensor)>> {
        let (s, cap) = (tokens.len(), self.capacity);
        if s == 0 || pos + s > cap {
            return Err(ModelError::Generate(format!(
                "{s} tokens at position {pos} do not fit the KV cache of {cap} positions"
            )));
        }
        let half = self.config.rope_dim / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(s * half), Vec::with_capacity(s * half));
        // llama.cpp's angles: the position times f32 powers of base^(−2/n_rot), built up by
        // repeated f32 products.
        let step = (self.config.rope_base as f32).powf(-2.0 / self.config.rope_dim as f32);
        for p in pos..pos + s {
            let mut theta = p as f32;
            for _ in 0..half {
                cos.push(theta.cos());
                sin.push(theta.sin());
                theta *= step;
            }
        }
        let mut mask = vec![HIDDEN; s * cap];
        for (i, row) in mask.chunks_mut(cap).enumerate() {
            row[..=pos + i].fill(0.0);
        }
        let rows: Vec<i64> = (s - logit_rows.clamp(1, s)..s).map(|r| r as i64).collect();
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        Ok(vec![
            (TOKENS, Tensor::from_vec(ids, &[s])?),
            (ROPE_COS, Tensor::from_vec(cos, &[s, half])?),
            (ROPE_SIN, Tensor::from_vec(sin, &[s, half])?),
            (MASK, Tensor::from_vec(mask, &[s, cap])?),
            (POS, Tensor::from_vec(vec![pos as i64], &[1])?),
            (OUT_ROWS, Tensor::from_vec(rows.clone(), &[rows.len()])?),
        ])
    }
}

/// The product llama.cpp's CPU backend computes for weights of type `t`: 8-bit activation
/// blocks against the 32-value block types, exact float activations otherwise.
fn llama_cpp_activations(t: GgufType) -> Activations {
    match t {
        GgufType::Q4_0 | GgufType::Q4_1 | GgufType::Q8_0 => Activations::Q8Blocks,
        _ => Activations::Exact,
    }
}

/// The rope style llama.cpp uses for a GGUF architecture (its NORM types pair adjacent channels).
pub fn gguf_rope_style(arch: &str) -> RopeStyle {
    match arch {
        "llama" | "deepseek" | "deepseek2" | "granite" | "command-r" | "baichuan" | "internlm2" | "minicpm" => RopeStyle::GptJ,
        _ => RopeStyle::NeoX,
    }
}
