//! Byte-level BPE (GPT-2 style) as llama.cpp runs it for GGUF files whose
//! `tokenizer.ggml.model` is `gpt2`, and as Hugging Face `tokenizers` runs a byte-level BPE
//! tokenizer.json ([`BpeTokenizer::from_tokenizer_json`]): text → special-token split → (NFC) →
//! pre-tokenizer regexes → bytes mapped to GPT-2's printable characters → merges by rank → ids;
//! decoding maps back.

use crate::error::{ModelError, Result};
use fancy_regex::Regex;
use rlx_io::{GgufFile, GgufValue};
use std::collections::HashMap;
use unicode_normalization::UnicodeNormalization;

/// ggml's token types (`tokenizer.ggml.token_type`).
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;

/// The GPT-2 word regex (contractions, letters, digits, other symbols, trailing whitespace).
const GPT2_WORDS: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// A byte-level BPE tokenizer read from GGUF metadata or a tokenizer.json.
pub struct BpeTokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    ranks: HashMap<(String, String), usize>,
    /// Control and user-defined tokens, longest first: matched verbatim when specials parse.
    specials: Vec<(String, u32)>,
    is_control: Vec<bool>,
    /// Applied in order; each splits every piece the previous one left.
    pre: Vec<Regex>,
    /// Text between special tokens is NFC-normalized first (Qwen2's tokenizer.json).
    nfc: bool,
    /// A word that is a whole vocabulary token is taken as is, unmerged (Llama 3).
    ignore_merges: bool,
    byte_char: [char; 256],
    char_byte: HashMap<char, u8>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Whether `encode` puts `bos` first (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// The Jinja chat template, when the file carries one.
    pub chat_template: Option<String>,
}

/// What a source gives the BPE core: the vocabulary by id, merges by rank, which ids are
/// special, and how text is split.
pub(crate) struct BpeParts {
    pub tokens: Vec<String>,
    pub merges: Vec<(String, String)>,
    /// Ids matched verbatim in text (control and user-defined tokens).
    pub specials: Vec<u32>,
    /// Per id: a control token, left out of decoded text unless asked for.
    pub is_control: Vec<bool>,
    pub pre: Vec<String>,
    pub nfc: bool,
    pub ignore_merges: bool,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub chat_template: Option<String>,
}

/// The pre-tokenizer regexes llama.cpp uses for a `tokenizer.ggml.pre` name.
fn pre_regexes(pre: &str) -> Option<Vec<&'static str>> {
    Some(match pre {
        "default" | "gpt2" | "gpt-2" => vec![GPT2_WORDS],
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" => vec![r"\p{N}", GPT2_WORDS],
        _ => return None,
    })
}

/// GPT-2's reversible map from bytes to printable characters: printable Latin-1 bytes map
/// to themselves, the others to U+0100 onward in byte order.
fn byte_chars() -> [char; 256] {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let mut out = ['\0'; 256];
    let mut next = 0x100;
    for b in 0..256u32 {
        out[b as usize] = if printable(b) {
            char::from_u32(b).unwrap_or('\0')
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or('\0')
        };
    }
    out
}

/// `value` as a string list, or an error naming the key.
fn strings<'a>(gguf: &'a GgufFile, key: &str) -> Result<&'a [String]> {
    gguf.get(key)
        .and_then(GgufValue::as_array)
        .and_then(|a| a.as_strings())
        .ok_or_else(|| ModelError::metadata(gguf, key, "an array of strings"))
}

fn optional_id(gguf: &GgufFile, key: &str) -> Option<u32> {
    gguf.get(key).and_then(GgufValue::as_u64).and_then(|v| u32::try_from(v).ok())
}

