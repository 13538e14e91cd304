//! `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q4_K`, `Q5_K` and `Q6_K` weights laid out for the
//! `Q8Blocks` product: rows in panels of [`PANEL`], and in each block of a panel every field of the GGUF
//! block ([`fields`]) stored for the 8 rows side by side — f16 scales two bytes per row, the
//! K-quants' packed sub-block scales one byte per row, codes interleaved four bytes at a time.
//! One 32-byte load then holds four bytes of codes of each of the 8 rows; an integer dot product
//! against four activation codes broadcast to all lanes sums each row in its own lane, and the
//! scales multiply 8 rows at once — no horizontal sums (llama.cpp's single-row dot products
//! need one per block).
//!
//! The layout is a permutation of the GGUF bytes within each panel's rows ([`Panels::unpack`]
//! restores them), so a weight of whole panels is laid out in its own memory
//! ([`Panels::in_place`]); a last panel short of rows is padded with zero blocks. The
//! executor lays a weight out once (`dispatch::prepack`); a product given the GGUF bytes lays
//! them out per call.

use super::q8::{quantize, Q8Rows, QK, ROW_TILE};
use super::q8k::{self, Q8KRows};
use crate::kernels::matmul::OutPtr;
use rayon::prelude::*;
use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use rlx_runtime::Tensor;

/// Weight rows per panel: the i32 lanes of one 256-bit register.
pub(super) const PANEL: usize = 8;
/// Multiply-adds below which a product runs on one thread.
const PAR_FLOPS: usize = 1 << 18;

/// The sums of one call of a [`Kernel`]: `[activation row][row of the panel]`, at least as
/// many activation rows as the call takes.
pub(super) type Sums = [[f32; PANEL]];

/// Computes panel `p` against activation rows `m0 .. m0 + rows` (`1 ≤ rows ≤ ROW_TILE`), rounded
/// to 8-bit blocks `A`, into the first `rows` entries of the sums.
pub(super) type Kernel<A> = fn(&Panels, usize, &A, usize, usize, &mut Sums);

/// One instruction set's kernels: against 8-bit blocks of 32 (`Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`,
/// `Q8_0`) and of 256 (the K-quants).
#[derive(Clone, Copy)]
pub(super) struct Kernels {
    pub blocks: Kernel<Q8Rows>,
    pub super_blocks: Kernel<Q8KRows>,
}

/// The portable kernels, which the SIMD ones are tested against.
pub(super) const PORTABLE: Kernels = Kernels { blocks: kernel_portable, super_blocks: q8k::kernel_portable };

/// Whether `t` has kernels here.
pub(super) fn supports(t: GgufType) -> bool {
    matches!(t, GgufType::Q4_0 | GgufType::Q4_1 | GgufType::Q5_0 | GgufType::Q5_1 | GgufType::Q8_0 | GgufType::Q4_K | GgufType::Q5_K | GgufType::Q6_K)
}

/// A block of `t` as fields in GGUF order, each `(bytes, unit)`: in a panel the field takes
/// [`PANEL`]× its bytes, unit `i` (of `unit` bytes) of row `lane` at `(PANEL·i + lane)·unit`
/// from the field's start. f16 values move as units of 2, the K-quants' packed 6-bit scales
/// and `Q6_K`'s i8 scales as bytes, codes and `Q5_0`/`Q5_1`'s 32-bit masks of fifth bits as
/// 4-byte units.
fn fields(t: GgufType) -> &'static [(usize, usize)] {
    match t {
        GgufType::Q4_0 => &[(2, 2), (16, 4)],
        GgufType::Q4_1 => &[(4, 2), (16, 4)],
        GgufType::Q8_0 => &[(2, 2), (32, 4)],
        GgufType::Q5_0 => &[(2, 2), (4, 4), (16, 4)],
        GgufType::Q5_1 => &[(4, 2), (4, 4), (16, 4)],
        GgufType::Q4_K => &[(4, 2), (12, 1), (128, 4)],
        GgufType::Q5_K => &[(4, 2), (12, 1), (32, 4), (128, 4)],
        _ => &[(128, 4), (64, 4), (16, 1), (2, 2)],
    }
}

