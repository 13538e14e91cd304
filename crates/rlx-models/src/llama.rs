//! Llama-family decoders (Llama, SmolLM2) as rlx graphs, configured and loaded from GGUF files:
//! RMSNorm, rotary embeddings, grouped-query attention, a SwiGLU feed-forward, and an output
//! head tied to the token embedding when the file has no `output.weight`. Weights stay in their
//! GGUF blocks and run through `DequantMatMul`; norms are F32. Hugging Face checkpoint folders
//! ([`hf`]) feed the same builder, with Qwen2/Qwen3/Gemma3's differences as [`Variant`] fields.
//!
//! One graph serves prefill and decode: it reads `tokens [S]` at positions `pos..pos+S`, writes
//! their keys and values into per-layer caches of the KV heads (`[capacity, H_kv·D]`) held as graph state
//! (`KvAppend` on a parameter, updated in place by the backend), and attends over the cache
//! under an additive mask, each KV head read in place by its group of query heads. Sliding
//! layers' caches are rings of `window + RING_CHUNK − 1` slots when that is less than the
//! capacity (prompts are fed in chunks). Rope rows are gathered from constant tables and the
//! masks computed from the position in the graph, so a step's inputs are its token ids, its
//! position and the rows whose logits it returns. Products round as llama.cpp's CPU backend
//! does (8-bit activation blocks against the 32-value weight types).
//!
//! Dense weights (F32 files, random weights) are held in the graph's dtype, F32 or BF16
//! ([`Llama::build_as`]): with BF16 the activations, products and KV caches are BF16 too
//! (kernels accumulate and take norm / softmax statistics in f32) and the logits come out
//! F32. A tied head and the embedding share one `[d, vocab]` matrix.

pub mod batch;
mod blocks;
mod config;
mod generate;
mod kv_pool;
pub mod hf;
mod variant;
mod weights;

pub use config::{LlamaConfig, GGUF_ARCHS};
pub use generate::{argmax, sample, Generator, Rng, Sampling, StepTimes};
pub use hf::HfModel;
pub use kv_pool::KvPool;
pub use variant::{inverse_frequencies, Moe, RopeScaling, SlidingWindow, Variant};
pub use weights::{random_blocks, MappedBlocks, Stored, Weights};

use weights::random_dense;

use crate::bpe::BpeTokenizer;
use crate::error::{ModelError, Result};
use rlx_io::GgufFile;
use std::path::Path;
use std::sync::Arc;
use rlx_ir::ops::attention::{Attention, MaskKind, Rope, RopeStyle};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::quant::{Activations, DequantMatMul, GgufType, QuantScheme};
use rlx_ir::{DType, Dim, Graph, Shape, TensorType, ValueId};
use rlx_runtime::{CompiledGraph, Session, Tensor};

/// Names of the graph inputs: a step's token ids, the position of the first, and the rows
/// whose logits are computed. Rope angles and attention masks follow from the position in the
/// graph, so a decode step uploads three small integer vectors.
pub const TOKENS: &str = "tokens";
/// `[1]` I64: the cache slot of the first token.
pub const POS: &str = "pos";
/// `[R]` I64: the rows of the sequence whose logits are computed (the last one when decoding).
pub const OUT_ROWS: &str = "out_rows";
/// The decoder graphs' outputs: `[R, vocab]` F32 logits of the `out_rows`, then `[R]` I64
/// greedy tokens (each row's first largest logit), so that greedy decoding reads back one id
/// a step rather than the whole vocabulary's logits.
pub const LOGITS: usize = 0;
pub const GREEDY: usize = 1;

/// The additive mask value of a hidden cache slot.
const HIDDEN: f32 = -1e9;

/// The most tokens one step writes into a sliding layer's ring cache (longer prompts are fed
/// in chunks): the ring holds the window plus this many slots less one.
pub const RING_CHUNK: usize = 512;

/// A decoder graph with its parameter values.
pub struct Llama {
    pub config: LlamaConfig,
    pub graph: Graph,
    /// `[R, vocab]` logits of the `out_rows`.
    pub logits: ValueId,
    /// Every graph parameter's value (weights, then zeroed caches).
    pub params: Vec<(String, ParamValue)>,
    /// Cache slots per layer.
    pub capacity: usize,
    /// Slots of the sliding layers' caches when those are rings smaller than `capacity`: slot
    /// `p mod ring` holds position `p`, overwritten once the window has passed it.
    pub ring: Option<usize>,
    /// The most tokens a step takes when the sliding layers have rings.
    pub chunk: usize,
    /// The dtype of the activations, dense weights and KV caches.
    pub dtype: DType,
}

/// A graph parameter's value.
#[derive(Clone)]
pub enum ParamValue {
    /// Held by the model: norm gains, biases, F32 weights, zeroed caches.
    Held(Tensor),
    /// Blocks left in the mapped GGUF file, copied into the backend's memory when the graph
    /// is compiled (and then released from resident memory).
    Mapped(MappedBlocks),
}

