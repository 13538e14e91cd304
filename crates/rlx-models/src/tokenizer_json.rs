//! BPE tokenizers from a Hugging Face tokenizer.json, byte-level (Llama 3, Qwen2/3, SmolLM2,
//! GPT-2) or SentencePiece-style with `byte_fallback` (Llama 2, TinyLlama, Mistral, Gemma): the
//! `model`'s vocabulary and merges, `added_tokens`, the `normalizer` (NFC/NFD/NFKC/NFKD,
//! Replace, Prepend), the `pre_tokenizer` (Split, Digits, ByteLevel, Metaspace) and, for
//! SentencePiece-style files, the `decoder` (Replace, ByteFallback, Fuse, Strip, Metaspace) become
//! a [`BpeTokenizer`], the same core GGUF metadata feeds. Other models and stages are refused by
//! name.

use crate::bpe::{self, Behavior, BpeParts, BpeTokenizer, Decoder, Decoding, Normalizer, PreTokenizer, PrependScheme, Symbols, Vocab};
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
    /// Reads a BPE tokenizer.json. `bos` and `add_bos` come from a `TemplateProcessing`
    /// post-processor that puts one special token before the text; `eos` is left unset
    /// (tokenizer_config.json or config.json say it).
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
    let byte_fallback = r.flag(model, "byte_fallback", false)?;
    for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if model.get(key).and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            return Err(r.unsupported(format!("model.{key} is not implemented")));
        }
    }
    if model.get("unk_token").is_some_and(|u| !u.is_null() && !u.is_string()) {
        return Err(r.error("model.unk_token", "a string or null"));
    }
    r.flag(model, "fuse_unk", false)?;
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
            let (a, b) = pair.ok_or_else(|| r.error("model.merges", &format!("`left right` strings or [left, right] pairs, entry {rank} is {m}")))?;
            if [a.as_str(), b.as_str(), &format!("{a}{b}")].iter().any(|t| !vocab.contains_key(*t)) {
                return Err(r.error("model.merges", &format!("pairs of tokens whose join is a token, entry {rank} is `{a} {b}`")));
            }
            Ok((a, b))
        })
        .collect::<Result<Vec<_>>>()?;

    let mut specials = Vec::new();
    let mut normalized_specials = Vec::new();
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
        let special = r.flag(t, "special", false)?;
        if r.flag(t, "normalized", !special)? {
            normalized_specials.push(id);
        } else {
            specials.push(id);
        }
        if special {
            control.push(id);
        }
    }
    let mut is_control = vec![false; tokens.len()];
    control.iter().for_each(|&i| is_control[i as usize] = true);

    let mut normalizers = Vec::new();
    if let Some(n) = json.get("normalizer").filter(|n| !n.is_null()) {
        normalizer(r, n, &mut normalizers)?;
    }
    let mut pre = Vec::new();
    if let Some(p) = json.get("pre_tokenizer").filter(|p| !p.is_null()) {
        pre_tokenizer(r, p, &mut pre)?;
    }
    let byte_level = has_byte_level(json.get("pre_tokenizer"));
    let decoding = match (byte_fallback, byte_level) {
        (false, true) => Decoding::Bytes,
        (false, false) => return Err(r.unsupported("BPE without byte_fallback and without a ByteLevel pre-tokenizer is not implemented".into())),
        (true, true) => return Err(r.unsupported("a ByteLevel pre-tokenizer with model.byte_fallback is not implemented".into())),
        (true, false) => match json.get("decoder").filter(|d| !d.is_null()) {
            None => Decoding::Spaced,
            Some(d) => {
                let mut steps = Vec::new();
                decoder(r, d, &mut steps)?;
                Decoding::Chain(steps)
            }
        },
    };
    let (bos, add_bos) = bos_template(r, json.get("post_processor"), &tokens)?;
    let mut table = Vocab::from_tokens(tokens.iter().map(String::as_str));
    let merges = merges.iter().map(|(a, b)| table.pair(a, b)).collect();
    if let Some(name) = bpe::missing_byte_token(&table).filter(|_| byte_fallback) {
        return Err(r.error("model.vocab", &format!("the byte tokens <0x00>…<0xFF> model.byte_fallback needs; {name} is missing")));
    }
    Ok(BpeParts {
        vocab: table,
        merges,
        specials,
        normalized_specials,
        is_control,
        normalizers,
        pre,
        ignore_merges: r.flag(model, "ignore_merges", false)?,
        symbols: if byte_fallback { Symbols::ByteFallback } else { Symbols::byte_level() },
        decoding,
        bos,
        eos: None,
        add_bos,
        chat_template: None,
    })
}