/// A GGUF weight of `n` rows of `blocks` blocks in the panel layout.
#[derive(Debug)]
pub struct Panels {
    pub(super) t: GgufType,
    n: usize,
    pub(super) blocks: usize,
    /// Bytes per panel block: [`PANEL`] GGUF blocks.
    pub(super) block_len: usize,
    /// The panels, as U8 bytes.
    data: Tensor,
}

/// The blocks per row of `n` rows of `k` weights of type `t` held in `len` bytes, or why the
/// product cannot take them.
fn check(t: GgufType, len: usize, n: usize, k: usize) -> Result<usize, String> {
    if !supports(t) {
        return Err(format!("the Q8Blocks product needs Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weights, got {t:?}"));
    }
    let qk = t.block_size();
    if !k.is_multiple_of(qk) {
        return Err(format!("k = {k} is not a whole number of {qk}-blocks"));
    }
    let (blocks, bb) = (k / qk, t.block_bytes());
    if len != n * blocks * bb {
        return Err(format!("the {t:?} weight holds {len} bytes, but {n} rows of k = {k} need {}", n * blocks * bb));
    }
    Ok(blocks)
}

impl Panels {
    /// Lays out `w`, `n` rows of `k` weights of type `t` (one [`supports`] takes).
    pub fn new(t: GgufType, w: &[u8], n: usize, k: usize) -> Result<Panels, String> {
        let blocks = check(t, w.len(), n, k)?;
        let mut p = Panels::empty(t, n, blocks);
        let rows = PANEL * blocks * t.block_bytes();
        for (i, src) in w.chunks(rows.max(1)).enumerate() {
            p.lay_out(i, src);
        }
        Ok(p)
    }

    /// [`Panels::new`] in the memory of `w` (its bytes), which whole panels fill exactly:
    /// `Err(w)`, untouched, when `n` is not a whole number of panels or `w` would be rejected.
    pub fn in_place(t: GgufType, w: Tensor, n: usize, k: usize) -> Result<Panels, Tensor> {
        let Ok(blocks) = check(t, w.bytes().len(), n, k) else { return Err(w) };
        if !n.is_multiple_of(PANEL) {
            return Err(w);
        }
        let mut p = Panels { t, n, blocks, block_len: PANEL * t.block_bytes(), data: w };
        let mut rows = vec![0; PANEL * blocks * t.block_bytes()];
        for i in 0..n / PANEL {
            rows.copy_from_slice(p.panel_mut(i));
            p.lay_out(i, &rows);
        }
        Ok(p)
    }

    /// Zeroed panels for `n` rows of `blocks` blocks.
    fn empty(t: GgufType, n: usize, blocks: usize) -> Panels {
        let block_len = PANEL * t.block_bytes();
        Panels { t, n, blocks, block_len, data: Tensor::zeros(DType::U8, &[n.div_ceil(PANEL) * blocks * block_len]) }
    }

