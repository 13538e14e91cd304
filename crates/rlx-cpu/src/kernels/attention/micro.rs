//! Register tiles of the f32 attention forward (`tiled.rs`): the logits of key rows against a
//! block of queries stored lane-wise (transposed, so no key tile is ever packed), `P·V`
//! accumulated into output rows straight from the value rows, and the dot products of the
//! few-query path. All `#[inline(always)]`: they compile into the caller's target features
//! (AVX-512F, or AVX2 + FMA, there), where the fixed-size accumulator arrays become vector
//! registers.

use std::ops::Range;

/// Query lanes of one logit register tile (two AVX vectors).
pub const LANES: usize = 16;
/// Key rows of one logit register tile.
const KEY_ROWS: usize = 4;
/// Output rows of one `P·V` register tile.
const OUT_ROWS: usize = 4;
/// Output columns of one `P·V` register tile (two AVX vectors).
const OUT_COLS: usize = 16;
/// Output columns of a single row's `P·V` tile (eight AVX vectors: independent chains, where
/// two would wait on the latency of each multiply-add).
const ROW_COLS: usize = 64;

/// One head's rows of one operand: row `s` is `data[r·stride..][..width]` with `r = at[s]`
/// where the rows are read at indices (K and V at `kv_rows`), else `r = s`.
#[derive(Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [f32],
    pub stride: usize,
    pub width: usize,
    pub at: Option<&'a [usize]>,
}

impl<'a> Rows<'a> {
    #[inline(always)]
    pub fn row(&self, s: usize) -> &'a [f32] {
        let r = self.at.map_or(s, |at| at[s]);
        &self.data[r * self.stride..][..self.width]
    }

    /// The rows from `s0` on.
    #[inline(always)]
    pub fn skip(self, s0: usize) -> Rows<'a> {
        match self.at {
            Some(at) => Rows { at: Some(&at[s0..]), ..self },
            None => Rows { data: &self.data[s0 * self.stride..], ..self },
        }
    }

    /// Row `s`, or `None` past the last.
    #[inline(always)]
    fn get(&self, s: usize) -> Option<&'a [f32]> {
        let r = match self.at {
            Some(at) => *at.get(s)?,
            None => s,
        };
        self.data.get(r * self.stride..)?.get(..self.width)
    }

    /// The starts of rows `s .. s + 8`.
    #[inline(always)]
    fn eight(&self, s: usize) -> [*const f32; 8] {
        std::array::from_fn(|r| self.row(s + r).as_ptr())
    }
}

/// `out[p·ld + i] = x_i[p]` for the first `n` rows of `x` (a block of queries stored
/// lane-wise for [`logits`]). With AVX2, 8 × 8 blocks go through registers: element by
/// element, every row's first load stalled the loop (an eighth of the kernel's time).
#[inline(always)]
pub fn transpose(x: Rows, n: usize, out: &mut [f32], ld: usize) {
    assert!(n <= ld && out.len() >= x.width * ld && (n == 0 || x.row(n - 1).len() == x.width), "attention transpose out of bounds");
    let mut i0 = 0;
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        while i0 + 8 <= n {
            let rows = x.eight(i0);
            let mut p = 0;
            while p + 8 <= x.width {
                // Safety: the CPU has AVX2; rows i0..i0 + 8 (all below n, asserted to exist)
                // hold floats p..p + 8, and `out` holds `out[(p + 7)·ld + i0 + 8]` (i0 + 8 ≤ n
                // ≤ ld, p + 8 ≤ width).
                unsafe {
                    let columns = columns8(rows, p);
                    for (c, column) in columns.into_iter().enumerate() {
                        std::arch::x86_64::_mm256_storeu_ps(out.as_mut_ptr().add((p + c) * ld + i0), column);
                    }
                }
                p += 8;
            }
            for p in p..x.width {
                for r in 0..8 {
                    out[p * ld + i0 + r] = x.row(i0 + r)[p];
                }
            }
            i0 += 8;
        }
    }
    for i in i0..n {
        for (lanes, &v) in out.chunks_exact_mut(ld).zip(x.row(i)) {
            lanes[i] = v;
        }
    }
}