/// Whether pre-tokenizer `p` (a `Sequence` recursively) has a ByteLevel stage.
fn has_byte_level(p: Option<&Value>) -> bool {
    let Some(p) = p else { return false };
    match p.get("type").and_then(Value::as_str) {
        Some("ByteLevel") => true,
        Some("Sequence") => p.get("pretokenizers").and_then(Value::as_array).is_some_and(|l| l.iter().any(|q| has_byte_level(Some(q)))),
        _ => false,
    }
}

/// A `{"String": ...}` pattern's text; `what` names the stage for the error.
fn string_pattern(r: &Reader, v: &Value, what: &str) -> Result<String> {
    let pattern = v.get("pattern").ok_or_else(|| r.error(&format!("{what}.pattern"), "an object"))?;
    match pattern.get("String").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        Some(_) => Err(r.error(&format!("{what}.pattern"), "a non-empty string")),
        None => Err(r.unsupported(format!("{what} with pattern {pattern} is not implemented (a String pattern is)"))),
    }
}

/// The one character of a string field.
fn one_char(r: &Reader, v: &Value, key: &str) -> Result<char> {
    let s = r.str(v, key)?;
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Ok(c),
        _ => Err(r.error(key, "one character")),
    }
}

/// A Metaspace stage's prepend scheme: `prepend_scheme`, or the older `add_prefix_space`.
fn prepend_scheme(r: &Reader, v: &Value) -> Result<PrependScheme> {
    match v.get("prepend_scheme").and_then(Value::as_str) {
        Some("always") => Ok(PrependScheme::Always),
        Some("first") => Ok(PrependScheme::First),
        Some("never") => Ok(PrependScheme::Never),
        Some(other) => Err(r.error("prepend_scheme", &format!("always, first or never, not `{other}`"))),
        None if r.flag(v, "add_prefix_space", true)? => Ok(PrependScheme::Always),
        None => Ok(PrependScheme::Never),
    }
}

/// Appends the steps of normalizer `n` (a `Sequence` recursively) to `out`.
fn normalizer(r: &Reader, n: &Value, out: &mut Vec<Normalizer>) -> Result<()> {
    out.push(match r.str(n, "type")? {
        "Sequence" => {
            let list = n.get("normalizers").and_then(Value::as_array).ok_or_else(|| r.error("normalizer.normalizers", "an array"))?;
            return list.iter().try_for_each(|m| normalizer(r, m, out));
        }
        "NFC" => Normalizer::Nfc,
        "NFD" => Normalizer::Nfd,
        "NFKC" => Normalizer::Nfkc,
        "NFKD" => Normalizer::Nfkd,
        "Replace" => Normalizer::Replace { from: string_pattern(r, n, "normalizer Replace")?, to: r.str(n, "content")?.to_string() },
        "Prepend" => Normalizer::Prepend(r.str(n, "prepend")?.to_string()),
        other => return Err(r.unsupported(format!("normalizer `{other}` is not implemented (Sequence, NFC, NFD, NFKC, NFKD, Replace, Prepend are)"))),
    });
    Ok(())
}

