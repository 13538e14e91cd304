//! rlx's GEMM into f32: `c (+)= a · b` over strided f32, f16 or bf16 operands, packed (and
//! widened) into panels and cache-blocked around the register tiles of [`tile`](super::tile),
//! with an optional epilogue over each finished piece of `c`.
//!
//! Loop nest, per block of at most `kc` steps of the inner dimension ([`Blocking`]): all of
//! `a`'s rows are packed into `mr`-row panels (each `mr × kc`, small enough to stay in L1
//! while it sweeps a column block); then each task — a block of rows × at most `nc` columns —
//! packs its columns of `b` into `nr`-column panels (a `kc × nc` block that stays in L2) and
//! runs the tile kernel over its row panels × column panels. Tasks run on rayon when the product is large enough.
//! Products with few rows of `a` skip packing ([`rows`](super::rows)). A weight multiplied
//! again and again is packed once ([`PackedB`]): as `b` for [`sgemm_prepacked`], or as `a`
//! for [`sgemm_filled`], whose `b` panels a caller's closure writes per task (a conv's
//! windows).

use super::choice::Choice;
use super::rows::few_rows;
use super::tile::{InPlace, Tile, MAX_TILE};
use half::{bf16, f16};
use rayon::prelude::*;
use std::cell::RefCell;

/// The cache blocking around the register tile. `kc` also decides where the f32 sums over
/// the inner dimension are cut into blocks (each summed in registers, then added to `c`), so
/// another `kc` rounds differently, as another tile may; `nc` only changes how work is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Most steps of the inner dimension per packed block (an `mr × kc` panel of `a` stays in
    /// L1); the inner dimension is cut into equal blocks of at most this.
    pub kc: usize,
    /// Most columns of `b` one task packs (a `kc × nc` block of `b` stays in L2).
    pub nc: usize,
}

impl Blocking {
    /// The blocking without tuning (a `384 × 512` block of `b` is 768 KiB, inside a 1 MiB L2).
    pub const DEFAULT: Blocking = Blocking { kc: 384, nc: 512 };
    /// The `kc` accepted from the environment or a cache file: at most 1024 steps, where a
    /// 12-row panel of `a` (48 KiB) is already the size of an L1 data cache.
    pub const KC_RANGE: std::ops::RangeInclusive<usize> = 16..=1024;
    /// The `nc` accepted from the environment or a cache file.
    pub const NC_RANGE: std::ops::RangeInclusive<usize> = 16..=8192;
}

/// Multiply-adds below which a product runs on one thread.
pub const PAR_FLOPS: usize = 1 << 18;

/// An operand element type: f32, or a half float widened to f32 while it is packed.
pub trait Element: Copy + Send + Sync + 'static {
    fn f32(self) -> f32;
    /// The elements as f32 when they are f32 (for the transposing fast path).
    fn as_f32(data: &[Self]) -> Option<&[f32]>;
}

impl Element for f32 {
    fn f32(self) -> f32 {
        self
    }
    fn as_f32(data: &[f32]) -> Option<&[f32]> {
        Some(data)
    }
}

impl Element for f16 {
    fn f32(self) -> f32 {
        self.to_f32()
    }
    fn as_f32(_: &[f16]) -> Option<&[f32]> {
        None
    }
}

impl Element for bf16 {
    fn f32(self) -> f32 {
        self.to_f32()
    }
    fn as_f32(_: &[bf16]) -> Option<&[f32]> {
        None
    }
}

/// A read-only matrix: element `(i, j)` is `data[i·strides[0] + j·strides[1]]`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a, T = f32> {
    pub data: &'a [T],
    pub rows: usize,
    pub cols: usize,
    pub strides: [usize; 2],
}

/// A row-major f32 matrix to write: element `(i, j)` is `data[i·ld + j]`.
#[derive(Debug)]
pub struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

impl<'a, T> Mat<'a, T> {
    /// A contiguous row-major `[rows, cols]` matrix.
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Mat<'a, T> {
        Mat { data, rows, cols, strides: [cols, 1] }
    }

    /// Index one past the last element addressed (0 when empty).
    pub(super) fn span(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            (self.rows - 1) * self.strides[0] + (self.cols - 1) * self.strides[1] + 1
        }
    }
}

impl<'a> MatMut<'a> {
    /// A contiguous row-major `[rows, cols]` matrix.
    pub fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> MatMut<'a> {
        MatMut { data, rows, cols, ld: cols }
    }
}

