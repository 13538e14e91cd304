//! SentencePiece-style (byte-fallback) BPE from tokenizer.json against the `tokenizers`
//! package: ids of every text with special tokens parsed and not, and the decoded text of those
//! ids and of chosen id lists, with and without special tokens; and the same vocabularies as
//! `llama` GGUF files against llama.cpp's ids (fixtures: `tools/models/spm_tokenizer_fixtures.py`).

use rlx_io::GgufFile;
use rlx_models::bpe::BpeTokenizer;
use rlx_models::ModelError;
use serde_json::Value;
use std::path::{Path, PathBuf};

const NAMES: [&str; 4] = ["llama2", "metaspace", "metaspace_split", "gemma"];

fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(file)
}

fn tokenizer(name: &str) -> BpeTokenizer {
    BpeTokenizer::from_tokenizer_json(&data(&format!("spm_{name}.json"))).unwrap()
}

fn cases(name: &str) -> Value {
    let text = std::fs::read_to_string(data(&format!("spm_{name}_cases.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect()
}

#[test]
fn ids_match_the_tokenizers_package() {
    for name in NAMES {
        let tok = tokenizer(name);
        let fx = cases(name);
        let texts = fx["texts"].as_array().unwrap();
        assert!(texts.len() >= 20);
        for c in texts {
            let text = c["text"].as_str().unwrap();
            assert_eq!(tok.encode(text, true), ids(&c["special"]["ids"]), "{name}: {text:?}");
            assert_eq!(tok.encode(text, false), ids(&c["plain"]["ids"]), "{name}: {text:?} (specials not parsed)");
        }
    }
}

#[test]
fn decoding_matches_the_tokenizers_package() {
    for name in NAMES {
        let tok = tokenizer(name);
        let fx = cases(name);
        let encoded = fx["texts"].as_array().unwrap().iter().flat_map(|c| [&c["special"], &c["plain"]]);
        for c in encoded.chain(fx["decodes"].as_array().unwrap()) {
            let ids = ids(&c["ids"]);
            assert_eq!(tok.decode(&ids, true), c["decoded"].as_str().unwrap(), "{name}: {ids:?}");
            assert_eq!(tok.decode(&ids, false), c["decoded_skip"].as_str().unwrap(), "{name}: {ids:?} (specials skipped)");
        }
    }
}

#[test]
fn some_texts_take_the_byte_fallback() {
    let tok = tokenizer("llama2");
    let ids = tok.encode("日本語 🦀", false);
    let bytes = tok.token_id("<0xE6>").unwrap();
    assert!(ids.contains(&bytes), "{ids:?}");
    assert_eq!(tok.decode(&ids, false), "日本語 🦀");
}

/// Streamed output: each generated token's bytes continue the text, `▁` as a space and byte
/// tokens as their bytes, without the leading-space strip `decode` applies to a whole text.
#[test]
fn token_bytes_spell_the_text_token_by_token() {
    for (name, prefix) in [("llama2", " "), ("metaspace", " "), ("gemma", "")] {
        let tok = tokenizer(name);
        for text in ["Hello  world, 日本 🦀\n\tend ", "x"] {
            let ids = tok.encode(text, true);
            let bytes: Vec<u8> = ids.iter().flat_map(|&i| tok.token_bytes(i, false)).collect();
            assert_eq!(String::from_utf8(bytes).unwrap(), format!("{prefix}{text}"), "{name}");
        }
    }
    let tok = tokenizer("gemma");
    let turn = tok.token_id("<start_of_turn>").unwrap();
    assert_eq!(tok.token_bytes(turn, false), b"");
    assert_eq!(tok.token_bytes(turn, true), b"<start_of_turn>");
    assert_eq!(tok.token_bytes(tok.token_id("<tool>").unwrap(), false), b"<tool>");
    assert_eq!((tok.bos, tok.add_bos), (tok.token_id("<bos>"), true));
}

/// A copy of the llama2 fixture with `edit` applied to its JSON.
fn edited(file: &str, edit: impl FnOnce(&mut Value)) -> Result<BpeTokenizer, ModelError> {
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(data("spm_llama2.json")).unwrap()).unwrap();
    edit(&mut json);
    let path = std::env::temp_dir().join(format!("rlx-spm-{}-{file}", std::process::id()));
    std::fs::write(&path, json.to_string()).unwrap();
    let tok = BpeTokenizer::from_tokenizer_json(&path);
    std::fs::remove_file(&path).unwrap();
    tok
}

#[test]
fn malformed_files_are_refused_by_name() {
    let err = edited("bytes.json", |j| {
        j["model"]["vocab"].as_object_mut().unwrap().remove("<0xE6>");
    });
    assert!(matches!(&err, Err(ModelError::Metadata { key, expected, .. }) if key == "model.vocab" && expected.contains("<0xE6>")), "{:?}", err.err());
    let err = edited("normalizer.json", |j| j["normalizer"] = serde_json::json!({"type": "Lowercase"}));
    assert!(matches!(&err, Err(ModelError::Unsupported(m)) if m.contains("normalizer `Lowercase`")), "{:?}", err.err());
    let err = edited("decoder.json", |j| j["decoder"]["decoders"][0] = serde_json::json!({"type": "WordPiece"}));
    assert!(matches!(&err, Err(ModelError::Unsupported(m)) if m.contains("decoder `WordPiece`")), "{:?}", err.err());
    let err = edited("merges.json", |j| j["model"]["merges"][0] = serde_json::json!(["▁", "no such token"]));
    assert!(matches!(&err, Err(ModelError::Metadata { key, .. }) if key == "model.merges"), "{:?}", err.err());
}

#[test]
fn gguf_sentencepiece_ids_match_llama_cpp() {
    for name in ["llama2", "gemma"] {
        let tok = BpeTokenizer::from_gguf(&GgufFile::open(data(&format!("spm_{name}.gguf"))).unwrap()).unwrap();
        assert!(tok.add_bos);
        let fx = cases(&format!("{name}_gguf"));
        let texts = fx["texts"].as_array().unwrap();
        assert!(texts.len() >= 20);
        for c in texts {
            let text = c["text"].as_str().unwrap();
            assert_eq!(tok.encode(text, true), ids(&c["special"]), "{name}: {text:?}");
            let plain = tok.encode(text, false);
            assert_eq!(plain, ids(&c["plain"]), "{name}: {text:?} (specials not parsed)");
            if !text.contains(['<', '▁']) {
                assert_eq!(tok.decode(&plain, false), text, "{name}: decoding {text:?}");
            }
        }
    }
}
