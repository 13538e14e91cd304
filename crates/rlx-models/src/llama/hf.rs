//! Hugging Face checkpoint folders (config.json, model.safetensors or its sharded index,
//! tokenizer.json) for the Llama family: `llama` (incl. SmolLM2), `qwen2`, `qwen3` and
//! `gemma3_text`. config.json becomes a [`LlamaConfig`] whose [`Variant`] holds what the member
//! changes; tensors are renamed to the GGUF names the graph builder reads and widened to F32.
//!
//! Both config spellings are read: transformers ≥ 5's `rope_parameters` (per layer type for
//! Gemma3, `layer_types`) and the `rope_theta` / `rope_scaling` / `rope_local_base_freq` /
//! `sliding_window_pattern` of most published checkpoints.

use super::variant::yarn_attention_factor;
use super::{LlamaConfig, RopeScaling, SlidingWindow, Stored, Variant, Weights};
use crate::bpe::BpeTokenizer;
use crate::error::{ModelError, Result};
use rlx_io::SafetensorsFile;
use rlx_ir::ops::attention::RopeStyle;
use rlx_ir::ops::elementwise::ActivationKind;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The model types this loader configures.
pub const MODEL_TYPES: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3_text"];

/// What config.json says beyond the decoder's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct HfConfig {
    pub llama: LlamaConfig,
    /// The output head is the token embedding (`tie_word_embeddings`).
    pub tied: bool,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

/// A checkpoint folder loaded for generation.
pub struct HfModel {
    pub tokenizer: BpeTokenizer,
    pub config: LlamaConfig,
    pub weights: Weights,
}

impl HfModel {
    /// Opens the folder `dir`; `progress` is called with (tensors read, total).
    pub fn open(dir: &Path, progress: impl FnMut(usize, usize)) -> Result<HfModel> {
        let cfg = HfConfig::read(&dir.join("config.json"))?;
        let mut tokenizer = BpeTokenizer::from_tokenizer_json(&dir.join("tokenizer.json"))?;
        let special = read_json(&dir.join("tokenizer_config.json")).ok().map(|t| {
            let named = |key: &str| t.get(key).and_then(|v| v.as_str().or_else(|| v.get("content").and_then(Value::as_str))).map(str::to_string);
            (named("eos_token"), named("bos_token"), t.get("add_bos_token").and_then(Value::as_bool))
        });
        if let Some((eos, bos, add_bos)) = special {
            tokenizer.eos = tokenizer.eos.or(eos.and_then(|t| tokenizer.token_id(&t)));
            tokenizer.bos = tokenizer.bos.or(bos.and_then(|t| tokenizer.token_id(&t)));
            tokenizer.add_bos |= add_bos == Some(true) && tokenizer.bos.is_some();
        }
        tokenizer.eos = tokenizer.eos.or(cfg.eos);
        tokenizer.chat_template = crate::chat::template_from_tokenizer_config(&dir.join("tokenizer_config.json"))?;
        let weights = load_weights(dir, &cfg, progress)?;
        Ok(HfModel { tokenizer, config: cfg.llama, weights })
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Unsupported(format!("{}: cannot read: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| ModelError::Unsupported(format!("{}: not JSON: {e}", path.display())))
}

/// Typed reads of config.json keys, errors naming the file and key.
struct Keys<'a> {
    v: &'a Value,
    file: &'a Path,
}

impl Keys<'_> {
    fn error(&self, key: &str, expected: &str) -> ModelError {
        ModelError::Metadata { file: self.file.display().to_string(), key: key.into(), expected: expected.into() }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.v.get(key).filter(|v| !v.is_null())
    }

    fn count(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().and_then(|n| usize::try_from(n).ok()).filter(|&n| n > 0).map(Some).ok_or_else(|| self.error(key, "a positive integer")),
        }
    }

    fn size(&self, key: &str) -> Result<usize> {
        self.count(key)?.ok_or_else(|| self.error(key, "a positive integer"))
    }

    fn num(&self, key: &str) -> Result<Option<f64>> {
        self.get(key).map(|v| v.as_f64().ok_or_else(|| self.error(key, "a number"))).transpose()
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool> {
        self.get(key).map_or(Ok(default), |v| v.as_bool().ok_or_else(|| self.error(key, "a boolean")))
    }

    fn str(&self, key: &str) -> Result<Option<&str>> {
        self.get(key).map(|v| v.as_str().ok_or_else(|| self.error(key, "a string"))).transpose()
    }

    /// A token id, or the first of a list of them (`eos_token_id: [1, 106]`).
    fn id(&self, key: &str) -> Option<u32> {
        let v = self.get(key)?;
        v.as_u64().or_else(|| v.as_array()?.first()?.as_u64()).and_then(|n| u32::try_from(n).ok())
    }
}

impl HfConfig {
    /// Reads a config.json of one of [`MODEL_TYPES`].
    pub fn read(path: &Path) -> Result<HfConfig> {
        let v = read_json(path)?;
        HfConfig::from_json(&v, path)
    }

