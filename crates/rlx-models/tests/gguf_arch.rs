//! Tiny random GGUF models of each architecture rlx loads (`llama` as Mistral ships it,
//! `qwen2`, `qwen3`, `qwen3moe`, `gemma3`, `phi3`), converted from transformers checkpoints by
//! llama.cpp's own `convert_hf_to_gguf.py`, against llama.cpp's greedy continuation of a random
//! prompt and its tokenizations (fixtures: `fixtures/models/gguf-tiny/`, written by
//! `tools/models/gguf_arch_fixtures.py`, which says how each model is made).
//!
//! rlx loads each file through `GgufModel::open`, as `rlx generate` does, and runs it on the
//! CPU. At every step llama.cpp's top logits must agree with rlx's to [`LOGIT_TOLERANCE`], and
//! rlx's greedy tokens must equal llama.cpp's; a divergence is accepted only at a near-tie
//! (llama.cpp's top two logits within [`NEAR_TIE`]), after which the sequences part.

use rlx_cpu::CpuBackend;
use rlx_models::llama::{argmax, Generator, GgufModel, Llama};
use rlx_runtime::Session;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// Largest difference allowed between a logit of rlx and of llama.cpp (the logits are of size
/// 1–15): both multiply the same F32 weights in a different order (Q8_0 experts: llama.cpp
/// rounds activations to 8 bits, rlx multiplies them exactly), and llama.cpp's GELU reads an
/// f16 table.
const LOGIT_TOLERANCE: f32 = 0.05;

/// A greedy choice may differ from llama.cpp's only where llama.cpp's top two logits are
/// closer than this.
const NEAR_TIE: f32 = 0.02;

fn fixture(name: &str) -> (PathBuf, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/gguf-tiny");
    let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
    (
        dir.join(format!("{name}.gguf")),
        serde_json::from_str(&text).unwrap(),
    )
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Runs the fixture `name` and checks its logits, greedy tokens and tokenizations.
fn matches_llama_cpp(name: &str, arch: &str) {
    let (path, fx) = fixture(name);
    let m = GgufModel::open(&path, |_, _| {}).unwrap();
    assert_eq!(m.config.arch, arch);
    for case in fx["tokens"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            m.tokenizer.encode(text, true),
            ids(&case["ids"]),
            "{name}: tokens of {text:?}"
        );
    }
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut gen =
        Generator::new(Llama::build(&m.config, &m.weights, 64).unwrap(), &session).unwrap();
    let want = ids(&fx["greedy"]);
    let mut logits = gen.feed(&ids(&fx["prompt"])).unwrap();
    for (step, (top, &token)) in fx["top"].as_array().unwrap().iter().zip(&want).enumerate() {
        let top: Vec<(usize, f32)> = top
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p[0].as_u64().unwrap() as usize,
                    p[1].as_f64().unwrap() as f32,
                )
            })
            .collect();
        for &(id, value) in &top {
            let diff = (logits[id] - value).abs();
            assert!(
                diff <= LOGIT_TOLERANCE,
                "{name} step {step}: logit {id} is {} in rlx, {value} in llama.cpp",
                logits[id]
            );
        }
        let ours = argmax(&logits);
        if ours != token {
            let margin = top[0].1 - top[1].1;
            assert!(
                margin < NEAR_TIE,
                "{name} step {step}: rlx picks {ours}, llama.cpp {token} by a margin of {margin}"
            );
            eprintln!("{name}: diverges at step {step}, a near-tie of {margin}");
            return;
        }
        logits = gen.feed(&[token]).unwrap();
    }
}

#[test]
fn mistral_style_llama_matches_llama_cpp() {
    matches_llama_cpp("mistral", "llama");
}

#[test]
fn qwen2_matches_llama_cpp() {
    matches_llama_cpp("qwen2", "qwen2");
}

#[test]
fn qwen3_matches_llama_cpp() {
    matches_llama_cpp("qwen3", "qwen3");
}

#[test]
fn qwen3moe_matches_llama_cpp() {
    matches_llama_cpp("qwen3moe", "qwen3moe");
}

#[test]
fn gemma3_matches_llama_cpp() {
    matches_llama_cpp("gemma3", "gemma3");
}

#[test]
fn phi3_matches_llama_cpp() {
    matches_llama_cpp("phi3", "phi3");
}

#[test]
fn an_unknown_architecture_is_refused_naming_the_file() {
    let (path, _) = fixture("qwen2");
    let bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(5).position(|w| w == b"qwen2").unwrap();
    let mut renamed = bytes.clone();
    renamed[at..at + 5].copy_from_slice(b"qwen9");
    let dir = std::env::temp_dir().join(format!("rlx-gguf-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("renamed.gguf");
    std::fs::write(&bad, renamed).unwrap();
    let err = GgufModel::open(&bad, |_, _| {})
        .err()
        .expect("qwen9 is refused")
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        err.contains("renamed.gguf") && err.contains("`qwen9`") && err.contains("gemma3"),
        "{err}"
    );
}