/// Work on finished output while it is still in cache (a bias, an activation):
/// `f(row, col0, values)` gets `c[row, col0 .. col0 + values.len()]` once the whole product
/// is in it. The pieces never overlap, together cover `c`, and may come from several threads.
pub type Epilogue<'e> = &'e (dyn Fn(usize, usize, &mut [f32]) + Sync);

/// `c = a·b`, or `c += a·b` with `accumulate`: `a [m, k]`, `b [k, n]`, `c [m, n]`, each read
/// or written through its strides (a transposed operand needs no copy); f16 and bf16
/// operands are widened as they are packed, and accumulation is f32 (in the order of `k`,
/// except on the few-rows path's dot products over a transposed `b`).
/// With `parallel` a large product is split over the current rayon pool (callers already
/// splitting work over threads pass `false`). Errors name the mismatch when the shapes
/// disagree, a slice is too short for its geometry, or `c`'s row stride is below its width.
pub fn sgemm<A: Element, B: Element>(a: Mat<A>, b: Mat<B>, c: MatMut, accumulate: bool, parallel: bool) -> Result<(), String> {
    sgemm_with(Choice::get(), a, b, c, accumulate, parallel, None)
}

/// [`sgemm`], then `epilogue` over the output piece by piece as each is finished.
pub fn sgemm_then<A: Element, B: Element>(a: Mat<A>, b: Mat<B>, c: MatMut, accumulate: bool, parallel: bool, epilogue: Epilogue) -> Result<(), String> {
    sgemm_with(Choice::get(), a, b, c, accumulate, parallel, Some(epilogue))
}

/// [`sgemm`] on a chosen register tile and blocking (tests run every tile the CPU has, `rlx
/// tune` times them), with an optional epilogue.
pub fn sgemm_with<A: Element, B: Element>(
    choice: Choice,
    a: Mat<A>,
    b: Mat<B>,
    c: MatMut,
    accumulate: bool,
    parallel: bool,
    epilogue: Option<Epilogue>,
) -> Result<(), String> {
    product(choice, a, b, None, c, accumulate, parallel, epilogue)
}

/// [`sgemm`] with an optional epilogue, reading `b`'s panels from `packed` (made from this
/// `b`) instead of packing them; products with few rows of `a` read `b` itself.
pub fn sgemm_prepacked<A: Element>(
    a: Mat<A>,
    b: Mat<f32>,
    packed: &PackedB,
    c: MatMut,
    accumulate: bool,
    parallel: bool,
    epilogue: Option<Epilogue>,
) -> Result<(), String> {
    if packed.layout != Layout::B || (packed.k, packed.n) != (b.rows, b.cols) {
        return Err(format!("sgemm: b packed as [{}, {}] is [{}, {}]", packed.k, packed.n, b.rows, b.cols));
    }
    let choice = Choice { tile: packed.tile, blocking: Blocking { kc: packed.kc, nc: Choice::get().blocking.nc } };
    product(choice, a, b, Some(packed), c, accumulate, parallel, epilogue)
}

/// What a [`PackedB`] holds, and for which product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `b [k, n]` in `nr`-column panels ([`PackedB::new`], for [`sgemm_prepacked`]).
    B,
    /// The rows of an `a [m, k]` in `mr`-row panels ([`PackedB::rows_of`], for
    /// [`sgemm_filled`] and a direct conv with output channels as the tile's rows).
    RowsOfA,
    /// The rows of an `a [m, k]` as the `nr`-column panels of `aᵀ` ([`PackedB::columns_of`],
    /// for a direct conv with output cells as the tile's rows).
    ColumnsOfA,
}

/// A weight packed once into a tile's panels, so that the products reading it skip packing
/// it on every call (see [`Layout`]).
pub struct PackedB {
    tile: Tile,
    /// Most steps of the inner dimension per packed block (the `kc` it was packed with).
    kc: usize,
    /// Columns of the packed matrix per panel: `nr`, or `mr` for [`Layout::RowsOfA`].
    width: usize,
    layout: Layout,
    /// Shape of the packed matrix, `[k, n]` (for `aᵀ`, `k` = `a`'s columns).
    k: usize,
    n: usize,
    /// The shape [`PackedB::unpack`] restores: `[k, n]`, or the tensor `a` was viewed from.
    dims: Vec<usize>,
    /// Per block of the inner dimension (as [`inner_block`] cuts it), `⌈n / width⌉` panels of
    /// `kc × width` floats, laid out as [`pack_b`] writes them.
    data: Vec<f32>,
}

