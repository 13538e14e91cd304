//! f16 / bf16 products whose matrices' rows do not start 16 bytes apart (an odd vocabulary:
//! GPT-2's 50 257 logits), staged through copies with padded rows. cuBLASLt's tensor-core
//! kernels want every row of A, B and C 16-byte aligned; given misaligned rows its heuristic
//! falls back to kernels about five times slower (on the H200, with PyTorch's cuBLAS too:
//! `[16384, 768]·[768, 50257]` in bf16 took 10.2 ms against 2.0 ms with rows of 50 264).
//! Each misaligned matrix is copied into scratch with rows padded to a multiple of 8 elements
//! (C is computed there and copied out), in chunks along one axis so that the scratch stays
//! under [`BUDGET`]. Chunks along K add into f32 sums, rounded once at the end, so every
//! output is rounded once however the product is cut.

use crate::engine::CudaEngine;
use crate::gpu::BLAS_WORKSPACE;
use crate::launch::{self, Param};
use crate::lt::{Epilogue, Problem};
use crate::memory::DevMem;
use crate::source::matmul::rows_into;
use rlx_ir::{DType, Op};

/// Scratch bytes one staged product may hold, unless `RLX_CUDA_STAGE_BUDGET` says otherwise
/// (0 turns staging off: for side-by-side figures, and for tests that cut small products).
const BUDGET: usize = 256 << 20;
/// Multiply-adds per staged byte below which staging costs more than it saves: misaligned
/// kernels lose ~7 ps per multiply-add on the H200, a staged byte is read and written
/// again (~0.8 ps), and the copies should cost under half of what they save.
const INTENSITY: usize = 128;
/// Chunks are multiples of this many rows or columns (aligned slices of aligned matrices).
const STEP: usize = 64;
/// 128 × 128 output tiles a chunk's product should have to fill the device (two per
/// multiprocessor of an H100 / H200); a cut that leaves fewer is taken only if no other fits.
const TILES: usize = 264;
/// Bytes per element of A, B and C (f16 and bf16), and of the f32 sums.
const SIZE: usize = 2;
const SUM: usize = 4;

/// The scratch budget a device opens with: `RLX_CUDA_STAGE_BUDGET` bytes where set, else
/// [`BUDGET`] (`CudaBackend::set_stage_budget` changes it for one opening).
pub(crate) fn budget() -> usize {
    std::env::var("RLX_CUDA_STAGE_BUDGET").ok().and_then(|v| v.parse().ok()).unwrap_or(BUDGET)
}

/// An axis of the product `C [M, N] = A [M, K] · B [K, N]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Axis {
    M,
    N,
    K,
}

/// A, B or C as stored: the axes of its rows and columns, its address, the elements between
/// its rows, and whether it is staged (its rows or address are not 16-byte aligned).
#[derive(Clone, Copy, Debug)]
struct Matrix {
    ptr: u64,
    rows: Axis,
    cols: Axis,
    ld: usize,
    staged: bool,
}

impl Matrix {
    fn has(&self, axis: Axis) -> bool {
        self.rows == axis || self.cols == axis
    }
}

/// How one product is staged: its matrices, the axis it is cut along and the chunk.
#[derive(Debug)]
pub(crate) struct Staging {
    mats: [Matrix; 3],
    split: Axis,
    chunk: usize,
}

fn extent(p: &Problem, axis: Axis) -> usize {
    match axis {
        Axis::M => p.m,
        Axis::N => p.n,
        Axis::K => p.k,
    }
}

/// Scratch bytes of a `rows × cols` piece of `size`-byte elements, rows padded to 8
/// elements, rounded to 256.
fn bytes(rows: usize, cols: usize, size: usize) -> usize {
    (rows * cols.next_multiple_of(8) * size).next_multiple_of(256)
}