    /// Panel `i`'s bytes.
    fn panel_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.blocks * self.block_len;
        &mut self.data.bytes_mut()[i * len..(i + 1) * len]
    }

    /// Writes the GGUF rows `src` (up to [`PANEL`], whole rows) as panel `i`.
    fn lay_out(&mut self, i: usize, src: &[u8]) {
        let (t, blocks, len) = (self.t, self.blocks, self.block_len);
        let bb = t.block_bytes();
        let panel = self.panel_mut(i);
        for (lane, row) in src.chunks_exact((blocks * bb).max(1)).enumerate() {
            for (b, src) in row.chunks_exact(bb).enumerate() {
                let dst = &mut panel[b * len..(b + 1) * len];
                for_units(t, lane, |gguf, laid, unit| dst[laid..laid + unit].copy_from_slice(&src[gguf..gguf + unit]));
            }
        }
    }

    /// The GGUF bytes again, row after row.
    pub fn unpack(&self) -> Vec<u8> {
        let mut w = vec![0; self.n * self.row_bytes()];
        for (j, row) in w.chunks_exact_mut(self.row_bytes().max(1)).enumerate() {
            self.copy_row(j, row);
        }
        w
    }

    /// Bytes of one GGUF row.
    pub fn row_bytes(&self) -> usize {
        self.blocks * self.t.block_bytes()
    }

    /// Row `j`'s GGUF bytes into `dst` ([`Panels::row_bytes`] long).
    pub fn copy_row(&self, j: usize, dst: &mut [u8]) {
        for (b, dst) in dst.chunks_exact_mut(self.t.block_bytes()).enumerate() {
            self.gguf_block(j / PANEL, b, j % PANEL, dst);
        }
    }

    /// Block `b` of row `lane` of panel `p` as its GGUF bytes, into `dst` (a block long).
    pub(super) fn gguf_block(&self, p: usize, b: usize, lane: usize, dst: &mut [u8]) {
        let at = (p * self.blocks + b) * self.block_len;
        let src = &self.data.bytes()[at..at + self.block_len];
        for_units(self.t, lane, |gguf, laid, unit| dst[gguf..gguf + unit].copy_from_slice(&src[laid..laid + unit]));
    }

    /// The panels' bytes.
    pub(super) fn data(&self) -> &[u8] {
        self.data.bytes()
    }

    /// `k`, the weights per row.
    pub fn k(&self) -> usize {
        self.blocks * self.t.block_size()
    }

    /// `n`, the rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `out [rows, n] = x [rows, k] · wᵀ`, each activation row rounded to 8-bit blocks first
    /// (of 256 against the K-quants, else of 32); `x` and `out` must hold whole rows of `k` and
    /// `n`.
    pub(super) fn matmul(&self, x: &[f32], out: &mut [f32], kernels: Kernels) {
        if self.n == 0 || out.is_empty() {
            return;
        }
        match self.t {
            GgufType::Q4_K | GgufType::Q5_K | GgufType::Q6_K => self.run(&q8k::quantize(x), out, kernels.super_blocks),
            _ => self.run(&quantize(x, self.blocks), out, kernels.blocks),
        }
    }

    /// [`Panels::matmul`] on the rounded rows `acts`: tasks of whole panels, each over tiles
    /// of [`ROW_TILE`] rows.
    fn run<A: Sync>(&self, acts: &A, out: &mut [f32], kernel: Kernel<A>) {
        let n = self.n;
        let rows = out.len() / n;
        let panels = n.div_ceil(PANEL);
        let per_task = if rows * n * self.k() < PAR_FLOPS { panels } else { panels.div_ceil(8 * rayon::current_num_threads()) };
        let dst = OutPtr(out.as_mut_ptr());
        let task = |p0: usize| {
            let mut sums = [[0f32; PANEL]; ROW_TILE];
            for p in p0..panels.min(p0 + per_task) {
                let width = PANEL.min(n - p * PANEL);
                for m0 in (0..rows).step_by(ROW_TILE) {
                    let h = ROW_TILE.min(rows - m0);
                    kernel(self, p, acts, m0, h, &mut sums);
                    for (r, row) in sums.iter().enumerate().take(h) {
                        // Safety: row `m0 + r` < `rows` and columns `p·8 .. p·8 + width` ≤ `n` lie
                        // inside `out`, and only the task owning panel `p` writes them.
                        unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), dst.at((m0 + r) * n + p * PANEL), width) };
                    }
                }
            }
        };
        let tasks = panels.div_ceil(per_task);
        if tasks > 1 {
            (0..tasks).into_par_iter().for_each(|i| task(i * per_task));
        } else {
            task(0);
        }
    }
}

/// Calls `f(gguf, laid, unit)` for every unit of a block of `t` in row `lane` of its panel:
/// its offset in the GGUF block, in the panel block, and its length ([`fields`]).
fn for_units(t: GgufType, lane: usize, mut f: impl FnMut(usize, usize, usize)) {
    let mut at = 0;
    for &(len, unit) in fields(t) {
        for i in 0..len / unit {
            f(at + i * unit, PANEL * at + (PANEL * i + lane) * unit, unit);
        }
        at += len;
    }
}

