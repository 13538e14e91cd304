//! The BERT WordPiece tokenizer of a Hugging Face `tokenizer.json`: `BertNormalizer` (clean
//! text, space around CJK ideographs, NFD accent stripping, lowercase), `BertPreTokenizer`
//! (split on whitespace, isolate punctuation), greedy longest-match WordPiece with a
//! continuation prefix, and the `[CLS] … [SEP]` template. Special tokens written in the text
//! (`[MASK]`, `[SEP]`, …) are matched before normalisation, as `tokenizers` does.
//!
//! Character classes follow `tokenizers` exactly: "control" is Unicode category Cc, Cf or Co
//! (except tab, newline, carriage return), punctuation is ASCII punctuation or category P*,
//! and accent stripping drops category Mn after NFD — all through the `unicode_categories`
//! tables `tokenizers` itself uses.

use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use thiserror::Error;
use unicode_categories::UnicodeCategories;
use unicode_normalization::UnicodeNormalization;

/// Reading a `tokenizer.json` failed; each variant names the file.
#[derive(Debug, Error)]
pub enum TokenizerError {
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: not a tokenizer.json: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{}: {what}", path.display())]
    Unsupported { path: PathBuf, what: String },
    #[error("{}: the vocabulary has no token `{token}` ({role})", path.display())]
    MissingToken { path: PathBuf, token: String, role: &'static str },
}

/// A loaded WordPiece tokenizer.
#[derive(Clone, Debug)]
pub struct WordPiece {
    vocab: HashMap<String, u32>,
    unk: u32,
    prefix: String,
    max_chars: usize,
    normalizer: Normalizer,
    cls: u32,
    sep: u32,
    pad: u32,
    /// Special tokens matched verbatim in the raw text, longest first.
    specials: Vec<(String, u32)>,
}

/// Token ids of a batch, padded on the right to the longest sequence, row-major `[batch, seq]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    pub batch: usize,
    pub seq: usize,
    pub input_ids: Vec<i64>,
    /// 1 for a real token, 0 for padding.
    pub attention_mask: Vec<i64>,
    /// All 0: one segment per text.
    pub token_type_ids: Vec<i64>,
}

#[derive(Clone, Copy, Debug)]
struct Normalizer {
    clean_text: bool,
    chinese_chars: bool,
    strip_accents: bool,
    lowercase: bool,
}

#[derive(Deserialize)]
struct Spec {
    normalizer: Option<NormalizerSpec>,
    pre_tokenizer: Option<TypeOnly>,
    model: ModelSpec,
    post_processor: Option<PostSpec>,
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
}

#[derive(Deserialize)]
struct TypeOnly {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct NormalizerSpec {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes")]
    clean_text: bool,
    #[serde(default = "yes")]
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
    #[serde(default = "yes")]
    lowercase: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct ModelSpec {
    #[serde(rename = "type")]
    kind: String,
    vocab: HashMap<String, u32>,
    unk_token: String,
    #[serde(default = "double_hash")]
    continuing_subword_prefix: String,
    #[serde(default = "hundred")]
    max_input_chars_per_word: usize,
}

fn double_hash() -> String {
    "##".into()
}

fn hundred() -> usize {
    100
}

#[derive(Deserialize)]
struct PostSpec {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    single: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    #[serde(default)]
    special: bool,
    #[serde(default)]
    normalized: bool,
}

impl WordPiece {
    /// Reads a `tokenizer.json` whose model is WordPiece with BERT's normaliser, pre-tokeniser
    /// and `[CLS] A [SEP]` template (what BERT-family checkpoints ship).
    pub fn from_file(path: impl AsRef<Path>) -> Result<WordPiece, TokenizerError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TokenizerError::Read { path: path.into(), source })?;
        WordPiece::from_json(&text, path)
    }