impl ParamValue {
    /// The dims the graph declares the parameter with.
    pub fn dims(&self) -> &[usize] {
        match self {
            ParamValue::Held(t) => t.shape(),
            ParamValue::Mapped(m) => &m.dims,
        }
    }

    /// The bytes a backend holds for it.
    pub fn byte_len(&self) -> usize {
        match self {
            ParamValue::Held(t) => t.bytes().len(),
            ParamValue::Mapped(m) => m.dims.iter().product(),
        }
    }

    /// Makes this the value of parameter `name` of `compiled`: a held tensor moves in, mapped
    /// blocks are copied from the file into the backend's memory and their pages released.
    fn set(self, compiled: &mut CompiledGraph, name: &str) -> Result<()> {
        match self {
            ParamValue::Held(t) => compiled.set_param(name, t)?,
            ParamValue::Mapped(m) => {
                compiled.set_param_bytes(name, DType::U8, &m.dims, m.bytes()?)?;
                m.release()?;
            }
        }
        Ok(())
    }
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
        let mut gguf = GgufFile::open(path)?;
        let tokenizer = BpeTokenizer::from_gguf(&gguf)?;
        let config = LlamaConfig::from_gguf(&gguf)?;
        // Read: the vocabulary, merges and scores need not stay while the weights load.
        gguf.retain_metadata(|_, v| v.as_array().is_none());
        let weights = Weights::from_gguf(Arc::new(gguf), progress)?;
        Ok(GgufModel { tokenizer, config, weights })
    }
}

/// Builds the graph of `config` over `weights` with caches of `capacity` slots.
struct Builder<'w> {
    g: Graph,
    w: &'w Weights,
    params: Vec<(String, ParamValue)>,
    /// RMSNorm gains are stored as offsets from 1.
    norm_plus_one: bool,
    /// The activations', dense weights' and caches' dtype.
    dtype: DType,
}

/// What the attention of one kind of layer reads and where its cache is written.
#[derive(Clone, Copy)]
struct Attend {
    /// `[S, rope_dim/2]` rope rows of the step's tokens.
    cos: ValueId,
    sin: ValueId,
    /// Additive mask over the slots attention reads.
    mask: ValueId,
    /// `[1]` I64: the cache slot the step's first token goes to.
    at: ValueId,
    /// Slots of the cache.
    slots: usize,
    /// `[U]` I64: the cache slots attention reads (a pooled cache); the whole cache when `None`.
    rows: Option<ValueId>,
}

