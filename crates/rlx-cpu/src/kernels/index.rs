//! Index kernels (OPS.md §9, `GatherBackward` §22): gathers move elements of any dtype by
//! size; scatters copy (`None`) any dtype and combine (`Add`, `Mul`, `Max`, `Min`) floats,
//! integers and, for `Add`/`Mul`, complex numbers. F16/BF16 combine in f32 and round once.
//!
//! Index operands are I8–I64/U8/U32 or whole-valued F32 (truncated toward zero). `Gather`,
//! `GatherBackward` and `ScatterAdd` reject negative indices; the ONNX-derived ops
//! (`GatherNd`, `GatherElements`, `ScatterNd`, `ScatterElements`) read `i < 0` as `i + dim`.
//! Either way an index outside the extent is an error naming its value and position.

use super::by_size;
use super::quant::Panels;
use super::PAR_MIN;
use crate::view::{strides, In, Out};
use bytemuck::Pod;
use half::{bf16, f16};
use num_complex::Complex32;
use rayon::prelude::*;
use rlx_ir::ops::index::ScatterReduction;
use rlx_ir::{norm_axis, DType};

/// The values of an index operand as `i64`.
fn index_values(idx: &In) -> Result<Vec<i64>, String> {
    fn all<T: Pod + Into<i64>>(idx: &In) -> Vec<i64> {
        idx.get::<T>().iter().map(|&v| v.into()).collect()
    }
    Ok(match idx.dtype {
        DType::I8 => all::<i8>(idx),
        DType::U8 => all::<u8>(idx),
        DType::I16 => all::<i16>(idx),
        DType::I32 => all::<i32>(idx),
        DType::I64 => all::<i64>(idx),
        DType::U32 => all::<u32>(idx),
        DType::U16 => all::<u16>(idx),
        DType::U64 => idx.get::<u64>().iter().map(|&v| i64::try_from(v).unwrap_or(i64::MAX)).collect(),
        DType::F32 => idx
            .get::<f32>()
            .iter()
            .enumerate()
            .map(|(p, &v)| {
                if v.is_finite() {
                    Ok(v.trunc() as i64)
                } else {
                    Err(format!("index {v} at {} is not a number", position(p, idx.dims)))
                }
            })
            .collect::<Result<_, _>>()?,
        d => return Err(format!("indices must be integers, got {d}")),
    })
}

/// `[i, j, ..]`, the multi-index of flat position `p` in a tensor of `dims`.
fn position(mut p: usize, dims: &[usize]) -> String {
    let mut at = vec![0; dims.len()];
    for a in (0..dims.len()).rev() {
        at[a] = p % dims[a].max(1);
        p /= dims[a].max(1);
    }
    format!("{at:?}")
}

/// How an index reads against an extent: strictly in range, or ONNX-style with negatives
/// counting from the end.
#[derive(Clone, Copy, PartialEq)]
enum Negatives {
    Reject,
    Wrap,
}

/// Index `v` (at flat position `p` of indices `dims`) checked against extent `extent` of
/// `what`; returns it in `[0, extent)`.
fn resolve(v: i64, extent: usize, neg: Negatives, p: usize, dims: &[usize], what: impl Fn() -> String) -> Result<usize, String> {
    let n = extent as i64;
    let w = if neg == Negatives::Wrap && v < 0 { v + n } else { v };
    if (0..n).contains(&w) {
        return Ok(w as usize);
    }
    let range = if neg == Negatives::Wrap { format!("[-{n}, {n})") } else { format!("[0, {n})") };
    Err(format!("index {v} at {} of the indices is outside {range}, the extent of {}", position(p, dims), what()))
}

/// Every index checked against one extent.
fn resolve_all(idx: &In, extent: usize, neg: Negatives, what: &str) -> Result<Vec<usize>, String> {
    index_values(idx)?
        .into_iter()
        .enumerate()
        .map(|(p, v)| resolve(v, extent, neg, p, idx.dims, || what.to_string()))
        .collect()
}

/// Indices read as `Gather`'s are (each in `[0, extent)`, else an error naming it and
/// `what`): the rows of `Attention`'s `kv_rows`.
pub(crate) fn gather_indices(idx: &In, extent: usize, what: &str) -> Result<Vec<usize>, String> {
    resolve_all(idx, extent, Negatives::Reject, what)
}

