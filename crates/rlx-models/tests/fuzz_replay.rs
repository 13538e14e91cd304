//! Replays the fuzz targets' committed inputs (`fuzz/seeds/<target>/` and the inputs that once
//! crashed, hung or over-allocated, `fuzz/regressions/<target>/`) through the same entry points
//! the fuzzers drive (`fuzz/src/lib.rs`), on stable and without libFuzzer: none may panic.

#[path = "../../../fuzz/src/lib.rs"]
mod entries;

use std::path::PathBuf;

fn replay(target: &str, entry: fn(&[u8])) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut count = 0;
    for dir in ["seeds", "regressions"] {
        let Ok(read) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        let mut files: Vec<PathBuf> = read.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| entry(&data)).is_err() {
                panic!("{target}: {} panicked", f.display());
            }
            count += 1;
        }
    }
    assert!(count > 0, "{target}: no saved inputs under fuzz/seeds or fuzz/regressions");
}

#[test]
fn gguf() {
    replay("gguf", entries::gguf);
}

#[test]
fn safetensors() {
    replay("safetensors", entries::safetensors);
}

#[test]
fn onnx() {
    replay("onnx", entries::onnx);
}

#[test]
fn ir_text() {
    replay("ir_text", entries::ir_text);
}

#[test]
fn tokenizer_json() {
    replay("tokenizer_json", entries::tokenizer_json);
}

#[test]
fn gguf_tokenizer() {
    replay("gguf_tokenizer", entries::gguf_tokenizer);
}
