//! Register tiles of the f32 attention forward (`tiled.rs`): the logits of key rows against a
//! block of queries stored lane-wise (transposed, so no key tile is ever packed), `P·V`
//! accumulated into output rows straight from the value rows, and the dot products of the
//! few-query path. All `#[inline(always)]`: they compile into the caller's target features
//! (AVX2 + FMA there), where the fixed-size accumulator arrays become vector registers.

use std::ops::Range;

/// Query lanes of one logit register tile (two AVX vectors).
pub const LANES: usize = 16;
/// Key rows of one logit register tile.
const KEY_ROWS: usize = 4;
/// Output rows of one `P·V` register tile.
const OUT_ROWS: usize = 4;
/// Output columns of one `P·V` register tile (two AVX vectors).
const OUT_COLS: usize = 16;

/// One head's rows of one operand: row `s` is `data[s·stride..][..width]`.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [f32],
    pub stride: usize,
    pub width: usize,
}

impl<'a> Rows<'a> {
    #[inline(always)]
    pub fn row(&self, s: usize) -> &'a [f32] {
        &self.data[s * self.stride..][..self.width]
    }
}

/// `s[j·ld + l] = Σ_p k_j[p]·qt[p·ld + l]` for the keys `j` in `keys` and the `LANES` lanes
/// from `l0`: `qt` holds the block's queries transposed (`width` rows of `ld` lanes).
#[inline(always)]
pub fn logits(k: Rows, qt: &[f32], ld: usize, l0: usize, keys: Range<usize>, s: &mut [f32]) {
    let mut j = keys.start;
    while j + KEY_ROWS <= keys.end {
        logit_tile::<KEY_ROWS>(k, qt, ld, l0, j, s);
        j += KEY_ROWS;
    }
    for j in j..keys.end {
        logit_tile::<1>(k, qt, ld, l0, j, s);
    }
}

#[inline(always)]
fn logit_tile<const R: usize>(k: Rows, qt: &[f32], ld: usize, l0: usize, j: usize, s: &mut [f32]) {
    let rows: [&[f32]; R] = std::array::from_fn(|r| k.row(j + r));
    let mut acc = [[0f32; LANES]; R];
    for p in 0..k.width {
        let q: &[f32; LANES] = qt[p * ld + l0..][..LANES].try_into().expect("LANES lanes");
        for r in 0..R {
            let x = rows[r][p];
            for l in 0..LANES {
                acc[r][l] = x.mul_add(q[l], acc[r][l]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        s[(j + r) * ld + l0..][..LANES].copy_from_slice(a);
    }
}

/// `acc[i·dv + c] += Σ_j p[j·ld + i]·v_j[c]` for the rows `i` in `rows`, each over its keys
/// `keys(i)` (ranges of `v`'s rows; a register tile of rows takes the union of theirs, so
/// `p` must be zero on the keys a row does not own).
#[inline(always)]
pub fn weighted_values(p: &[f32], ld: usize, v: Rows, rows: Range<usize>, keys: impl Fn(usize) -> Range<usize>, acc: &mut [f32]) {
    let dv = v.width;
    let union = |i0: usize, n: usize| {
        let (mut lo, mut hi) = (usize::MAX, 0);
        for i in i0..i0 + n {
            let r = keys(i);
            if r.start < r.end {
                lo = lo.min(r.start);
                hi = hi.max(r.end);
            }
        }
        lo.min(hi)..hi
    };
    let mut i = rows.start;
    while i + OUT_ROWS <= rows.end {
        weighted_rows::<OUT_ROWS>(p, ld, v, i, union(i, OUT_ROWS), acc, dv);
        i += OUT_ROWS;
    }
    for i in i..rows.end {
        weighted_rows::<1>(p, ld, v, i, union(i, 1), acc, dv);
    }
}

/// Rows `i0..i0 + R` of [`weighted_values`] over `keys`, column block by column block.
#[inline(always)]
fn weighted_rows<const R: usize>(p: &[f32], ld: usize, v: Rows, i0: usize, keys: Range<usize>, acc: &mut [f32], dv: usize) {
    let mut c = 0;
    while c + OUT_COLS <= dv {
        weighted_tile::<R, OUT_COLS>(p, ld, v, i0, keys.clone(), c, acc, dv);
        c += OUT_COLS;
    }
    if c + OUT_COLS / 2 <= dv {
        weighted_tile::<R, { OUT_COLS / 2 }>(p, ld, v, i0, keys.clone(), c, acc, dv);
        c += OUT_COLS / 2;
    }
    for c in c..dv {
        weighted_tile::<R, 1>(p, ld, v, i0, keys.clone(), c, acc, dv);
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weighted_tile<const R: usize, const W: usize>(p: &[f32], ld: usize, v: Rows, i0: usize, keys: Range<usize>, c0: usize, acc: &mut [f32], dv: usize) {
    let mut a = [[0f32; W]; R];
    for (r, a) in a.iter_mut().enumerate() {
        a.copy_from_slice(&acc[(i0 + r) * dv + c0..][..W]);
    }
    for j in keys {
        let x: &[f32; W] = v.data[j * v.stride + c0..][..W].try_into().expect("W columns");
        let w: &[f32] = &p[j * ld + i0..][..R];
        for r in 0..R {
            for c in 0..W {
                a[r][c] = w[r].mul_add(x[c], a[r][c]);
            }
        }
    }
    for (r, a) in a.iter().enumerate() {
        acc[(i0 + r) * dv + c0..][..W].copy_from_slice(a);
    }
}

/// Keys scored at once by [`dots`] (independent accumulation chains).
const DOT_KEYS: usize = 8;

/// `s[j] = Σ_p q[p]·k_j[p]` for the keys `j` in `keys`, each summed in order of `p` with fused
/// multiply-adds: the same rounding as [`logits`] gives a query in a lane, so a query scores
/// the same alone (decode) as in a block (prefill).
#[inline(always)]
pub fn dots(q: &[f32], k: Rows, keys: Range<usize>, s: &mut [f32]) {
    let mut j = keys.start;
    while j + DOT_KEYS <= keys.end {
        let rows: [&[f32]; DOT_KEYS] = std::array::from_fn(|r| k.row(j + r));
        let mut acc = [0f32; DOT_KEYS];
        for (p, &x) in q.iter().enumerate() {
            for r in 0..DOT_KEYS {
                acc[r] = rows[r][p].mul_add(x, acc[r]);
            }
        }
        s[j..j + DOT_KEYS].copy_from_slice(&acc);
        j += DOT_KEYS;
    }
    for (j, out) in (j..keys.end).zip(&mut s[j..keys.end]) {
        *out = k.row(j).iter().zip(q).fold(0.0, |a, (&y, &x)| y.mul_add(x, a));
    }
}
