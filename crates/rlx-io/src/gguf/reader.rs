//! A bounds-checked little-endian cursor over a GGUF file: every read that would pass the end
//! is a [`IoError::Truncated`], and counts are checked against the bytes left before use.

use crate::error::{IoError, Result};
use std::path::Path;

pub(super) struct Reader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(path: &'a Path, bytes: &'a [u8]) -> Reader<'a> {
        Reader { path, bytes, pos: 0 }
    }

    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn path(&self) -> &'a Path {
        self.path
    }

    fn left(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// The next `n` bytes, holding `what`.
    pub(super) fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(IoError::Truncated {
                path: self.path.to_path_buf(),
                what: what(),
                at: self.pos as u64,
                need: n,
                len: self.bytes.len() as u64,
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    pub(super) fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N as u64, what)?);
        Ok(a)
    }

    pub(super) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of `what` records of at least `min_bytes` each, refused when that many cannot
    /// fit in the rest of the file — so a count can size an allocation once it is returned.
    pub(super) fn count(&mut self, what: &'static str, min_bytes: u64) -> Result<usize> {
        let count = self.u64(&|| format!("the number of {what}"))?;
        let limit = self.left() / min_bytes;
        if count > limit {
            return Err(IoError::TooMany { path: self.path.to_path_buf(), what, count, limit });
        }
        Ok(count as usize)
    }

    /// A GGUF string (`u64` length, UTF-8 bytes) holding `what`.
    pub(super) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        self.str(what).map(str::to_string)
    }

    /// A GGUF string, borrowed from the file.
    pub(super) fn str(&mut self, what: &dyn Fn() -> String) -> Result<&'a str> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        let b = self.take(len, what)?;
        std::str::from_utf8(b).map_err(|_| IoError::BadUtf8 { path: self.path.to_path_buf(), what: what() })
    }
}