/// The 8 × 8 block of columns `p .. p + 8` of eight rows, as its columns: vector `c` holds
/// `rows[r][p + c]` in lane `r` (an 8 × 8 transposition in registers).
///
/// # Safety
/// The CPU has AVX2, and each of the eight rows holds eight floats from `p`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn columns8(rows: [*const f32; 8], p: usize) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(rows[i].add(p)));
    let t = [
        _mm256_unpacklo_ps(r[0], r[1]),
        _mm256_unpackhi_ps(r[0], r[1]),
        _mm256_unpacklo_ps(r[2], r[3]),
        _mm256_unpackhi_ps(r[2], r[3]),
        _mm256_unpacklo_ps(r[4], r[5]),
        _mm256_unpackhi_ps(r[4], r[5]),
        _mm256_unpacklo_ps(r[6], r[7]),
        _mm256_unpackhi_ps(r[6], r[7]),
    ];
    // Columns c and c + 4 of rows 0..4 in u[c], of rows 4..8 in u[c + 4].
    let u = [
        _mm256_shuffle_ps::<0x44>(t[0], t[2]),
        _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        _mm256_shuffle_ps::<0x44>(t[1], t[3]),
        _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        _mm256_shuffle_ps::<0x44>(t[4], t[6]),
        _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        _mm256_shuffle_ps::<0x44>(t[5], t[7]),
        _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    std::array::from_fn(|c| if c < 4 { _mm256_permute2f128_ps::<0x20>(u[c], u[c + 4]) } else { _mm256_permute2f128_ps::<0x31>(u[c - 4], u[c]) })
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
            // Safety: `Rows::row` gave each row `k.width` elements, and `p < k.width` (the
            // checked index kept a compare and branch per multiply-add in the loop).
            let x = unsafe { *rows[r].get_unchecked(p) };
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
        weighted_rows::<OUT_ROWS, OUT_COLS>(p, ld, v, i, union(i, OUT_ROWS), acc, dv);
        i += OUT_ROWS;
    }
    for i in i..rows.end {
        weighted_rows::<1, ROW_COLS>(p, ld, v, i, union(i, 1), acc, dv);
    }
}

/// Rows `i0..i0 + R` of [`weighted_values`] over `keys`, `C` columns at a time, then the
/// remainder in narrower blocks. Each output element is summed over the keys in order, so
/// the blocking does not change the bits.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn weighted_rows<const R: usize, const C: usize>(p: &[f32], ld: usize, v: Rows, i0: usize, keys: Range<usize>, acc: &mut [f32], dv: usize) {
    let mut c = 0;
    while c + C <= dv {
        weighted_tile::<R, C>(p, ld, v, i0, keys.clone(), c, acc, dv);
        c += C;
    }
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
        if R == 1 && W == ROW_COLS {
            prefetch::<L1>(v, j + PREFETCH_ROWS..j + PREFETCH_ROWS + 1);
        }
        let x: &[f32; W] = v.row(j)[c0..][..W].try_into().expect("W columns");
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

/// Rows ahead of a single row's `P·V` whose values are prefetched.
const PREFETCH_ROWS: usize = 8;

/// The prefetch hint into L1 (x86's `_MM_HINT_T0`; 0 elsewhere).
#[cfg(target_arch = "x86_64")]
pub const L1: i32 = std::arch::x86_64::_MM_HINT_T0;
/// The prefetch hint into L2 (x86's `_MM_HINT_T1`; 0 elsewhere).
#[cfg(target_arch = "x86_64")]
pub const L2: i32 = std::arch::x86_64::_MM_HINT_T1;
#[cfg(not(target_arch = "x86_64"))]
pub const L1: i32 = 0;
#[cfg(not(target_arch = "x86_64"))]
pub const L2: i32 = 0;