impl Builder<'_> {
    /// A parameter holding `value` under `name`.
    fn param(&mut self, name: &str, value: Tensor) -> ValueId {
        let v = self.g.param(name, value.ty());
        self.params.push((name.to_string(), ParamValue::Held(value)));
        v
    }

    /// The parameter `name` when it is declared already.
    fn declared(&self, name: &str) -> Option<ValueId> {
        self.g.params().into_iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The `[rows, row_bytes]` U8 parameter of the blocks of weight `name`, declared once
    /// however many nodes read it (a tied embedding is gathered from and multiplied by).
    fn blocks(&mut self, name: &str, ty: GgufType) -> Result<ValueId> {
        if let Some(v) = self.declared(name) {
            return Ok(v);
        }
        match self.w.get(name)? {
            Stored::Random { shape, seed, scale, .. } => {
                let t = random_blocks(shape, *seed, *scale, ty)?;
                Ok(self.param(name, t))
            }
            Stored::Blocks { shape, .. } => {
                let m = self.w.blocks(name, ty, &shape.clone())?;
                let v = self.g.param(name, TensorType::of(DType::U8, &m.dims));
                self.params.push((name.to_string(), ParamValue::Mapped(m)));
                Ok(v)
            }
            Stored::F32(_) => Err(ModelError::Unsupported(format!("tensor `{name}` is F32, not {ty:?} blocks"))),
        }
    }

    /// The dense `[n, k]` weight `name` as the `[k, n]` parameter a `MatMul` takes, in the
    /// graph's dtype, declared once (a tied embedding is gathered from and multiplied by).
    fn dense(&mut self, name: &str) -> Result<ValueId> {
        if let Some(v) = self.declared(name) {
            return Ok(v);
        }
        let kn = match self.w.get(name)? {
            Stored::F32(t) => {
                let kn = weights::transposed(t).map_err(|e| ModelError::Unsupported(format!("tensor `{name}`: {e}")))?;
                self.held(kn)?
            }
            Stored::Random { shape, seed, scale, .. } => random_dense(shape, *seed, *scale, true, self.dtype)?,
            Stored::Blocks { ty, .. } => return Err(ModelError::Unsupported(format!("tensor `{name}` is {ty:?} blocks, not dense"))),
        };
        Ok(self.param(name, kn))
    }

    /// An F32 tensor as the graph's dtype holds it.
    fn held(&self, t: Tensor) -> Result<Tensor> {
        match self.dtype {
            DType::F32 => Ok(t),
            DType::BF16 => {
                let v: Vec<half::bf16> = t.as_slice::<f32>()?.iter().map(|&x| half::bf16::from_f32(x)).collect();
                Ok(Tensor::from_vec(v, t.shape())?)
            }
            d => Err(ModelError::Unsupported(format!("a Llama graph in {d}: F32 and BF16 are built"))),
        }
    }

    /// A vector weight (norm gains, biases) in the graph's dtype.
    fn vector(&mut self, name: &str) -> Result<ValueId> {
        let t = self.held(self.w.f32(name)?)?;
        Ok(self.param(name, t))
    }

    /// A constant of `values` in the graph's dtype.
    fn constant(&mut self, dims: &[usize], values: &[f32]) -> Result<ValueId> {
        let t = self.held(Tensor::from_slice(values, dims)?)?;
        Ok(self.g.constant(t.ty(), t.bytes().to_vec())?)
    }

    /// `x` cast to `to` (itself when it has that dtype).
    fn cast(&mut self, x: ValueId, to: DType) -> Result<ValueId> {
        match self.g.ty(x).dtype == to {
            true => Ok(x),
            false => Ok(self.g.cast(x, to)?),
        }
    }

    /// `x [.., k] · Wᵀ` for the `[n, k]` weight `name`: `DequantMatMul` on GGUF blocks (F32
    /// activations), or a `MatMul` with the dense weight stored transposed.
    fn linear(&mut self, name: &str, x: ValueId) -> Result<ValueId> {
        match self.w.get(name)? {
            Stored::Blocks { ty, .. } | Stored::Random { blocks: Some(ty), .. } => {
                let ty = *ty;
                let w = self.blocks(name, ty)?;
                let attrs = DequantMatMul { scheme: QuantScheme::Gguf(ty), out_dim: None, activations: llama_cpp_activations(ty) };
                let x = self.cast(x, DType::F32)?;
                let y = self.g.dequant_matmul(attrs, x, &[w])?;
                self.cast(y, self.dtype)
            }
            Stored::F32(_) | Stored::Random { blocks: None, .. } => {
                let w = self.dense(name)?;
                Ok(self.g.matmul(x, w)?)
            }
        }
    }

    fn rms_norm(&mut self, name: &str, x: ValueId, eps: f32) -> Result<ValueId> {
        let gamma = if self.norm_plus_one {
            let mut t = self.w.f32(name)?;
            t.as_mut_slice::<f32>()?.iter_mut().for_each(|v| *v += 1.0);
            let t = self.held(t)?;
            self.param(name, t)
        } else {
            self.vector(name)?
        };
        let d = self.g.ty(gamma).shape.numel().unwrap_or(0);
        let beta = self.constant(&[d], &vec![0.0; d])?;
        Ok(self.g.rms_norm(x, gamma, beta, -1, eps)?)
    }
}

impl Llama {
    /// Builds the decoder of `config` over `weights`, with KV caches of `capacity` positions
    /// (sliding layers: rings for steps of up to [`RING_CHUNK`] tokens, when smaller).
    pub fn build(config: &LlamaConfig, weights: &Weights, capacity: usize) -> Result<Llama> {
        Llama::build_chunked(config, weights, capacity, RING_CHUNK)
    }

    /// [`Llama::build`] with the activations, dense weights and KV caches in `dtype` (F32 or
    /// BF16); GGUF blocks stay blocks, multiplied with F32 activations.
    pub fn build_as(config: &LlamaConfig, weights: &Weights, capacity: usize, dtype: DType) -> Result<Llama> {
        Llama::build_in(config, weights, capacity, RING_CHUNK, dtype)
    }

    /// [`Llama::build`] with sliding layers' rings sized for steps of up to `chunk` tokens.
    pub fn build_chunked(config: &LlamaConfig, weights: &Weights, capacity: usize, chunk: usize) -> Result<Llama> {
        Llama::build_in(config, weights, capacity, chunk, DType::F32)
    }

