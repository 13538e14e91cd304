//! The byte-level BPE tokenizer against llama.cpp's ids on SmolLM2's GGUF vocabulary
//! (fixture: `tools/models/llama_fixtures.py tokens`); skipped when the model file is absent.

use rlx_io::GgufFile;
use rlx_models::bpe::BpeTokenizer;

mod common;

use common::smollm2 as model;

fn fixture() -> serde_json::Value {
    let text = include_str!("data/bpe_smollm2.json");
    serde_json::from_str(text).expect("fixture parses")
}

#[test]
fn ids_match_llama_cpp() {
    let Some(path) = model() else { return };
    let tok = BpeTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let fx = fixture();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let special = c["parse_special"].as_bool().unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(text, special), want, "{text:?} (parse_special = {special})");
    }
}

#[test]
fn decoding_gives_the_text_back() {
    let Some(path) = model() else { return };
    let tok = BpeTokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    for c in fixture()["cases"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let special = c["parse_special"].as_bool().unwrap();
        assert_eq!(tok.decode(&tok.encode(text, special), true), text, "parse_special = {special}");
    }
    let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", true);
    assert_eq!(tok.decode(&ids, false), "user\nhi");
    assert_eq!(tok.eos, Some(2));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
}
