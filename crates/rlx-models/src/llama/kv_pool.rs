//! The slots of a pooled KV cache: which are free, and how much of the pool running sequences
//! have reserved. Pure bookkeeping, the same for every backend.
//!
//! A sequence reserves, on admission, the blocks its prompt and longest reply can fill, so a
//! step never runs out of slots mid-sequence; the slots themselves are handed out per step, as
//! one contiguous run for all the tokens the step writes (the graph appends them with one
//! `KvAppend` per layer), and given back when the sequence ends.

use std::collections::BTreeMap;

/// Free slots as runs, and reservations counted in blocks.
#[derive(Debug)]
pub struct KvPool {
    /// Free runs: start → length, never adjacent (freeing merges neighbours).
    free: BTreeMap<usize, usize>,
    slots: usize,
    block: usize,
    reserved: usize,
}

impl KvPool {
    /// A pool of `blocks` blocks of `block` slots each, all free.
    pub fn new(blocks: usize, block: usize) -> KvPool {
        let slots = blocks * block;
        let free = if slots > 0 { BTreeMap::from([(0, slots)]) } else { BTreeMap::new() };
        KvPool { free, slots, block: block.max(1), reserved: 0 }
    }

    /// Slots in the pool.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Blocks in the pool.
    pub fn blocks(&self) -> usize {
        self.slots / self.block
    }

    /// Blocks reserved by admitted sequences.
    pub fn reserved_blocks(&self) -> usize {
        self.reserved
    }

    /// Blocks that `tokens` slots take.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block)
    }

    /// Reserves the blocks for `tokens` slots if that many are unreserved.
    pub fn reserve(&mut self, tokens: usize) -> bool {
        let need = self.blocks_for(tokens);
        if self.reserved + need > self.blocks() {
            return false;
        }
        self.reserved += need;
        true
    }

    /// Gives back a reservation of `tokens` slots.
    pub fn unreserve(&mut self, tokens: usize) {
        self.reserved = self.reserved.saturating_sub(self.blocks_for(tokens));
    }

    /// The first free run of at least `n` slots, else the longest: `(start, len)` with
    /// `len ≤ n`, taken out of the free set; `None` when no slot is free.
    pub fn take_run(&mut self, n: usize) -> Option<(usize, usize)> {
        let (&start, &len) = self.free.iter().find(|&(_, &len)| len >= n).or_else(|| self.free.iter().max_by_key(|&(&s, &len)| (len, std::cmp::Reverse(s))))?;
        let took = len.min(n);
        self.free.remove(&start);
        if took < len {
            self.free.insert(start + took, len - took);
        }
        Some((start, took))
    }

    /// Returns `slots` (in any order, none free already) to the free set.
    pub fn give_back(&mut self, slots: &[usize]) {
        let mut sorted = slots.to_vec();
        sorted.sort_unstable();
        let mut i = 0;
        while i < sorted.len() {
            let start = sorted[i];
            let mut len = 1;
            while i + len < sorted.len() && sorted[i + len] == start + len {
                len += 1;
            }
            self.free_run(start, len);
            i += len;
        }
    }

    /// Frees `[start, start + len)`, merging it with the free runs it touches.
    fn free_run(&mut self, mut start: usize, mut len: usize) {
        if let Some((&s, &l)) = self.free.range(..start).next_back() {
            if s + l == start {
                self.free.remove(&s);
                start = s;
                len += l;
            }
        }
        if let Some(&l) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += l;
        }
        self.free.insert(start, len);
    }

    /// Free slots in all.
    pub fn free_slots(&self) -> usize {
        self.free.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_merge_and_fall_back_to_the_longest() {
        let mut p = KvPool::new(4, 4);
        assert_eq!(p.take_run(5), Some((0, 5)));
        assert_eq!(p.take_run(3), Some((5, 3)));
        assert_eq!(p.free_slots(), 8);
        p.give_back(&[1, 3, 2]);
        // Free: [1, 4) and [8, 16): the first run long enough, else the longest.
        assert_eq!(p.take_run(3), Some((1, 3)));
        p.give_back(&[6, 1, 2, 3, 5]);
        assert_eq!(p.take_run(20), Some((8, 8)));
        assert_eq!(p.take_run(20), Some((1, 3)));
        assert_eq!(p.take_run(20), Some((5, 2)));
        assert_eq!(p.take_run(1), None);
        p.give_back(&(0..16).collect::<Vec<_>>());
        assert_eq!(p.take_run(16), Some((0, 16)), "every run merged back into one");
    }

    #[test]
    fn reservations_count_whole_blocks_up_to_the_pool() {
        let mut p = KvPool::new(3, 16);
        assert!(p.reserve(17));
        assert_eq!(p.reserved_blocks(), 2);
        assert!(!p.reserve(17), "two more blocks do not fit");
        assert!(p.reserve(16));
        p.unreserve(17);
        assert!(p.reserve(30));
        assert_eq!(p.reserved_blocks(), 3);
    }

    #[test]
    fn random_takes_and_frees_keep_every_slot_accounted_for() {
        let mut p = KvPool::new(8, 8);
        let mut rng = crate::llama::Rng::new(9);
        let mut held: Vec<Vec<usize>> = Vec::new();
        for _ in 0..500 {
            if rng.uniform() < 0.55 {
                let n = 1 + (rng.uniform() * 9.0) as usize;
                if let Some((s, l)) = p.take_run(n) {
                    held.push((s..s + l).collect());
                }
            } else if !held.is_empty() {
                let i = (rng.uniform() * held.len() as f64) as usize % held.len();
                p.give_back(&held.swap_remove(i));
            }
            let mut all: Vec<usize> = held.iter().flatten().copied().collect();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), held.iter().map(Vec::len).sum::<usize>(), "a slot handed out twice");
            assert_eq!(all.len() + p.free_slots(), 64);
        }
    }
}