    fn build_in(config: &LlamaConfig, weights: &Weights, capacity: usize, chunk: usize, dtype: DType) -> Result<Llama> {
        let c = config;
        let chunk = chunk.max(1);
        let ring = c.variant.sliding.as_ref().map(|w| w.window + chunk - 1).filter(|&r| r < capacity);
        let var = &c.variant;
        let mut b = Builder { g: Graph::new(), w: weights, params: Vec::new(), norm_plus_one: var.norm_plus_one, dtype };
        let s = Dim::sym("S");
        let tokens = b.g.input(TOKENS, TensorType::new(DType::I64, Shape(vec![s.clone()])));
        let pos = b.g.input(POS, TensorType::new(DType::I64, Shape(vec![Dim::Static(1)])));
        let out_rows = b.g.input(OUT_ROWS, TensorType::new(DType::I64, Shape(vec![Dim::sym("R")])));
        let positions = b.positions(tokens, pos)?;
        let (cos, sin) = rope_tables_for(var, c.rope_base, c.rope_dim, &var.rope_scaling, capacity);
        let (cos, sin) = b.rope_rows(&cos, &sin, c.rope_dim / 2, positions)?;
        let mask = b.causal_mask(positions, capacity)?;
        let local = var.sliding.as_ref();
        let (cos_local, sin_local) = match local.and_then(|w| w.rope_base) {
            Some(base) => {
                let (cos, sin) = rope_tables_for(var, base, c.rope_dim, &RopeScaling::None, capacity);
                b.rope_rows(&cos, &sin, c.rope_dim / 2, positions)?
            }
            None => (cos, sin),
        };
        let mask_local = match local {
            Some(w) => b.window_mask(positions, w.window, ring.unwrap_or(capacity))?,
            None => mask,
        };
        let pos_local = match ring {
            Some(r) => {
                let r = b.constant_i64(&[1], &[r as i64])?;
                b.g.binary(BinaryOp::Mod, pos, r)?
            }
            None => pos,
        };

        let global = Attend { cos, sin, mask, at: pos, slots: capacity, rows: None };
        let local = Attend { cos: cos_local, sin: sin_local, mask: mask_local, at: pos_local, slots: ring.unwrap_or(capacity), rows: None };
        let logits = b.decoder(c, tokens, out_rows, &global, &local)?;
        Ok(Llama { config: c.clone(), graph: b.g, logits, params: b.params, capacity, ring, chunk, dtype })
    }

    /// Compiles the graph on `session` and sets every parameter.
    pub fn compile(&self, session: &Session) -> Result<CompiledGraph> {
        let mut compiled = session.compile(&self.graph)?;
        for (name, value) in &self.params {
            value.clone().set(&mut compiled, name)?;
        }
        Ok(compiled)
    }

    /// Bytes of the KV caches (graph state, held with the weights): per layer, keys and values
    /// of the KV heads for `capacity` positions, or the ring's slots on sliding layers.
    pub fn cache_bytes(&self) -> usize {
        let c = &self.config;
        let sliding = c.variant.sliding.as_ref();
        (0..c.layers)
            .map(|l| match sliding.is_some_and(|w| w.layers.get(l) == Some(&true)) {
                true => self.ring.unwrap_or(self.capacity),
                false => self.capacity,
            })
            .map(|slots| 2 * c.kv_heads * slots * c.head_dim * self.dtype.size())
            .sum()
    }

    /// The most tokens a step at `pos` may take: what is left of the cache, and with ring
    /// caches at most `chunk`, up to the ring's end.
    pub fn step_limit(&self, pos: usize) -> usize {
        let left = self.capacity.saturating_sub(pos);
        match self.ring {
            Some(r) => left.min(self.chunk).min(r - pos % r),
            None => left,
        }
    }

    /// The inputs of one step: `tokens` at positions `pos..pos + tokens.len()` (each seeing
    /// the cache up to itself), logits for the last `logit_rows` of them. At most
    /// [`Llama::step_limit`] tokens.
    pub fn step_inputs(&self, tokens: &[u32], pos: usize, logit_rows: usize) -> Result<Vec<(&'static str, Tensor)>> {
        let (s, cap) = (tokens.len(), self.capacity);
        if s == 0 || pos + s > cap {
            return Err(ModelError::Generate(format!(
                "{s} tokens at position {pos} do not fit the KV cache of {cap} positions"
            )));
        }
        if s > self.step_limit(pos) {
            return Err(ModelError::Generate(format!(
                "{s} tokens at position {pos} overrun the sliding layers' ring caches: at most {} in this step",
                self.step_limit(pos)
            )));
        }
        let rows: Vec<i64> = (s - logit_rows.clamp(1, s)..s).map(|r| r as i64).collect();
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        Ok(vec![
            (TOKENS, Tensor::from_vec(ids, &[s])?),
            (POS, Tensor::from_vec(vec![pos as i64], &[1])?),
            (OUT_ROWS, Tensor::from_vec(rows.clone(), &[rows.len()])?),
        ])
    }
}

/// The rope tables of `base` under `scaling`: llama.cpp's arithmetic for GGUF files where it
/// applies (no scaling or linear), else f64 angles.
fn rope_tables_for(var: &Variant, base: f64, n_rot: usize, scaling: &RopeScaling, n: usize) -> (Vec<f32>, Vec<f32>) {
    match *scaling {
        RopeScaling::None if var.llama_cpp_numerics => llama_cpp_rope_tables(base, n_rot, n),
        RopeScaling::Linear { factor } if var.llama_cpp_numerics => llama_cpp_scaled_rope_tables(base, n_rot, n, 1.0 / factor as f32),
        _ => rope_tables(base, n_rot, scaling, n),
    }
}

/// llama.cpp's rope angles for positions `0..n`: the position times f32 powers of
/// `base^(−2/n_rot)`, built up by repeated f32 products (GGUF models follow llama.cpp).
fn llama_cpp_rope_tables(base: f64, n_rot: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    llama_cpp_scaled_rope_tables(base, n_rot, n, 1.0)
}

