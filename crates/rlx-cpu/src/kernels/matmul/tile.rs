//! Register tiles of the f32 GEMM: `c[MR × NR] (+)= a_panel · b_panel` over `kc` steps, the
//! accumulators held in registers for the whole sweep. One portable kernel and, on x86-64,
//! AVX2+FMA (6 × 16, twelve ymm accumulators) and AVX-512F (12 × 32, twenty-four zmm
//! accumulators, or 8 × 48 for row counts that are multiples of 8) kernels picked at run time,
//! each with the same instruction set's few-rows kernels ([`rows`](super::rows)).

use super::choice::Choice;
use super::rows::{self, Rows};

/// A micro-kernel and the tile it computes, with the few-rows kernels of its instruction set.
///
/// Contract of `kernel(kc, a, b, c, ldc, add)`: `a` holds `kc × mr` floats, step `p`'s column
/// of the tile at `a[p·mr .. p·mr + mr]`; `b` holds `kc × nr` floats, step `p`'s row at
/// `b[p·nr .. p·nr + nr]`; `c` addresses a full `mr × nr` row-major tile with row stride
/// `ldc` that overlaps neither panel. With `add` the product is added to `c`, else it
/// overwrites `c`. No alignment is required.
#[derive(Clone, Copy)]
pub struct Tile {
    pub mr: usize,
    pub nr: usize,
    pub name: &'static str,
    /// The instruction set: tiles of one set share their few-rows kernels.
    pub isa: &'static str,
    kernel: unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool),
    /// Few rows of `a` × a row-major `b`.
    pub(super) axpy: Rows,
    /// Few rows of `a` × a `b` with contiguous columns.
    pub(super) dot: Rows,
}

/// A register tile's kernel reading `a` unpacked: `(kc, a, lda, b, c, ldc, add)`, row `i` of the
/// tile at `a + i·lda` (unit column stride), `b` packed as for [`Tile::run`].
pub type InPlace = unsafe fn(usize, *const f32, usize, *const f32, *mut f32, usize, bool);

/// A tile kernel with one operand packed and the other read in place at step `p` from
/// `x + offsets[p]`: `kernel(kc, packed, x, offsets, c, ldc, add)`, otherwise as on [`Tile`].
/// From [`Tile::gathered`] the packed operand is `a` and `b`'s rows are read in place; from
/// [`Tile::gathered_rows`] the packed operand is `b` and `a`'s columns are read in place.
pub type Gathered = unsafe fn(usize, *const f32, *const f32, *const usize, *mut f32, usize, bool);

/// The largest tile any kernel computes (`mr · nr`), for edge-tile scratch space.
pub const MAX_TILE: usize = 12 * 32;

impl Tile {
    /// Runs the kernel on one tile.
    ///
    /// # Safety
    /// The pointers must satisfy the contract on [`Tile`] for this tile's `mr` and `nr`, and the
    /// kernel must be supported by the running CPU (true for every tile [`Tile::available`]
    /// returns).
    pub unsafe fn run(&self, kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        (self.kernel)(kc, a, b, c, ldc, add)
    }

    /// The portable kernel (the reference the SIMD kernels are tested against).
    pub fn portable() -> Tile {
        Tile { mr: 4, nr: 8, name: "portable 4×8", isa: "portable", kernel: portable::<4, 8>, axpy: rows::portable_axpy, dot: rows::portable_dot }
    }

