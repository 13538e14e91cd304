//! Matrix products (OPS.md §4): `MatMul` with NumPy batch broadcasting and `DotGeneral`.
//! f32, f16 and bf16 (in any mix) run on rlx's own packed, cache-blocked [`sgemm`], half
//! floats widened as they are packed and accumulated in f32; f64 and c32 on the `gemm` crate;
//! integers on a wrapping i64-accumulating loop.

pub mod bfloat16;
pub mod choice;
pub mod int8;
mod narrow;
mod rows;
mod sgemm;
mod tile;
pub mod tune;

pub use choice::{Choice, Choices};
pub use rows::FEW_ROWS;
pub use sgemm::{sgemm, sgemm_filled, sgemm_prepacked, sgemm_then, sgemm_with, Blocking, Element, Epilogue, FillB, Layout, Mat, MatMut, PackedB, PAR_FLOPS};
pub use tile::{Gathered, Tile, MAX_TILE};
pub(crate) use sgemm::{with_buffer, OutPtr};

use super::real::Real;
use crate::view::{broadcast_strides, for_each_broadcast, strides, In, Out};
use gemm::Parallelism;
use half::{bf16, f16};
use num_complex::Complex32;
use rayon::prelude::*;
use rlx_ir::ops::matmul::DotGeneral;
use rlx_ir::DType;

/// Matrix offsets (in elements) of each batch entry: `(a, b, out)`.
type Batches = Vec<(usize, usize, usize)>;

/// Geometry of a batched product of row-major `[m, k] × [k, n]` matrices.
struct Gemm {
    m: usize,
    k: usize,
    n: usize,
    batches: Batches,
}

impl Gemm {
    /// The geometry of `MatMul(a, b)` with output dims `out`. When `b` has no batch (or a
    /// batch of one) the batch folds into `m`: one large product instead of many small ones.
    fn of_matmul(a: &[usize], b: &[usize], out: &[usize]) -> Gemm {
        let (ra, rb, ro) = (a.len(), b.len(), out.len());
        let (m, k, n) = (a[ra - 2], a[ra - 1], b[rb - 1]);
        let batch_out = &out[..ro - 2];
        let a_batch: usize = a[..ra - 2].iter().product();
        let b_batch: usize = b[..rb - 2].iter().product();
        let out_batch: usize = batch_out.iter().product();
        if b_batch == 1 && a_batch == out_batch {
            return Gemm { m: m * out_batch, k, n, batches: vec![(0, 0, 0)] };
        }
        let sa = broadcast_strides(&a[..ra - 2], batch_out);
        let sb = broadcast_strides(&b[..rb - 2], batch_out);
        let mut batches = Vec::with_capacity(out_batch);
        for_each_broadcast(batch_out, [&sa, &sb], |i, [ia, ib]| batches.push((ia * m * k, ib * k * n, i * m * n)));
        if out_batch == 0 {
            batches.clear();
        }
        Gemm { m, k, n, batches }
    }

    /// Runs `one(a_offset, b_offset, out, parallel)` for every batch entry: small products
    /// side by side on the rayon pool, each on one thread; large ones in turn, each split
    /// over the pool.
    fn each<T: Send>(&self, o: &mut [T], one: impl Fn(usize, usize, &mut [T], bool) -> Result<(), String> + Sync) -> Result<(), String> {
        let (m, n) = (self.m, self.n);
        if m * n == 0 {
            return Ok(());
        }
        if self.batches.len() >= rayon::current_num_threads() && m * n * self.k < PAR_FLOPS * 4 {
            let mut outs: Vec<(usize, usize, &mut [T])> = Vec::with_capacity(self.batches.len());
            let mut rest = o;
            let mut at = 0;
            let mut order: Vec<&(usize, usize, usize)> = self.batches.iter().collect();
            order.sort_by_key(|x| x.2);
            for &&(ao, bo, oo) in &order {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(oo - at);
                let (mine, tail) = tail.split_at_mut(m * n);
                outs.push((ao, bo, mine));
                rest = tail;
                at = oo + m * n;
            }
            outs.into_par_iter().try_for_each(|(ao, bo, out)| one(ao, bo, out, false))
        } else {
            self.batches.iter().try_for_each(|&(ao, bo, oo)| one(ao, bo, &mut o[oo..oo + m * n], true))
        }
    }