impl BpeTokenizer {
    /// Reads vocabulary, merges, token types and special ids from `tokenizer.ggml.*`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<BpeTokenizer> {
        let model = gguf.get("tokenizer.ggml.model").and_then(GgufValue::as_str).unwrap_or("");
        if model != "gpt2" {
            return Err(ModelError::Unsupported(format!(
                "{}: tokenizer.ggml.model is `{model}`; only byte-level BPE (`gpt2`) is implemented",
                gguf.path().display()
            )));
        }
        let tokens = strings(gguf, "tokenizer.ggml.tokens")?.to_vec();
        let merges = strings(gguf, "tokenizer.ggml.merges")?;
        let types: Vec<i32> = match gguf.get("tokenizer.ggml.token_type").and_then(GgufValue::as_array) {
            Some(rlx_io::gguf::GgufArray::I32(v)) if v.len() == tokens.len() => v.clone(),
            None => vec![1; tokens.len()],
            Some(_) => return Err(ModelError::metadata(gguf, "tokenizer.ggml.token_type", "one i32 per token")),
        };
        let pre_name = gguf.get("tokenizer.ggml.pre").and_then(GgufValue::as_str).unwrap_or("default");
        let pre = pre_regexes(pre_name)
            .ok_or_else(|| ModelError::Unsupported(format!("{}: pre-tokenizer `{pre_name}` is not known", gguf.path().display())))?;
        let merges = merges
            .iter()
            .enumerate()
            .map(|(rank, m)| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| ModelError::metadata(gguf, "tokenizer.ggml.merges", &format!("`left right` pairs, entry {rank} is `{m}`")))
            })
            .collect::<Result<Vec<_>>>()?;
        BpeTokenizer::from_parts(BpeParts {
            specials: (0..tokens.len() as u32).filter(|&i| matches!(types[i as usize], TYPE_CONTROL | TYPE_USER_DEFINED)).collect(),
            is_control: types.iter().map(|&t| t == TYPE_CONTROL).collect(),
            tokens,
            merges,
            pre: pre.into_iter().map(str::to_string).collect(),
            nfc: false,
            ignore_merges: false,
            bos: optional_id(gguf, "tokenizer.ggml.bos_token_id"),
            eos: optional_id(gguf, "tokenizer.ggml.eos_token_id"),
            add_bos: gguf.get("tokenizer.ggml.add_bos_token").and_then(GgufValue::as_bool).unwrap_or(false),
            chat_template: gguf.get("tokenizer.chat_template").and_then(GgufValue::as_str).map(str::to_string),
        })
    }

    /// The tokenizer of `parts`, its regexes compiled.
    pub(crate) fn from_parts(p: BpeParts) -> Result<BpeTokenizer> {
        let pre = p
            .pre
            .iter()
            .map(|r| Regex::new(r).map_err(|e| ModelError::Unsupported(format!("pre-tokenizer regex {r}: {e}"))))
            .collect::<Result<Vec<_>>>()?;
        let mut ranks = HashMap::with_capacity(p.merges.len());
        for (rank, pair) in p.merges.into_iter().enumerate() {
            ranks.entry(pair).or_insert(rank);
        }
        let ids: HashMap<String, u32> = p.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut specials: Vec<(String, u32)> = p
            .specials
            .iter()
            .filter_map(|&i| p.tokens.get(i as usize).filter(|t| !t.is_empty()).map(|t| (t.clone(), i)))
            .collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let byte_char = byte_chars();
        let char_byte = byte_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        Ok(BpeTokenizer {
            is_control: p.is_control,
            tokens: p.tokens,
            ids,
            ranks,
            specials,
            pre,
            nfc: p.nfc,
            ignore_merges: p.ignore_merges,
            byte_char,
            char_byte,
            bos: p.bos,
            eos: p.eos,
            add_bos: p.add_bos,
            chat_template: p.chat_template,
        })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a token's exact text, if it is in the vocabulary.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Token ids of `text`: `bos` first when `add_bos` is set; with `parse_special`, control and
    /// user-defined token texts (`<|im_start|>`) become their ids instead of being spelled out.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        if self.add_bos {
            out.extend(self.bos);
        }
        let mut rest = text;
        while !rest.is_empty() {
            let hit = if parse_special { self.next_special(rest) } else { None };
            let (plain, special) = match hit {
                Some((at, len, id)) => (&rest[..at], Some((len, id, at))),
                None => (rest, None),
            };
            self.encode_plain(plain, &mut out);
            match special {
                Some((len, id, at)) => {
                    out.push(id);
                    rest = &rest[at + len..];
                }
                None => rest = "",
            }
        }
        out
    }

    /// The earliest special token in `text` (longest at a tie): byte offset, length, id.
    fn next_special(&self, text: &str) -> Option<(usize, usize, u32)> {
        let mut best: Option<(usize, usize, u32)> = None;
        for (s, id) in &self.specials {
            if let Some(at) = text.find(s.as_str()) {
                if best.is_none_or(|(b, len, _)| at < b || (at == b && s.len() > len)) {
                    best = Some((at, s.len(), *id));
                }
            }
        }
        best
    }

    /// Ids of text without special tokens: pre-tokenized, then each word merged.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let normalized: String;
        let text = if self.nfc {
            normalized = text.nfc().collect();
            normalized.as_str()
        } else {
            text
        };
        let mut pieces = vec![text];
        for re in &self.pre {
            pieces = pieces.into_iter().flat_map(|p| split_keeping(re, p)).collect();
        }
        for word in pieces {
            self.encode_word(word, out);
        }
    }

    /// One pre-tokenized word: its bytes as GPT-2 characters, merged pairwise by lowest rank
    /// (leftmost first at equal rank); a symbol outside the vocabulary falls back to its bytes.
    fn encode_word(&self, word: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<String> = word.bytes().map(|b| self.byte_char[b as usize].to_string()).collect();
        if self.ignore_merges {
            if let Some(&id) = self.ids.get(&symbols.concat()) {
                out.push(id);
                return;
            }
        }
        loop {
            let best = symbols
                .windows(2)
                .enumerate()
                .filter_map(|(i, p)| self.ranks.get(&(p[0].clone(), p[1].clone())).map(|&r| (r, i)))
                .min();
            let Some((_, i)) = best else { break };
            let right = symbols.remove(i + 1);
            symbols[i].push_str(&right);
        }
        for s in symbols {
            match self.ids.get(&s) {
                Some(&id) => out.push(id),
                None => out.extend(s.chars().filter_map(|c| self.ids.get(&c.to_string()).copied())),
            }
        }
    }

    /// The bytes of one token: control tokens give nothing unless `specials` is set, when they
    /// (and user-defined tokens) give their text verbatim.
    pub fn token_bytes(&self, id: u32, specials: bool) -> Vec<u8> {
        let Some(text) = self.tokens.get(id as usize) else { return Vec::new() };
        let special = self.specials.iter().any(|(_, s)| *s == id);
        if special {
            let control = self.is_control.get(id as usize).copied().unwrap_or(false);
            return if specials || !control { text.as_bytes().to_vec() } else { Vec::new() };
        }
        text.chars().map(|c| self.char_byte.get(&c).copied().unwrap_or(b'?')).collect()
    }

    /// The text of `ids` (invalid UTF-8 replaced), control tokens omitted unless `specials`.
    pub fn decode(&self, ids: &[u32], specials: bool) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.token_bytes(id, specials)).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// `text` cut at every match of `re`: matches and the spans between them, in order.
fn split_keeping<'t>(re: &Regex, text: &'t str) -> Vec<&'t str> {
    let mut out = Vec::new();
    let mut last = 0;
    for m in re.find_iter(text).flatten() {
        if m.start() > last {
            out.push(&text[last..m.start()]);
        }
        if m.end() > m.start() {
            out.push(m.as_str());
        }
        last = m.end();
    }
    if last < text.len() {
        out.push(&text[last..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_gpt2s() {
        let m = byte_chars();
        assert_eq!(m[b'A' as usize], 'A');
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
        assert_eq!(m[0], 'Ā');
        let distinct: std::collections::HashSet<char> = m.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn digits_then_words_split_like_the_smollm_pre_tokenizer() {
        let res: Vec<Regex> = pre_regexes("smollm").unwrap().into_iter().map(|r| Regex::new(r).unwrap()).collect();
        let mut pieces = vec!["Hello  world 123's\tok\n\n"];
        for re in &res {
            pieces = pieces.into_iter().flat_map(|p| split_keeping(re, p)).collect();
        }
        assert_eq!(pieces, ["Hello", " ", " world", " ", "1", "2", "3", "'s", "\t", "ok", "\n\n"]);
    }
}
