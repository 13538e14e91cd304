//! Tiny random-weight Llama, Qwen2, Qwen3 and Gemma3 checkpoints against transformers: every
//! prompt row's logits, 8 greedy tokens decoded through the KV cache, and the logits after
//! them; and each folder's tokenizer.json against the `tokenizers` package (fixtures:
//! `tools/models/hf_tiny_fixtures.py`, which lists what each model exercises).

use rlx_cpu::CpuBackend;
use rlx_models::bpe::BpeTokenizer;
use rlx_models::llama::hf::{load_weights, HfConfig};
use rlx_models::llama::{argmax, Generator, HfModel, Llama};
use rlx_models::ModelError;
use rlx_runtime::Session;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

const MODELS: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3_text"];

/// Largest |rlx − transformers| allowed, relative to the largest reference logit of the row.
const RELATIVE_TOLERANCE: f32 = 1e-4;

fn folder(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/hf-tiny").join(name)
}

fn reference(name: &str) -> Value {
    let text = std::fs::read_to_string(folder(name).join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("reference parses")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// max |got − want| / max |want|.
fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale
}

fn session() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

/// `n` greedy tokens after `prompt` through the KV cache, and the logits that chose the last.
fn greedy(mut gen: Generator, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let mut logits = gen.feed(prompt).unwrap();
    let mut got = Vec::new();
    for i in 0..n {
        got.push(argmax(&logits));
        if i + 1 < n {
            logits = gen.feed(&got[i..=i]).unwrap();
        }
    }
    (got, logits)
}

#[test]
fn prompt_logits_match_transformers() {
    for name in MODELS {
        let dir = folder(name);
        let cfg = HfConfig::read(&dir.join("config.json")).unwrap();
        let weights = load_weights(&dir, &cfg, |_, _| {}).unwrap();
        let model = Llama::build(&cfg.llama, &weights, 32).unwrap();
        let mut compiled = model.compile(&session()).unwrap();
        let fx = reference(name);
        let prompt = ids(&fx["prompt"]);
        let inputs = model.step_inputs(&prompt, 0, prompt.len()).unwrap();
        let named: Vec<(&str, &rlx_runtime::Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let logits = compiled.run(&named).unwrap().remove(0).to_vec::<f32>().unwrap();
        let rows = fx["logits"].as_array().unwrap();
        assert_eq!(logits.len(), rows.len() * cfg.llama.vocab, "{name}");
        let mut worst = 0f32;
        for (r, row) in rows.iter().enumerate() {
            let got = &logits[r * cfg.llama.vocab..(r + 1) * cfg.llama.vocab];
            let err = relative_error(got, &floats(row));
            assert!(err < RELATIVE_TOLERANCE, "{name}: prompt row {r} differs by {err} (relative)");
            worst = worst.max(err);
        }
        eprintln!("{name}: largest relative logit difference over the prompt rows: {worst:.2e}");
    }
}

#[test]
fn greedy_decoding_with_the_cache_matches_transformers() {
    for name in MODELS {
        let fx = reference(name);
        let hf = HfModel::open(&folder(name), |_, _| {}).unwrap();
        let model = Llama::build(&hf.config, &hf.weights, 32).unwrap();
        let want = ids(&fx["greedy"]);
        let (got, logits) = greedy(Generator::new(model, &session()).unwrap(), &ids(&fx["prompt"]), want.len());
        assert_eq!(got, want, "{name}: greedy tokens");
        let err = relative_error(&logits, &floats(&fx["final_logits"]));
        assert!(err < RELATIVE_TOLERANCE, "{name}: logits after 7 decoded tokens differ by {err} (relative)");
    }
}

#[test]
fn sliding_layers_decode_through_ring_caches_as_transformers() {
    // Window 4, steps of at most 3 tokens: the sliding layers keep 6 slots, so the 12-token
    // prompt goes in chunks and every slot is overwritten before the 8th greedy token.
    let fx = reference("gemma3_text");
    let hf = HfModel::open(&folder("gemma3_text"), |_, _| {}).unwrap();
    let model = Llama::build_chunked(&hf.config, &hf.weights, 32, 3).unwrap();
    assert_eq!(model.ring, Some(6));
    let slots: Vec<usize> = model.params.iter().filter(|(n, _)| n.ends_with("k_cache")).map(|(_, t)| t.dims()[0]).collect();
    assert_eq!(slots, vec![6, 32, 6]);
    assert!(model.step_inputs(&[1, 2, 3, 4], 0, 1).unwrap_err().to_string().contains("at most 3 in this step"));
    let want = ids(&fx["greedy"]);
    let (got, logits) = greedy(Generator::new(model, &session()).unwrap(), &ids(&fx["prompt"]), want.len());
    assert_eq!(got, want, "greedy tokens through ring caches");
    let err = relative_error(&logits, &floats(&fx["final_logits"]));
    assert!(err < RELATIVE_TOLERANCE, "logits after 7 decoded tokens differ by {err} (relative)");
}

#[test]
fn tokenizer_json_ids_match_the_tokenizers_package() {
    for name in MODELS {
        let tok = BpeTokenizer::from_tokenizer_json(&folder(name).join("tokenizer.json")).unwrap();
        let cases = reference(name)["tokens"].as_array().unwrap().clone();
        assert!(cases.len() >= 12);
        for c in &cases {
            let text = c["text"].as_str().unwrap();
            let want = ids(&c["ids"]);
            assert_eq!(tok.encode(text, true), want, "{name}: {text:?}");
            assert_eq!(tok.decode(&want, true), c["decoded"].as_str().unwrap(), "{name}: decoding {text:?}");
        }
    }
}

#[test]
fn llama3_template_adds_bos_and_specials_are_control_tokens() {
    let tok = BpeTokenizer::from_tokenizer_json(&folder("llama").join("tokenizer.json")).unwrap();
    assert!(tok.add_bos);
    assert_eq!(tok.bos, tok.token_id("<|begin_of_text|>"));
    let ids = tok.encode("<|eot_id|>hi<tool>", true);
    assert_eq!(tok.decode(&ids, false), "hi<tool>");
    let qwen = BpeTokenizer::from_tokenizer_json(&folder("qwen2").join("tokenizer.json")).unwrap();
    assert!(!qwen.add_bos);
}

/// Gemma3's config.json rewritten in the spelling of published checkpoints (`rope_theta`,
/// `rope_scaling`, `rope_local_base_freq`, `sliding_window_pattern`) configures the same model.
#[test]
fn legacy_and_transformers5_config_spellings_agree() {
    let path = folder("gemma3_text").join("config.json");
    let new: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut old = new.clone();
    let o = old.as_object_mut().unwrap();
    let rope = o.remove("rope_parameters").unwrap();
    o.remove("layer_types");
    o.insert("rope_theta".into(), rope["full_attention"]["rope_theta"].clone());
    o.insert("rope_scaling".into(), json!({"rope_type": "linear", "factor": rope["full_attention"]["factor"]}));
    o.insert("rope_local_base_freq".into(), rope["sliding_attention"]["rope_theta"].clone());
    o.insert("sliding_window_pattern".into(), json!(2));
    let (a, b) = (HfConfig::from_json(&new, &path).unwrap(), HfConfig::from_json(&old, &path).unwrap());
    assert_eq!(a, b);
    let sliding = a.llama.variant.sliding.as_ref().unwrap();
    assert_eq!((sliding.window, sliding.layers.as_slice(), sliding.rope_base), (4, &[true, false, true][..], Some(10_000.0)));
}

#[test]
fn unknown_model_types_and_missing_tensors_are_named() {
    let path = folder("llama").join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v["model_type"] = json!("mistral");
    let err = HfConfig::from_json(&v, &path).unwrap_err().to_string();
    assert!(err.contains("mistral") && err.contains("qwen3"), "{err}");
    v["model_type"] = json!("llama");
    v["rope_scaling"]["rope_type"] = json!("dynamic");
    let err = HfConfig::from_json(&v, &path).unwrap_err().to_string();
    assert!(err.contains("rope_scaling.rope_type") && err.contains("dynamic"), "{err}");
    let mut cfg = HfConfig::read(&path).unwrap();
    cfg.llama.variant.qk_norm = true;
    match load_weights(&folder("llama"), &cfg, |_, _| {}) {
        Err(ModelError::Tensor { tensor, .. }) => assert_eq!(tensor, "model.layers.0.self_attn.q_norm.weight"),
        other => panic!("expected a missing-tensor error, got {:?}", other.map(|_| ())),
    }
}
