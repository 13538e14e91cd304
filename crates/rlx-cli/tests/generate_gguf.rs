//! `rlx generate` on the tiny GGUF models of each architecture (`fixtures/models/gguf-tiny`,
//! written by `tools/models/gguf_arch_fixtures.py`): greedy, it must print the prompt and then
//! llama.cpp's own greedy continuation of it, up to the end-of-sequence token.

use std::path::PathBuf;
use std::process::Command;

fn generates_what_llama_cpp_does(name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/gguf-tiny");
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
            .unwrap();
    let g = &fx["generate"];
    let out = Command::new(env!("CARGO_BIN_EXE_rlx"))
        .args(["generate", "--model"])
        .arg(dir.join(format!("{name}.gguf")))
        .args([
            "--prompt",
            g["prompt"].as_str().unwrap(),
            "-n",
            &g["n"].to_string(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {stderr}");
    let want = format!(
        "{}{}\n",
        g["prompt"].as_str().unwrap(),
        g["text"].as_str().unwrap()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{name}");
    let count = g["ids"].as_array().unwrap().len();
    assert!(
        stderr.contains(&format!("generated {count} tokens")),
        "{name}: {stderr}"
    );
}

#[test]
fn generate_runs_every_gguf_architecture_as_llama_cpp_does() {
    for name in ["mistral", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"] {
        generates_what_llama_cpp_does(name);
    }
}