/// Rows of `row` elements: `dst` row `r` is `src` row `pick(r)`; split across threads when large.
pub(crate) fn copy_rows<T: Pod + Send + Sync>(src: &[T], dst: &mut [T], row: usize, pick: impl Fn(usize) -> usize + Sync) {
    if row == 0 {
        return;
    }
    if row == 1 {
        let one = |(r, d): (usize, &mut T)| *d = src[pick(r)];
        if dst.len() < PAR_MIN {
            dst.iter_mut().enumerate().for_each(one);
        } else {
            dst.par_iter_mut().enumerate().for_each(one);
        }
        return;
    }
    let one = |r: usize, d: &mut [T]| {
        let s = pick(r) * row;
        d.copy_from_slice(&src[s..s + row]);
    };
    if dst.len() < PAR_MIN {
        dst.chunks_mut(row).enumerate().for_each(|(r, d)| one(r, d));
    } else {
        dst.par_chunks_mut(row).enumerate().for_each(|(r, d)| one(r, d));
    }
}

/// `out = table[:axis] ++ indices.shape ++ table[axis+1:]` (ONNX `Gather`, `jnp.take`);
/// indices must lie in `[0, table.dims[axis])`.
pub fn gather(axis: usize, table: In, indices: In, out: &mut Out) -> Result<(), String> {
    let extent = table.dims[axis];
    let idx = resolve_all(&indices, extent, Negatives::Reject, &format!("axis {axis} of the table {:?}", table.dims))?;
    let post: usize = table.dims[axis + 1..].iter().product();
    let n = idx.len();
    // Output row r = (p, i) over [pre, n] reads table row p·extent + idx[i].
    by_size!(table.dtype.size(), T => copy_rows(table.get::<T>(), out.get::<T>(), post, |r| (r / n) * extent + idx[r % n]));
    Ok(())
}

/// [`gather`] along axis 0 of a table of GGUF rows held laid out for the `Q8Blocks` product:
/// each row's bytes restored from the panels.
pub fn gather_panel_rows(table: &Panels, indices: In, out: &mut Out) -> Result<(), String> {
    let idx = resolve_all(&indices, table.n(), Negatives::Reject, &format!("axis 0 of the table [{}, {}]", table.n(), table.row_bytes()))?;
    for (dst, &j) in out.bytes.chunks_exact_mut(table.row_bytes().max(1)).zip(&idx) {
        table.copy_row(j, dst);
    }
    Ok(())
}

/// `out[i] = data[i with coord(axis) := indices[i]]`, `out` shaped as `indices`
/// (ONNX `GatherElements`, `np.take_along_axis`); negatives wrap.
pub fn gather_elements(axis: i32, data: In, indices: In, out: &mut Out) -> Result<(), String> {
    let axis = norm_axis(axis as i64, data.dims.len())?;
    let targets = element_targets(axis, &data, &indices)?;
    by_size!(data.dtype.size(), T => copy_rows(data.get::<T>(), out.get::<T>(), 1, |r| targets[r]));
    Ok(())
}

/// For each element `i` of `indices`, the flat offset into `data` of
/// `i with coord(axis) := indices[i]` (negatives wrap).
fn element_targets(axis: usize, data: &In, indices: &In) -> Result<Vec<usize>, String> {
    let ds = strides(data.dims);
    let what = format!("axis {axis} of the data {:?}", data.dims);
    let values = index_values(indices)?;
    let dims = indices.dims;
    let mut at = vec![0usize; dims.len()];
    let mut base = 0usize; // Σ over axes ≠ axis of at[a]·ds[a]
    let mut out = Vec::with_capacity(values.len());
    for (p, &v) in values.iter().enumerate() {
        let i = resolve(v, data.dims[axis], Negatives::Wrap, p, dims, || what.clone())?;
        out.push(base + i * ds[axis]);
        for a in (0..dims.len()).rev() {
            at[a] += 1;
            if a != axis {
                base += ds[a];
            }
            if at[a] < dims[a] {
                break;
            }
            if a != axis {
                base -= ds[a] * dims[a];
            }
            at[a] = 0;
        }
    }
    Ok(out)
}

/// Geometry of `GatherNd`/`ScatterNd`: `indices [b.., m.., k]` address, per batch, the
/// `k` data axes after the `b` batch axes; each tuple selects a block of `rest` elements.
struct Tuples {
    /// Flat element offset into `data` of each tuple's block.
    offsets: Vec<usize>,
    rest: usize,
}