    /// `v` as config.json at `path` (used in messages).
    pub fn from_json(v: &Value, path: &Path) -> Result<HfConfig> {
        let k = Keys { v, file: path };
        let model_type = k.str("model_type")?.unwrap_or("");
        if !MODEL_TYPES.contains(&model_type) {
            let hint = if model_type == "gemma3" { " (the multimodal Gemma3 checkpoint; its text model `gemma3_text` is)" } else { "" };
            return Err(ModelError::Unsupported(format!(
                "{}: model_type `{model_type}` is not implemented{hint}; {} are",
                path.display(),
                MODEL_TYPES.join(", ")
            )));
        }
        let gemma = model_type == "gemma3_text";
        let d_model = k.size("hidden_size")?;
        let heads = k.size("num_attention_heads")?;
        let kv_heads = k.count("num_key_value_heads")?.unwrap_or(heads);
        let default_head_dim = match model_type {
            "qwen3" => 128,
            "gemma3_text" => 256,
            _ => d_model / heads,
        };
        let head_dim = k.count("head_dim")?.unwrap_or(default_head_dim);
        if heads % kv_heads != 0 || head_dim % 2 != 0 {
            return Err(k.error("num_key_value_heads", &format!("a divisor of num_attention_heads {heads}, with an even head_dim ({head_dim})")));
        }
        let layers = k.size("num_hidden_layers")?;
        let context = k.count("max_position_embeddings")?.unwrap_or(4096);
        let (rope_base, rope_scaling, local_rope) = rope(&k, gemma, context)?;
        let act_key = if gemma { "hidden_activation" } else { "hidden_act" };
        let act = k.str(act_key)?.unwrap_or(if gemma { "gelu_pytorch_tanh" } else { "silu" });
        let ffn_act = match act {
            "silu" | "swish" => ActivationKind::Silu,
            "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => ActivationKind::GeluApprox,
            "gelu" => ActivationKind::Gelu,
            other => return Err(k.error(act_key, &format!("silu, gelu or gelu_pytorch_tanh, not `{other}`"))),
        };
        let attention_bias = k.flag("attention_bias", false)?;
        let softcap = |key: &str| -> Result<Option<f32>> { Ok(k.num(key)?.filter(|&c| c > 0.0).map(|c| c as f32)) };
        let mut variant = Variant {
            rope_scaling,
            qkv_bias: attention_bias || model_type == "qwen2",
            o_bias: attention_bias,
            ffn_bias: k.flag("mlp_bias", false)?,
            qk_norm: matches!(model_type, "qwen3" | "gemma3_text"),
            norm_plus_one: gemma,
            post_norms: gemma,
            ffn_act,
            embed_scale: gemma.then(|| (d_model as f32).sqrt()),
            attn_scale: None,
            // transformers' Gemma3 attention leaves `attn_logit_softcapping` unapplied (QK-norm
            // took its place); the checkpoints were trained that way.
            attn_softcap: None,
            final_softcap: softcap("final_logit_softcapping")?,
            sliding: None,
            moe: None,
            llama_cpp_numerics: false,
        };
        if gemma {
            let scalar = k.num("query_pre_attn_scalar")?.unwrap_or(256.0);
            variant.attn_scale = Some(scalar.powf(-0.5) as f32);
            if k.flag("use_bidirectional_attention", false)? {
                return Err(k.error("use_bidirectional_attention", "false (bidirectional attention is not implemented)"));
            }
        }
        variant.sliding = sliding(&k, model_type, layers, local_rope)?;
        let llama = LlamaConfig {
            arch: model_type.to_string(),
            vocab: k.size("vocab_size")?,
            d_model,
            layers,
            heads,
            kv_heads,
            head_dim,
            d_ff: k.size("intermediate_size")?,
            context,
            rope_base,
            rope_dim: head_dim,
            rope_style: RopeStyle::NeoX,
            eps: k.num("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            variant,
        };
        Ok(HfConfig { llama, tied: k.flag("tie_word_embeddings", gemma)?, bos: k.id("bos_token_id"), eos: k.id("eos_token_id") })
    }
}

/// The global rope base and scaling, and the sliding layers' own base where it differs.
fn rope(k: &Keys, gemma: bool, context: usize) -> Result<(f64, RopeScaling, Option<f64>)> {
    let default_base = if gemma { 1_000_000.0 } else { 10_000.0 };
    if let Some(p) = k.get("rope_parameters") {
        let per_type = p.get("full_attention").is_some();
        let global = if per_type { &p["full_attention"] } else { p };
        let (base, scaling) = rope_entry(k, "rope_parameters", global, default_base, context)?;
        let local = match p.get("sliding_attention").filter(|_| per_type) {
            Some(s) => {
                let (local_base, local_scaling) = rope_entry(k, "rope_parameters.sliding_attention", s, 10_000.0, context)?;
                if local_scaling != RopeScaling::None {
                    return Err(k.error("rope_parameters.sliding_attention", "rope_type `default` (scaled sliding-layer rope is not implemented)"));
                }
                Some(local_base)
            }
            None => None,
        };
        return Ok((base, scaling, local));
    }
    let base = k.num("rope_theta")?.unwrap_or(default_base);
    let scaling = match k.get("rope_scaling") {
        Some(s) => rope_entry(k, "rope_scaling", s, base, context)?.1,
        None => RopeScaling::None,
    };
    let local = if gemma { Some(k.num("rope_local_base_freq")?.unwrap_or(10_000.0)) } else { None };
    Ok((base, scaling, local))
}

/// One rope dictionary (`rope_type` or legacy `type`, `rope_theta`, scaling parameters).
fn rope_entry(k: &Keys, key: &str, p: &Value, default_base: f64, context: usize) -> Result<(f64, RopeScaling)> {
    let e = |field: &str, expected: &str| k.error(&format!("{key}.{field}"), expected);
    let num = |field: &str| -> Result<Option<f64>> {
        p.get(field).filter(|v| !v.is_null()).map(|v| v.as_f64().ok_or_else(|| e(field, "a number"))).transpose()
    };
    let base = num("rope_theta")?.unwrap_or(default_base);
    let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
    let factor = || num("factor")?.ok_or_else(|| e("factor", "a number"));
    let original = || num("original_max_position_embeddings")?.ok_or_else(|| e("original_max_position_embeddings", "a number"));
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "llama3" => RopeScaling::Llama3 {
            factor: factor()?,
            low_freq_factor: num("low_freq_factor")?.ok_or_else(|| e("low_freq_factor", "a number"))?,
            high_freq_factor: num("high_freq_factor")?.ok_or_else(|| e("high_freq_factor", "a number"))?,
            original_context: original()?,
        },
        "yarn" => {
            let original_context = original()?;
            let factor = num("factor")?.unwrap_or(context as f64 / original_context);
            let attention_factor = match num("attention_factor")? {
                Some(a) => a,
                None => yarn_attention_factor(factor, num("mscale")?, num("mscale_all_dim")?),
            };
            RopeScaling::Yarn {
                factor,
                original_context,
                beta_fast: num("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0),
                beta_slow: num("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0),
                attention_factor,
                truncate: p.get("truncate").and_then(Value::as_bool).unwrap_or(true),
            }
        }
        other => return Err(e("rope_type", &format!("default, linear, llama3 or yarn, not `{other}`"))),
    };
    Ok((base, scaling))
}

/// Which layers slide: `layer_types` when given, else Gemma3's `sliding_window_pattern` (every
/// n-th layer global); Qwen's legacy `use_sliding_window` without `layer_types` is refused.
fn sliding(k: &Keys, model_type: &str, layers: usize, rope_base: Option<f64>) -> Result<Option<SlidingWindow>> {
    let kinds: Vec<bool> = match k.get("layer_types") {
        Some(list) => {
            let list = list.as_array().filter(|l| l.len() == layers).ok_or_else(|| k.error("layer_types", &format!("{layers} layer types")))?;
            list.iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(k.error("layer_types", "`sliding_attention` or `full_attention` entries")),
                })
                .collect::<Result<_>>()?
        }
        None if model_type == "gemma3_text" => {
            let pattern = match k.count("sliding_window_pattern")? {
                Some(p) => p,
                None => k.count("_sliding_window_pattern")?.unwrap_or(6),
            };
            (0..layers).map(|i| (i + 1) % pattern != 0).collect()
        }
        None if k.flag("use_sliding_window", false)? => {
            return Err(k.error("layer_types", "a list when use_sliding_window is set (max_window_layers is not read)"));
        }
        None => vec![false; layers],
    };
    if !kinds.contains(&true) {
        return Ok(None);
    }
    let window = k.size("sliding_window")?;
    Ok(Some(SlidingWindow { window, layers: kinds, rope_base }))
}

/// The checkpoint's tensor files: the shards of model.safetensors.index.json, or
/// model.safetensors.
fn open_files(dir: &Path) -> Result<(Vec<SafetensorsFile>, HashMap<String, usize>)> {
    let index = dir.join("model.safetensors.index.json");
    let paths: Vec<PathBuf> = if index.exists() {
        let v = read_json(&index)?;
        let map = v.get("weight_map").and_then(Value::as_object).ok_or_else(|| ModelError::Metadata {
            file: index.display().to_string(),
            key: "weight_map".into(),
            expected: "an object of tensor → file".into(),
        })?;
        let mut files: Vec<&str> = map.values().filter_map(Value::as_str).collect();
        files.sort_unstable();
        files.dedup();
        files.iter().map(|f| dir.join(f)).collect()
    } else {
        vec![dir.join("model.safetensors")]
    };
    let files = paths.iter().map(SafetensorsFile::open).collect::<Result<Vec<_>, _>>()?;
    let mut by_name = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        for t in f.tensors() {
            by_name.insert(t.name.to_string(), i);
        }
    }
    Ok((files, by_name))
}

