//! The device memory a backend holds, counted as it allocates and frees: what
//! `Backend::device_memory` reports and what peak-memory benches read.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of device memory rlx holds on one opened device, and the most it has held at once
/// since the peak was last reset.
#[derive(Default)]
pub struct Usage {
    in_use: AtomicUsize,
    peak: AtomicUsize,
}

impl Usage {
    /// Counts `bytes` more held.
    pub fn add(&self, bytes: usize) {
        let now = self.in_use.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Counts `bytes` given back.
    pub fn sub(&self, bytes: usize) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The most bytes held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Starts the peak again from what is held now.
    pub fn reset_peak(&self) {
        self.peak.store(self.in_use(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn the_peak_outlasts_what_is_given_back_until_reset() {
        let u = Usage::default();
        u.add(100);
        u.add(50);
        u.sub(120);
        assert_eq!((u.in_use(), u.peak()), (30, 150));
        u.reset_peak();
        assert_eq!(u.peak(), 30);
    }
}