    /// Products into f32 on rlx's own [`sgemm`].
    fn run_f32<A: Element, B: Element>(&self, a: &[A], b: &[B], o: &mut [f32]) -> Result<(), String> {
        let (m, k, n) = (self.m, self.k, self.n);
        self.each(o, |ao, bo, out, parallel| {
            let (a, b) = (Mat::row_major(&a[ao..], m, k), Mat::row_major(&b[bo..], k, n));
            sgemm(a, b, MatMut::row_major(out, m, n), false, parallel)
        })
    }

    /// A float product with `a` already typed: f16 and bf16 operands are widened while
    /// packed, f64 mixed with a narrower float is widened to f32 first.
    fn run_mixed<A: Element>(&self, a: &[A], b: In, o: &mut [f32]) -> Result<(), String> {
        match b.dtype {
            DType::F16 => self.run_f32(a, b.get::<f16>(), o),
            DType::BF16 => self.run_f32(a, b.get::<bf16>(), o),
            DType::F32 => self.run_f32(a, b.get::<f32>(), o),
            _ => self.run_f32(a, &widen(b), o),
        }
    }

    /// f64 and complex products on the `gemm` crate.
    fn run<T: Copy + Send + Sync + 'static>(&self, a: &[T], b: &[T], o: &mut [T], zero: T, one: T) -> Result<(), String> {
        let (m, k, n) = (self.m, self.k, self.n);
        if k == 0 {
            o.fill(zero);
            return Ok(());
        }
        let threads = rayon::current_num_threads();
        let big = m * n * k >= PAR_FLOPS && threads > 1;
        self.each(o, |ao, bo, out, parallel| {
            let par = if parallel && big { Parallelism::Rayon(threads) } else { Parallelism::None };
            // Safety: the slices hold the full `[m,k]`, `[k,n]` and `[m,n]` row-major matrices
            // at these offsets (checked by inference), and `out` does not alias the operands.
            unsafe {
                gemm::gemm(
                    m, n, k,
                    out.as_mut_ptr(), 1, n as isize, false,
                    a[ao..].as_ptr(), 1, k as isize,
                    b[bo..].as_ptr(), 1, n as isize,
                    zero, one, false, false, false, par,
                )
            }
            Ok(())
        })
    }

    /// Integer products: exact i64 accumulation, wrapped to the element type.
    fn run_int(&self, a: &[i64], b: &[i64], o: &mut [i64]) {
        let (m, k, n) = (self.m, self.k, self.n);
        for &(ao, bo, oo) in &self.batches {
            for i in 0..m {
                let row = &mut o[oo + i * n..oo + (i + 1) * n];
                row.fill(0);
                for p in 0..k {
                    let x = a[ao + i * k + p];
                    for (r, &y) in row.iter_mut().zip(&b[bo + p * n..bo + (p + 1) * n]) {
                        *r = r.wrapping_add(x.wrapping_mul(y));
                    }
                }
            }
        }
    }

    fn dispatch(&self, a: In, b: In, out: &mut Out) -> Result<(), String> {
        match (a.dtype, b.dtype) {
            (DType::F32, DType::F32) => self.run_f32(a.get::<f32>(), b.get::<f32>(), out.get::<f32>())?,
            (DType::F64, DType::F64) => self.run(a.get::<f64>(), b.get::<f64>(), out.get::<f64>(), 0.0, 1.0)?,
            (DType::C64, DType::C64) => {
                let (z, o) = (Complex32::new(0.0, 0.0), Complex32::new(1.0, 0.0));
                self.run(a.get::<Complex32>(), b.get::<Complex32>(), out.get::<Complex32>(), z, o)?
            }
            (x, y) if x.is_float() && y.is_float() => {
                let mut fo = vec![0.0f32; out.numel()];
                match a.dtype {
                    DType::F16 => self.run_mixed(a.get::<f16>(), b, &mut fo)?,
                    DType::BF16 => self.run_mixed(a.get::<bf16>(), b, &mut fo)?,
                    DType::F32 => self.run_mixed(a.get::<f32>(), b, &mut fo)?,
                    _ => self.run_mixed(&widen(a), b, &mut fo)?,
                }
                narrow(&fo, out);
            }
            (x, _) if x.is_int() => {
                let (ia, ib) = (ints(a), ints(b));
                let mut io = vec![0i64; out.numel()];
                self.run_int(&ia, &ib, &mut io);
                store_ints(&io, out);
            }
            (x, y) => return Err(format!("no product kernel for {x} × {y}")),
        }
        Ok(())
    }
}