/// Every tensor the graph of `cfg` reads: its GGUF name, HF name and expected shape.
fn tensor_names(cfg: &HfConfig) -> Vec<(String, String, Vec<usize>)> {
    let c = &cfg.llama;
    let v = &c.variant;
    let (d, q, kv, ff) = (c.d_model, c.heads * c.head_dim, c.kv_heads * c.head_dim, c.d_ff);
    let mut out = vec![
        ("token_embd.weight".to_string(), "model.embed_tokens.weight".to_string(), vec![c.vocab, d]),
        ("output_norm.weight".into(), "model.norm.weight".into(), vec![d]),
    ];
    if !cfg.tied {
        out.push(("output.weight".into(), "lm_head.weight".into(), vec![c.vocab, d]));
    }
    for l in 0..c.layers {
        let mut add = |gguf: &str, hf: &str, shape: Vec<usize>| out.push((format!("blk.{l}.{gguf}"), format!("model.layers.{l}.{hf}"), shape));
        add("attn_norm.weight", "input_layernorm.weight", vec![d]);
        for (g, h, n) in [("attn_q", "q_proj", q), ("attn_k", "k_proj", kv), ("attn_v", "v_proj", kv)] {
            add(&format!("{g}.weight"), &format!("self_attn.{h}.weight"), vec![n, d]);
            if v.qkv_bias {
                add(&format!("{g}.bias"), &format!("self_attn.{h}.bias"), vec![n]);
            }
        }
        add("attn_output.weight", "self_attn.o_proj.weight", vec![d, q]);
        if v.o_bias {
            add("attn_output.bias", "self_attn.o_proj.bias", vec![d]);
        }
        if v.qk_norm {
            add("attn_q_norm.weight", "self_attn.q_norm.weight", vec![c.head_dim]);
            add("attn_k_norm.weight", "self_attn.k_norm.weight", vec![c.head_dim]);
        }
        if v.post_norms {
            add("post_attention_norm.weight", "post_attention_layernorm.weight", vec![d]);
            add("ffn_norm.weight", "pre_feedforward_layernorm.weight", vec![d]);
            add("post_ffw_norm.weight", "post_feedforward_layernorm.weight", vec![d]);
        } else {
            add("ffn_norm.weight", "post_attention_layernorm.weight", vec![d]);
        }
        for (g, h, shape) in [("ffn_gate", "gate_proj", [ff, d]), ("ffn_up", "up_proj", [ff, d]), ("ffn_down", "down_proj", [d, ff])] {
            add(&format!("{g}.weight"), &format!("mlp.{h}.weight"), shape.to_vec());
            if v.ffn_bias {
                add(&format!("{g}.bias"), &format!("mlp.{h}.bias"), vec![shape[0]]);
            }
        }
    }
    out
}

