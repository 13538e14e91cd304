//! A vocabulary held compactly: every entry's text in one buffer ([`PackedStrings`]), found by
//! text through an open-addressing table of ids. A 49k-token vocabulary costs about a megabyte
//! this way, against some ten for a `Vec<String>` and a `HashMap<String, u32>` of a hundred
//! thousand small allocations.

use rlx_io::PackedStrings;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

/// Token texts by id and ids by text. Entries past the tokens are symbols a merge list names
/// that are no token (a GGUF merge whose side is not in the vocabulary): they can be looked
/// up, so that merges are keyed by ids, but are never a token id.
#[derive(Default)]
pub(crate) struct Vocab {
    entries: PackedStrings,
    /// Entries below this are tokens.
    tokens: usize,
    /// Open addressing: entry + 1, or 0 for a free slot; a power of two, at least twice the
    /// entries.
    slots: Vec<u32>,
}

impl Vocab {
    /// The tokens of `texts`, id by id. A text given twice is found as its last id, as a map
    /// collected from the list would give it.
    pub(crate) fn from_tokens<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vocab {
        let mut v = Vocab::default();
        for t in texts {
            v.push(t);
        }
        v.tokens = v.entries.len();
        v
    }

    /// The number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.tokens
    }

    /// Token `id`'s text.
    pub(crate) fn get(&self, id: u32) -> Option<&str> {
        let i = id as usize;
        (i < self.tokens).then(|| &self.entries[i])
    }

    /// The id of the token whose text is `s`.
    pub(crate) fn id(&self, s: &str) -> Option<u32> {
        self.find(s).filter(|&e| (e as usize) < self.tokens)
    }

    /// Whether `s` is a token.
    pub(crate) fn contains(&self, s: &str) -> bool {
        self.id(s).is_some()
    }

    /// The entry of `s`, a token or a merge symbol.
    pub(crate) fn find(&self, s: &str) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = hash(s) & mask;
        loop {
            match self.slots[at] {
                0 => return None,
                e if &self.entries[e as usize - 1] == s => return Some(e - 1),
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// The entry of `s`, added past the tokens when it is neither a token nor a symbol yet.
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        match self.find(s) {
            Some(e) => e,
            None => self.push(s),
        }
    }

    /// The entries (a token or a merge symbol) of a merge's sides.
    pub(crate) fn pair(&mut self, a: &str, b: &str) -> (u32, u32) {
        (self.intern(a), self.intern(b))
    }

    /// Appends entry `s`; the text table then finds `s` as this entry.
    fn push(&mut self, s: &str) -> u32 {
        self.entries.push(s);
        let n = self.entries.len();
        if self.slots.len() < 2 * n {
            self.slots = vec![0; (2 * n).next_power_of_two().max(16)];
            (0..n).for_each(|i| self.place(i));
        } else {
            self.place(n - 1);
        }
        n as u32 - 1
    }

    /// Puts entry `e` in the slot of its text, taking it over from an earlier equal text.
    fn place(&mut self, e: usize) {
        let mask = self.slots.len() - 1;
        let s = &self.entries[e];
        let mut at = hash(s) & mask;
        loop {
            match self.slots[at] {
                0 => break,
                old if &self.entries[old as usize - 1] == s => break,
                _ => at = (at + 1) & mask,
            }
        }
        self.slots[at] = e as u32 + 1;
    }
}

fn hash(s: &str) -> usize {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(s) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_and_ids_round_trip_and_the_last_duplicate_wins() {
        let words: Vec<String> = (0..1000).map(|i| format!("w{}", i * 7919 % 1000)).chain(["w3".into(), String::new()]).collect();
        let v = Vocab::from_tokens(words.iter().map(String::as_str));
        assert_eq!(v.len(), 1002);
        for (i, w) in words.iter().enumerate().take(1000) {
            assert_eq!(v.get(i as u32), Some(w.as_str()));
            let want = if w == "w3" { 1000 } else { i as u32 };
            assert_eq!(v.id(w), Some(want), "{w}");
        }
        assert_eq!(v.id(""), Some(1001));
        assert_eq!(v.id("w1000"), None);
        assert_eq!(v.get(1002), None);
    }

    #[test]
    fn merge_symbols_are_found_but_are_no_tokens() {
        let mut v = Vocab::from_tokens(["a", "b"]);
        assert_eq!(v.pair("a", "xy"), (0, 2));
        assert_eq!(v.intern("xy"), 2);
        assert_eq!((v.find("xy"), v.id("xy"), v.get(2), v.len()), (Some(2), None, None, 2));
        assert!(v.contains("b") && !v.contains("xy"));
    }
}