/// Any float operand as f32.
pub(crate) fn widen(x: In) -> Vec<f32> {
    match x.dtype {
        DType::F32 => x.get::<f32>().to_vec(),
        DType::F64 => x.get::<f64>().iter().map(|&v| v as f32).collect(),
        DType::F16 => x.get::<f16>().iter().map(|v| v.to_f32()).collect(),
        _ => x.get::<bf16>().iter().map(|v| v.to_f32()).collect(),
    }
}

/// Stores f32 results into a float output of any width.
pub(crate) fn narrow(v: &[f32], out: &mut Out) {
    match out.dtype {
        DType::F32 => out.get::<f32>().copy_from_slice(v),
        DType::F64 => out.get::<f64>().iter_mut().zip(v).for_each(|(o, &x)| *o = x as f64),
        DType::F16 => out.get::<f16>().iter_mut().zip(v).for_each(|(o, &x)| *o = f16::from_f32(x)),
        _ => out.get::<bf16>().iter_mut().zip(v).for_each(|(o, &x)| *o = bf16::from_f32(x)),
    }
}

macro_rules! int_io {
    ($($d:ident => $t:ty),*) => {
        pub(crate) fn ints(x: In) -> Vec<i64> {
            match x.dtype {
                $(DType::$d => x.get::<$t>().iter().map(|&v| v as i64).collect(),)*
                _ => unreachable!("integer dtypes only"),
            }
        }
        pub(crate) fn store_ints(v: &[i64], out: &mut Out) {
            match out.dtype {
                $(DType::$d => out.get::<$t>().iter_mut().zip(v).for_each(|(o, &x)| *o = x as $t),)*
                _ => unreachable!("integer dtypes only"),
            }
        }
    };
}
int_io!(I8 => i8, U8 => u8, I16 => i16, I32 => i32, I64 => i64, U32 => u32);

/// `MatMul`: `out[.., m, n] = Σ_k a[.., m, k]·b[.., k, n]`, batch dims broadcast; the output
/// has the dtype of `a`.
pub fn matmul(a: In, b: In, out: &mut Out) -> Result<(), String> {
    Gemm::of_matmul(a.dims, b.dims, out.dims).dispatch(a, b, out)
}

/// Packs a 2-D f32 weight `b [k, n]` once for [`matmul_prepacked`] and the fused matmul.
pub fn prepack(b: In) -> PackedB {
    PackedB::new(Mat::row_major(b.get::<f32>(), b.dims[0], b.dims[1]))
}

/// [`matmul`] with `b`, a 2-D f32 weight, also given pre-packed in `packed` ([`prepack`]);
/// other operands take [`matmul`].
pub fn matmul_prepacked(a: In, b: In, packed: &PackedB, out: &mut Out) -> Result<(), String> {
    let g = Gemm::of_matmul(a.dims, b.dims, out.dims);
    if a.dtype != DType::F32 || b.dtype != DType::F32 || out.dtype != DType::F32 || b.dims.len() != 2 || g.batches != [(0, 0, 0)] {
        return matmul(a, b, out);
    }
    let (m, k, n) = (g.m, g.k, g.n);
    let (a, b) = (Mat::row_major(a.get::<f32>(), m, k), Mat::row_major(b.get::<f32>(), k, n));
    sgemm_prepacked(a, b, packed, MatMut::row_major(out.get::<f32>(), m, n), false, true, None)
}