/// [`llama_cpp_rope_tables`] with each angle times `freq_scale` (linear scaling's `1/factor`)
/// in f32, as ggml does.
fn llama_cpp_scaled_rope_tables(base: f64, n_rot: usize, n: usize, freq_scale: f32) -> (Vec<f32>, Vec<f32>) {
    let half = n_rot / 2;
    let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
    let step = (base as f32).powf(-2.0 / n_rot as f32);
    for p in 0..n {
        let mut theta = p as f32;
        for _ in 0..half {
            let scaled = freq_scale * theta;
            cos.push(scaled.cos());
            sin.push(scaled.sin());
            theta *= step;
        }
    }
    (cos, sin)
}

/// The product llama.cpp's CPU backend computes for weights of type `t`: 8-bit activation
/// blocks against the 32-value block types `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0` and (in blocks
/// of 256) the K-quants `Q4_K`, `Q5_K`, `Q6_K` — every type of a Q4_K_M or Q5_K_M file, whose
/// rows of a length not a multiple of 256 fall back to `Q5_0`/`Q5_1`/`Q8_0`; exact float
/// activations otherwise.
fn llama_cpp_activations(t: GgufType) -> Activations {
    match t {
        GgufType::Q4_0 | GgufType::Q4_1 | GgufType::Q5_0 | GgufType::Q5_1 | GgufType::Q8_0 => Activations::Q8Blocks,
        GgufType::Q4_K | GgufType::Q5_K | GgufType::Q6_K => Activations::Q8Blocks,
        _ => Activations::Exact,
    }
}

/// `[n, n_rot/2]` cos and sin tables of positions `0..n` (f64 angles, rounded once).
fn rope_tables(base: f64, n_rot: usize, scaling: &RopeScaling, n: usize) -> (Vec<f32>, Vec<f32>) {
    let (freqs, factor) = inverse_frequencies(base, n_rot, scaling);
    let (mut cos, mut sin) = (Vec::with_capacity(n * freqs.len()), Vec::with_capacity(n * freqs.len()));
    for p in 0..n {
        for f in &freqs {
            let theta = p as f64 * f;
            cos.push((theta.cos() * factor) as f32);
            sin.push((theta.sin() * factor) as f32);
        }
    }
    (cos, sin)
}