impl Staging {
    /// The staging of `p` over `ptrs` (A, B, C), or `None` where every matrix is aligned, the
    /// product is batched, has an epilogue or does too little work per staged byte, or no
    /// cut fits `budget` bytes of scratch.
    pub(crate) fn new(p: &Problem, ptrs: [u64; 3], budget: usize) -> Option<Staging> {
        if p.batch != 1 || p.epilogue != Epilogue::None || p.c_f32 {
            return None;
        }
        let axes = [
            if p.trans_a { (Axis::K, Axis::M) } else { (Axis::M, Axis::K) },
            if p.trans_b { (Axis::N, Axis::K) } else { (Axis::K, Axis::N) },
            (Axis::M, Axis::N),
        ];
        let mats: [Matrix; 3] = std::array::from_fn(|i| Matrix {
            ptr: ptrs[i],
            rows: axes[i].0,
            cols: axes[i].1,
            ld: p.ld[i],
            staged: p.ld[i] % 8 != 0 || ptrs[i] % 16 != 0,
        });
        let staged: usize = mats.iter().filter(|x| x.staged).map(|x| bytes(extent(p, x.rows), extent(p, x.cols), SIZE)).sum();
        if staged == 0 || p.m.saturating_mul(p.n).saturating_mul(p.k) < INTENSITY.saturating_mul(staged) {
            return None;
        }
        // Per cut: the bytes staged whole (matrices without the axis, and the f32 sums of a
        // cut along K), the chunk the rest of the budget allows, and whether a chunk's product
        // fills the device. Filling first, then the fewest bytes staged whole (M, N, K on a tie).
        [Axis::M, Axis::N, Axis::K]
            .into_iter()
            .filter_map(|split| {
                // A cut along K keeps C's f32 sums in place of a staged C.
                let sums = if split == Axis::K { bytes(p.m, p.n, SUM) } else { 0 };
                let whole: usize = sums + mats[..2].iter().filter(|x| x.staged && !x.has(split)).map(|x| bytes(extent(p, x.rows), extent(p, x.cols), SIZE)).sum::<usize>();
                let other = |x: &Matrix| extent(p, if x.rows == split { x.cols } else { x.rows });
                let per: usize = mats.iter().filter(|x| x.staged && x.has(split)).map(|x| bytes(STEP, other(x), SIZE) / STEP).sum();
                let all = extent(p, split);
                let chunk = if per == 0 { all } else { (budget.checked_sub(whole)?.checked_div(per)? / STEP * STEP).min(all) };
                if chunk < STEP.min(all) {
                    return None;
                }
                let (m, n) = match split {
                    Axis::M => (chunk, p.n),
                    Axis::N => (p.m, chunk),
                    Axis::K => (p.m, p.n),
                };
                let fills = m.div_ceil(128) * n.div_ceil(128) >= TILES;
                Some(((!fills, whole), Staging { mats, split, chunk }))
            })
            .min_by_key(|(rank, _)| *rank)
            .map(|(_, s)| s)
    }