    /// Parses the text of a `tokenizer.json`; `path` names it in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<WordPiece, TokenizerError> {
        let unsupported = |what: String| TokenizerError::Unsupported { path: path.into(), what };
        let spec: Spec = serde_json::from_str(text).map_err(|source| TokenizerError::Json { path: path.into(), source })?;
        if spec.model.kind != "WordPiece" {
            return Err(unsupported(format!("model type `{}`, expected WordPiece", spec.model.kind)));
        }
        let normalizer = match &spec.normalizer {
            Some(n) if n.kind == "BertNormalizer" => Normalizer {
                clean_text: n.clean_text,
                chinese_chars: n.handle_chinese_chars,
                strip_accents: n.strip_accents.unwrap_or(n.lowercase),
                lowercase: n.lowercase,
            },
            Some(n) => return Err(unsupported(format!("normalizer type `{}`, expected BertNormalizer", n.kind))),
            None => return Err(unsupported("no normalizer, expected BertNormalizer".into())),
        };
        match &spec.pre_tokenizer {
            Some(p) if p.kind == "BertPreTokenizer" => {}
            other => {
                let kind = other.as_ref().map_or("none", |p| p.kind.as_str());
                return Err(unsupported(format!("pre_tokenizer `{kind}`, expected BertPreTokenizer")));
            }
        }
        let template = spec.post_processor.as_ref().map(template_tokens).transpose().map_err(unsupported)?;
        let (cls_token, sep_token) = template.unwrap_or_else(|| ("[CLS]".into(), "[SEP]".into()));
        let vocab = spec.model.vocab;
        let id = |token: &str, role: &'static str| {
            vocab.get(token).copied().ok_or_else(|| TokenizerError::MissingToken { path: path.into(), token: token.into(), role })
        };
        let (unk, cls, sep) = (id(&spec.model.unk_token, "unk_token")?, id(&cls_token, "template start")?, id(&sep_token, "template end")?);
        let pad = vocab.get("[PAD]").copied().unwrap_or(0);
        let mut specials: Vec<(String, u32)> = spec
            .added_tokens
            .into_iter()
            .filter(|t| t.special && !t.normalized && !t.content.is_empty())
            .map(|t| (t.content, t.id))
            .collect();
        specials.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
        Ok(WordPiece {
            unk,
            prefix: spec.model.continuing_subword_prefix,
            max_chars: spec.model.max_input_chars_per_word,
            vocab,
            normalizer,
            cls,
            sep,
            pad,
            specials,
        })
    }

    /// The number of entries in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The ids of `text` between `[CLS]` and `[SEP]`, the whole cut to `max_len` tokens
    /// (at least 2) by dropping tokens from the end of the text.
    pub fn encode(&self, text: &str, max_len: usize) -> Vec<u32> {
        let mut body = self.tokenize(text);
        body.truncate(max_len.max(2) - 2);
        let mut ids = Vec::with_capacity(body.len() + 2);
        ids.push(self.cls);
        ids.extend(body);
        ids.push(self.sep);
        ids
    }

    /// Encodes each text (as [`WordPiece::encode`]) and pads them into one batch.
    pub fn encode_batch(&self, texts: &[&str], max_len: usize) -> Encoding {
        let rows: Vec<Vec<u32>> = texts.iter().map(|t| self.encode(t, max_len)).collect();
        let seq = rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut e = Encoding {
            batch: rows.len(),
            seq,
            input_ids: Vec::with_capacity(rows.len() * seq),
            attention_mask: Vec::with_capacity(rows.len() * seq),
            token_type_ids: vec![0; rows.len() * seq],
        };
        for row in &rows {
            e.input_ids.extend(row.iter().map(|&i| i64::from(i)));
            e.input_ids.extend(std::iter::repeat_n(i64::from(self.pad), seq - row.len()));
            e.attention_mask.extend(std::iter::repeat_n(1, row.len()));
            e.attention_mask.extend(std::iter::repeat_n(0, seq - row.len()));
        }
        e
    }

    /// The ids of `text` without the template or truncation.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (before, special) = self.next_special(rest);
            for word in pre_tokenize(&self.normalizer.apply(&rest[..before])) {
                self.word_piece(&word, &mut ids);
            }
            match special {
                Some((len, id)) => {
                    ids.push(id);
                    rest = &rest[before + len..];
                }
                None => break,
            }
        }
        ids
    }

    /// The byte offset of the leftmost special token in `text` (the longest at that offset)
    /// with its length and id, or `text.len()` and none.
    fn next_special(&self, text: &str) -> (usize, Option<(usize, u32)>) {
        for (at, _) in text.char_indices() {
            if let Some((s, id)) = self.specials.iter().find(|(s, _)| text[at..].starts_with(s.as_str())) {
                return (at, Some((s.len(), *id)));
            }
        }
        (text.len(), None)
    }

    /// Greedy longest-match pieces of one word; the whole word is `[UNK]` when it is longer
    /// than `max_chars` or some position matches no piece.
    fn word_piece(&self, word: &str, out: &mut Vec<u32>) {
        if word.chars().count() > self.max_chars {
            out.push(self.unk);
            return;
        }
        let start_len = out.len();
        let mut start = 0;
        let mut piece = String::new();
        while start < word.len() {
            let mut end = word.len();
            let found = loop {
                piece.clear();
                if start > 0 {
                    piece.push_str(&self.prefix);
                }
                piece.push_str(&word[start..end]);
                if let Some(&id) = self.vocab.get(&piece) {
                    break Some(id);
                }
                match word[start..end].char_indices().next_back() {
                    Some((last, _)) if last > 0 => end = start + last,
                    _ => break None,
                }
            };
            match found {
                Some(id) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(start_len);
                    out.push(self.unk);
                    return;
                }
            }
        }
    }
}

