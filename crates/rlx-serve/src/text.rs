//! Generated tokens as text: bytes held until they form whole UTF-8 characters, and text held
//! while it could be the start of a stop string, which ends the text where it begins.

/// Incremental detokenizer with stop strings.
pub struct TextStream {
    stops: Vec<String>,
    /// Bytes not yet a whole character.
    bytes: Vec<u8>,
    /// Text that may begin a stop string.
    held: String,
    stopped: bool,
}

impl TextStream {
    pub fn new(stops: Vec<String>) -> TextStream {
        TextStream { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), bytes: Vec::new(), held: String::new(), stopped: false }
    }

    /// Whether a stop string was met (the text ends before it).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds a token's bytes; returns the text that is now certain (empty after a stop).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        if self.stopped {
            return String::new();
        }
        self.bytes.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.bytes) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // An invalid sequence will never complete: show it as U+FFFD and go on.
            Err(_) => self.bytes.len(),
        };
        let chunk: Vec<u8> = self.bytes.drain(..valid).collect();
        self.held.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self.held.len() - self.longest_stop_prefix_suffix();
        let rest = self.held.split_off(keep);
        std::mem::replace(&mut self.held, rest)
    }

    /// The text still held at the end of generation.
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let mut out = std::mem::take(&mut self.held);
        out.push_str(&String::from_utf8_lossy(&std::mem::take(&mut self.bytes)));
        out
    }

    /// The length of the longest suffix of `held` that begins some stop string.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let h = &self.held;
        (1..=h.len())
            .rev()
            .filter(|&n| h.is_char_boundary(h.len() - n))
            .find(|&n| self.stops.iter().any(|s| s.starts_with(&h[h.len() - n..])))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&[u8]]) -> (Vec<String>, bool) {
        let mut t = TextStream::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out: Vec<String> = pieces.iter().map(|p| t.push(p)).collect();
        out.push(t.finish());
        (out, t.stopped())
    }

    #[test]
    fn split_characters_wait_for_their_last_byte() {
        let e = "é".as_bytes();
        assert_eq!(run(&[], &[b"a", &e[..1], &e[1..], b"b"]).0, vec!["a", "", "é", "b", ""]);
    }

    #[test]
    fn a_stop_string_across_tokens_ends_the_text_before_it() {
        let (out, stopped) = run(&["END"], &[b"one E", b"N", b"D two", b"three"]);
        assert_eq!(out, vec!["one ", "", "", "", ""]);
        assert!(stopped);
    }

    #[test]
    fn a_false_start_of_a_stop_string_is_released() {
        let (out, stopped) = run(&["END", "\n\n"], &[b"x E", b"Nx", b"\n", b"y"]);
        assert_eq!(out.concat(), "x ENx\ny");
        assert_eq!(out, vec!["x ", "ENx", "", "\ny", ""]);
        assert!(!stopped);
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let (out, _) = run(&["b", "a"], &[b"xab"]);
        assert_eq!(out.concat(), "x");
    }
}