impl PackedB {
    /// Packs `b` for the chosen tile ([`Tile::best`]).
    pub fn new<B: Element>(b: Mat<B>) -> PackedB {
        PackedB::with_tile(Tile::best(), b)
    }

    /// Packs `b` for `tile`, in blocks of the chosen `kc` ([`Choice::get`]).
    pub fn with_tile<B: Element>(tile: Tile, b: Mat<B>) -> PackedB {
        PackedB::panels_of(tile, Layout::B, b, vec![b.rows, b.cols])
    }

    /// Packs the rows of `a [m, k]` for `tile` as [`sgemm_filled`] reads them; `dims` is the
    /// shape of the tensor `a` views (a conv weight `[C_out, C_in, kH, kW]`), which
    /// [`PackedB::dims`] reports and [`PackedB::unpack`] lays out.
    pub fn rows_of(tile: Tile, a: Mat<f32>, dims: &[usize]) -> PackedB {
        let at = Mat { data: a.data, rows: a.cols, cols: a.rows, strides: [a.strides[1], a.strides[0]] };
        PackedB::panels_of(tile, Layout::RowsOfA, at, dims.to_vec())
    }

    /// Packs `aᵀ` for an `a [m, k]` in `tile`'s `nr`-column panels ([`Layout::ColumnsOfA`]);
    /// `dims` as on [`PackedB::rows_of`].
    pub fn columns_of(tile: Tile, a: Mat<f32>, dims: &[usize]) -> PackedB {
        let at = Mat { data: a.data, rows: a.cols, cols: a.rows, strides: [a.strides[1], a.strides[0]] };
        PackedB::panels_of(tile, Layout::ColumnsOfA, at, dims.to_vec())
    }

    fn panels_of<B: Element>(tile: Tile, layout: Layout, b: Mat<B>, dims: Vec<usize>) -> PackedB {
        let width = if layout == Layout::RowsOfA { tile.mr } else { tile.nr };
        let (k, n) = (b.rows, b.cols);
        let padded = n.div_ceil(width) * width;
        let mut data = vec![0.0f32; k * padded];
        let kc_max = Choice::get().blocking.kc;
        let block = inner_block(k, kc_max);
        for p0 in (0..k).step_by(block) {
            let kc = block.min(k - p0);
            pack_b(&b, p0, kc, 0, width, &mut data[p0 * padded..(p0 + kc) * padded]);
        }
        PackedB { tile, kc: kc_max, width, layout, k, n, dims, data }
    }

    /// The weight again, row-major in [`PackedB::dims`] (the inverse of the packing on f32).
    pub fn unpack(&self) -> Vec<f32> {
        let (k, n, width) = (self.k, self.n, self.width);
        let padded = n.div_ceil(width) * width;
        let mut b = vec![0.0f32; k * n];
        let block = inner_block(self.k, self.kc);
        for p0 in (0..k).step_by(block) {
            let kc = block.min(k - p0);
            for (j, panel) in self.data[p0 * padded..(p0 + kc) * padded].chunks_exact(kc * width).enumerate() {
                let w = width.min(n - j * width);
                for (p, step) in panel.chunks_exact(width).enumerate() {
                    if self.layout != Layout::B {
                        for (c, &v) in step[..w].iter().enumerate() {
                            b[(j * width + c) * k + p0 + p] = v;
                        }
                    } else {
                        b[(p0 + p) * n + j * width..][..w].copy_from_slice(&step[..w]);
                    }
                }
            }
        }
        b
    }

    /// The tile it is packed for.
    pub fn tile(&self) -> Tile {
        self.tile
    }

    /// What it holds.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The shape of the packed weight: `[k, n]` for a `b`, the given dims for rows of an `a`.
    pub fn dims(&self) -> Vec<usize> {
        self.dims.clone()
    }

