//! Read-only memory maps of model files, shared by the safetensors and GGUF readers.

use crate::error::{IoError, Result};
use memmap2::Mmap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The most a page fault maps of a file at once: Linux maps the cached pages around a faulting
/// one (`fault_around_bytes`, 64 KiB by default) within one page table, which covers 2 MiB.
const FAULT_AROUND: usize = 2 << 20;

/// A file mapped read-only into memory, with its path for error messages.
pub(crate) struct Mapped {
    pub(crate) path: PathBuf,
    map: Option<Mmap>,
}

impl Mapped {
    /// Maps `path`. The file must not be modified or truncated while it is open (the contract
    /// of every memory-mapped loader: the map reflects the file's current contents).
    pub(crate) fn open(path: &Path) -> Result<Mapped> {
        let path = path.to_path_buf();
        let file = File::open(&path).map_err(|source| IoError::Open { path: path.clone(), source })?;
        let len = file.metadata().map_err(|source| IoError::Open { path: path.clone(), source })?.len();
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this value; the file staying unchanged
            // while open is the documented contract of `open`.
            Some(unsafe { Mmap::map(&file) }.map_err(|source| IoError::Open { path: path.clone(), source })?)
        };
        Ok(Mapped { path, map })
    }

    /// The whole file.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Drops the pages holding `range` from the process's resident memory, once their bytes
    /// have been copied elsewhere; touching them again reads the file. The range is widened to
    /// the [`FAULT_AROUND`] windows it touches, so the neighbours' pages that the kernel mapped
    /// along with it go too (they would otherwise stay resident until the map is dropped).
    pub(crate) fn release(&self, range: Range<usize>) -> std::io::Result<()> {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            let start = range.start / FAULT_AROUND * FAULT_AROUND;
            let end = range.end.div_ceil(FAULT_AROUND).saturating_mul(FAULT_AROUND).min(map.len());
            // SAFETY: the map is read-only and shared with the file, so dropped pages read back
            // the same bytes when touched: every borrow of the map stays valid.
            unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end.saturating_sub(start)) }?;
        }
        #[cfg(not(unix))]
        let _ = range;
        Ok(())
    }
}