/// The f16 at the start of `b` as f32.
pub(super) fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// The portable [`Kernel`] of the 32-blocks: per row of the panel, its GGUF block restored,
/// the exact integer sum of its codes times the activation codes (`Q4_0`'s offset of −8 and
/// `Q5_0`'s of −16 taken off as that times the activation sum), then the same f32 steps as the
/// SIMD kernels, so all give the same bits.
pub(super) fn kernel_portable(w: &Panels, p: usize, a: &Q8Rows, m0: usize, rows: usize, out: &mut Sums) {
    let t = w.t;
    let mut blk = vec![0u8; t.block_bytes()];
    for acc in out.iter_mut().take(rows) {
        acc.fill(0.0);
    }
    for b in 0..w.blocks {
        for lane in 0..PANEL {
            w.gguf_block(p, b, lane, &mut blk);
            let codes = codes32(t, &blk);
            let (d, m) = (f16_at(&blk), f16_at(&blk[2..]));
            for (r, acc) in out.iter_mut().enumerate().take(rows) {
                let xi = (m0 + r) * w.blocks + b;
                let xq = &a.q[xi * QK..(xi + 1) * QK];
                let mut s: i32 = codes.iter().zip(xq).map(|(&c, &x)| c * i32::from(x)).sum();
                match t {
                    GgufType::Q4_0 => s -= 8 * a.sum[xi],
                    GgufType::Q5_0 => s -= 16 * a.sum[xi],
                    _ => {}
                }
                let acc = &mut acc[lane];
                *acc = (s as f32).mul_add(d * a.d[xi], *acc);
                if matches!(t, GgufType::Q4_1 | GgufType::Q5_1) {
                    *acc = m.mul_add(a.s[xi], *acc);
                }
            }
        }
    }
}

/// The 32 codes of a GGUF block `b` of a 32-block type `t`: `Q8_0`'s signed bytes, else the
/// unsigned nibbles (value `e` in byte `e mod 16`, high nibble from 16 on) with `Q5_0`/`Q5_1`'s
/// fifth bits (bit `e` of their 32-bit mask).
fn codes32(t: GgufType, b: &[u8]) -> [i32; QK] {
    let (high, qs) = match t {
        GgufType::Q8_0 => return std::array::from_fn(|e| i32::from(b[2 + e] as i8)),
        GgufType::Q4_0 => (0, &b[2..18]),
        GgufType::Q4_1 => (0, &b[4..20]),
        GgufType::Q5_0 => (u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22]),
        _ => (u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24]),
    };
    std::array::from_fn(|e| i32::from((qs[e % 16] >> (4 * (e / 16))) & 15) | (((high >> e) & 1) << 4) as i32)
}

#[cfg(test)]
mod tests {
    use super::super::q8::tests::{activations, close, reference};
    use super::super::q8k::tests::blocks as weight_blocks;
    use super::*;

    const TYPES: [GgufType; 8] =
        [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q5_0, GgufType::Q5_1, GgufType::Q8_0, GgufType::Q4_K, GgufType::Q5_K, GgufType::Q6_K];

    /// `(rows, n, k)`: 1 to 129 activation rows, leaving tails of every length after the kernels'
    /// tiles of 8 (and 4) rows, panels short of 8 rows, and enough work to run in parallel.
    const SHAPES: [(usize, usize, usize); 13] = [
        (1, 7, 64),
        (1, 8, 32),
        (2, 4, 32),
        (3, 17, 64),
        (6, 8, 64),
        (7, 5, 96),
        (8, 16, 96),
        (12, 9, 64),
        (17, 11, 32),
        (63, 3, 32),
        (129, 9, 128),
        (5, 300, 256),
        (1, 1000, 32),
    ];

    #[test]
    fn the_layout_unpacks_to_the_gguf_bytes() {
        for t in TYPES {
            for (n, k) in [(1, 256), (7, 512), (8, 256), (9, 768), (17, 256)] {
                let w = weight_blocks(t, n * k / t.block_size(), (n + k) as u32);
                assert_eq!(Panels::new(t, &w, n, k).unwrap().unpack(), w, "{t:?} {n}×{k}");
            }
        }
    }