    /// The blocks of the inner dimension as `(p0, kc, panels)`: the panels of steps
    /// `p0..p0 + kc`, one `kc × width` panel per tile after another (panel `i` at
    /// `panels[i·width·kc..]`, step-major).
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (usize, usize, &[f32])> + '_ {
        let block = inner_block(self.k, self.kc);
        (0..self.k).step_by(block).map(move |p0| {
            let kc = block.min(self.k - p0);
            (p0, kc, self.panels(p0, kc, &(0..self.n.div_ceil(self.width))))
        })
    }

    /// The panels of column tiles `cols` in the block of `kc` steps from `p0`.
    fn panels(&self, p0: usize, kc: usize, cols: &std::ops::Range<usize>) -> &[f32] {
        let (w, at) = (self.width, p0 * self.n.div_ceil(self.width) * self.width);
        &self.data[at + cols.start * kc * w..at + cols.end * kc * w]
    }
}

/// Steps of the inner dimension per packed block: `k` cut into equal blocks of at most `kc`.
fn inner_block(k: usize, kc: usize) -> usize {
    k.div_ceil(k.div_ceil(kc).max(1)).max(1)
}

/// The product on `choice`, with `b`'s panels from `packed` (packed with `choice`'s `kc`)
/// when given.
#[allow(clippy::too_many_arguments)]
fn product<A: Element, B: Element>(
    Choice { tile, blocking }: Choice,
    a: Mat<A>,
    b: Mat<B>,
    packed: Option<&PackedB>,
    mut c: MatMut,
    accumulate: bool,
    parallel: bool,
    epilogue: Option<Epilogue>,
) -> Result<(), String> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || c.rows != m || c.cols != n {
        return Err(format!("sgemm: [{m}, {k}] × [{}, {n}] does not give [{}, {}]", b.rows, c.rows, c.cols));
    }
    // With `packed`, `b`'s elements are never read (its unpacked copy may be released).
    if a.data.len() < a.span() || (packed.is_none() && b.data.len() < b.span()) {
        return Err(format!("sgemm: operand slices of {} and {} elements are too short for their strides", a.data.len(), b.data.len()));
    }
    if trivial(&mut c, k, accumulate, epilogue)? {
        return Ok(());
    }
    if packed.is_none() && few_rows(tile, &a, &b, &mut c, accumulate, parallel, epilogue).is_some() {
        return Ok(());
    }
    let threads = if parallel && m * n * k >= PAR_FLOPS { rayon::current_num_threads() } else { 1 };
    let plan = Plan::new(tile, blocking.nc, m, n, threads);
    let out = OutPtr(c.data.as_mut_ptr());
    let block = inner_block(k, blocking.kc);
    // An f32 `a` of unit column stride is read in place where the tile has a kernel for it
    // (only a last, partial row panel is packed then), unless its rows lie a multiple of
    // 4 KiB apart: a tile's rows would then share L1 sets (2048² at 70 GFLOP/s in place, 90
    // packed; MiniLM's 384- and 1536-wide rows gain 5–10%).
    let in_place = tile.in_place().zip(A::as_f32(a.data)).filter(|_| a.strides[1] == 1 && !a.strides[0].is_multiple_of(1024)).map(|(k, data)| (data, a.strides[0], k));
    // Read in place, only a partial last panel is packed (and the buffer holds it alone: the
    // zeroed buffer of all panels was 6 MiB per thread at 4096 rows); no fork for it.
    let (full, packed_rows) = match in_place {
        Some(_) if m % tile.mr == 0 => (m / tile.mr, 0),
        Some(_) => (m / tile.mr, tile.mr),
        None => (0, m.div_ceil(tile.mr) * tile.mr),
    };
    with_buffer(&PACKED_A, packed_rows * block, |packed_a| {
        for p0 in (0..k).step_by(block) {
            let kc = block.min(k - p0);
            let panels = &mut packed_a[..packed_rows * kc];
            let pack = |(i, panel): (usize, &mut [f32])| pack_a(&a, (full + i) * tile.mr, p0, tile.mr, panel);
            if threads > 1 && in_place.is_none() {
                panels.par_chunks_mut(tile.mr * kc).enumerate().for_each(pack);
            } else {
                panels.chunks_mut(tile.mr * kc).enumerate().for_each(pack);
            }
            let last = (p0 + kc == k).then_some(epilogue).flatten();
            let tiles = Tiles { tile, a: panels, in_place: in_place.map(|(d, lda, k)| (&d[p0..], lda, k)), kc, m, n, ld: c.ld, add: accumulate || p0 > 0, epilogue: last };
            let step = Step { tiles, b: &b, packed, p0 };
            let task = |t: usize| {
                // Safety: tasks cover disjoint blocks of `c` (Plan::block), `c` holds every
                // addressed element (checked above) and overlaps neither operand (`&mut`).
                unsafe { step.run(plan.block(t), &out) }
            };
            if threads > 1 {
                (0..plan.tasks()).into_par_iter().for_each(task);
            } else {
                (0..plan.tasks()).for_each(task);
            }
        }
    });
    Ok(())
}