fn tuples(batch_dims: usize, data: &In, indices: &In) -> Result<Tuples, String> {
    let q = indices.dims.len();
    let k = indices.dims[q - 1];
    let b = batch_dims;
    let ds = strides(data.dims);
    let batch_stride: usize = data.dims[b..].iter().product();
    let batches: usize = data.dims[..b].iter().product();
    let values = index_values(indices)?;
    let count = values.len().checked_div(k).unwrap_or(0);
    let per_batch = count.checked_div(batches).unwrap_or(0);
    let mut offsets = Vec::with_capacity(count);
    for t in 0..count {
        let mut off = (t / per_batch.max(1)) * batch_stride;
        for j in 0..k {
            let a = b + j;
            let what = || format!("axis {a} of the data {:?}", data.dims);
            off += resolve(values[t * k + j], data.dims[a], Negatives::Wrap, t * k + j, indices.dims, what)? * ds[a];
        }
        offsets.push(off);
    }
    Ok(Tuples { offsets, rest: data.dims[b + k..].iter().product() })
}

/// ONNX `GatherND`: `out = indices.shape[:-1] ++ data.shape[batch_dims+k:]`, each index
/// tuple (negatives wrap) picking a block of `data` within its batch.
pub fn gather_nd(batch_dims: i32, data: In, indices: In, out: &mut Out) -> Result<(), String> {
    let q = indices.dims.len() as i64;
    let b = if batch_dims < 0 { batch_dims as i64 + q } else { batch_dims as i64 } as usize;
    let t = tuples(b, &data, &indices)?;
    by_size!(data.dtype.size(), T => {
        let (src, dst) = (data.get::<T>(), out.get::<T>());
        if t.rest > 0 {
            let copy = |u: usize, d: &mut [T]| d.copy_from_slice(&src[t.offsets[u]..t.offsets[u] + t.rest]);
            if dst.len() < PAR_MIN {
                dst.chunks_mut(t.rest).enumerate().for_each(|(u, d)| copy(u, d));
            } else {
                dst.par_chunks_mut(t.rest).enumerate().for_each(|(u, d)| copy(u, d));
            }
        }
    });
    Ok(())
}

/// An element type the scatter reductions combine.
trait Combine: Pod + Send + Sync {
    fn combine(self, other: Self, r: ScatterReduction) -> Self;
}

macro_rules! float_combine {
    ($($t:ty),*) => {$(impl Combine for $t {
        /// Max/Min propagate NaN (`np.maximum.at`).
        fn combine(self, o: Self, r: ScatterReduction) -> Self {
            match r {
                ScatterReduction::None => o,
                ScatterReduction::Add => self + o,
                ScatterReduction::Mul => self * o,
                ScatterReduction::Max => if self.is_nan() || o.is_nan() { <$t>::NAN } else { self.max(o) },
                ScatterReduction::Min => if self.is_nan() || o.is_nan() { <$t>::NAN } else { self.min(o) },
            }
        }
    })*};
}
float_combine!(f32, f64);

macro_rules! int_combine {
    ($($t:ty),*) => {$(impl Combine for $t {
        /// Add and Mul wrap.
        fn combine(self, o: Self, r: ScatterReduction) -> Self {
            match r {
                ScatterReduction::None => o,
                ScatterReduction::Add => self.wrapping_add(o),
                ScatterReduction::Mul => self.wrapping_mul(o),
                ScatterReduction::Max => self.max(o),
                ScatterReduction::Min => self.min(o),
            }
        }
    })*};
}
int_combine!(i8, u8, i16, i32, i64, u32, u16, u64);

impl Combine for Complex32 {
    /// Inference rejects Max/Min on complex numbers.
    fn combine(self, o: Self, r: ScatterReduction) -> Self {
        match r {
            ScatterReduction::Add => self + o,
            ScatterReduction::Mul => self * o,
            _ => o,
        }
    }
}

/// Combines `src` block `u` (of `row` elements) into `dst` at `targets[u]`, in order of `u`.
fn scatter<T: Combine>(r: ScatterReduction, src: &[T], targets: &[usize], row: usize, dst: &mut [T]) {
    for (u, &t) in targets.iter().enumerate() {
        let (d, s) = (&mut dst[t..t + row], &src[u * row..(u + 1) * row]);
        for (d, &s) in d.iter_mut().zip(s) {
            *d = d.combine(s, r);
        }
    }
}

