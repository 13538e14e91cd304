//! Byte-level BPE tokenizers from a Hugging Face tokenizer.json (Llama 3, Qwen2/3, SmolLM2,
//! GPT-2): the `model`'s vocabulary and merges, `added_tokens`, an NFC `normalizer`, and the
//! `pre_tokenizer` (Split regexes, Digits, ByteLevel) become a [`BpeTokenizer`], the same core
//! GGUF metadata feeds. Other models, normalizers or pre-tokenizers are refused by name.

use crate::bpe::{BpeParts, BpeTokenizer};
use crate::error::{ModelError, Result};
use serde_json::Value;
use std::path::Path;

/// The regex Hugging Face's ByteLevel pre-tokenizer splits with when `use_regex` is set.
const BYTE_LEVEL_WORDS: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Errors name the file and the JSON path.
struct Reader<'a> {
    file: &'a Path,
}

impl Reader<'_> {
    fn error(&self, key: &str, expected: &str) -> ModelError {
        ModelError::Metadata { file: self.file.display().to_string(), key: key.into(), expected: expected.into() }
    }

    fn unsupported(&self, what: String) -> ModelError {
        ModelError::Unsupported(format!("{}: {what}", self.file.display()))
    }

    fn str<'v>(&self, v: &'v Value, key: &str) -> Result<&'v str> {
        v.get(key).and_then(Value::as_str).ok_or_else(|| self.error(key, "a string"))
    }

    fn flag(&self, v: &Value, key: &str, default: bool) -> Result<bool> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(x) => x.as_bool().ok_or_else(|| self.error(key, "a boolean")),
        }
    }
}

impl BpeTokenizer {
    /// Reads a byte-level BPE tokenizer.json. `bos` and `add_bos` come from a
    /// `TemplateProcessing` post-processor that puts one special token before the text; `eos`
    /// is left unset (tokenizer_config.json or config.json say it).
    pub fn from_tokenizer_json(path: &Path) -> Result<BpeTokenizer> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::Unsupported(format!("{}: cannot read: {e}", path.display())))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| ModelError::Unsupported(format!("{}: not JSON: {e}", path.display())))?;
        parts(&Reader { file: path }, &json).and_then(BpeTokenizer::from_parts)
    }
}

fn parts(r: &Reader, json: &Value) -> Result<BpeParts> {
    let model = json.get("model").ok_or_else(|| r.error("model", "an object"))?;
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    if kind != "BPE" {
        return Err(r.unsupported(format!("model type `{kind}`; only BPE is implemented")));
    }
    if r.flag(model, "byte_fallback", false)? {
        return Err(r.unsupported("model.byte_fallback (SentencePiece-style BPE) is not implemented; byte-level BPE is".into()));
    }
    for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if model.get(key).and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            return Err(r.unsupported(format!("model.{key} is not implemented")));
        }
    }
    let vocab = model.get("vocab").and_then(Value::as_object).ok_or_else(|| r.error("model.vocab", "an object of token ids"))?;
    let mut tokens: Vec<String> = Vec::new();
    let put = |tokens: &mut Vec<String>, text: &str, id: u64, key: &str| -> Result<u32> {
        let i = usize::try_from(id).ok().filter(|&i| i < 1 << 24).ok_or_else(|| r.error(key, "ids below 2^24"))?;
        if tokens.len() <= i {
            tokens.resize(i + 1, String::new());
        }
        tokens[i] = text.to_string();
        Ok(i as u32)
    };
    for (text, id) in vocab {
        let id = id.as_u64().ok_or_else(|| r.error("model.vocab", &format!("an integer id for `{text}`")))?;
        put(&mut tokens, text, id, "model.vocab")?;
    }
    let merges = model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or_else(|| r.error("model.merges", "an array"))?
        .iter()
        .enumerate()
        .map(|(rank, m)| {
            let pair = match m {
                Value::String(s) => s.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())),
                Value::Array(p) => match p.as_slice() {
                    [Value::String(a), Value::String(b)] => Some((a.clone(), b.clone())),
                    _ => None,
                },
                _ => None,
            };
            pair.ok_or_else(|| r.error("model.merges", &format!("`left right` strings or [left, right] pairs, entry {rank} is {m}")))
        })
        .collect::<Result<Vec<_>>>()?;

    let mut specials = Vec::new();
    let mut control = Vec::new();
    for t in json.get("added_tokens").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        let content = r.str(t, "content")?;
        let id = t.get("id").and_then(Value::as_u64).ok_or_else(|| r.error("added_tokens.id", "an integer"))?;
        let id = put(&mut tokens, content, id, "added_tokens.id")?;
        for key in ["lstrip", "rstrip", "single_word"] {
            if r.flag(t, key, false)? {
                return Err(r.unsupported(format!("added token `{content}` sets {key}, which is not implemented")));
            }
        }
        specials.push(id);
        if r.flag(t, "special", false)? {
            control.push(id);
        }
    }
    let mut is_control = vec![false; tokens.len()];
    control.iter().for_each(|&i| is_control[i as usize] = true);

    let nfc = match json.get("normalizer") {
        None | Some(Value::Null) => false,
        Some(n) => match n.get("type").and_then(Value::as_str) {
            Some("NFC") => true,
            other => return Err(r.unsupported(format!("normalizer {other:?} is not implemented (NFC is)"))),
        },
    };
    let mut pre = Vec::new();
    match json.get("pre_tokenizer") {
        None | Some(Value::Null) => {}
        Some(p) => pre_tokenizer(r, p, &mut pre)?,
    }
    let (bos, add_bos) = bos_template(r, json.get("post_processor"), &tokens)?;
    Ok(BpeParts {
        tokens,
        merges,
        specials,
        is_control,
        pre,
        nfc,
        ignore_merges: r.flag(model, "ignore_merges", false)?,
        bos,
        eos: None,
        add_bos,
        chat_template: None,
    })
}