/// The output's base pointer, shared by tasks that write disjoint parts of it (GEMM tiles,
/// conv tiles, attention rows, quantized products' columns).
pub(crate) struct OutPtr(pub(crate) *mut f32);
// Safety: every user writes only its own disjoint part through it (see each use).
unsafe impl Sync for OutPtr {}

impl OutPtr {
    pub(crate) fn get(&self) -> *mut f32 {
        self.0
    }

    /// The pointer `offset` elements on.
    pub(crate) fn at(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

/// How the output is split into tasks: row blocks of `rows` tiles × column blocks of `cols`
/// tiles, column blocks outermost.
struct Plan {
    mt: usize,
    nt: usize,
    rows: usize,
    cols: usize,
}

impl Plan {
    /// One row block and `nc`-wide column blocks on one thread; on several, the split whose
    /// busiest thread has the fewest tiles (ties: fewer tasks, since each packs its own `b`; then
    /// fewer column blocks, so each packed panel of `a` sweeps more columns).
    fn new(tile: Tile, nc: usize, m: usize, n: usize, threads: usize) -> Plan {
        let (mt, nt) = (m.div_ceil(tile.mr), n.div_ceil(tile.nr));
        let max_cols = (nc / tile.nr).max(1);
        let mut best = Plan { mt, nt, rows: mt, cols: nt.min(max_cols) };
        if threads == 1 {
            return best;
        }
        let mut best_cost = usize::MAX;
        for cb in nt.div_ceil(max_cols)..=nt.min(8 * threads).max(nt.div_ceil(max_cols)) {
            for rb in 1..=mt.min(8 * threads) {
                let p = Plan { mt, nt, rows: mt.div_ceil(rb), cols: nt.div_ceil(cb) };
                let cost = p.tasks().div_ceil(threads) * p.rows * p.cols;
                if cost < best_cost || (cost == best_cost && p.tasks() < best.tasks()) {
                    best_cost = cost;
                    best = p;
                }
            }
        }
        best
    }

    /// `threads` row blocks, each sweeping every `nc`-wide column block: for [`sgemm_filled`],
    /// whose tasks write their own column panels, so that a column split would have every
    /// task stream the whole packed `a` (a conv's weight) while a row split only repeats the
    /// cheaper fill.
    fn by_rows(tile: Tile, nc: usize, m: usize, n: usize, threads: usize) -> Plan {
        let (mt, nt) = (m.div_ceil(tile.mr), n.div_ceil(tile.nr));
        Plan { mt, nt, rows: mt.div_ceil(threads.clamp(1, mt)), cols: nt.min((nc / tile.nr).max(1)) }
    }

    fn tasks(&self) -> usize {
        self.mt.div_ceil(self.rows) * self.nt.div_ceil(self.cols)
    }

    /// Tile ranges `(rows, cols)` of task `t`.
    fn block(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let rb = self.mt.div_ceil(self.rows);
        let (r, c) = (t % rb, t / rb);
        (r * self.rows..((r + 1) * self.rows).min(self.mt), c * self.cols..((c + 1) * self.cols).min(self.nt))
    }
}

/// One block of `kc` steps of the product: packed panels of `a`, and `b` unpacked or pre-packed.
struct Step<'s, B> {
    tiles: Tiles<'s>,
    b: &'s Mat<'s, B>,
    packed: Option<&'s PackedB>,
    p0: usize,
}

impl<B: Element> Step<'_, B> {
    /// Packs this block's columns of `b` (unless pre-packed) and runs the tiles of rows × cols.
    ///
    /// # Safety
    /// As [`Tiles::run`].
    unsafe fn run(&self, (rows, cols): (std::ops::Range<usize>, std::ops::Range<usize>), out: &OutPtr) {
        let t = &self.tiles;
        let panel_b = t.tile.nr * t.kc;
        if let Some(p) = self.packed {
            return t.run(rows, cols.clone(), p.panels(self.p0, t.kc, &cols), out);
        }
        with_buffer(&PACKED_B, cols.len() * panel_b, |packed_b| {
            pack_b(self.b, self.p0, t.kc, cols.start * t.tile.nr, t.tile.nr, packed_b);
            t.run(rows, cols, packed_b, out)
        });
    }
}