/// A 2-D f32 weight rounded once to a narrow type, for products other than f32
/// ([`crate::Products`]).
pub enum Rounded {
    Int8(int8::PackedI8),
    Bf16(bfloat16::PackedBf16),
}

impl Rounded {
    /// `b [k, n]` rounded as `products` says; `None` for f32 products.
    pub fn new(products: crate::Products, b: Mat<f32>) -> Option<Rounded> {
        match products {
            crate::Products::F32 => None,
            crate::Products::Int8 => Some(Rounded::Int8(int8::PackedI8::new(b))),
            crate::Products::Bf16 => Some(Rounded::Bf16(bfloat16::PackedBf16::new(b))),
        }
    }

    /// `[k, n]`, the weight's shape.
    pub fn dims(&self) -> [usize; 2] {
        match self {
            Rounded::Int8(w) => w.dims(),
            Rounded::Bf16(w) => w.dims(),
        }
    }

    /// The values the rounded weight stands for, row-major `[k, n]`.
    pub fn unpack(&self) -> Vec<f32> {
        match self {
            Rounded::Int8(w) => w.unpack(),
            Rounded::Bf16(w) => w.unpack(),
        }
    }
}

/// `MatMul` of an f32 `a [.., m, k]` and a rounded 2-D weight, then `epilogue` over each
/// finished piece of the output.
pub fn matmul_rounded(a: In, b: &Rounded, out: &mut Out, epilogue: Option<Epilogue>) -> Result<(), String> {
    let [k, n] = b.dims();
    if a.dtype != DType::F32 || out.dtype != DType::F32 || a.dims.last() != Some(&k) || out.dims.last() != Some(&n) {
        return Err(format!("a product of a rounded weight takes f32 [.., m, {k}] to f32 [.., m, {n}]; got {:?} {:?} to {:?} {:?}", a.dtype, a.dims, out.dtype, out.dims));
    }
    let m = out.numel() / n.max(1);
    let (a, c) = (Mat::row_major(a.get::<f32>(), m, k), MatMut::row_major(out.get::<f32>(), m, n));
    match b {
        Rounded::Int8(w) => int8::product(a, w, c, true, epilogue),
        Rounded::Bf16(w) => bfloat16::product(a, w, c, true, epilogue),
    }
}

/// `x` with its axes reordered (output axis `i` is input axis `perm[i]`): a copy, or `x`'s own
/// bytes where the order is unchanged.
pub fn permuted<'a>(x: In<'a>, perm: &[usize]) -> std::borrow::Cow<'a, [u8]> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return std::borrow::Cow::Borrowed(x.bytes);
    }
    let size = x.dtype.size();
    let dims: Vec<usize> = perm.iter().map(|&p| x.dims[p]).collect();
    let src = strides(x.dims);
    let walk: Vec<usize> = perm.iter().map(|&p| src[p]).collect();
    let mut out = vec![0u8; x.bytes.len()];
    for_each_broadcast(&dims, [&walk], |o, [i]| out[o * size..(o + 1) * size].copy_from_slice(&x.bytes[i * size..(i + 1) * size]));
    std::borrow::Cow::Owned(out)
}

/// The free axes (neither batch nor contracted) of `DotGeneral`'s sides of ranks `ra`, `rb`.
fn free_axes(d: &DotGeneral, ra: usize, rb: usize) -> (Vec<usize>, Vec<usize>) {
    let free = |rank: usize, c: &[usize], bt: &[usize]| -> Vec<usize> { (0..rank).filter(|i| !c.contains(i) && !bt.contains(i)).collect() };
    (free(ra, &d.lhs_contracting, &d.lhs_batch), free(rb, &d.rhs_contracting, &d.rhs_batch))
}