/// Runs a scatter of `updates` into `out` (already initialized) on the dtype's element type.
/// F16/BF16 are widened to f32, combined, and rounded back once.
fn scatter_typed(r: ScatterReduction, updates: &In, targets: &[usize], row: usize, out: &mut Out) -> Result<(), String> {
    if r == ScatterReduction::None {
        let size = updates.dtype.size();
        by_size!(size, T => {
            let (src, dst) = (updates.get::<T>(), out.get::<T>());
            for (u, &t) in targets.iter().enumerate() {
                dst[t..t + row].copy_from_slice(&src[u * row..(u + 1) * row]);
            }
        });
        return Ok(());
    }
    macro_rules! widened {
        ($h:ty) => {{
            let src: Vec<f32> = updates.get::<$h>().iter().map(|v| v.to_f32()).collect();
            let mut acc: Vec<f32> = out.get::<$h>().iter().map(|v| v.to_f32()).collect();
            scatter(r, &src, targets, row, &mut acc);
            for (o, a) in out.get::<$h>().iter_mut().zip(acc) {
                *o = <$h>::from_f32(a);
            }
        }};
    }
    match updates.dtype {
        DType::F32 => scatter(r, updates.get::<f32>(), targets, row, out.get::<f32>()),
        DType::F64 => scatter(r, updates.get::<f64>(), targets, row, out.get::<f64>()),
        DType::I8 => scatter(r, updates.get::<i8>(), targets, row, out.get::<i8>()),
        DType::U8 => scatter(r, updates.get::<u8>(), targets, row, out.get::<u8>()),
        DType::I16 => scatter(r, updates.get::<i16>(), targets, row, out.get::<i16>()),
        DType::I32 => scatter(r, updates.get::<i32>(), targets, row, out.get::<i32>()),
        DType::I64 => scatter(r, updates.get::<i64>(), targets, row, out.get::<i64>()),
        DType::U32 => scatter(r, updates.get::<u32>(), targets, row, out.get::<u32>()),
        DType::U16 => scatter(r, updates.get::<u16>(), targets, row, out.get::<u16>()),
        DType::U64 => scatter(r, updates.get::<u64>(), targets, row, out.get::<u64>()),
        DType::C64 => scatter(r, updates.get::<Complex32>(), targets, row, out.get::<Complex32>()),
        DType::F16 => widened!(f16),
        DType::BF16 => widened!(bf16),
        d => return Err(format!("reduction {r:?} does not apply to {d}")),
    }
    Ok(())
}

/// Zeros of `out`, then `out[.., idx[p], ..] += dy[.., p, ..]` along `axis` (the gradient
/// of `Gather`); `out.dims` is the table shape, indices must lie in `[0, out.dims[axis])`.
pub fn gather_backward(axis: i32, dy: In, indices: In, out: &mut Out) -> Result<(), String> {
    let axis = norm_axis(axis as i64, out.dims.len())?;
    let extent = out.dims[axis];
    let idx = resolve_all(&indices, extent, Negatives::Reject, &format!("axis {axis} of the table {:?}", out.dims))?;
    let post: usize = out.dims[axis + 1..].iter().product();
    let pre: usize = out.dims[..axis].iter().product();
    let n = idx.len();
    // Source row (p, i) of [pre, n] lands on output row p·extent + idx[i].
    let targets: Vec<usize> = (0..pre * n).map(|r| ((r / n) * extent + idx[r % n]) * post).collect();
    out.bytes.fill(0);
    scatter_typed(ScatterReduction::Add, &dy, &targets, post, out)
}

/// `out = zeros[out_dim, T..]`, then `out[idx[u]] += updates[u]` for `updates [U, T..]`;
/// indices must lie in `[0, out_dim)`.
pub fn scatter_add(updates: In, indices: In, out: &mut Out) -> Result<(), String> {
    let extent = out.dims[0];
    let idx = resolve_all(&indices, extent, Negatives::Reject, &format!("axis 0 of the output {:?}", out.dims))?;
    let row: usize = out.dims[1..].iter().product();
    let targets: Vec<usize> = idx.iter().map(|&i| i * row).collect();
    out.bytes.fill(0);
    scatter_typed(ScatterReduction::Add, &updates, &targets, row, out)
}

