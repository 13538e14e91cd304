//! Memory planning: places buffers with known lifetimes into one arena so that buffers
//! whose lifetimes overlap never share bytes, and the arena stays small.

/// A buffer to place: `size` bytes, live from step `first` to step `last` inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub size: usize,
    pub first: usize,
    pub last: usize,
}

/// Where each buffer lives in the arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub offsets: Vec<usize>,
    /// Total arena bytes.
    pub size: usize,
}

fn align_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

/// Greedy best-offset placement, largest buffers first: each buffer takes the lowest
/// offset at which it overlaps no already placed buffer that is live at the same time.
/// Every offset is a multiple of `align` (a power of two: 64 for the CPU's cache lines and
/// SIMD loads, 256 for CUDA and wgpu bindings).
pub fn plan(buffers: &[Interval], align: usize) -> Plan {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].size), buffers[i].first));
    let mut offsets = vec![0usize; buffers.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(buffers.len());
    let mut size = 0;
    for i in order {
        let b = buffers[i];
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| buffers[j].first <= b.last && b.first <= buffers[j].last)
            .map(|&j| (offsets[j], offsets[j] + align_up(buffers[j].size, align)))
            .collect();
        busy.sort_unstable();
        let need = align_up(b.size, align);
        let mut at = 0;
        for (lo, hi) in busy {
            if at + need <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        size = size.max(at + need);
        placed.push(i);
    }
    Plan { offsets, size }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(p: &Plan, b: &[Interval]) -> bool {
        (0..b.len()).any(|i| {
            (0..i).any(|j| {
                let time = b[i].first <= b[j].last && b[j].first <= b[i].last;
                let space = p.offsets[i] < p.offsets[j] + b[j].size && p.offsets[j] < p.offsets[i] + b[i].size;
                time && space && b[i].size > 0 && b[j].size > 0
            })
        })
    }

    #[test]
    fn reuses_memory_of_dead_buffers() {
        let b = [
            Interval { size: 1000, first: 0, last: 1 },
            Interval { size: 1000, first: 1, last: 2 },
            Interval { size: 1000, first: 2, last: 3 },
        ];
        let p = plan(&b, 64);
        assert!(!overlaps(&p, &b));
        assert_eq!(p.size, 2 * align_up(1000, 64));
        assert_eq!(p.offsets[0], p.offsets[2]);
    }

    #[test]
    fn random_lifetimes_never_collide() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..50 {
            let align = if round % 2 == 0 { 64 } else { 256 };
            let b: Vec<Interval> = (0..40)
                .map(|_| {
                    let first = (next() % 30) as usize;
                    Interval { size: (next() % 5000) as usize + 1, first, last: first + (next() % 8) as usize }
                })
                .collect();
            let p = plan(&b, align);
            assert!(!overlaps(&p, &b));
            assert!(p.offsets.iter().all(|o| o % align == 0));
            let total: usize = b.iter().map(|x| align_up(x.size, align)).sum();
            assert!(p.size <= total);
        }
    }
}