/// Of a tensor with `dims` and row-major strides `st`: the stride that walks the axes `group`
/// (in that order) as one index, and their extent — `None` where they do not merge (not
/// adjacent in memory in that order).
fn merged(dims: &[usize], st: &[usize], group: &[usize]) -> Option<(usize, usize)> {
    let extent = group.iter().map(|&i| dims[i]).product();
    let axes: Vec<usize> = group.iter().copied().filter(|&i| dims[i] != 1).collect();
    axes.windows(2).all(|w| st[w[0]] == st[w[1]] * dims[w[1]]).then(|| (axes.last().map_or(1, |&i| st[i]), extent))
}

/// `DotGeneral` over f32 / f64 whose free and contracted axes each merge into one strided
/// index on both sides: each batch item one product that reads the operands in place
/// ([`gemm_slice`]: a transposed operand is a stride, not a copy). `false` where it does not
/// apply.
fn dot_general_in_place<T: Real>(d: &DotGeneral, a: In, b: In, out: &mut Out) -> bool {
    let (fa, fb) = free_axes(d, a.dims.len(), b.dims.len());
    let (sa, sb) = (strides(a.dims), strides(b.dims));
    let parts = (merged(a.dims, &sa, &fa), merged(a.dims, &sa, &d.lhs_contracting), merged(b.dims, &sb, &d.rhs_contracting), merged(b.dims, &sb, &fb));
    let (Some((sm, m)), Some((ska, k)), Some((skb, kb)), Some((sn, n))) = parts else { return false };
    if k != kb {
        return false;
    }
    let batch_dims: Vec<usize> = d.lhs_batch.iter().map(|&i| a.dims[i]).collect();
    let offsets = |st: &[usize], axes: &[usize]| -> Vec<usize> {
        let mut offs = Vec::new();
        let walk: Vec<usize> = axes.iter().map(|&i| st[i]).collect();
        for_each_broadcast(&batch_dims, [&walk], |_, [o]| offs.push(o));
        offs
    };
    let (oa, ob) = (offsets(&sa, &d.lhs_batch), offsets(&sb, &d.rhs_batch));
    let (xa, xb, o) = (a.get::<T>(), b.get::<T>(), out.get::<T>());
    if m * n == 0 {
        return true;
    }
    let split = oa.len() > 1 && m * n * k < PAR_FLOPS * 4;
    let one = |(i, c): (usize, &mut [T])| {
        let a = Mat { data: &xa[oa[i]..], rows: m, cols: k, strides: [sm, ska] };
        let b = Mat { data: &xb[ob[i]..], rows: k, cols: n, strides: [skb, sn] };
        gemm_slice(a, b, c, false, !split);
    };
    if split {
        o.par_chunks_mut(m * n).enumerate().for_each(one);
    } else {
        o.chunks_mut(m * n).enumerate().for_each(one);
    }
    true
}

/// `DotGeneral` (jax.lax.dot_general): f32 / f64 products read their operands in place where
/// the axes allow ([`dot_general_in_place`]); otherwise both sides are permuted to `[batch,
/// free, contract]` / `[batch, contract, free]`, then one batched product gives XLA's output
/// order directly.
pub fn dot_general(d: &DotGeneral, a: In, b: In, out: &mut Out) -> Result<(), String> {
    let in_place = match (a.dtype, b.dtype) {
        (DType::F32, DType::F32) => dot_general_in_place::<f32>(d, a, b, out),
        (DType::F64, DType::F64) => dot_general_in_place::<f64>(d, a, b, out),
        _ => false,
    };
    if in_place {
        return Ok(());
    }
    dot_general_permuted(d, a, b, out)
}

