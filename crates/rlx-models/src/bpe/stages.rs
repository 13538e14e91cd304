//! The text stages around the BPE model, as Hugging Face `tokenizers` runs them: normalizers
//! (on the text between added tokens), pre-tokenizers (text → the words merges stay within) and
//! decoders (token texts → text). Each is a closed enum; tokenizer.json's `type` names the variant.

use fancy_regex::Regex;
use unicode_normalization::UnicodeNormalization;

/// The character SentencePiece vocabularies write for a space.
pub const METASPACE: char = '▁';

/// One normalizer (of a `Sequence`).
pub enum Normalizer {
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
    /// Every occurrence of `from` (not empty) becomes `to`.
    Replace { from: String, to: String },
    /// Put before the text unless it is empty.
    Prepend(String),
}

/// `text` after each of `steps` in turn.
pub fn normalize(steps: &[Normalizer], text: &str) -> String {
    let mut s = text.to_string();
    for step in steps {
        s = match step {
            Normalizer::Nfc => s.nfc().collect(),
            Normalizer::Nfd => s.nfd().collect(),
            Normalizer::Nfkc => s.nfkc().collect(),
            Normalizer::Nfkd => s.nfkd().collect(),
            Normalizer::Replace { from, to } => s.replace(from.as_str(), to),
            Normalizer::Prepend(p) if !s.is_empty() => format!("{p}{s}"),
            Normalizer::Prepend(_) => s,
        };
    }
    s
}

/// What a `Split` does with the text a pattern matches (`tokenizers`' SplitDelimiterBehavior).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Behavior {
    /// Dropped.
    Removed,
    /// A word of its own.
    Isolated,
    /// Joined to the word before it (kept alone after another match or at the start).
    MergedWithPrevious,
    /// Joined to the word after it (kept alone before another match or at the end).
    MergedWithNext,
    /// Adjacent matches become one word.
    Contiguous,
}

/// Where a Metaspace pre-tokenizer puts a `▁` before a word that lacks one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PrependScheme {
    Always,
    /// Only before the text that starts the input (not after an added token).
    First,
    Never,
}

/// One pre-tokenizer (of a `Sequence`).
pub enum PreTokenizer {
    /// Cut at `re`'s matches (the spans between them with `invert`).
    Split { re: Regex, behavior: Behavior, invert: bool },
    /// Spaces become `replacement`, which is prepended per `prepend`; with `split`, every
    /// `replacement` starts a new word.
    Metaspace { replacement: char, prepend: PrependScheme, split: bool },
}

/// The words of `text` after each of `steps`; `at_start` says it begins the input (for
/// [`PrependScheme::First`]). Empty words are dropped.
pub fn pre_tokenize(steps: &[PreTokenizer], text: &str, at_start: bool) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut words = vec![(text.to_string(), at_start)];
    for step in steps {
        words = words.into_iter().flat_map(|(w, first)| step.split(&w, first)).filter(|(w, _)| !w.is_empty()).collect();
    }
    words.into_iter().map(|(w, _)| w).collect()
}

impl PreTokenizer {
    /// The words of one word, each with whether it begins the input.
    fn split(&self, word: &str, at_start: bool) -> Vec<(String, bool)> {
        let (text, spans) = match self {
            PreTokenizer::Split { re, behavior, invert } => {
                let matches = re.find_iter(word).flatten().map(|m| (m.start(), m.end()));
                (word.to_string(), spans(word.len(), matches, *behavior, *invert))
            }
            PreTokenizer::Metaspace { replacement, prepend, split } => {
                let mut text = word.replace(' ', replacement.encode_utf8(&mut [0; 4]));
                let wanted = match prepend {
                    PrependScheme::Always => true,
                    PrependScheme::First => at_start,
                    PrependScheme::Never => false,
                };
                if wanted && !text.starts_with(*replacement) {
                    text.insert(0, *replacement);
                }
                let spans = if *split {
                    let marks = text.match_indices(*replacement).map(|(at, m)| (at, at + m.len()));
                    spans(text.len(), marks, Behavior::MergedWithNext, false)
                } else {
                    vec![(0, text.len())]
                };
                (text, spans)
            }
        };
        spans.into_iter().map(|(a, b)| (text[a..b].to_string(), at_start && a == 0)).collect()
    }
}