/// The register tiles of one block of `kc` steps over packed panels of `a` (row panel `i` at
/// `a[i·mr·kc..]`), into an `m × n` output of row stride `ld`.
struct Tiles<'s> {
    tile: Tile,
    a: &'s [f32],
    /// `a` unpacked from this block's first step, with its row stride and the kernel that
    /// reads its full row panels in place ([`Tile::in_place`]); `a` then holds only a partial
    /// last panel, at its start.
    in_place: Option<(&'s [f32], usize, InPlace)>,
    kc: usize,
    m: usize,
    n: usize,
    ld: usize,
    add: bool,
    /// Set on the last block only.
    epilogue: Option<Epilogue<'s>>,
}

impl Tiles<'_> {
    /// Runs the tiles of rows × cols over `packed_b`, the panels of `cols`.
    ///
    /// # Safety
    /// `out` addresses an `m × n` matrix of row stride `ld` that no other thread touches
    /// inside this block.
    unsafe fn run(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, packed_b: &[f32], out: &OutPtr) {
        let Tile { mr, nr, .. } = self.tile;
        let (kc, panel_a, panel_b) = (self.kc, mr * self.kc, nr * self.kc);
        let mut scratch = [0.0f32; MAX_TILE];
        for i in rows {
            let (r0, h) = (i * mr, mr.min(self.m - i * mr));
            let in_place = self.in_place.filter(|_| h == mr);
            let a = match in_place {
                Some((data, lda, _)) => data[r0 * lda..].as_ptr(),
                None if self.in_place.is_some() => self.a.as_ptr(),
                None => self.a[i * panel_a..].as_ptr(),
            };
            let kernel = |b: *const f32, c: *mut f32, ldc: usize, add: bool| match in_place {
                Some((_, lda, k)) => k(kc, a, lda, b, c, ldc, add),
                None => self.tile.run(kc, a, b, c, ldc, add),
            };
            for (j, b) in cols.clone().zip(packed_b.chunks_exact(panel_b)) {
                let (c0, w) = (j * nr, nr.min(self.n - j * nr));
                let c = out.0.add(r0 * self.ld + c0);
                if h == mr && w == nr {
                    kernel(b.as_ptr(), c, self.ld, self.add);
                } else {
                    kernel(b.as_ptr(), scratch.as_mut_ptr(), nr, false);
                    for (r, part) in scratch.chunks_exact(nr).take(h).enumerate() {
                        let row = std::slice::from_raw_parts_mut(c.add(r * self.ld), w);
                        for (o, &v) in row.iter_mut().zip(part) {
                            *o = if self.add { *o + v } else { v };
                        }
                    }
                }
            }
            // Once per row of the strip, over all of `cols` (still in cache): per tile row the
            // calls' own cost outweighed a short epilogue's work.
            if let Some(f) = self.epilogue {
                let c0 = cols.start * nr;
                let w = (cols.end * nr).min(self.n).saturating_sub(c0);
                for r in 0..h {
                    f(r0 + r, c0, std::slice::from_raw_parts_mut(out.0.add((r0 + r) * self.ld + c0), w));
                }
            }
        }
    }
}

/// Checks that `c` holds its `[m, n]` and finishes the products with nothing to multiply:
/// `true` when `c` is empty, or when `k = 0` (then `c` is zeroed unless `accumulate`, and the
/// epilogue runs on each row).
fn trivial(c: &mut MatMut, k: usize, accumulate: bool, epilogue: Option<Epilogue>) -> Result<bool, String> {
    let (m, n) = (c.rows, c.cols);
    if m * n == 0 {
        return Ok(true);
    }
    if c.ld < n || c.data.len() < (m - 1) * c.ld + n {
        return Err(format!("sgemm: output of {} elements with row stride {} cannot hold [{m}, {n}]", c.data.len(), c.ld));
    }
    if k == 0 {
        for (i, row) in c.data.chunks_mut(c.ld).take(m).enumerate() {
            if !accumulate {
                row[..n].fill(0.0);
            }
            if let Some(f) = epilogue {
                f(i, 0, &mut row[..n]);
            }
        }
    }
    Ok(k == 0)
}

