//! The architecture's sizes and switches, read from GGUF metadata (`<arch>.*` keys) as
//! llama.cpp reads them for `llama`, `qwen2`, `qwen3`, `qwen3moe`, `gemma3` and `phi3` files.

use super::gguf_rope_style;
use super::{Moe, RopeScaling, SlidingWindow, Variant};
use crate::error::{ModelError, Result};
use rlx_io::gguf::GgufArray;
use rlx_io::{GgufFile, GgufValue};
use rlx_ir::ops::attention::RopeStyle;
use rlx_ir::ops::elementwise::ActivationKind;

/// A Llama-family decoder's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// `general.architecture` (`llama` for Llama and SmolLM2).
    pub arch: String,
    pub vocab: usize,
    pub d_model: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Hidden width of the feed-forward.
    pub d_ff: usize,
    /// Longest context the model was trained for.
    pub context: usize,
    pub rope_base: f64,
    /// Rotated channels per head.
    pub rope_dim: usize,
    pub rope_style: RopeStyle,
    pub eps: f32,
    /// What this family member changes from plain Llama.
    pub variant: Variant,
}

impl LlamaConfig {
    /// Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads over 8 KV heads of 64, FFN
    /// 8192, vocabulary 128256, tied embeddings, rope base 500000, HF's half-split rotation),
    /// without its llama3 rope rescaling: for random-weight benchmarks.
    pub fn llama_3_2_1b() -> LlamaConfig {
        LlamaConfig {
            arch: "llama".into(),
            vocab: 128_256,
            d_model: 2048,
            layers: 16,
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
            d_ff: 8192,
            context: 131_072,
            rope_base: 500_000.0,
            rope_dim: 64,
            rope_style: RopeStyle::NeoX,
            eps: 1e-5,
            variant: Variant::default(),
        }
    }

    /// SmolLM2-135M's shape as its GGUF file gives it (hidden 576, 30 layers, 9 heads over 3
    /// KV heads of 64, FFN 1536, vocabulary 49152, tied embeddings, llama.cpp's rope).
    pub fn smollm2_135m() -> LlamaConfig {
        LlamaConfig {
            arch: "llama".into(),
            vocab: 49_152,
            d_model: 576,
            layers: 30,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
            d_ff: 1536,
            context: 8192,
            rope_base: 100_000.0,
            rope_dim: 64,
            rope_style: gguf_rope_style("llama"),
            eps: 1e-5,
            variant: Variant { llama_cpp_numerics: true, ..Variant::default() },
        }
    }

    /// Reads the `<arch>.*` keys llama.cpp reads for the architectures of [`GGUF_ARCHS`], and
    /// from the tensor names which optional parts (biases, fused projections) the file has.
    pub fn from_gguf(gguf: &GgufFile) -> Result<LlamaConfig> {
        let arch = gguf
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| ModelError::metadata(gguf, "general.architecture", "a string"))?
            .to_string();
        if !GGUF_ARCHS.contains(&arch.as_str()) {
            return Err(ModelError::Unsupported(format!(
                "{}: architecture `{arch}` is not implemented ({} are)",
                gguf.path().display(),
                GGUF_ARCHS.join(", ")
            )));
        }
        let keys = ArchKeys { gguf, arch: &arch };
        let d_model = keys.int("embedding_length")?;
        let heads = keys.int("attention.head_count")?;
        let kv_heads = keys.optional_int("attention.head_count_kv")?.unwrap_or(heads);
        let head_dim = match keys.optional_int("attention.key_length")? {
            Some(k) => k,
            None if d_model % heads == 0 => d_model / heads,
            None => return Err(keys.error("attention.head_count", &format!("a divisor of embedding_length {d_model}"))),
        };
        if keys.optional_int("attention.value_length")?.is_some_and(|v| v != head_dim) {
            return Err(keys.error("attention.value_length", &format!("key_length {head_dim} (values as wide as keys)")));
        }
        if heads % kv_heads != 0 {
            return Err(keys.error("attention.head_count_kv", &format!("a divisor of head_count {heads}")));
        }
        let rope_dim = keys.optional_int("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dim % 2 != 0 || rope_dim > head_dim {
            return Err(keys.error("rope.dimension_count", &format!("even and at most {head_dim}")));
        }
        let vocab = match keys.optional_int("vocab_size")? {
            Some(v) => v,
            None => gguf.get("tokenizer.ggml.tokens").and_then(GgufValue::as_array).map_or(0, |a| a.len()),
        };
        let layers = keys.int("block_count")?;
        let has = |name: &str| gguf.info(name).is_ok();
        let mut variant = Variant {
            rope_scaling: keys.rope_scaling()?,
            qkv_bias: has("blk.0.attn_q.bias") || has("blk.0.attn_qkv.bias"),
            o_bias: has("blk.0.attn_output.bias"),
            qk_norm: has("blk.0.attn_q_norm.weight"),
            llama_cpp_numerics: true,
            ..Variant::default()
        };
        if arch == "gemma3" {
            variant.post_norms = true;
            variant.ffn_act = ActivationKind::GeluApprox;
            variant.embed_scale = Some((d_model as f32).sqrt());
            // llama.cpp scales queries by 1/√head_dim, by 1/√(d_model/heads) for the 62-layer
            // 27B model; it does not read query_pre_attn_scalar.
            let per = if layers == 62 { d_model / heads } else { head_dim };
            variant.attn_scale = Some(1.0 / (per as f32).sqrt());
            variant.final_softcap = keys.float("final_logit_softcapping", 0.0)?.filter(|&c| c > 0.0).map(|c| c as f32);
            variant.sliding = keys.gemma3_sliding(layers)?;
        }
        if arch == "qwen3moe" {
            variant.moe = Some(Moe {
                experts: keys.int("expert_count")?,
                used: keys.int("expert_used_count")?,
                d_ff: keys.int("expert_feed_forward_length")?,
            });
        }
        if let Some(m) = &variant.moe {
            if m.used > m.experts {
                return Err(keys.error("expert_used_count", &format!("at most expert_count {}", m.experts)));
            }
        }
        Ok(LlamaConfig {
            rope_style: gguf_rope_style(&arch),
            vocab,
            d_model,
            layers,
            heads,
            kv_heads,
            head_dim,
            d_ff: match &variant.moe {
                Some(m) => m.d_ff,
                None => keys.int("feed_forward_length")?,
            },
            context: keys.int("context_length")?,
            rope_base: keys.float("rope.freq_base", 10_000.0)?.unwrap_or(10_000.0),
            rope_dim,
            eps: keys.float("attention.layer_norm_rms_epsilon", 1e-5)?.unwrap_or(1e-5) as f32,
            variant,
            arch,
        })
    }
}