/// Appends the stages of pre-tokenizer `p` (a `Sequence` recursively) to `out`; ByteLevel's
/// regex and Digits become isolating splits.
fn pre_tokenizer(r: &Reader, p: &Value, out: &mut Vec<PreTokenizer>) -> Result<()> {
    match r.str(p, "type")? {
        "Sequence" => {
            let list = p.get("pretokenizers").and_then(Value::as_array).ok_or_else(|| r.error("pre_tokenizer.pretokenizers", "an array"))?;
            return list.iter().try_for_each(|q| pre_tokenizer(r, q, out));
        }
        "Split" => {
            let behavior = match p.get("behavior").and_then(Value::as_str).unwrap_or("Isolated") {
                "Removed" => Behavior::Removed,
                "Isolated" => Behavior::Isolated,
                "MergedWithPrevious" => Behavior::MergedWithPrevious,
                "MergedWithNext" => Behavior::MergedWithNext,
                "Contiguous" => Behavior::Contiguous,
                other => return Err(r.unsupported(format!("Split pre-tokenizer behavior `{other}` is not known"))),
            };
            let pattern = p.get("pattern").ok_or_else(|| r.error("pre_tokenizer.pattern", "an object"))?;
            let re = match (pattern.get("Regex").and_then(Value::as_str), pattern.get("String").and_then(Value::as_str)) {
                (Some(re), _) => re.to_string(),
                (None, Some(s)) => fancy_regex::escape(s).into_owned(),
                _ => return Err(r.error("pre_tokenizer.pattern", "{\"Regex\": ...} or {\"String\": ...}")),
            };
            let re = fancy_regex::Regex::new(&re).map_err(|e| r.unsupported(format!("pre-tokenizer regex {re}: {e}")))?;
            out.push(PreTokenizer::Split { re, behavior, invert: r.flag(p, "invert", false)? });
        }
        "Digits" => out.push(bpe::isolating(if r.flag(p, "individual_digits", false)? { r"\p{N}" } else { r"\p{N}+" })?),
        "ByteLevel" => {
            if r.flag(p, "add_prefix_space", false)? {
                return Err(r.unsupported("ByteLevel pre-tokenizer with add_prefix_space is not implemented".into()));
            }
            if r.flag(p, "use_regex", true)? {
                out.push(bpe::isolating(BYTE_LEVEL_WORDS)?);
            }
        }
        "Metaspace" => out.push(PreTokenizer::Metaspace {
            replacement: one_char(r, p, "replacement")?,
            prepend: prepend_scheme(r, p)?,
            split: r.flag(p, "split", true)?,
        }),
        other => return Err(r.unsupported(format!("pre-tokenizer `{other}` is not implemented (Sequence, Split, Digits, ByteLevel, Metaspace are)"))),
    }
    Ok(())
}

/// Appends the steps of decoder `d` (a `Sequence` recursively) to `out`.
fn decoder(r: &Reader, d: &Value, out: &mut Vec<Decoder>) -> Result<()> {
    let count = |key: &str| -> Result<usize> {
        d.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| r.error(&format!("decoder.{key}"), "a count"))
    };
    out.push(match r.str(d, "type")? {
        "Sequence" => {
            let list = d.get("decoders").and_then(Value::as_array).ok_or_else(|| r.error("decoder.decoders", "an array"))?;
            return list.iter().try_for_each(|e| decoder(r, e, out));
        }
        "Replace" => Decoder::Replace { from: string_pattern(r, d, "decoder Replace")?, to: r.str(d, "content")?.to_string() },
        "ByteFallback" => Decoder::ByteFallback,
        "Fuse" => Decoder::Fuse,
        "Strip" => Decoder::Strip { content: one_char(r, d, "content")?, start: count("start")?, stop: count("stop")? },
        "Metaspace" => Decoder::Metaspace {
            replacement: one_char(r, d, "replacement")?,
            drop_first: prepend_scheme(r, d)? != PrependScheme::Never,
        },
        other => return Err(r.unsupported(format!("decoder `{other}` is not implemented (Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace are)"))),
    });
    Ok(())
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