    /// Every kernel this CPU can run, fastest first.
    pub fn available() -> Vec<Tile> {
        let mut tiles = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                let (axpy, dot) = (rows::avx512::axpy, rows::avx512::dot);
                tiles.push(Tile { mr: 12, nr: 32, name: "avx512 12×32", isa: "avx512", kernel: x86::avx512::<12, 2>, axpy, dot });
                tiles.push(Tile { mr: 8, nr: 48, name: "avx512 8×48", isa: "avx512", kernel: x86::avx512::<8, 3>, axpy, dot });
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                tiles.push(Tile { mr: 6, nr: 16, name: "avx2 6×16", isa: "avx2", kernel: x86::avx2::<6>, axpy: rows::avx2::axpy, dot: rows::avx2::dot });
            }
        }
        tiles.push(Tile::portable());
        tiles
    }

    /// The kernel f32 GEMMs run, chosen once ([`Choice::get`]): the one `RLX_SGEMM_TILE` names
    /// where this CPU runs it, else the one `rlx tune` cached for this machine, else the fastest
    /// this CPU runs.
    pub fn best() -> Tile {
        Choice::get().tile
    }

    /// The tile this CPU runs that `name` names: a tile's name (`avx512 8×48`; `x` for `×`
    /// and any case) or an instruction set (`avx512`, `avx2`, `portable`: its fastest tile).
    pub fn named(name: &str) -> Option<Tile> {
        let plain = |s: &str| s.trim().replace('×', "x").to_ascii_lowercase();
        let want = plain(name);
        Tile::available().into_iter().find(|t| plain(t.name) == want || t.isa == want)
    }

    /// This tile's rows with `b` rows read in place ([`Gathered`]) over `16·nv` columns, where
    /// such a kernel exists (AVX-512: 12 rows × 2 vectors, 8 rows × 2 or 3).
    pub fn gathered(&self, nv: usize) -> Option<Gathered> {
        #[cfg(target_arch = "x86_64")]
        if self.isa == "avx512" {
            return match (self.mr, nv) {
                (12, 2) => Some(x86::avx512_gathered::<12, 2>),
                (8, 2) => Some(x86::avx512_gathered::<8, 2>),
                (8, 3) => Some(x86::avx512_gathered::<8, 3>),
                _ => None,
            };
        }
        let _ = nv;
        None
    }

    /// A kernel of `mr` rows (4 to this tile's `mr`) and this tile's `nr` columns reading `a`'s
    /// columns in place and `b` from this tile's panels ([`Gathered`]), where one exists
    /// (AVX-512).
    pub fn gathered_rows(&self, mr: usize) -> Option<Gathered> {
        #[cfg(target_arch = "x86_64")]
        if self.isa == "avx512" {
            use x86::avx512_gathered_a as k;
            return match (self.nr, mr) {
                (48, 4) => Some(k::<4, 3>),
                (48, 5) => Some(k::<5, 3>),
                (48, 6) => Some(k::<6, 3>),
                (48, 7) => Some(k::<7, 3>),
                (48, 8) => Some(k::<8, 3>),
                (32, 4) => Some(k::<4, 2>),
                (32, 5) => Some(k::<5, 2>),
                (32, 6) => Some(k::<6, 2>),
                (32, 7) => Some(k::<7, 2>),
                (32, 8) => Some(k::<8, 2>),
                (32, 10) => Some(k::<10, 2>),
                (32, 12) => Some(k::<12, 2>),
                _ => None,
            };
        }
        let _ = mr;
        None
    }

    /// The kernel of this tile that reads full row panels of an f32 `a` in place, where
    /// there is one: no packing of `a`.
    pub fn in_place(&self) -> Option<InPlace> {
        #[cfg(target_arch = "x86_64")]
        if self.isa == "avx512" {
            return match (self.mr, self.nr) {
                (12, 32) => Some(x86::avx512_in_place::<12, 2>),
                (8, 48) => Some(x86::avx512_in_place::<8, 3>),
                _ => None,
            };
        }
        None
    }

    /// The tile of [`Tile::best`]'s instruction set that pads `m` rows the least (ties go to
    /// the best): for a weight packed by rows, such as a conv's output channels.
    pub fn for_rows(m: usize) -> Tile {
        let best = Tile::best();
        let padded = |t: &Tile| m.div_ceil(t.mr) * t.mr;
        Tile::available().into_iter().filter(|t| t.isa == best.isa).fold(best, |a, t| if padded(&t) < padded(&a) { t } else { a })
    }
}

