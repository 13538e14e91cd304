//! The architecture's sizes and switches, read from GGUF metadata (`<arch>.*` keys).

use super::gguf_rope_style;
use super::Variant;
use crate::error::{ModelError, Result};
use rlx_io::{GgufFile, GgufValue};
use rlx_ir::ops::attention::RopeStyle;

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

    /// Reads the `<arch>.*` keys llama.cpp reads for its LLAMA architecture.
    pub fn from_gguf(gguf: &GgufFile) -> Result<LlamaConfig> {
        let arch = gguf
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| ModelError::metadata(gguf, "general.architecture", "a string"))?
            .to_string();
        if arch != "llama" {
            return Err(ModelError::Unsupported(format!(
                "{}: architecture `{arch}` is not implemented (llama is)",
                gguf.path().display()
            )));
        }
        let int = |key: &str| -> Result<usize> {
            let k = format!("{arch}.{key}");
            gguf.get(&k)
                .and_then(GgufValue::as_u64)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| ModelError::metadata(gguf, &k, "a positive integer"))
        };
        let float = |key: &str, default: f64| -> Result<f64> {
            let k = format!("{arch}.{key}");
            match gguf.get(&k) {
                None => Ok(default),
                Some(v) => v.as_f64().ok_or_else(|| ModelError::metadata(gguf, &k, "a number")),
            }
        };
        let d_model = int("embedding_length")?;
        let heads = int("attention.head_count")?;
        let kv_heads = int("attention.head_count_kv").unwrap_or(heads);
        if d_model % heads != 0 || heads % kv_heads != 0 {
            return Err(ModelError::metadata(
                gguf,
                &format!("{arch}.attention.head_count"),
                &format!("heads dividing embedding_length {d_model} and divisible by head_count_kv {kv_heads}"),
            ));
        }
        let head_dim = d_model / heads;
        let rope_dim = int("rope.dimension_count").unwrap_or(head_dim);
        if rope_dim % 2 != 0 || rope_dim > head_dim {
            return Err(ModelError::metadata(gguf, &format!("{arch}.rope.dimension_count"), &format!("even and at most {head_dim}")));
        }
        let vocab = match int("vocab_size") {
            Ok(v) => v,
            Err(_) => gguf.get("tokenizer.ggml.tokens").and_then(GgufValue::as_array).map_or(0, |a| a.len()),
        };
        Ok(LlamaConfig {
            rope_style: gguf_rope_style(&arch),
            vocab,
            d_model,
            layers: int("block_count")?,
            heads,
            kv_heads,
            head_dim,
            d_ff: int("feed_forward_length")?,
            context: int("context_length")?,
            rope_base: float("rope.freq_base", 10_000.0)?,
            rope_dim,
            eps: float("attention.layer_norm_rms_epsilon", 1e-5)? as f32,
            variant: Variant { llama_cpp_numerics: true, ..Variant::default() },
            arch,
        })
    }
}
