//! BPE tokenizers of three kinds, sharing added-token splitting, merging and the API:
//!
//! - byte-level (GPT-2 style), as llama.cpp runs it for GGUF files whose `tokenizer.ggml.model`
//!   is `gpt2` and as Hugging Face `tokenizers` runs a byte-level tokenizer.json: words' bytes
//!   map to GPT-2's printable characters before merging, and back when decoding;
//! - SentencePiece-style (`byte_fallback`, Llama 2, Mistral, Gemma) from a tokenizer.json:
//!   spaces are written `▁` by the normalizer or a Metaspace pre-tokenizer, each character that
//!   is no token becomes its UTF-8 bytes as `<0xNN>` tokens, and decoding runs the file's
//!   decoder chain ([`stages`]);
//! - SentencePiece as llama.cpp runs it for GGUF files whose `tokenizer.ggml.model` is `llama`:
//!   no merge list, but any two adjacent symbols whose join is a token merge, the join with the
//!   best `tokenizer.ggml.scores` entry first; what stays outside the vocabulary becomes byte
//!   tokens.
//!
//! In each: text → added-token split → normalizers → pre-tokenizers → words → symbols merged
//! by rank → ids.

mod stages;
mod vocab;

pub(crate) use stages::{Behavior, Decoder, Normalizer, PreTokenizer, PrependScheme};
pub(crate) use vocab::Vocab;

use crate::error::{ModelError, Result};
use fancy_regex::Regex;
use rlx_io::gguf::{GgufArray, PackedStrings};
use rlx_io::{GgufFile, GgufValue};
use stages::{byte_token, byte_token_name, METASPACE};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// ggml's token types (`tokenizer.ggml.token_type`).
const TYPE_UNKNOWN: i32 = 2;
const TYPE_CONTROL: i32 = 3;
const TYPE_USER_DEFINED: i32 = 4;
const TYPE_UNUSED: i32 = 5;

/// The GPT-2 word regex (contractions, letters, digits, other symbols, trailing whitespace).
const GPT2_WORDS: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Qwen2's split (llama.cpp's spelling: contractions in either case, single digits).
const QWEN2_WORDS: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A BPE tokenizer read from GGUF metadata or a tokenizer.json.
pub struct BpeTokenizer {
    vocab: Vocab,
    /// Merge-list rank by the entries of the left and right symbol (empty for
    /// [`Symbols::Scored`]).
    ranks: HashMap<(u32, u32), u32>,
    /// Added tokens matched in the text as given.
    specials: AddedTokens,
    /// Added tokens matched in normalized text (their own text normalized too).
    normalized_specials: AddedTokens,
    kinds: Vec<Kind>,
    normalizers: Vec<Normalizer>,
    pre: Vec<PreTokenizer>,
    /// A word that is a whole vocabulary token is taken as is, unmerged (Llama 3).
    ignore_merges: bool,
    symbols: Symbols,
    decoding: Decoding,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Whether `encode` puts `bos` first (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// The Jinja chat template, when the file carries one.
    pub chat_template: Option<String>,
}

/// What a token id is, for matching and decoding.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Model,
    /// User-defined: matched verbatim in text whether or not specials are parsed.
    Added,
    /// Matched verbatim only when specials are parsed; left out of decoded text unless asked for.
    Control,
    /// Filler of the vocabulary (ggml's UNUSED, e.g. a converter's `[PAD…]`): never matched in
    /// text, and decoded to nothing, as llama.cpp does.
    Unused,
}

/// How a word becomes the symbols merging starts from, and how they merge.
pub(crate) enum Symbols {
    /// Each byte as its GPT-2 printable character; merges by the merge list.
    ByteLevel { byte_char: Box<[char; 256]>, char_byte: HashMap<char, u8> },
    /// Each character that is a token as itself, any other as its bytes' `<0xNN>` tokens;
    /// merges by the merge list.
    ByteFallback,
    /// Each character; two symbols merge when their join is a token, ranked per token id
    /// (equal scores, equal ranks); symbols left outside the vocabulary become byte tokens.
    Scored { ranks: Vec<usize> },
}