/// Plain loops over an `MR × NR` accumulator array.
unsafe fn portable<const MR: usize, const NR: usize>(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    let a = std::slice::from_raw_parts(a, kc * MR);
    let b = std::slice::from_raw_parts(b, kc * NR);
    let mut acc = [[0.0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (row, &x) in acc.iter_mut().zip(ap) {
            for (r, &y) in row.iter_mut().zip(bp) {
                *r += x * y;
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let out = std::slice::from_raw_parts_mut(c.add(i * ldc), NR);
        for (o, &v) in out.iter_mut().zip(row) {
            *o = if add { *o + v } else { v };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// One step of an `MR × 16·NV` tile: `acc[i] += a[i] · b[0 .. 16·NV]` (a macro, not a
    /// function: through a `&mut` the accumulators went to the stack and back on every call).
    macro_rules! step {
        ($acc:ident, $a:expr, $b:expr) => {
            step!($acc, $a, 1, $b)
        };
        ($acc:ident, $a:expr, $rs:expr, $b:expr) => {{
            let (a, b, rs): (*const f32, *const f32, usize) = ($a, $b, $rs);
            let mut bv = [_mm512_setzero_ps(); NV];
            for (h, v) in bv.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(b.add(16 * h));
            }
            for (i, row) in $acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a.add(i * rs));
                for (r, &v) in row.iter_mut().zip(&bv) {
                    *r = _mm512_fmadd_ps(x, v, *r);
                }
            }
        }};
    }

    /// Asks for the lines of the row-major `MR × 16·NV` tile at `c` while the sweep runs: a
    /// large output is read back from memory for `add`, its rows often 4 KiB apart in one L1
    /// set, and waiting for them at the store took 8% of a 2048² product.
    macro_rules! prefetch {
        ($c:expr, $ldc:expr) => {
            for i in 0..MR {
                let row = $c.add(i * $ldc) as *const i8;
                for h in 0..NV {
                    _mm_prefetch::<_MM_HINT_T0>(row.add(64 * h));
                }
                _mm_prefetch::<_MM_HINT_T0>(row.add(64 * NV - 1));
            }
        };
    }

    /// Writes (or with `add` adds) the accumulators to the row-major tile at `c`.
    macro_rules! store {
        ($acc:ident, $c:expr, $ldc:expr, $add:expr) => {
            for (i, row) in $acc.iter().enumerate() {
                for (h, &v) in row.iter().enumerate() {
                    let p = $c.add(i * $ldc + 16 * h);
                    _mm512_storeu_ps(p, if $add { _mm512_add_ps(_mm512_loadu_ps(p), v) } else { v });
                }
            }
        };
    }

    /// `MR × 16·NV` with `NV` zmm accumulators per row; `a`'s values are broadcast from memory.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512<const MR: usize, const NV: usize>(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        prefetch!(c, ldc);
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let (mut a, mut b) = (a, b);
        for _ in 0..kc {
            step!(acc, a, b);
            a = a.add(MR);
            b = b.add(16 * NV);
        }
        store!(acc, c, ldc, add);
    }

    /// `MR × 16·NV` whose `b` row at step `p` is the `16·NV` floats at `x + offsets[p]` (a
    /// direct convolution's input, no packed panel).
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512_gathered<const MR: usize, const NV: usize>(kc: usize, a: *const f32, x: *const f32, offsets: *const usize, c: *mut f32, ldc: usize, add: bool) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let mut a = a;
        for p in 0..kc {
            step!(acc, a, x.add(*offsets.add(p)));
            a = a.add(MR);
        }
        store!(acc, c, ldc, add);
    }

    /// `MR × 16·NV` whose `a` column at step `p` is the `MR` floats at `x + offsets[p]` and
    /// whose `b` is a packed panel (a direct convolution with output cells as rows).
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512_gathered_a<const MR: usize, const NV: usize>(kc: usize, b: *const f32, x: *const f32, offsets: *const usize, c: *mut f32, ldc: usize, add: bool) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let mut b = b;
        for p in 0..kc {
            step!(acc, x.add(*offsets.add(p)), b);
            b = b.add(16 * NV);
        }
        store!(acc, c, ldc, add);
    }

    /// [`avx512`] reading `a`'s rows in place: row `i` of the tile at `a + i·lda`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512_in_place<const MR: usize, const NV: usize>(kc: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        prefetch!(c, ldc);
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let (mut a, mut b) = (a, b);
        for _ in 0..kc {
            step!(acc, a, lda, b);
            a = a.add(1);
            b = b.add(16 * NV);
        }
        store!(acc, c, ldc, add);
    }

    /// `MR × 16` with two ymm accumulators per row.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2<const MR: usize>(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let (mut a, mut b) = (a, b);
        for _ in 0..kc {
            let (b0, b1) = (_mm256_loadu_ps(b), _mm256_loadu_ps(b.add(8)));
            for (i, row) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.add(i));
                row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                row[1] = _mm256_fmadd_ps(x, b1, row[1]);
            }
            a = a.add(MR);
            b = b.add(16);
        }
        for (i, row) in acc.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                let p = c.add(i * ldc + 8 * h);
                _mm256_storeu_ps(p, if add { _mm256_add_ps(_mm256_loadu_ps(p), v) } else { v });
            }
        }
    }
}