    /// Runs `p` (as [`Staging::new`] saw it) chunk by chunk on the device's stream.
    pub(crate) fn run(&self, e: &CudaEngine, op: &Op, p: Problem) -> Result<(), String> {
        let gpu = &*e.gpu;
        let dtype = if p.half { DType::F16 } else { DType::BF16 };
        let (split, chunk, all) = (self.split, self.chunk, extent(&p, self.split));
        let dims = |x: &Matrix, len: usize| {
            let of = |axis: Axis| if axis == split { len } else { extent(&p, axis) };
            (of(x.rows), of(x.cols))
        };
        // Scratch at 256-byte boundaries: each staged A or B (whole, or one chunk reused chunk
        // after chunk: the stream orders each chunk's copies after the last chunk's product),
        // then C's chunk, or the f32 sums of a cut along K.
        let mut at = 0;
        let place: [Option<usize>; 3] = std::array::from_fn(|i| {
            let x = &self.mats[i];
            let sums = i == 2 && split == Axis::K;
            (x.staged || sums).then(|| {
                let (r, c) = dims(x, chunk);
                let here = at;
                at += bytes(r, c, if sums { SUM } else { SIZE });
                here
            })
        });
        let scratch = DevMem::uninit(&e.gpu, at).map_err(|err| err.to_string())?;
        let rows = |from: DType, (src, ld_in): (u64, usize), (dst, ld_out): (u64, usize), (r, c): (usize, usize)| -> Result<(), String> {
            let f = e.kernel(rows_into(dtype, from), op, &[from])?;
            let mut params = [Param::Ptr(dst), Param::Ptr(src), Param::I64(r as i64), Param::I64(c as i64), Param::I64(ld_in as i64), Param::I64(ld_out as i64)];
            launch::grid(gpu, f, (r.min(4 * e.split.sms()) as u32, 1, 1), (256, 1, 1), 0, &mut params)
        };
        for (x, off) in self.mats.iter().zip(place).take(2) {
            if let (Some(off), false) = (off, x.has(split)) {
                let (r, c) = dims(x, chunk);
                rows(dtype, (x.ptr, x.ld), (scratch.at(off), c.next_multiple_of(8)), (r, c))?;
            }
        }
        for c0 in (0..all).step_by(chunk) {
            let len = chunk.min(all - c0);
            let mut q = p;
            match split {
                Axis::M => q.m = len,
                Axis::N => q.n = len,
                Axis::K => (q.k, q.c_f32) = (len, true),
            }
            let mut ptrs = [0u64; 3];
            let mut out = None;
            for (i, x) in self.mats.iter().enumerate() {
                let (r, c) = dims(x, len);
                let first = if x.rows == split { c0 * x.ld } else if x.cols == split { c0 } else { 0 };
                let piece = x.ptr + (first * SIZE) as u64;
                let Some(off) = place[i] else {
                    (ptrs[i], q.ld[i]) = (piece, x.ld);
                    continue;
                };
                (ptrs[i], q.ld[i]) = (scratch.at(off), c.next_multiple_of(8));
                if i < 2 && x.has(split) {
                    rows(dtype, (piece, x.ld), (ptrs[i], q.ld[i]), (r, c))?;
                } else if i == 2 && split != Axis::K {
                    out = Some(((ptrs[i], q.ld[i]), (piece, x.ld), (r, c)));
                }
            }
            gpu.lt.matmul(gpu, q, (ptrs[0], ptrs[1], ptrs[2], 0), gpu.workspace, BLAS_WORKSPACE, split == Axis::K && c0 > 0).map_err(|err| err.to_string())?;
            if let Some((from, to, rc)) = out {
                rows(dtype, from, to, rc)?;
            }
        }
        if let (Axis::K, Some(off)) = (split, place[2]) {
            let c = &self.mats[2];
            rows(DType::F32, (scratch.at(off), p.n.next_multiple_of(8)), (c.ptr, c.ld), (p.m, p.n))?;
        }
        // The scratch is freed on the stream, after the copies that read it.
        drop(scratch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(m: usize, n: usize, k: usize, trans_a: bool, trans_b: bool) -> Problem {
        Problem {
            half: false,
            m,
            n,
            k,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            trans_a,
            trans_b,
            ld: Problem::packed(m, n, k, trans_a, trans_b),
            c_f32: false,
            epilogue: Epilogue::None,
        }
    }

    const ALIGNED: [u64; 3] = [1 << 20, 1 << 30, 1 << 34];

    #[test]
    fn aligned_or_light_products_are_not_staged() {
        assert!(Staging::new(&problem(4096, 4096, 4096, false, false), ALIGNED, BUDGET).is_none());
        // 64 rows against a misaligned [768, 50257] weight: the copy would cost more than it saves.
        assert!(Staging::new(&problem(64, 50257, 768, false, false), ALIGNED, BUDGET).is_none());
        let mut batched = problem(16384, 50257, 768, false, false);
        batched.batch = 2;
        assert!(Staging::new(&batched, ALIGNED, BUDGET).is_none());
    }

    #[test]
    fn the_head_of_an_odd_vocabulary_is_cut_where_chunks_still_fill_the_device() {
        let staged = |s: &Staging| s.mats.map(|x| x.staged);
        // Forward: B [768, 50257] and C [16384, 50257] misaligned, both with N: chunks of columns.
        let s = Staging::new(&problem(16384, 50257, 768, false, false), ALIGNED, BUDGET).unwrap();
        assert_eq!((s.split, staged(&s)), (Axis::N, [false, true, true]));
        assert!(s.chunk % STEP == 0 && s.chunk < 50257 && bytes(768, s.chunk, SIZE) + bytes(16384, s.chunk, SIZE) <= BUDGET);
        // The input's gradient, G [16384, 50257] · W [768, 50257]ᵀ: chunks of G's rows would
        // leave [1792, 768] products (84 tiles), so K is cut, into f32 sums.
        let s = Staging::new(&problem(16384, 768, 50257, false, true), ALIGNED, BUDGET).unwrap();
        assert_eq!((s.split, staged(&s)), (Axis::K, [true, true, false]));
        assert!(bytes(16384, 768, SUM) + bytes(16384, s.chunk, SIZE) + bytes(768, s.chunk, SIZE) <= BUDGET);
        // The weight's gradient, X [16384, 768]ᵀ · G [16384, 50257]: chunks of G's columns.
        let s = Staging::new(&problem(768, 50257, 16384, true, false), ALIGNED, BUDGET).unwrap();
        assert_eq!((s.split, staged(&s)), (Axis::N, [false, true, true]));
        assert!(bytes(16384, s.chunk, SIZE) + bytes(768, s.chunk, SIZE) <= BUDGET);
    }

    #[test]
    fn the_device_test_cuts_each_way_in_several_chunks() {
        // tests/ops.rs, `products_over_misaligned_rows_are_staged_through_padded_copies`:
        // (problem, budget) → (axis, chunks).
        let cases = [
            (problem(1024, 1001, 1024, false, false), 1 << 20, Axis::N, 4),
            (problem(1024, 768, 1001, false, true), 2 << 20, Axis::M, 4),
            (problem(512, 1001, 4096, true, false), 4 << 20, Axis::N, 3),
            (problem(640, 640, 4001, false, true), 4 << 20, Axis::K, 5),
        ];
        for (p, budget, axis, chunks) in cases {
            let s = Staging::new(&p, ALIGNED, budget).unwrap();
            assert_eq!((s.split, extent(&p, s.split).div_ceil(s.chunk)), (axis, chunks), "{p:?}");
        }
        assert!(Staging::new(&problem(1024, 1001, 1024, false, false), ALIGNED, 0).is_none());
    }

    #[test]
    fn a_misaligned_address_is_staged_like_a_misaligned_row() {
        let s = Staging::new(&problem(4096, 4096, 4096, false, false), [ALIGNED[0] + 2, ALIGNED[1], ALIGNED[2]], BUDGET).unwrap();
        assert_eq!((s.split, s.mats.map(|x| x.staged)), (Axis::M, [true, false, false]));
    }
}