/// The first and last special tokens of a `TemplateProcessing` single-sequence template that
/// reads `special, $A, special`.
fn template_tokens(p: &PostSpec) -> Result<(String, String), String> {
    let special = |v: &serde_json::Value| v.get("SpecialToken").and_then(|s| s.get("id")).and_then(|s| s.as_str()).map(str::to_string);
    let is_a = |v: &serde_json::Value| v.get("Sequence").and_then(|s| s.get("id")).and_then(|s| s.as_str()) == Some("A");
    match (p.kind.as_str(), p.single.as_slice()) {
        ("TemplateProcessing", [first, a, last]) if is_a(a) => match (special(first), special(last)) {
            (Some(f), Some(l)) => Ok((f, l)),
            _ => Err("post_processor.single must be [SpecialToken, Sequence A, SpecialToken]".into()),
        },
        ("BertProcessing", _) => Ok(("[CLS]".into(), "[SEP]".into())),
        (kind, _) => Err(format!("post_processor `{kind}`, expected TemplateProcessing `[CLS] $A [SEP]` or BertProcessing")),
    }
}

impl Normalizer {
    fn apply(&self, text: &str) -> String {
        let mut s: String = if self.clean_text {
            text.chars()
                .filter(|&c| !(c == '\0' || c == '\u{fffd}' || is_control(c)))
                .map(|c| if is_whitespace(c) { ' ' } else { c })
                .collect()
        } else {
            text.to_string()
        };
        if self.chinese_chars && s.chars().any(is_chinese_char) {
            let mut spaced = String::with_capacity(s.len() + 16);
            for c in s.chars() {
                if is_chinese_char(c) {
                    spaced.extend([' ', c, ' ']);
                } else {
                    spaced.push(c);
                }
            }
            s = spaced;
        }
        if self.strip_accents {
            s = s.nfd().filter(|c| !c.is_mark_nonspacing()).collect();
        }
        if self.lowercase {
            s = s.chars().flat_map(char::to_lowercase).collect();
        }
        s
    }
}

/// Whitespace-separated words, each punctuation character a word of its own.
fn pre_tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_whitespace() || is_punctuation(c) {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                words.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.is_punctuation()
}

/// The CJK ideograph blocks BERT puts spaces around (not Hangul, kana or other CJK scripts).
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> WordPiece {
        let json = r###"{
            "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]},
            "added_tokens": [{"id": 4, "content": "[MASK]", "special": true, "normalized": false}],
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 9,
                      "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "un": 5, "##aff": 6, "##able": 7, "cafe": 8, "!": 9, "中": 10, "##a": 11}}
        }"###;
        WordPiece::from_json(json, Path::new("tiny.json")).unwrap()
    }

    #[test]
    fn greedy_longest_match_with_unknown_words_and_specials() {
        let t = tiny();
        assert_eq!(t.tokenize("Unaffable CAFÉ!"), vec![5, 6, 7, 8, 9]);
        assert_eq!(t.tokenize("unaffablea"), vec![1], "longer than 9 characters");
        assert_eq!(t.tokenize("unx"), vec![1], "no piece matches `x`");
        assert_eq!(t.tokenize("un[MASK]中文"), vec![5, 4, 10, 1]);
        assert_eq!(t.encode("un un un", 4), vec![2, 5, 5, 3]);
    }

    #[test]
    fn batches_pad_on_the_right() {
        let e = tiny().encode_batch(&["un", "un cafe"], 16);
        assert_eq!((e.batch, e.seq), (2, 4));
        assert_eq!(e.input_ids, vec![2, 5, 3, 0, 2, 5, 8, 3]);
        assert_eq!(e.attention_mask, vec![1, 1, 1, 0, 1, 1, 1, 1]);
    }

    #[test]
    fn other_models_are_refused_naming_the_file() {
        let err = WordPiece::from_json(r#"{"model": {"type": "BPE", "vocab": {}, "unk_token": "x"}}"#, Path::new("bpe.json")).unwrap_err();
        assert_eq!(err.to_string(), "bpe.json: model type `BPE`, expected WordPiece");
    }
}