impl Builder<'_> {
    /// The decoder over `tokens`: embedding, the layers (full-attention ones attending as
    /// `global` says, sliding ones as `local`), and the `[R, vocab]` F32 logits of `out_rows`,
    /// set as the graph's output.
    fn decoder(&mut self, c: &LlamaConfig, tokens: ValueId, out_rows: ValueId, global: &Attend, local: &Attend) -> Result<ValueId> {
        let var = &c.variant;
        let mut x = self.embedding("token_embd.weight", tokens)?;
        if let Some(scale) = var.embed_scale {
            x = self.scale(x, scale)?;
        }
        let (h, hkv, hd) = (c.heads, c.kv_heads, c.head_dim);
        let rope = Rope { head_dim: hd, n_rot: c.rope_dim, style: c.rope_style };
        let attn = Attention { score_scale: var.attn_scale, attn_logit_softcap: var.attn_softcap, ..Attention::new(h, hd, MaskKind::Bias) };
        for l in 0..c.layers {
            let p = |n: &str| format!("blk.{l}.{n}");
            let slides = var.sliding.as_ref().is_some_and(|w| w.layers.get(l) == Some(&true));
            let at = if slides { local } else { global };
            let a = self.rms_norm(&p("attn_norm.weight"), x, c.eps)?;
            let (q, k, v) = self.qkv(c, l, a)?;
            let (q, k) = if var.qk_norm {
                (self.head_norm(&p("attn_q_norm.weight"), q, h, hd, c.eps)?, self.head_norm(&p("attn_k_norm.weight"), k, hkv, hd, c.eps)?)
            } else {
                (q, k)
            };
            let q = self.g.rope(rope.clone(), q, at.cos, at.sin)?;
            let k = self.g.rope(rope.clone(), k, at.cos, at.sin)?;
            let k = self.cache(&p("k_cache"), k, at, hkv * hd)?;
            let v = self.cache(&p("v_cache"), v, at, hkv * hd)?;
            let o = self.g.attention(attn.clone(), q, k, v, Some(at.mask))?;
            let o = self.linear(&p("attn_output.weight"), o)?;
            let o = self.bias(var.o_bias, &p("attn_output.bias"), o)?;
            let o = if var.post_norms { self.rms_norm(&p("post_attention_norm.weight"), o, c.eps)? } else { o };
            x = self.g.binary(BinaryOp::Add, x, o)?;
            let f = self.rms_norm(&p("ffn_norm.weight"), x, c.eps)?;
            let f = self.feed_forward(c, l, f)?;
            let f = if var.post_norms { self.rms_norm(&p("post_ffw_norm.weight"), f, c.eps)? } else { f };
            x = self.g.binary(BinaryOp::Add, x, f)?;
        }
        let x = self.g.gather(x, out_rows, 0)?;
        let x = self.rms_norm("output_norm.weight", x, c.eps)?;
        let head = if self.w.has("output.weight") { "output.weight" } else { "token_embd.weight" };
        let logits = self.linear(head, x)?;
        let logits = match var.final_softcap {
            Some(cap) => self.softcap(logits, cap)?,
            None => logits,
        };
        let logits = self.cast(logits, DType::F32)?;
        let next = self.g.arg_max(logits, 1, false)?;
        self.g.set_outputs(vec![logits, next])?;
        Ok(logits)
    }

    /// An I64 constant of shape `dims`.
    fn constant_i64(&mut self, dims: &[usize], values: &[i64]) -> Result<ValueId> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(self.g.constant(TensorType::of(DType::I64, dims), data)?)
    }

    /// `[S]` I64: the positions `pos..pos + S` of the step's `tokens`, as `pos` plus the
    /// exclusive running sum of ones (the IR has no iota of a symbolic length).
    fn positions(&mut self, tokens: ValueId, pos: ValueId) -> Result<ValueId> {
        let one = self.constant_i64(&[1], &[1])?;
        let shape = self.g.ty(tokens).shape.clone();
        let ones = self.g.expand_to(one, &shape)?;
        let rows = self.g.cumsum(ones, 0, true)?;
        Ok(self.g.binary(BinaryOp::Add, rows, pos)?)
    }

    /// The `[S, half]` rows of the `[capacity, half]` cos and sin tables at `positions`; the
    /// tables are constants of the graph.
    fn rope_rows(&mut self, cos: &[f32], sin: &[f32], half: usize, positions: ValueId) -> Result<(ValueId, ValueId)> {
        let rows = cos.len() / half.max(1);
        let cos = self.g.constant_f32(&[rows, half], cos)?;
        let sin = self.g.constant_f32(&[rows, half], sin)?;
        Ok((self.g.gather(cos, positions, 0)?, self.g.gather(sin, positions, 0)?))
    }

    /// `[S, slots]` additive mask: 0 where `visible [S, slots]` holds, [`HIDDEN`] elsewhere.
    fn additive(&mut self, visible: ValueId) -> Result<ValueId> {
        let shown = self.g.constant_f32(&[1], &[0.0])?;
        let hidden = self.g.constant_f32(&[1], &[HIDDEN])?;
        Ok(self.g.select(visible, shown, hidden)?)
    }

    /// `[S, capacity]` mask of a full-attention layer: the query at position `q` sees the
    /// cache slots `j ≤ q`.
    fn causal_mask(&mut self, positions: ValueId, capacity: usize) -> Result<ValueId> {
        let slots: Vec<i64> = (0..capacity as i64).collect();
        let j = self.constant_i64(&[capacity], &slots)?;
        let q = self.g.reshape(positions, &[-1, 1])?;
        let visible = self.g.compare(CmpOp::Le, j, q)?;
        self.additive(visible)
    }

    /// `[S, slots]` mask of a sliding layer whose cache slot `j` holds the latest position
    /// `≡ j (mod slots)` written. The query at `q` sees slot `j` when its position is one of
    /// `q − window < p ≤ q`: with `d = (q − j) mod slots`, `p = q − d` exists (`d ≤ q`) and is
    /// in the window (`d < window`). Steps within [`Llama::step_limit`] overwrite no such slot
    /// with a later position of their own (a ring holds `window + chunk − 1` slots).
    fn window_mask(&mut self, positions: ValueId, window: usize, slots: usize) -> Result<ValueId> {
        let columns: Vec<i64> = (0..slots as i64).map(|j| slots as i64 - j).collect();
        let shifted = self.constant_i64(&[slots], &columns)?;
        let modulus = self.constant_i64(&[1], &[slots as i64])?;
        let window = self.constant_i64(&[1], &[window as i64])?;
        let q = self.g.reshape(positions, &[-1, 1])?;
        let d = self.g.binary(BinaryOp::Add, q, shifted)?;
        let d = self.g.binary(BinaryOp::Mod, d, modulus)?;
        let written = self.g.compare(CmpOp::Le, d, q)?;
        let recent = self.g.compare(CmpOp::Lt, d, window)?;
        let visible = self.g.binary(BinaryOp::BitAnd, written, recent)?;
        self.additive(visible)
    }

    /// `[S, d]` rows of the `[vocab, d]` embedding `name` for `tokens`, in the graph's dtype:
    /// ggml blocks stay quantized, the step's rows gathered as blocks and decoded by a product
    /// with the `[d, d]` identity (exact: each output is one weight times 1), transposed. The
    /// identity is computed from `0..d` in the graph (once per plan), not held as a literal.
    /// A dense embedding that is also the head is the head's `[d, vocab]` matrix, whose
    /// columns are gathered.
    fn embedding(&mut self, name: &str, tokens: ValueId) -> Result<ValueId> {
        match self.w.get(name)? {
            Stored::Blocks { ty, shape } | Stored::Random { blocks: Some(ty), shape, .. } => {
                let (ty, shape) = (*ty, shape.clone());
                let table = self.blocks(name, ty)?;
                let rows = self.g.gather(table, tokens, 0)?;
                let d = shape[1];
                let iota: Vec<i64> = (0..d as i64).collect();
                let row = self.constant_i64(&[d, 1], &iota)?;
                let column = self.g.reshape(row, &[1, -1])?;
                let diagonal = self.g.compare(CmpOp::Eq, row, column)?;
                let (one, zero) = (self.g.constant_f32(&[1], &[1.0])?, self.g.constant_f32(&[1], &[0.0])?);
                let identity = self.g.select(diagonal, one, zero)?;
                let attrs = DequantMatMul { scheme: QuantScheme::Gguf(ty), out_dim: None, activations: Activations::Exact };
                let columns = self.g.dequant_matmul(attrs, identity, &[rows])?;
                let x = self.g.transpose(columns, &[1, 0])?;
                self.cast(x, self.dtype)
            }
            Stored::F32(_) | Stored::Random { blocks: None, .. } if !self.w.has("output.weight") => {
                let table = self.dense(name)?;
                let columns = self.g.gather(table, tokens, 1)?;
                Ok(self.g.transpose(columns, &[1, 0])?)
            }
            Stored::F32(t) => {
                let table = self.held(t.clone())?;
                let table = self.param("token_embd.table", table);
                Ok(self.g.gather(table, tokens, 0)?)
            }
            Stored::Random { shape, seed, scale, .. } => {
                let table = random_dense(shape, *seed, *scale, false, self.dtype)?;
                let table = self.param("token_embd.table", table);
                Ok(self.g.gather(table, tokens, 0)?)
            }
        }
    }

    /// Writes this step's keys or values `x [S, H_kv·D]` into the cache `name`
    /// (`[slots, H_kv·D]`, a row per slot, as the projection gives them) at `at.at`, and
    /// returns what attention reads: the whole cache, each KV head read for its group of query
    /// heads in place, or the rows `at.rows` of a pooled cache.
    fn cache(&mut self, name: &str, x: ValueId, at: &Attend, width: usize) -> Result<ValueId> {
        let cache = self.param(name, Tensor::zeros(self.dtype, &[at.slots, width]));
        let cache = self.g.kv_append_at(cache, x, at.at, 0)?;
        match at.rows {
            Some(rows) => Ok(self.g.gather(cache, rows, 0)?),
            None => Ok(cache),
        }
    }

    /// `x + bias` with the vector `name` when `present`, else `x`.
    fn bias(&mut self, present: bool, name: &str, x: ValueId) -> Result<ValueId> {
        if !present {
            return Ok(x);
        }
        let b = self.vector(name)?;
        Ok(self.g.binary(BinaryOp::Add, x, b)?)
    }

    /// RMSNorm of each `head_dim`-wide head of `x [S, heads·head_dim]` with the gain `name`.
    fn head_norm(&mut self, name: &str, x: ValueId, heads: usize, hd: usize, eps: f32) -> Result<ValueId> {
        let x = self.g.reshape(x, &[-1, heads as i64, hd as i64])?;
        let x = self.rms_norm(name, x, eps)?;
        Ok(self.g.reshape(x, &[-1, (heads * hd) as i64])?)
    }

    /// `x · s` for a constant `s`.
    fn scale(&mut self, x: ValueId, s: f32) -> Result<ValueId> {
        let s = self.constant(&[1], &[s])?;
        Ok(self.g.binary(BinaryOp::Mul, x, s)?)
    }

    /// `cap · tanh(x / cap)`.
    fn softcap(&mut self, x: ValueId, cap: f32) -> Result<ValueId> {
        let x = self.scale(x, 1.0 / cap)?;
        let x = self.g.activation(ActivationKind::Tanh, x)?;
        self.scale(x, cap)
    }
}