/// Asks for the cache lines of rows `rows` of `x` (those it has) into the cache level `HINT`
/// ([`L1`], [`L2`]) ahead of their use: a KV cache is read once per decode step, from memory,
/// and the column order of [`dots_avx2`] hides its stream from the hardware prefetcher.
#[inline(always)]
pub fn prefetch<const HINT: i32>(x: Rows, rows: Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    for r in rows {
        let Some(row) = x.get(r) else { return };
        for line in row.chunks(16) {
            // Safety: a prefetch of an address inside the slice; it reads nothing.
            unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(line.as_ptr().cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, rows);
}

/// Keys scored at once by the portable [`dots`] (independent accumulation chains).
const DOT_KEYS: usize = 8;
/// Queries [`dots`] scores against each load of key rows (the heads of one KV head).
pub const DOT_QUERIES: usize = 4;

/// `s[g·ld + j] = Σ_p q_g[p]·k_j[p]` for each query `q_g` of `qs` and the keys `j` in `keys`,
/// each summed in order of `p` with fused multiply-adds: the same rounding as [`logits`] gives
/// a query in a lane, so a query scores the same alone (decode) as in a block (prefill), and
/// the same beside other queries. With AVX2, keys go eight to a vector (key rows transposed in
/// registers, [`dots_avx2`]), each transposition serving up to [`DOT_QUERIES`] queries (query
/// heads sharing a KV head read its keys once).
#[inline(always)]
pub fn dots(qs: &[&[f32]], k: Rows, keys: Range<usize>, s: &mut [f32], ld: usize) {
    for (c, chunk) in qs.chunks(DOT_QUERIES).enumerate() {
        let s = &mut s[c * DOT_QUERIES * ld..];
        let mut j = keys.start;
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // Safety: the CPU has the features the functions are compiled for.
            j = unsafe {
                match chunk.len() {
                    1 => dots_avx2::<1, 2>(chunk, k, keys.clone(), s, ld),
                    2 => dots_avx2::<2, 1>(chunk, k, keys.clone(), s, ld),
                    3 => dots_avx2::<3, 1>(chunk, k, keys.clone(), s, ld),
                    _ => dots_avx2::<4, 1>(chunk, k, keys.clone(), s, ld),
                }
            };
        }
        for (g, q) in chunk.iter().enumerate() {
            dots_portable(q, k, j..keys.end, &mut s[g * ld..]);
        }
    }
}

/// One query's [`dots`] without vector instructions.
#[inline(always)]
fn dots_portable(q: &[f32], k: Rows, keys: Range<usize>, s: &mut [f32]) {
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

/// [`dots`] of `Q` queries for the keys of `keys` in groups of eight, `G` groups at a time;
/// returns the first key left. Keys past the last whole group, when there are at least eight,
/// are scored as the group of eight ending at the last key: the keys it shares with the group
/// before get the same sums again (each key's sum is its own chain), where one chain a key had
/// waited on every multiply-add.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<const Q: usize, const G: usize>(qs: &[&[f32]], k: Rows, keys: Range<usize>, s: &mut [f32], ld: usize) -> usize {
    let n = (keys.end - keys.start.min(keys.end)) / 8 * 8;
    let end = keys.start + n;
    if n == 0 {
        return keys.start;
    }
    let qs: [&[f32]; Q] = std::array::from_fn(|g| qs[g]);
    let d = qs[0].len();
    assert!(qs.iter().all(|q| q.len() == d) && k.width >= d && (Q - 1) * ld + keys.end <= s.len(), "attention dots out of bounds");
    let mut j = keys.start;
    while j + 8 * G <= end {
        prefetch::<L1>(k, j + 16 * G..j + 24 * G);
        // Safety: rows j..j + 8·G are rows of `k` (read through `Rows::row`) of at least `d`
        // floats, and s[g·ld + j..][..8·G] is in bounds (asserted above).
        unsafe { dot_groups::<Q, G>(qs, k, j, s, ld) };
        j += 8 * G;
    }
    while j < end {
        // Safety: as above, for eight keys.
        unsafe { dot_groups::<Q, 1>(qs, k, j, s, ld) };
        j += 8;
    }
    if j < keys.end {
        // Safety: as above: keys.end − 8 ≥ keys.start (n ≥ 8).
        unsafe { dot_groups::<Q, 1>(qs, k, keys.end - 8, s, ld) };
        j = keys.end;
    }
    j
}

/// `s[g·ld + j..][..8·G]` for the `Q` queries: `G` groups of eight keys, each a vector of eight
/// lanes summed over `p` in order, one transposition of the key rows for all queries. Rows
/// `j..j + 8·G` of `k` (bounds-checked) must have the queries' length and `s` must hold them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_groups<const Q: usize, const G: usize>(qs: [&[f32]; Q], k: Rows, j: usize, s: &mut [f32], ld: usize) {
    use std::arch::x86_64::*;
    let d = qs[0].len();
    let rows: [[*const f32; 8]; G] = std::array::from_fn(|g| k.eight(j + 8 * g));
    let mut acc = [[_mm256_setzero_ps(); G]; Q];
    let mut p = 0;
    while p + 8 <= d {
        for g in 0..G {
            let columns = columns8(rows[g], p);
            for (c, column) in columns.into_iter().enumerate() {
                for (a, q) in acc.iter_mut().zip(&qs) {
                    a[g] = _mm256_fmadd_ps(column, _mm256_set1_ps(*q.get_unchecked(p + c)), a[g]);
                }
            }
        }
        p += 8;
    }
    for p in p..d {
        for g in 0..G {
            let x = rows[g].map(|r| *r.add(p));
            let col = _mm256_setr_ps(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
            for (a, q) in acc.iter_mut().zip(&qs) {
                a[g] = _mm256_fmadd_ps(col, _mm256_set1_ps(*q.get_unchecked(p)), a[g]);
            }
        }
    }
    for (qi, a) in acc.iter().enumerate() {
        for (g, v) in a.iter().enumerate() {
            _mm256_storeu_ps(s.as_mut_ptr().add(qi * ld + j + 8 * g), *v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_of_every_range_are_each_keys_chain_of_multiply_adds() {
        // 45 keys of 20 (a stride of 23): ranges of every length from 0 to 45 and several
        // starts, so that whole groups, a last group overlapping the one before, and ranges
        // under eight keys all occur; each key's logit is its own in-order chain, for one
        // query alone and for 2 to 6 queries scored together (one and two chunks).
        let (n, d, stride) = (45, 20, 23);
        let keys: Vec<f32> = (0..n * stride).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let queries: Vec<Vec<f32>> = (0..6).map(|g| (0..d).map(|i| (((i + 5 * g) * 13 % 29) as f32 - 14.0) / 9.0).collect()).collect();
        let k = Rows { data: &keys, stride, width: d, at: None };
        for count in 1..=6 {
            let qs: Vec<&[f32]> = queries[..count].iter().map(Vec::as_slice).collect();
            for start in [0, 1, 5, 8] {
                for end in start..=n {
                    let mut s = vec![f32::NAN; count * n];
                    dots(&qs, k, start..end, &mut s, n);
                    for (g, q) in qs.iter().enumerate() {
                        let s = &s[g * n..][..n];
                        for (j, got) in s.iter().enumerate().take(end).skip(start) {
                            let want = k.row(j).iter().zip(*q).fold(0f32, |a, (&y, &x)| y.mul_add(x, a));
                            assert_eq!(got.to_bits(), want.to_bits(), "{count} queries, keys {start}..{end}: query {g}, key {j}");
                        }
                        assert!(s[..start].iter().chain(&s[end..]).all(|x| x.is_nan()), "{count} queries, keys {start}..{end}: wrote outside");
                    }
                }
            }
        }
    }
}