impl Symbols {
    /// GPT-2's byte map, both ways.
    pub(crate) fn byte_level() -> Symbols {
        let byte_char = byte_chars();
        let char_byte = byte_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        Symbols::ByteLevel { byte_char: Box::new(byte_char), char_byte }
    }

    /// Ranks from SentencePiece scores: higher scores merge first.
    pub(crate) fn scored(scores: &[f32]) -> Symbols {
        let mut distinct = scores.to_vec();
        distinct.sort_by(|a, b| b.total_cmp(a));
        distinct.dedup_by(|a, b| a.total_cmp(b).is_eq());
        let ranks = scores.iter().map(|s| distinct.partition_point(|d| d.total_cmp(s).is_gt())).collect();
        Symbols::Scored { ranks }
    }
}

/// How `decode` makes text of token ids.
pub(crate) enum Decoding {
    /// Each token's bytes ([`BpeTokenizer::token_bytes`]) joined, invalid UTF-8 replaced.
    Bytes,
    /// The token texts through a `tokenizers` decoder chain, its outputs joined.
    Chain(Vec<Decoder>),
    /// No decoder: the token texts joined with spaces, as `tokenizers` does.
    Spaced,
}

/// What a source gives the BPE core: the vocabulary by id, merges by rank, which ids are
/// special, how text is normalized and split, and how words become symbols.
pub(crate) struct BpeParts {
    pub vocab: Vocab,
    /// The vocabulary entries of each merge's sides, by rank ([`Vocab::pair`]).
    pub merges: Vec<(u32, u32)>,
    /// Ids matched verbatim in the text as given (control and user-defined tokens).
    pub specials: Vec<u32>,
    /// Ids matched verbatim in normalized text.
    pub normalized_specials: Vec<u32>,
    /// Per id: a control token, matched only when specials are parsed and left out of decoded
    /// text unless asked for.
    pub is_control: Vec<bool>,
    pub normalizers: Vec<Normalizer>,
    pub pre: Vec<PreTokenizer>,
    pub ignore_merges: bool,
    pub symbols: Symbols,
    pub decoding: Decoding,
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
        "qwen2" | "deepseek-r1-qwen" => vec![QWEN2_WORDS],
        _ => return None,
    })
}

/// A pre-tokenizer that makes each match of `pattern` a word of its own.
pub(crate) fn isolating(pattern: &str) -> Result<PreTokenizer> {
    let re = Regex::new(pattern).map_err(|e| ModelError::Unsupported(format!("pre-tokenizer regex {pattern}: {e}")))?;
    Ok(PreTokenizer::Split { re, behavior: Behavior::Isolated, invert: false })
}

/// The first byte whose `<0xNN>` token a byte-fallback vocabulary lacks. An ASCII byte may
/// lack one when its character is a token (Gemma has `\t`, not `<0x09>`): it never falls back.
pub(crate) fn missing_byte_token(vocab: &Vocab) -> Option<String> {
    let covered = |b: u8| vocab.contains(&byte_token_name(b)) || (b.is_ascii() && vocab.contains(&char::from(b).to_string()));
    (0..=255u8).find(|&b| !covered(b)).map(byte_token_name)
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
fn strings<'a>(gguf: &'a GgufFile, key: &str) -> Result<&'a PackedStrings> {
    gguf.get(key)
        .and_then(GgufValue::as_array)
        .and_then(|a| a.as_strings())
        .ok_or_else(|| ModelError::metadata(gguf, key, "an array of strings"))
}

fn optional_id(gguf: &GgufFile, key: &str) -> Option<u32> {
    gguf.get(key).and_then(GgufValue::as_u64).and_then(|v| u32::try_from(v).ok())
}