/// The rope style llama.cpp uses for a GGUF architecture (its NORM types pair adjacent channels).
pub fn gguf_rope_style(arch: &str) -> RopeStyle {
    match arch {
        "llama" | "deepseek" | "deepseek2" | "granite" | "command-r" | "baichuan" | "internlm2" | "minicpm" => RopeStyle::GptJ,
        _ => RopeStyle::NeoX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_cpu::CpuBackend;

    /// The masks of a step at `pos` of `s` tokens, computed by the graph.
    fn graph_masks(window: usize, slots: usize, capacity: usize, pos: usize, s: usize) -> (Vec<f32>, Vec<f32>) {
        let w = Weights::new("none");
        let mut b = Builder { g: Graph::new(), w: &w, params: Vec::new(), norm_plus_one: false, dtype: DType::F32 };
        let tokens = b.g.input(TOKENS, TensorType::new(DType::I64, Shape(vec![Dim::sym("S")])));
        let at = b.g.input(POS, TensorType::of(DType::I64, &[1]));
        let positions = b.positions(tokens, at).unwrap();
        let causal = b.causal_mask(positions, capacity).unwrap();
        let sliding = b.window_mask(positions, window, slots).unwrap();
        b.g.set_outputs(vec![causal, sliding]).unwrap();
        let mut c = Session::new(std::sync::Arc::new(CpuBackend::new())).compile(&b.g).unwrap();
        let ids = Tensor::from_vec(vec![0i64; s], &[s]).unwrap();
        let at = Tensor::from_vec(vec![pos as i64], &[1]).unwrap();
        let out = c.run(&[(TOKENS, &ids), (POS, &at)]).unwrap();
        (out[0].to_vec().unwrap(), out[1].to_vec().unwrap())
    }

    /// The masks as the host built them before they moved into the graph: from the position
    /// each slot holds after the step, `last − (last − j) mod slots` for `j ≤ last`.
    fn host_masks(window: usize, slots: usize, capacity: usize, pos: usize, s: usize) -> (Vec<f32>, Vec<f32>) {
        let mut causal = vec![HIDDEN; s * capacity];
        for (i, row) in causal.chunks_mut(capacity).enumerate() {
            row[..=pos + i].fill(0.0);
        }
        let last = pos + s - 1;
        let held: Vec<Option<usize>> = (0..slots).map(|j| (j <= last).then(|| last - (last - j) % slots)).collect();
        let mut sliding = vec![HIDDEN; s * slots];
        for (i, row) in sliding.chunks_mut(slots).enumerate() {
            for (m, p) in row.iter_mut().zip(&held) {
                if p.is_some_and(|p| p <= pos + i && p + window > pos + i) {
                    *m = 0.0;
                }
            }
        }
        (causal, sliding)
    }

    /// The largest difference over the largest magnitude of `want`.
    fn normwise(got: &[f32], want: &[f32]) -> f32 {
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
    }

    #[test]
    fn a_bf16_graph_follows_the_f32_graph_on_random_weights() {
        let config = LlamaConfig { vocab: 97, d_model: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, d_ff: 128, rope_dim: 16, ..LlamaConfig::llama_3_2_1b() };
        let w = Weights::random(&config, 7, None);
        let session = Session::new(std::sync::Arc::new(CpuBackend::new()));
        let mut want = Generator::new(Llama::build(&config, &w, 16).unwrap(), &session).unwrap();
        let mut got = Generator::new(Llama::build_as(&config, &w, 16, DType::BF16).unwrap(), &session).unwrap();
        let graph = got.compiled().graph();
        let bf16_params = graph.params().iter().filter(|(_, v)| graph.ty(*v).dtype == DType::BF16).count();
        assert_eq!(bf16_params, graph.params().len(), "every weight and cache is BF16");
        let (mut w, mut g) = (want.feed(&[3, 50, 7]).unwrap(), got.feed(&[3, 50, 7]).unwrap());
        for step in 0..4 {
            assert!(normwise(&g, &w) < 3e-2, "step {step}: logits differ by {}", normwise(&g, &w));
            let next = generate::argmax(&w);
            w = want.feed(&[next]).unwrap();
            g = got.feed(&[next]).unwrap();
        }
        assert!(w.iter().any(|v| v.abs() > 0.1), "the logits are not all near zero");
    }

    #[test]
    fn the_graphs_greedy_token_is_the_hosts_argmax_of_its_logits() {
        let config = LlamaConfig { vocab: 97, d_model: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, d_ff: 128, rope_dim: 16, ..LlamaConfig::llama_3_2_1b() };
        let w = Weights::random(&config, 11, None);
        let session = Session::new(std::sync::Arc::new(CpuBackend::new()));
        let mut by_logits = Generator::new(Llama::build(&config, &w, 16).unwrap(), &session).unwrap();
        let mut greedy = Generator::new(Llama::build(&config, &w, 16).unwrap(), &session).unwrap();
        let mut next = greedy.feed_greedy(&[3, 50, 7]).unwrap();
        let mut logits = by_logits.feed(&[3, 50, 7]).unwrap();
        for step in 0..5 {
            assert_eq!(next, generate::argmax(&logits), "step {step}");
            next = greedy.feed_greedy(&[next]).unwrap();
            logits = by_logits.feed(&[generate::argmax(&logits)]).unwrap();
        }
        assert_eq!(greedy.position(), by_logits.position());
    }

    #[test]
    fn in_graph_masks_match_the_slots_positions_for_every_step_a_ring_allows() {
        let capacity = 40;
        for (window, chunk) in [(4, 3), (5, 1), (3, 6)] {
            let slots = window + chunk - 1;
            for pos in 0..capacity {
                // Llama::step_limit with a ring of `slots`.
                for s in 1..=(capacity - pos).min(chunk).min(slots - pos % slots) {
                    let what = format!("window {window}, ring {slots}: {s} tokens at {pos}");
                    assert_eq!(graph_masks(window, slots, capacity, pos, s), host_masks(window, slots, capacity, pos, s), "{what}");
                }
            }
        }
        assert_eq!(graph_masks(4, capacity, capacity, 9, 7), host_masks(4, capacity, capacity, 9, 7), "no ring");
    }
}
