//! Nearest-neighbour resizes (`ResizeNearest2x`, `Interpolate3d`; OPS.md §10).

use super::for_chunks;
use crate::kernels::by_size;
use crate::view::{In, Out};

/// Source cell of every destination cell on one axis: `min(⌊dst·in/out⌋, in − 1)` in exact
/// integer arithmetic (PyTorch `mode='nearest'`; for `out = 2·in` this is `⌊dst/2⌋`).
fn nearest_sources(inp: usize, out: usize) -> Vec<usize> {
    (0..out).map(|o| ((o as u128 * inp as u128 / out as u128) as usize).min(inp.saturating_sub(1))).collect()
}

/// Nearest-neighbour resize of `x [N, C, spatial…]` to the spatial extents of `out` (2 or 3
/// axes): `ResizeNearest2x` (`[N,C,2H,2W]`) and `Interpolate3d` (`[N,C,D_o,H_o,W_o]`) are
/// both this. Any dtype (a copy of element bits).
pub fn resize_nearest(x: In, out: &mut Out) -> Result<(), String> {
    let pad = |d: &[usize]| -> [usize; 3] {
        let sp = &d[2..];
        let mut a = [1; 3];
        a[3 - sp.len()..].copy_from_slice(sp);
        a
    };
    let (src, dst) = (pad(x.dims), pad(out.dims));
    let maps: Vec<Vec<usize>> = (0..3).map(|a| nearest_sources(src[a], dst[a])).collect();
    let (bi, o) = (src.iter().product::<usize>(), dst.iter().product::<usize>());
    by_size!(x.dtype.size(), T => {
        let x = x.get::<T>();
        for_chunks(out.get::<T>(), o, o, |plane, out| {
            let x = &x[plane * bi..(plane + 1) * bi];
            let mut at = 0;
            for &d in &maps[0] {
                for &h in &maps[1] {
                    let row = &x[(d * src[1] + h) * src[2]..];
                    for (v, &w) in out[at..at + dst[2]].iter_mut().zip(&maps[2]) {
                        *v = row[w];
                    }
                    at += dst[2];
                }
            }
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::nearest_sources;

    #[test]
    fn nearest_uses_exact_integer_floor() {
        assert_eq!(nearest_sources(3, 6), vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(nearest_sources(5, 3), vec![0, 1, 3]);
        // PyTorch's f32 arithmetic gives 0 here; the exact floor is 1 (OPS.md §10).
        assert_eq!(nearest_sources(2, 82)[41], 1);
    }
}