/// `tokenizer.ggml.merges` as pairs of `vocab`'s entries.
fn gpt2_merges(gguf: &GgufFile, vocab: &mut Vocab) -> Result<Vec<(u32, u32)>> {
    strings(gguf, "tokenizer.ggml.merges")?
        .iter()
        .enumerate()
        .map(|(rank, m)| {
            m.split_once(' ')
                .map(|(a, b)| vocab.pair(a, b))
                .ok_or_else(|| ModelError::metadata(gguf, "tokenizer.ggml.merges", &format!("`left right` pairs, entry {rank} is `{m}`")))
        })
        .collect()
}

/// The pre-tokenizer `tokenizer.ggml.pre` names.
fn gpt2_pre(gguf: &GgufFile) -> Result<Vec<PreTokenizer>> {
    let name = gguf.get("tokenizer.ggml.pre").and_then(GgufValue::as_str).unwrap_or("default");
    let regexes = pre_regexes(name).ok_or_else(|| ModelError::Unsupported(format!("{}: pre-tokenizer `{name}` is not known", gguf.path().display())))?;
    regexes.into_iter().map(isolating).collect()
}

/// A piece of text between added tokens, or an added token's id.
enum Piece<'t> {
    /// Text and its byte offset in what was split.
    Text(&'t str, usize),
    Added(u32),
}

/// Added tokens by first byte, longest first, so that a scan finds the leftmost-longest match
/// as `tokenizers` (and llama.cpp) do.
struct AddedTokens {
    by_first: HashMap<u8, Vec<(String, u32, bool)>>,
}

impl AddedTokens {
    /// From (text, id, control) triples; empty texts are never matched.
    fn new(list: impl IntoIterator<Item = (String, u32, bool)>) -> AddedTokens {
        let mut by_first: HashMap<u8, Vec<(String, u32, bool)>> = HashMap::new();
        for (text, id, control) in list {
            if let Some(&b) = text.as_bytes().first() {
                by_first.entry(b).or_default().push((text, id, control));
            }
        }
        for list in by_first.values_mut() {
            list.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        }
        AddedTokens { by_first }
    }

    /// `text` cut at every added token; control tokens only when `parse_special`.
    fn split<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Piece<'t>> {
        let mut out = Vec::new();
        let mut plain = 0;
        let mut at = 0;
        while at < text.len() {
            let hit = self.by_first.get(&text.as_bytes()[at]).and_then(|list| {
                list.iter().find(|(s, _, control)| (parse_special || !control) && text[at..].starts_with(s.as_str()))
            });
            match hit {
                Some((s, id, _)) => {
                    if at > plain {
                        out.push(Piece::Text(&text[plain..at], plain));
                    }
                    out.push(Piece::Added(*id));
                    at += s.len();
                    plain = at;
                }
                None => at += text[at..].chars().next().map_or(1, char::len_utf8),
            }
        }
        if plain < text.len() {
            out.push(Piece::Text(&text[plain..], plain));
        }
        out
    }
}

