//! SmolLM2-135M-Instruct (Q4_1 GGUF) against llama.cpp: prompt ids, the top-8 logits of every
//! step with rlx fed llama.cpp's 64 greedy tokens, and where rlx's own greedy choice first
//! differs, for five prompts (fixture: `tools/models/llama_fixtures.py generate`). Skipped when
//! the model file is absent.
//!
//! rlx rounds as llama.cpp's CPU backend does (8-bit activation blocks, f16 cache and attention
//! operands), yet the logits still differ by up to about 0.8: the model amplifies float-order
//! differences through those roundings (llama.cpp itself moves its top logits by 0.44 when the
//! rope base changes by 1e-5, and by 1.4 with an f32 cache). As measured, one prompt follows
//! llama.cpp's 64 tokens and the others first pick differently at steps 0–29, where the two
//! choices are 0.08–0.17 apart in llama.cpp's own logits.

use rlx_cpu::CpuBackend;
use rlx_io::GgufFile;
use rlx_models::bpe::BpeTokenizer;
use rlx_models::llama::{argmax, Generator, Llama, LlamaConfig, Sampling, Weights};
use rlx_runtime::Session;
use std::path::PathBuf;
use std::sync::Arc;

mod common;

use common::smollm2 as model;

/// Largest difference allowed between rlx's and llama.cpp's top logits (values near 20–35);
/// measured 0.60–0.66 on four prompts and 1.22 on the code prompt over all 64 steps (f32
/// attention; llama.cpp's f16 KV cache brought the worst to 0.77 at half the decode speed).
const LOGIT_TOLERANCE: f32 = 1.25;

/// A divergence from llama.cpp's greedy path is accepted only at a near-tie: rlx's choice
/// scores within this many logits of llama.cpp's top one in llama.cpp's own logits.
const NEAR_TIE: f32 = 0.3;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn load(path: &PathBuf, capacity: usize) -> (BpeTokenizer, Generator) {
    let gguf = Arc::new(GgufFile::open(path).unwrap());
    let tok = BpeTokenizer::from_gguf(&gguf).unwrap();
    let config = LlamaConfig::from_gguf(&gguf).unwrap();
    let weights = Weights::from_gguf(gguf, |_, _| {}).unwrap();
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
        let name = run["prompt"].as_str().unwrap();
        let prompt = ids(&run["prompt_ids"]);
        assert_eq!(tok.encode(name, true), prompt);
        gen.reset();
        let mut logits = gen.feed(&prompt).unwrap();
        let (mut prompt_worst, mut diverged) = (0f32, None);
        // Teacher-forced: rlx is fed llama.cpp's tokens, so every step's logits compare.
        for (step, (&w, top)) in ids(&run["greedy"]).iter().zip(run["top_logits"].as_array().unwrap()).enumerate() {
            for (id, v) in ids(&top["ids"]).iter().zip(top["values"].as_array().unwrap()) {
                prompt_worst = prompt_worst.max((logits[*id as usize] - v.as_f64().unwrap() as f32).abs());
            }
            let t = argmax(&logits);
            if t != w && diverged.is_none() {
                diverged = Some(step);
                // llama.cpp's own score of rlx's choice, when among its top 8.
                let theirs = ids(&top["ids"]).iter().position(|&i| i == t).map(|r| top["values"][r].as_f64().unwrap() as f32);
                let best = top["values"][0].as_f64().unwrap() as f32;
                let gap = theirs.map_or(f32::INFINITY, |v| best - v);
                let line = format!("{name:?}: diverges at step {step}: rlx picks {t}, llama.cpp {w}, {gap} below it there");
                eprintln!("{line}");
                if gap > NEAR_TIE {
                    report.push(line);
                }
            }
            logits = gen.feed(&[w]).unwrap();
        }
        eprintln!("{name:?}: top-8 logits within {prompt_worst} of llama.cpp's; first greedy divergence: {diverged:?}");
        worst = worst.max(prompt_worst);
    }
    assert!(worst < LOGIT_TOLERANCE, "top logits differ from llama.cpp's by up to {worst}");
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn decoding_with_the_cache_matches_recomputing_the_prefix() {
    let Some(path) = model() else { return };
    let (tok, mut gen) = load(&path, 64);
    let prompt = tok.encode("The capital of France is", false);
    let (cont, _) = gen.generate(&prompt, 6, Sampling::GREEDY, &[], |_| {}).unwrap();
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