/// Writes the panels of `b` for column tiles `cols` at steps `p0..p0 + kc`:
/// `fill(p0, kc, cols, panels)`, each panel `kc × nr` step-major as [`pack_b`] lays it out,
/// zeros past the last column.
pub type FillB<'f> = &'f (dyn Fn(usize, usize, std::ops::Range<usize>, &mut [f32]) + Sync);

/// `c = a·b`, then `epilogue` piece by piece, with `a [m, k]` pre-packed by rows
/// ([`PackedB::rows_of`], on the tile this product runs) and `b [k, n]` never stored whole:
/// each task (a block of rows × at most `nc` columns) has `fill` write its panels of `b` one
/// block of the inner dimension at a time (a conv writes its input windows straight into
/// them). With `parallel` a large product splits over the rayon pool.
pub fn sgemm_filled(a: &PackedB, n: usize, fill: FillB, mut c: MatMut, parallel: bool, epilogue: Option<Epilogue>) -> Result<(), String> {
    let (m, k, tile) = (a.n, a.k, a.tile);
    if a.layout != Layout::RowsOfA || c.rows != m || c.cols != n {
        return Err(format!("sgemm: a packed as [{m}, {k}] × [{k}, {n}] does not give [{}, {}]", c.rows, c.cols));
    }
    if trivial(&mut c, k, false, epilogue)? {
        return Ok(());
    }
    let threads = if parallel && m * n * k >= PAR_FLOPS { rayon::current_num_threads() } else { 1 };
    let plan = Plan::by_rows(tile, Choice::get().blocking.nc, m, n, threads);
    let (out, block, mt) = (OutPtr(c.data.as_mut_ptr()), inner_block(k, a.kc), m.div_ceil(tile.mr));
    let task = |t: usize| {
        let (rows, cols) = plan.block(t);
        with_buffer(&PACKED_B, cols.len() * tile.nr * block, |panels| {
            for p0 in (0..k).step_by(block) {
                let kc = block.min(k - p0);
                let panels = &mut panels[..cols.len() * tile.nr * kc];
                fill(p0, kc, cols.clone(), panels);
                let last = (p0 + kc == k).then_some(epilogue).flatten();
                let tiles = Tiles { tile, a: a.panels(p0, kc, &(0..mt)), in_place: None, kc, m, n, ld: c.ld, add: p0 > 0, epilogue: last };
                // Safety: tasks cover disjoint blocks of `c` (Plan::block), `c` holds every
                // addressed element (checked above) and overlaps neither `a` nor the panels (`&mut`).
                unsafe { tiles.run(rows.clone(), cols.clone(), panels, &out) }
            }
        })
    };
    if threads > 1 {
        (0..plan.tasks()).into_par_iter().for_each(task);
    } else {
        (0..plan.tasks()).for_each(task);
    }
    Ok(())
}

/// Packs rows `r0..r0 + mr` of `a` (zeros past the last row) at steps `p0..p0 + kc` into
/// `panel`, step-major: `panel[p·mr + r] = a[r0 + r, p0 + p]`.
fn pack_a<A: Element>(a: &Mat<A>, r0: usize, p0: usize, mr: usize, panel: &mut [f32]) {
    let [rs, cs] = a.strides;
    let h = mr.min(a.rows - r0);
    #[cfg(target_arch = "x86_64")]
    let done = pack_a_transposed(a, r0, p0, mr, panel);
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (p, step) in panel.chunks_exact_mut(mr).enumerate().skip(done) {
        let base = r0 * rs + (p0 + p) * cs;
        for (r, v) in step[..h].iter_mut().enumerate() {
            *v = a.data[base + r * rs].f32();
        }
        step[h..].fill(0.0);
    }
}

/// [`pack_a`]'s fast path for full panels of f32 rows: 4 × 4 blocks transposed in SSE
/// registers. Returns how many steps it packed (a multiple of 4; none when it does not apply).
#[cfg(target_arch = "x86_64")]
fn pack_a_transposed<A: Element>(a: &Mat<A>, r0: usize, p0: usize, mr: usize, panel: &mut [f32]) -> usize {
    let Some(data) = A::as_f32(a.data) else { return 0 };
    if a.strides[1] != 1 || !mr.is_multiple_of(4) || a.rows - r0 < mr {
        return 0;
    }
    let kc = panel.len() / mr;
    let done = kc - kc % 4;
    for quad in (0..mr).step_by(4) {
        let row = |r: usize| &data[(r0 + quad + r) * a.strides[0] + p0..][..done];
        let rows = [row(0), row(1), row(2), row(3)];
        for p in (0..done).step_by(4) {
            transpose4(&rows, p, mr, &mut panel[p * mr + quad..]);
        }
    }
    done
}