impl BpeTokenizer {
    /// Reads vocabulary, merges or scores, token types and special ids from `tokenizer.ggml.*`:
    /// model `gpt2` (byte-level BPE) or `llama` (SentencePiece, which llama.cpp starts each
    /// text between special tokens with a space unless `add_space_prefix` is false; decoding
    /// drops that space at the start, as Llama 2's tokenizer.json does).
    pub fn from_gguf(gguf: &GgufFile) -> Result<BpeTokenizer> {
        let mut vocab = Vocab::from_tokens(strings(gguf, "tokenizer.ggml.tokens")?.iter());
        let n = vocab.len();
        let ordinary;
        let types: &[i32] = match gguf.get("tokenizer.ggml.token_type").and_then(GgufValue::as_array) {
            Some(GgufArray::I32(v)) if v.len() == n => v,
            None => {
                ordinary = vec![1; n];
                &ordinary
            }
            Some(_) => return Err(ModelError::metadata(gguf, "tokenizer.ggml.token_type", "one i32 per token")),
        };
        let model = gguf.get("tokenizer.ggml.model").and_then(GgufValue::as_str).unwrap_or("");
        let (merges, symbols, normalizers, pre, decoding, add_bos) = match model {
            "gpt2" => (gpt2_merges(gguf, &mut vocab)?, Symbols::byte_level(), Vec::new(), gpt2_pre(gguf)?, Decoding::Bytes, false),
            "llama" => {
                let scores = match gguf.get("tokenizer.ggml.scores").and_then(GgufValue::as_array) {
                    Some(GgufArray::F32(v)) if v.len() == n => Symbols::scored(v),
                    _ => return Err(ModelError::metadata(gguf, "tokenizer.ggml.scores", "one f32 per token")),
                };
                let space = Normalizer::Replace { from: " ".into(), to: METASPACE.to_string() };
                let mut decoder = vec![Decoder::Replace { from: METASPACE.to_string(), to: " ".into() }, Decoder::ByteFallback, Decoder::Fuse];
                let normalizers = if gguf.get("tokenizer.ggml.add_space_prefix").and_then(GgufValue::as_bool).unwrap_or(true) {
                    decoder.push(Decoder::Strip { content: ' ', start: 1, stop: 0 });
                    vec![Normalizer::Prepend(METASPACE.to_string()), space]
                } else {
                    vec![space]
                };
                (Vec::new(), scores, normalizers, Vec::new(), Decoding::Chain(decoder), true)
            }
            _ => {
                return Err(ModelError::Unsupported(format!(
                    "{}: tokenizer.ggml.model is `{model}`; byte-level BPE (`gpt2`) and SentencePiece (`llama`) are implemented",
                    gguf.path().display()
                )))
            }
        };
        let special = |t: i32| matches!(t, TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN);
        BpeTokenizer::from_parts(BpeParts {
            specials: (0..n as u32).filter(|&i| special(types[i as usize])).collect(),
            normalized_specials: Vec::new(),
            is_control: types.iter().map(|&t| matches!(t, TYPE_CONTROL | TYPE_UNKNOWN)).collect(),
            vocab,
            merges,
            normalizers,
            pre,
            ignore_merges: false,
            symbols,
            decoding,
            bos: optional_id(gguf, "tokenizer.ggml.bos_token_id"),
            eos: optional_id(gguf, "tokenizer.ggml.eos_token_id"),
            add_bos: gguf.get("tokenizer.ggml.add_bos_token").and_then(GgufValue::as_bool).unwrap_or(add_bos),
            chat_template: gguf.get("tokenizer.chat_template").and_then(GgufValue::as_str).map(str::to_string),
        })
        .map(|mut t| {
            for (kind, _) in t.kinds.iter_mut().zip(types).filter(|(_, &ty)| ty == TYPE_UNUSED) {
                *kind = Kind::Unused;
            }
            t
        })
        .map_err(|e| match e {
            ModelError::Unsupported(m) => ModelError::Unsupported(format!("{}: {m}", gguf.path().display())),
            e => e,
        })
    }