/// ONNX `ScatterND`: a copy of `data`, then each update block combined in at its index
/// tuple (negatives wrap), in index order (so with `None` the last duplicate wins).
pub fn scatter_nd(r: ScatterReduction, data: In, indices: In, updates: In, out: &mut Out) -> Result<(), String> {
    let t = tuples(0, &data, &indices)?;
    out.bytes.copy_from_slice(data.bytes);
    if t.rest == 0 {
        return Ok(());
    }
    scatter_typed(r, &updates, &t.offsets, t.rest, out)
}

/// ONNX `ScatterElements`: a copy of `data`, then `updates[i]` combined in at
/// `i with coord(axis) := indices[i]` (negatives wrap), in row-major order of `i`.
pub fn scatter_elements(axis: i32, r: ScatterReduction, data: In, indices: In, updates: In, out: &mut Out) -> Result<(), String> {
    let axis = norm_axis(axis as i64, data.dims.len())?;
    let targets = element_targets(axis, &data, &indices)?;
    out.bytes.copy_from_slice(data.bytes);
    scatter_typed(r, &updates, &targets, 1, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins<'a>(dtype: DType, dims: &'a [usize], bytes: &'a [u8]) -> In<'a> {
        In { dtype, dims, bytes }
    }

    #[test]
    fn bad_indices_name_value_and_position() {
        let table = [0f32; 6];
        let t = ins(DType::F32, &[3, 2], bytemuck::cast_slice(&table));
        let idx = [0i64, 2, -1, 1];
        let i = ins(DType::I64, &[2, 2], bytemuck::cast_slice(&idx));
        let mut out = [0f32; 8];
        let mut o = Out { dtype: DType::F32, dims: &[2, 2, 2], bytes: bytemuck::cast_slice_mut(&mut out) };
        let e = gather(0, t, i, &mut o).unwrap_err();
        assert_eq!(e, "index -1 at [1, 0] of the indices is outside [0, 3), the extent of axis 0 of the table [3, 2]");
        // ONNX-derived ops wrap negatives but still reject what is out of range.
        let idx = [[-3i32, 1], [3, 0]];
        let i = ins(DType::I32, &[2, 2], bytemuck::cast_slice(&idx));
        let mut out = [0f32; 2];
        let mut o = Out { dtype: DType::F32, dims: &[2], bytes: bytemuck::cast_slice_mut(&mut out) };
        let e = gather_nd(0, t, i, &mut o).unwrap_err();
        assert_eq!(e, "index 3 at [1, 0] of the indices is outside [-3, 3), the extent of axis 0 of the data [3, 2]");
        let idx = [1.0f32, f32::NAN];
        let i = ins(DType::F32, &[2], bytemuck::cast_slice(&idx));
        let mut out = [0f32; 4];
        let mut o = Out { dtype: DType::F32, dims: &[2, 2], bytes: bytemuck::cast_slice_mut(&mut out) };
        assert!(gather(0, t, i, &mut o).unwrap_err().contains("index NaN at [1]"));
    }

    #[test]
    fn threaded_gather_matches_rows() {
        let (rows, cols, n) = (50usize, 700usize, 90usize);
        let table: Vec<u16> = (0..rows * cols).map(|v| v as u16).collect();
        let idx: Vec<i32> = (0..n as i32).map(|i| (i * 7) % rows as i32).collect();
        let mut out = vec![0u16; n * cols];
        let mut o = Out { dtype: DType::F16, dims: &[n, cols], bytes: bytemuck::cast_slice_mut(&mut out) };
        gather(0, ins(DType::F16, &[rows, cols], bytemuck::cast_slice(&table)), ins(DType::I32, &[n], bytemuck::cast_slice(&idx)), &mut o)
            .unwrap();
        for (r, &i) in idx.iter().enumerate() {
            assert_eq!(out[r * cols..(r + 1) * cols], table[i as usize * cols..(i as usize + 1) * cols]);
        }
    }

    #[test]
    fn half_scatters_accumulate_in_f32() {
        // 2048 + 1 + 1 in f16 steps stays 2048; accumulated in f32 it rounds once to 2050.
        let upd = [f16::from_f32(2048.0), f16::ONE, f16::ONE];
        let idx = [0i32, 0, 0];
        let mut out = [f16::ZERO; 1];
        let mut o = Out { dtype: DType::F16, dims: &[1], bytes: bytemuck::cast_slice_mut(&mut out) };
        scatter_add(ins(DType::F16, &[3], bytemuck::cast_slice(&upd)), ins(DType::I32, &[3], bytemuck::cast_slice(&idx)), &mut o).unwrap();
        assert_eq!(out[0].to_f32(), 2050.0);
    }
}