/// The `general.architecture` values [`LlamaConfig::from_gguf`] configures.
pub const GGUF_ARCHS: [&str; 6] = ["llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"];

/// Typed reads of a GGUF file's `<arch>.*` keys, errors naming the file and key.
struct ArchKeys<'a> {
    gguf: &'a GgufFile,
    arch: &'a str,
}

impl ArchKeys<'_> {
    fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    fn error(&self, key: &str, expected: &str) -> ModelError {
        ModelError::metadata(self.gguf, &self.key(key), expected)
    }

    /// A positive integer, `None` when the key is absent.
    fn optional_int(&self, key: &str) -> Result<Option<usize>> {
        match self.gguf.get(&self.key(key)) {
            None => Ok(None),
            Some(v) => v.as_u64().and_then(|v| usize::try_from(v).ok()).filter(|&v| v > 0).map(Some).ok_or_else(|| self.error(key, "a positive integer")),
        }
    }

    fn int(&self, key: &str) -> Result<usize> {
        self.optional_int(key)?.ok_or_else(|| self.error(key, "a positive integer"))
    }

    /// A number, `default` when absent (`None` when that is 0 and the key absent).
    fn float(&self, key: &str, default: f64) -> Result<Option<f64>> {
        match self.gguf.get(&self.key(key)) {
            None => Ok((default != 0.0).then_some(default)),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.error(key, "a number")),
        }
    }

    /// `rope.scaling.type` (llama.cpp's default `linear`) with `rope.scaling.factor` or the
    /// older `rope.scale_linear`; a factor of 0 or 1 scales nothing.
    fn rope_scaling(&self) -> Result<RopeScaling> {
        let kind = match self.gguf.get(&self.key("rope.scaling.type")) {
            None => "linear",
            Some(v) => v.as_str().ok_or_else(|| self.error("rope.scaling.type", "a string"))?,
        };
        let factor = match self.float("rope.scaling.factor", 0.0)? {
            Some(f) => f,
            None => self.float("rope.scale_linear", 0.0)?.unwrap_or(0.0),
        };
        match kind {
            "none" => Ok(RopeScaling::None),
            "linear" if factor == 0.0 || factor == 1.0 => Ok(RopeScaling::None),
            "linear" if factor > 0.0 => Ok(RopeScaling::Linear { factor }),
            "linear" => Err(self.error("rope.scaling.factor", "a positive number")),
            other => Err(self.error("rope.scaling.type", &format!("none or linear (`{other}` is not implemented for GGUF files)"))),
        }
    }

    /// Gemma3's sliding layers as llama.cpp sets them: `attention.sliding_window` wide (none
    /// when absent or 0), on the layers `attention.sliding_window_pattern` marks (a bool per
    /// layer, or `n`: every `n`-th layer global, 6 when absent), with their own rope base
    /// `rope.freq_base_swa` (10000 when absent).
    fn gemma3_sliding(&self, layers: usize) -> Result<Option<SlidingWindow>> {
        let window = match self.gguf.get(&self.key("attention.sliding_window")) {
            None => return Ok(None),
            Some(v) => v.as_u64().and_then(|w| usize::try_from(w).ok()).ok_or_else(|| self.error("attention.sliding_window", "a count of tokens"))?,
        };
        if window == 0 {
            return Ok(None);
        }
        let pattern_key = "attention.sliding_window_pattern";
        let slides: Vec<bool> = match self.gguf.get(&self.key(pattern_key)) {
            None => (0..layers).map(|l| l % 6 < 5).collect(),
            Some(GgufValue::Array(GgufArray::Bool(v))) if v.len() == layers => v.clone(),
            Some(v) => {
                let n = v.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| self.error(pattern_key, &format!("a layer period or {layers} bools")))?;
                (0..layers).map(|l| n == 0 || l % n < n - 1).collect()
            }
        };
        let rope_base = self.float("rope.freq_base_swa", 10_000.0)?;
        Ok(slides.contains(&true).then_some(SlidingWindow { window, layers: slides, rope_base }))
    }
}