/// Writes the 4 × 4 block `rows[r][p..p + 4]` transposed into `out` with row stride `mr`:
/// `out[q·mr + r] = rows[r][p + q]`.
#[cfg(target_arch = "x86_64")]
fn transpose4(rows: &[&[f32]; 4], p: usize, mr: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let x: [&[f32]; 4] = [&rows[0][p..p + 4], &rows[1][p..p + 4], &rows[2][p..p + 4], &rows[3][p..p + 4]];
    let y = &mut out[..3 * mr + 4];
    // Safety: SSE is part of x86-64's baseline; each `x[r]` holds 4 floats and `y` holds the
    // 4 floats at every `q·mr`, q < 4.
    unsafe {
        let (a, b, c, d) = (_mm_loadu_ps(x[0].as_ptr()), _mm_loadu_ps(x[1].as_ptr()), _mm_loadu_ps(x[2].as_ptr()), _mm_loadu_ps(x[3].as_ptr()));
        let (ab_lo, cd_lo) = (_mm_unpacklo_ps(a, b), _mm_unpacklo_ps(c, d));
        let (ab_hi, cd_hi) = (_mm_unpackhi_ps(a, b), _mm_unpackhi_ps(c, d));
        let columns = [_mm_movelh_ps(ab_lo, cd_lo), _mm_movehl_ps(cd_lo, ab_lo), _mm_movelh_ps(ab_hi, cd_hi), _mm_movehl_ps(cd_hi, ab_hi)];
        for (q, col) in columns.into_iter().enumerate() {
            _mm_storeu_ps(y.as_mut_ptr().add(q * mr), col);
        }
    }
}

/// Packs the column panels of `b` from column `c0`, `nr` wide, at steps `p0..p0 + kc` into
/// `panels` (as many as it holds), each step-major: `panels[i·kc·nr + p·nr + j] =
/// b[p0 + p, c0 + i·nr + j]`, zeros past the last column. Walks `b` a row at a time across
/// all the panels, so that a row-major `b` is read in long runs rather than one `nr`-wide
/// piece per row and panel.
fn pack_b<B: Element>(b: &Mat<B>, p0: usize, kc: usize, c0: usize, nr: usize, panels: &mut [f32]) {
    let [rs, cs] = b.strides;
    let count = panels.len() / (kc * nr);
    for p in 0..kc {
        let base = (p0 + p) * rs;
        for i in 0..count {
            let (col, step) = (c0 + i * nr, &mut panels[(i * kc + p) * nr..][..nr]);
            let w = nr.min(b.cols.saturating_sub(col));
            if cs == 1 {
                step[..w].iter_mut().zip(&b.data[base + col..base + col + w]).for_each(|(v, &x)| *v = x.f32());
            } else {
                for (j, v) in step[..w].iter_mut().enumerate() {
                    *v = b.data[base + (col + j) * cs].f32();
                }
            }
            step[w..].fill(0.0);
        }
    }
}

thread_local! {
    /// Packed panels of `a`, kept per thread across calls (no page faults per call).
    static PACKED_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Packed panels of `b`, kept per thread across calls.
    static PACKED_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Calls `f` with `len` floats of a 64-byte-aligned scratch buffer from `key`; when that
/// buffer is in use further up this thread's stack (rayon ran a nested product while
/// waiting), a fresh one.
pub(crate) fn with_buffer<R>(key: &'static std::thread::LocalKey<RefCell<Vec<f32>>>, len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    const ALIGN: usize = 16;
    let aligned = |v: &mut Vec<f32>| -> std::ops::Range<usize> {
        if v.len() < len + ALIGN {
            v.resize(len + ALIGN, 0.0);
        }
        let at = v.as_ptr().align_offset(64).min(ALIGN);
        at..at + len
    };
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            let range = aligned(&mut v);
            f(&mut v[range])
        }
        Err(_) => {
            let mut v = Vec::new();
            let range = aligned(&mut v);
            f(&mut v[range])
        }
    })
}