/// Appends the regexes of pre-tokenizer `p` (a `Sequence` recursively) to `out`. A byte-level
/// stage is required; what it and `Split`/`Digits` split with becomes one regex each.
fn pre_tokenizer(r: &Reader, p: &Value, out: &mut Vec<String>) -> Result<()> {
    match r.str(p, "type")? {
        "Sequence" => {
            let list = p.get("pretokenizers").and_then(Value::as_array).ok_or_else(|| r.error("pre_tokenizer.pretokenizers", "an array"))?;
            list.iter().try_for_each(|q| pre_tokenizer(r, q, out))
        }
        "Split" => {
            let behavior = p.get("behavior").and_then(Value::as_str).unwrap_or("Isolated");
            if behavior != "Isolated" || r.flag(p, "invert", false)? {
                return Err(r.unsupported(format!("Split pre-tokenizer with behavior `{behavior}` or invert is not implemented (Isolated is)")));
            }
            let pattern = p.get("pattern").ok_or_else(|| r.error("pre_tokenizer.pattern", "an object"))?;
            match (pattern.get("Regex").and_then(Value::as_str), pattern.get("String").and_then(Value::as_str)) {
                (Some(re), _) => out.push(re.to_string()),
                (None, Some(s)) => out.push(fancy_regex::escape(s).into_owned()),
                _ => return Err(r.error("pre_tokenizer.pattern", "{\"Regex\": ...} or {\"String\": ...}")),
            }
            Ok(())
        }
        "Digits" => {
            out.push(if r.flag(p, "individual_digits", false)? { r"\p{N}" } else { r"\p{N}+" }.to_string());
            Ok(())
        }
        "ByteLevel" => {
            if r.flag(p, "add_prefix_space", false)? {
                return Err(r.unsupported("ByteLevel pre-tokenizer with add_prefix_space is not implemented".into()));
            }
            if r.flag(p, "use_regex", true)? {
                out.push(BYTE_LEVEL_WORDS.to_string());
            }
            Ok(())
        }
        other => Err(r.unsupported(format!("pre-tokenizer `{other}` is not implemented (Sequence, Split, Digits, ByteLevel are)"))),
    }
}

/// `(bos, add_bos)` of the post-processor: a `TemplateProcessing` whose single-text template is
/// one special token then the text adds that token; ByteLevel or none add nothing.
fn bos_template(r: &Reader, post: Option<&Value>, tokens: &[String]) -> Result<(Option<u32>, bool)> {
    let Some(post) = post.filter(|p| !p.is_null()) else { return Ok((None, false)) };
    match r.str(post, "type")? {
        "ByteLevel" => Ok((None, false)),
        "Sequence" => {
            let list = post.get("processors").and_then(Value::as_array).ok_or_else(|| r.error("post_processor.processors", "an array"))?;
            let mut found = (None, false);
            for p in list {
                let got = bos_template(r, Some(p), tokens)?;
                if got.1 {
                    found = got;
                }
            }
            Ok(found)
        }
        "TemplateProcessing" => {
            let single = post.get("single").and_then(Value::as_array).ok_or_else(|| r.error("post_processor.single", "an array"))?;
            let names: Vec<Option<&str>> =
                single.iter().map(|piece| piece.get("SpecialToken").and_then(|s| s.get("id")).and_then(Value::as_str)).collect();
            match names.as_slice() {
                [None] => Ok((None, false)),
                [Some(bos), None] => {
                    let id = tokens.iter().position(|t| t == bos).ok_or_else(|| r.error("post_processor.single", &format!("`{bos}` in the vocabulary")))?;
                    Ok((Some(id as u32), true))
                }
                _ => Err(r.unsupported("a post-processor template other than `[bos] $A` is not implemented".into())),
            }
        }
        other => Err(r.unsupported(format!("post-processor `{other}` is not implemented"))),
    }
}