/// `DotGeneral` on copies of both sides permuted to `[batch, free, contract]` / `[batch,
/// contract, free]`.
fn dot_general_permuted(d: &DotGeneral, a: In, b: In, out: &mut Out) -> Result<(), String> {
    let (fa, fb) = free_axes(d, a.dims.len(), b.dims.len());
    let size = |x: &In, axes: &[usize]| axes.iter().map(|&i| x.dims[i]).product::<usize>();
    let (batch, m, k, n) = (size(&a, &d.lhs_batch), size(&a, &fa), size(&a, &d.lhs_contracting), size(&b, &fb));
    let pa: Vec<usize> = d.lhs_batch.iter().chain(&fa).chain(&d.lhs_contracting).copied().collect();
    let pb: Vec<usize> = d.rhs_batch.iter().chain(&d.rhs_contracting).chain(&fb).copied().collect();
    let (ba, bb) = (permuted(a, &pa), permuted(b, &pb));
    let (da, db) = ([batch, m, k], [batch, k, n]);
    let (a2, b2) = (In { dtype: a.dtype, dims: &da, bytes: &ba }, In { dtype: b.dtype, dims: &db, bytes: &bb });
    let g = Gemm { m, k, n, batches: (0..batch).map(|i| (i * m * k, i * k * n, i * m * n)).collect() };
    g.dispatch(a2, b2, out)
}

/// One product `out (+)= a·b` over slices, for kernels that lower onto GEMM (conv as
/// im2col + GEMM): `out [m, n]` row-major; `a [m, k]` and `b [k, n]` are read through
/// their strides, so a transposed operand needs no copy. With `accumulate`
/// the product is added to `out`, else `out` is overwritten. With `parallel` (the caller is
/// not itself splitting work over threads) a large product runs on several threads: the
/// caller says so, as every kernel already runs on one of rayon's workers while the others
/// spin (`awake::run`), so being on a worker tells nothing. Panics if a slice is too short for its geometry.
pub fn gemm_slice<T: Real>(a: Mat<T>, b: Mat<T>, out: &mut [T], accumulate: bool, parallel: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m * n == 0 {
        return;
    }
    let last = |s: [usize; 2], r: usize, c: usize| (r - 1) * s[0] + (c - 1) * s[1];
    assert!(out.len() >= m * n, "gemm_slice: out holds {} < {m}·{n}", out.len());
    if k == 0 {
        if !accumulate {
            out[..m * n].fill(T::ZERO);
        }
        return;
    }
    let (a_strides, b_strides) = (a.strides, b.strides);
    assert!(b.rows == k, "gemm_slice: [{m}, {k}] × [{}, {n}]", b.rows);
    assert!(a.data.len() > last(a_strides, m, k), "gemm_slice: a is too short for [{m}, {k}] at strides {a_strides:?}");
    assert!(b.data.len() > last(b_strides, k, n), "gemm_slice: b is too short for [{k}, {n}] at strides {b_strides:?}");
    let (a, b) = (a.data, b.data);
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let (a, b) = (bytemuck::cast_slice::<T, f32>(a), bytemuck::cast_slice::<T, f32>(b));
        let a = Mat { data: a, rows: m, cols: k, strides: a_strides };
        let b = Mat { data: b, rows: k, cols: n, strides: b_strides };
        let c = MatMut::row_major(bytemuck::cast_slice_mut::<T, f32>(&mut out[..m * n]), m, n);
        if let Err(e) = sgemm(a, b, c, accumulate, parallel) {
            panic!("gemm_slice: {e}");
        }
        return;
    }
    let threads = rayon::current_num_threads();
    let par = if m * n * k >= PAR_FLOPS && threads > 1 && parallel {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // Safety: the asserts above keep every addressed element inside its slice, and `out` is a
    // `&mut` so it aliases neither operand.
    unsafe {
        gemm::gemm(
            m, n, k,
            out.as_mut_ptr(), 1, n as isize, accumulate,
            a.as_ptr(), a_strides[1] as isize, a_strides[0] as isize,
            b.as_ptr(), b_strides[1] as isize, b_strides[0] as isize,
            if accumulate { T::ONE } else { T::ZERO }, T::ONE, false, false, false, par,
        )
    }
}

#[cfg(test)]
mod tests;