/// The byte spans of the words a split makes of a text of `len` bytes, given its pattern's
/// `matches` in order.
fn spans(len: usize, matches: impl Iterator<Item = (usize, usize)>, behavior: Behavior, invert: bool) -> Vec<(usize, usize)> {
    let mut pieces: Vec<(usize, usize, bool)> = Vec::new();
    let mut last = 0;
    for (a, b) in matches.filter(|(a, b)| b > a) {
        if a > last {
            pieces.push((last, a, invert));
        }
        pieces.push((a, b, !invert));
        last = b;
    }
    if last < len {
        pieces.push((last, len, invert));
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    match behavior {
        Behavior::Removed => out.extend(pieces.iter().filter(|p| !p.2).map(|&(a, b, _)| (a, b))),
        Behavior::Isolated => out.extend(pieces.iter().map(|&(a, b, _)| (a, b))),
        Behavior::MergedWithPrevious | Behavior::Contiguous => {
            let mut previous_match = false;
            for &(a, b, is_match) in &pieces {
                let join = match behavior {
                    Behavior::Contiguous => is_match == previous_match,
                    _ => is_match && !previous_match,
                };
                match out.last_mut() {
                    Some(last) if join => last.1 = b,
                    _ => out.push((a, b)),
                }
                previous_match = is_match;
            }
        }
        Behavior::MergedWithNext => {
            let mut previous_match = false;
            for &(a, b, is_match) in pieces.iter().rev() {
                match out.last_mut() {
                    Some(last) if is_match && !previous_match => last.0 = a,
                    _ => out.push((a, b)),
                }
                previous_match = is_match;
            }
            out.reverse();
        }
    }
    out
}

/// One decoder (of a `Sequence`): token texts in, token texts out.
pub enum Decoder {
    /// Every occurrence of `from` becomes `to`, per token.
    Replace { from: String, to: String },
    /// Runs of `<0xNN>` tokens become their UTF-8 text, or one U+FFFD per byte when invalid.
    ByteFallback,
    /// All tokens become one.
    Fuse,
    /// Up to `start` leading and `stop` trailing `content` characters removed, per token.
    Strip { content: char, start: usize, stop: usize },
    /// `replacement` becomes a space, except in the first token, where (unless `prepend` is
    /// never) every `replacement` is dropped as `tokenizers` does.
    Metaspace { replacement: char, drop_first: bool },
}

/// The byte a `<0xNN>` token stands for: six bytes, `NN` read as `u8::from_str_radix` reads
/// it (so `<0xff>` and `<0x+A>` count, as in `tokenizers`).
pub fn byte_token(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The name of the token for byte `b`: `<0x0A>`.
pub fn byte_token_name(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// `tokens` after each of `steps` in turn.
pub fn decode(steps: &[Decoder], mut tokens: Vec<String>) -> Vec<String> {
    for step in steps {
        tokens = match step {
            Decoder::Replace { from, to } => tokens.into_iter().map(|t| t.replace(from.as_str(), to)).collect(),
            Decoder::ByteFallback => byte_fallback(tokens),
            Decoder::Fuse => vec![tokens.concat()],
            Decoder::Strip { content, start, stop } => tokens.into_iter().map(|t| strip(&t, *content, *start, *stop)).collect(),
            Decoder::Metaspace { replacement, drop_first } => tokens
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    let drop = i == 0 && *drop_first;
                    t.chars().filter(|c| !(drop && c == replacement)).map(|c| if c == *replacement { ' ' } else { c }).collect()
                })
                .collect(),
        };
    }
    tokens
}

fn byte_fallback(tokens: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut bytes = Vec::new();
    let flush = |bytes: &mut Vec<u8>, out: &mut Vec<String>| {
        if bytes.is_empty() {
            return;
        }
        match String::from_utf8(std::mem::take(bytes)) {
            Ok(s) => out.push(s),
            Err(e) => out.extend(std::iter::repeat_n("\u{FFFD}".to_string(), e.as_bytes().len())),
        }
    };
    for t in tokens {
        match byte_token(&t) {
            Some(b) => bytes.push(b),
            None => {
                flush(&mut bytes, &mut out);
                out.push(t);
            }
        }
    }
    flush(&mut bytes, &mut out);
    out
}

fn strip(token: &str, content: char, start: usize, stop: usize) -> String {
    let chars: Vec<char> = token.chars().collect();
    let head = chars.iter().take(start).take_while(|&&c| c == content).count();
    let tail = chars[head..].iter().rev().take(stop).take_while(|&&c| c == content).count();
    chars[head..chars.len() - tail].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(words: &[(usize, usize)], text: &str) -> Vec<String> {
        words.iter().map(|&(a, b)| text[a..b].to_string()).collect()
    }

    #[test]
    fn split_behaviors_place_the_matches_as_tokenizers_does() {
        let text = "a  b c ";
        let matches = || text.match_indices(' ').map(|(i, _)| (i, i + 1));
        let cut = |behavior, invert| texts(&spans(text.len(), matches(), behavior, invert), text);
        assert_eq!(cut(Behavior::Removed, false), ["a", "b", "c"]);
        assert_eq!(cut(Behavior::Isolated, false), ["a", " ", " ", "b", " ", "c", " "]);
        assert_eq!(cut(Behavior::MergedWithPrevious, false), ["a ", " ", "b ", "c "]);
        assert_eq!(cut(Behavior::MergedWithNext, false), ["a", " ", " b", " c", " "]);
        assert_eq!(cut(Behavior::Contiguous, false), ["a", "  ", "b", " ", "c", " "]);
        assert_eq!(cut(Behavior::Removed, true), [" ", " ", " ", " "]);
    }

    #[test]
    fn metaspace_prepends_once_and_splits_before_each_mark() {
        let always = [PreTokenizer::Metaspace { replacement: METASPACE, prepend: PrependScheme::Always, split: true }];
        assert_eq!(pre_tokenize(&always, "hi  there", false), ["▁hi", "▁", "▁there"]);
        assert_eq!(pre_tokenize(&always, " hi", false), ["▁hi"]);
        let first = [PreTokenizer::Metaspace { replacement: METASPACE, prepend: PrependScheme::First, split: false }];
        assert_eq!(pre_tokenize(&first, "hi there", true), ["▁hi▁there"]);
        assert_eq!(pre_tokenize(&first, "hi there", false), ["hi▁there"]);
        assert!(pre_tokenize(&first, "", true).is_empty());
    }

    #[test]
    fn normalizers_prepend_only_to_text() {
        let llama = [Normalizer::Prepend("▁".into()), Normalizer::Replace { from: " ".into(), to: "▁".into() }];
        assert_eq!(normalize(&llama, "a b"), "▁a▁b");
        assert_eq!(normalize(&llama, ""), "");
        assert_eq!(normalize(&[Normalizer::Nfc], "e\u{301}"), "é");
        assert_eq!(normalize(&[Normalizer::Nfkc], "ﬁ"), "fi");
    }

    #[test]
    fn byte_tokens_are_named_and_read_back() {
        assert_eq!(byte_token_name(10), "<0x0A>");
        assert_eq!(byte_token("<0x0A>"), Some(10));
        assert_eq!(byte_token("<0xff>"), Some(255));
        assert_eq!(byte_token("<0x+A>"), Some(10));
        for bad in ["<0x0A", "<0x-A>", "<0x0AB>", "0x0A", "<0xG0>", "<0xé>"] {
            assert_eq!(byte_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn llama_decoder_fuses_bytes_and_strips_one_leading_space() {
        let steps = [
            Decoder::Replace { from: "▁".into(), to: " ".into() },
            Decoder::ByteFallback,
            Decoder::Fuse,
            Decoder::Strip { content: ' ', start: 1, stop: 0 },
        ];
        let tokens = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(decode(&steps, tokens(&["▁▁hi", "<0xE6>", "<0x97>", "<0xA5>", "▁x"])), [" hi日 x"]);
        assert_eq!(decode(&steps, tokens(&["a", "<0xE6>", "<0x97>", "b"])), ["a\u{FFFD}\u{FFFD}b"]);
        let meta = [Decoder::Metaspace { replacement: METASPACE, drop_first: true }];
        assert_eq!(decode(&meta, tokens(&["▁a▁b", "▁c"])), ["ab", " c"]);
    }
}