    #[test]
    fn whole_panels_are_laid_out_in_place_as_anew() {
        for t in TYPES {
            for (n, k) in [(8, 256), (16, 768), (24, 256)] {
                let w = weight_blocks(t, n * k / t.block_size(), (3 * n + k) as u32);
                let owned = Tensor::from_bytes(DType::U8, &[w.len()], &w).unwrap();
                let laid = Panels::in_place(t, owned, n, k).expect("whole panels");
                assert_eq!(laid.data(), Panels::new(t, &w, n, k).unwrap().data(), "{t:?} {n}×{k}");
                assert_eq!(laid.unpack(), w, "{t:?} {n}×{k}");
            }
            let w = weight_blocks(t, 9 * 512 / t.block_size(), 5);
            let back = Panels::in_place(t, Tensor::from_bytes(DType::U8, &[w.len()], &w).unwrap(), 9, 512).expect_err("a part panel");
            assert_eq!(back.bytes(), w, "{t:?}: given back untouched");
        }
    }

    #[test]
    fn bad_weights_are_errors() {
        let w = weight_blocks(GgufType::Q4_1, 4, 1);
        assert!(Panels::new(GgufType::Q4_1, &w, 2, 64).is_ok());
        assert!(Panels::new(GgufType::Q4_1, &w, 3, 64).unwrap_err().contains("need"));
        assert!(Panels::new(GgufType::Q4_1, &w[..40], 2, 48).unwrap_err().contains("32-blocks"));
        assert!(Panels::new(GgufType::Q2_K, &w, 2, 64).unwrap_err().contains("Q2_K"));
        let k = weight_blocks(GgufType::Q6_K, 4, 2);
        assert!(Panels::new(GgufType::Q6_K, &k, 2, 512).is_ok());
        assert!(Panels::new(GgufType::Q6_K, &k[..k.len() - 1], 2, 512).unwrap_err().contains("need"));
        assert!(Panels::new(GgufType::Q6_K, &k, 4, 288).unwrap_err().contains("256-blocks"));
        assert!(Panels::new(GgufType::Q4_K, &k, 2, 512).unwrap_err().contains("need"));
    }

    #[test]
    fn portable_kernel_matches_the_f64_reference() {
        for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q5_0, GgufType::Q5_1, GgufType::Q8_0] {
            for (rows, n, k) in SHAPES {
                let w = weight_blocks(t, n * k / QK, (rows * n + k) as u32);
                let x = activations(rows * k, (3 * rows + n) as u32);
                let mut got = vec![f32::NAN; rows * n];
                Panels::new(t, &w, n, k).unwrap().matmul(&x, &mut got, PORTABLE);
                close(&got, &reference(t, &x, &w, n, k), &format!("{t:?} {rows}×{n}×{k}"));
            }
        }
    }

    /// Every kernel this CPU runs (AVX-512 VNNI and AVX2 where the CPU has both) gives the
    /// portable kernel's bits, each row alone the same as in a tile of rows.
    #[test]
    fn every_kernel_gives_the_portable_bits_alone_and_in_tiles() {
        for (name, kernel) in super::super::q8_simd::available() {
            for t in TYPES {
                for (rows, n, k) in SHAPES {
                    let k = k.next_multiple_of(t.block_size());
                    let w = weight_blocks(t, n * k / t.block_size(), (rows + 5 * n + k) as u32);
                    let x = activations(rows * k, (7 * rows + n) as u32);
                    let panels = Panels::new(t, &w, n, k).unwrap();
                    let (mut got, mut portable) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
                    panels.matmul(&x, &mut got, kernel);
                    panels.matmul(&x, &mut portable, PORTABLE);
                    assert_eq!(got, portable, "{name} {t:?} {rows}×{n}×{k}");
                    for r in 0..rows {
                        let mut alone = vec![f32::NAN; n];
                        panels.matmul(&x[r * k..(r + 1) * k], &mut alone, kernel);
                        assert_eq!(alone, got[r * n..(r + 1) * n], "{name} {t:?} {rows}×{n}×{k}: row {r} alone");
                    }
                }
            }
        }
    }
}