    /// The tokenizer of `parts`: ranks indexed, added tokens indexed for matching.
    pub(crate) fn from_parts(p: BpeParts) -> Result<BpeTokenizer> {
        let mut ranks: HashMap<(u32, u32), u32> = HashMap::with_capacity(p.merges.len());
        for (rank, pair) in p.merges.into_iter().enumerate() {
            ranks.entry(pair).or_insert(rank as u32);
        }
        let mut kinds = vec![Kind::Model; p.vocab.len()];
        for &i in p.specials.iter().chain(&p.normalized_specials) {
            let control = p.is_control.get(i as usize).copied().unwrap_or(false);
            if let Some(k) = kinds.get_mut(i as usize) {
                *k = if control { Kind::Control } else { Kind::Added };
            }
        }
        let added = |list: &[u32], normalize: bool| {
            let vocab = &p.vocab;
            let kinds = &kinds;
            let normalizers = &p.normalizers;
            AddedTokens::new(list.iter().filter_map(move |&i| {
                let text = vocab.get(i)?;
                let text = if normalize { stages::normalize(normalizers, text) } else { text.to_string() };
                Some((text, i, kinds[i as usize] == Kind::Control))
            }))
        };
        let specials = added(&p.specials, false);
        let normalized_specials = added(&p.normalized_specials, true);
        if let Some(name) = missing_byte_token(&p.vocab).filter(|_| !matches!(p.symbols, Symbols::ByteLevel { .. })) {
            return Err(ModelError::Unsupported(format!("the vocabulary lacks the byte token {name}, which byte fallback needs")));
        }
        Ok(BpeTokenizer {
            vocab: p.vocab,
            ranks,
            specials,
            normalized_specials,
            kinds,
            normalizers: p.normalizers,
            pre: p.pre,
            ignore_merges: p.ignore_merges,
            symbols: p.symbols,
            decoding: p.decoding,
            bos: p.bos,
            eos: p.eos,
            add_bos: p.add_bos,
            chat_template: p.chat_template,
        })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The id of a token's exact text, if it is in the vocabulary.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// Token ids of `text`: `bos` first when `add_bos` is set. User-defined tokens' texts
    /// (`<tool>`) always become their ids; control tokens' (`<|im_start|>`) only with
    /// `parse_special`, as in `tokenizers` (`encode_special_tokens` off) and llama.cpp.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        if self.add_bos {
            out.extend(self.bos);
        }
        for piece in self.specials.split(text, parse_special) {
            let (plain, at) = match piece {
                Piece::Added(id) => {
                    out.push(id);
                    continue;
                }
                Piece::Text(plain, at) => (plain, at),
            };
            let normalized = stages::normalize(&self.normalizers, plain);
            for part in self.normalized_specials.split(&normalized, parse_special) {
                match part {
                    Piece::Added(id) => out.push(id),
                    Piece::Text(words, offset) => {
                        for word in stages::pre_tokenize(&self.pre, words, at == 0 && offset == 0) {
                            self.encode_word(&word, &mut out);
                        }
                    }
                }
            }
        }
        out
    }

    /// One pre-tokenized word: its symbols merged, then their ids. A symbol outside the
    /// vocabulary falls back to its characters' ids (byte-level: a merge whose join is no
    /// token, possible in GGUF files) or to its bytes' tokens (SentencePiece).
    fn encode_word(&self, word: &str, out: &mut Vec<u32>) {
        let symbols: Vec<String> = match &self.symbols {
            Symbols::Scored { .. } => word.chars().map(String::from).collect(),
            Symbols::ByteLevel { byte_char, .. } => word.bytes().map(|b| byte_char[b as usize].to_string()).collect(),
            Symbols::ByteFallback => word
                .chars()
                .flat_map(|c| {
                    let s = c.to_string();
                    if self.vocab.contains(&s) {
                        vec![s]
                    } else {
                        s.bytes().map(byte_token_name).collect()
                    }
                })
                .collect(),
        };
        if self.ignore_merges {
            let whole = match self.symbols {
                Symbols::ByteLevel { .. } => symbols.concat(),
                Symbols::ByteFallback | Symbols::Scored { .. } => word.to_string(),
            };
            if let Some(id) = self.vocab.id(&whole) {
                out.push(id);
                return;
            }
        }
        for s in self.merge(symbols) {
            match (self.vocab.id(&s), &self.symbols) {
                (Some(id), _) => out.push(id),
                (None, Symbols::ByteLevel { .. }) => out.extend(s.chars().filter_map(|c| self.vocab.id(&c.to_string()))),
                (None, _) => out.extend(s.bytes().filter_map(|b| self.byte_id(b))),
            }
        }
    }

    /// The token of byte `b`: `<0xNN>`, or for ASCII the character itself where that token is
    /// missing (as llama.cpp looks it up).
    fn byte_id(&self, b: u8) -> Option<u32> {
        let id = self.vocab.id(&byte_token_name(b));
        id.or_else(|| self.vocab.id(&char::from(b).to_string()).filter(|_| b.is_ascii()))
    }

    /// The merge rank of adjacent symbols `a` and `b`, if they merge.
    fn rank(&self, a: &str, b: &str) -> Option<usize> {
        match &self.symbols {
            Symbols::Scored { ranks } => self.vocab.id(&[a, b].concat()).and_then(|id| ranks.get(id as usize)).copied(),
            _ => self.ranks.get(&(self.vocab.find(a)?, self.vocab.find(b)?)).map(|&r| r as usize),
        }
    }

    /// `symbols` merged pairwise, lowest rank first and leftmost at equal rank: candidate pairs
    /// wait in a queue and are checked again when taken, since merges around them may have
    /// changed them.
    fn merge(&self, mut symbols: Vec<String>) -> Vec<String> {
        let n = symbols.len();
        let rank = |symbols: &[String], i: usize, j: usize| self.rank(&symbols[i], &symbols[j]);
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let mut queue: BinaryHeap<Reverse<(usize, usize)>> = (1..n).filter_map(|j| rank(&symbols, j - 1, j).map(|r| Reverse((r, j - 1)))).collect();
        while let Some(Reverse((r, i))) = queue.pop() {
            let j = next[i];
            if symbols[i].is_empty() || j >= n || rank(&symbols, i, j) != Some(r) {
                continue;
            }
            let right = std::mem::take(&mut symbols[j]);
            symbols[i].push_str(&right);
            next[i] = next[j];
            if let Some(k) = Some(next[i]).filter(|&k| k < n) {
                prev[k] = Some(i);
                queue.extend(rank(&symbols, i, k).map(|r| Reverse((r, i))));
            }
            if let Some(h) = prev[i] {
                queue.extend(rank(&symbols, h, i).map(|r| Reverse((r, h))));
            }
        }
        symbols.retain(|s| !s.is_empty());
        symbols
    }

    /// The bytes of one token, as streamed output shows it: control tokens give nothing unless
    /// `specials` is set, when they (and user-defined tokens) give their text verbatim; a
    /// `<0xNN>` token gives its byte and `▁` a space. Decoders' edits of the whole text (the
    /// leading space Llama's `Strip` removes) are [`BpeTokenizer::decode`]'s: a streamed token
    /// continues a prompt, so its space stays.
    pub fn token_bytes(&self, id: u32, specials: bool) -> Vec<u8> {
        let Some(text) = self.vocab.get(id) else { return Vec::new() };
        match self.kinds[id as usize] {
            Kind::Unused => Vec::new(),
            Kind::Control if !specials => Vec::new(),
            Kind::Control | Kind::Added => text.as_bytes().to_vec(),
            Kind::Model => match &self.symbols {
                Symbols::ByteLevel { char_byte, .. } => text.chars().map(|c| char_byte.get(&c).copied().unwrap_or(b'?')).collect(),
                Symbols::ByteFallback | Symbols::Scored { .. } => match byte_token(text) {
                    Some(b) => vec![b],
                    None => text.replace(METASPACE, " ").into_bytes(),
                },
            },
        }
    }

    /// The text of `ids` as `tokenizers`' `decode` gives it (byte-level: invalid UTF-8
    /// replaced), control tokens omitted unless `specials`.
    pub fn decode(&self, ids: &[u32], specials: bool) -> String {
        let texts = || -> Vec<String> {
            ids.iter()
                .filter(|&&id| self.kinds.get(id as usize).is_some_and(|&k| k != Kind::Unused && (specials || k != Kind::Control)))
                .filter_map(|&id| self.vocab.get(id).map(str::to_string))
                .collect()
        };
        match &self.decoding {
            Decoding::Bytes => {
                let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.token_bytes(id, specials)).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Decoding::Chain(steps) => stages::decode(steps, texts()).concat(),
            Decoding::Spaced => texts().join(" "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(pre: &[PreTokenizer], text: &str) -> Vec<String> {
        stages::pre_tokenize(pre, text, true)
    }

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
        let pre: Vec<PreTokenizer> = pre_regexes("smollm").unwrap().into_iter().map(|r| isolating(r).unwrap()).collect();
        assert_eq!(split_all(&pre, "Hello  world 123's\tok\n\n"), ["Hello", " ", " world", " ", "1", "2", "3", "'s", "\t", "ok", "\n\n"]);
    }

    /// A byte-fallback tokenizer over `vocab` (after the 256 byte tokens) and `merges`.
    fn spm(vocab: &[&str], merges: &[(&str, &str)]) -> BpeTokenizer {
        let tokens = (0..=255u8).map(byte_token_name).chain(vocab.iter().map(|s| s.to_string())).collect::<Vec<_>>();
        let mut vocab = Vocab::from_tokens(tokens.iter().map(String::as_str));
        BpeTokenizer::from_parts(BpeParts {
            is_control: vec![false; tokens.len()],
            merges: merges.iter().map(|(a, b)| vocab.pair(a, b)).collect(),
            vocab,
            specials: Vec::new(),
            normalized_specials: Vec::new(),
            normalizers: vec![Normalizer::Replace { from: " ".into(), to: "▁".into() }],
            pre: Vec::new(),
            ignore_merges: false,
            symbols: Symbols::ByteFallback,
            decoding: Decoding::Chain(vec![Decoder::Replace { from: "▁".into(), to: " ".into() }, Decoder::ByteFallback, Decoder::Fuse]),
            bos: None,
            eos: None,
            add_bos: false,
            chat_template: None,
        })
        .unwrap()
    }

    #[test]
    fn characters_outside_the_vocabulary_fall_back_to_byte_tokens() {
        let tok = spm(&["a", "▁", "b", "▁a", "▁ab"], &[("▁", "a"), ("▁a", "b")]);
        let ids = tok.encode("a ab é", false);
        let names: Vec<&str> = ids.iter().map(|&i| tok.vocab.get(i).unwrap()).collect();
        assert_eq!(names, ["a", "▁ab", "▁", "<0xC3>", "<0xA9>"]);
        assert_eq!(tok.decode(&ids, false), "a ab é");
        assert_eq!(tok.token_bytes(ids[1], false), b" ab");
        assert_eq!(tok.token_bytes(tok.token_id("<0x0A>").unwrap(), false), b"\n");
    }

    #[test]
    fn merges_take_the_lowest_rank_then_the_leftmost_pair() {
        let tok = spm(&["a", "b", "ab", "ba", "aba"], &[("b", "a"), ("a", "b"), ("ab", "a")]);
        let names = |t: &str| tok.encode(t, false).iter().map(|&i| tok.vocab.get(i).unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(names("abab"), ["a", "ba", "b"]);
        assert_eq!(names("abba"), ["ab", "ba"]);
        assert_eq!(names("aab"), ["a", "ab"]);
    }

    #[test]
    fn equal_scores_share_a_rank_and_higher_scores_merge_first() {
        let Symbols::Scored { ranks } = Symbols::scored(&[0.0, -2.0, -1.0, -2.0, 3.0]) else { unreachable!() };
        assert_eq!(ranks, [1, 3, 2, 3, 0]);
    }

    #[test]
    fn a_vocabulary_without_byte_tokens_is_refused() {
        let err = BpeTokenizer::from_parts(BpeParts {
            is_control: vec![false; 2],
            vocab: Vocab::from_tokens(["a", "<0x00>"]),
            merges: Vec::new(),
            specials: Vec::new(),
            normalized_specials: Vec::new(),
            normalizers: Vec::new(),
            pre: Vec::new(),
            ignore_merges: false,
            symbols: Symbols::ByteFallback,
            decoding: Decoding::Spaced,
            bos: None,
            eos: None,
            add_bos: false,
            chat_template: None,
        });
        assert!(matches!(err, Err(ModelError::Unsupported(m)) if m.contains("<0x01>")));
    }
}