/// The tensors of the checkpoint in `dir` that `cfg`'s graph reads, under their GGUF names,
/// widened to F32. A tied checkpoint's `lm_head.weight`, when saved, is used as the head.
pub fn load_weights(dir: &Path, cfg: &HfConfig, mut progress: impl FnMut(usize, usize)) -> Result<Weights> {
    let (files, by_name) = open_files(dir)?;
    let mut names = tensor_names(cfg);
    if cfg.tied && by_name.contains_key("lm_head.weight") {
        names.push(("output.weight".into(), "lm_head.weight".into(), vec![cfg.llama.vocab, cfg.llama.d_model]));
    }
    let mut w = Weights::new(&dir.display().to_string());
    for (i, (gguf, hf, shape)) in names.iter().enumerate() {
        let file = by_name.get(hf).map(|&f| &files[f]).ok_or_else(|| ModelError::Tensor {
            file: dir.display().to_string(),
            tensor: hf.clone(),
            reason: "is missing".into(),
        })?;
        let t = file.load_f32(hf)?;
        if t.shape() != shape.as_slice() {
            return Err(ModelError::Tensor {
                file: file.path().display().to_string(),
                tensor: hf.clone(),
                reason: format!("shape {:?}, expected {shape:?} from config.json", t.shape()),
            });
        }
        w.insert(gguf, Stored::F32(t));
        progress(i + 1, names.len());
    }
    Ok(w)
}
