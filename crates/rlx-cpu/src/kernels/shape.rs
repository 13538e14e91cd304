//! Shape kernels (OPS.md §9): reshape, transpose, narrow, slice, reverse, expand, concat
//! and pad. None of them looks at element values, so every one runs on every dtype by
//! moving elements of the dtype's size (1, 2, 4 or 8 bytes).
//!
//! Transpose, narrow, slice, reverse and expand are one kernel, [`copy_strided`]: each is a
//! strided read of its input ([`Strided`]) written out row-major.

use super::PAR_MIN;
use crate::view::{strides, In, Out};
use bytemuck::Pod;
use half::{bf16, f16};
use rayon::prelude::*;
use rlx_ir::ops::shape::PadMode;
use rlx_ir::DType;
use super::by_size;


/// A strided read: the output element at row-major multi-index `i` over `dims` is source
/// element `offset + Σ i[a]·strides[a]` (strides in elements; negative ones walk backwards,
/// zero ones repeat).
#[derive(Clone, Debug, PartialEq)]
pub struct Strided {
    pub dims: Vec<usize>,
    pub strides: Vec<isize>,
    pub offset: isize,
}

impl Strided {
    /// The plain row-major read of a tensor of `dims`.
    pub fn contiguous(dims: &[usize]) -> Strided {
        let strides = strides(dims).into_iter().map(|s| s as isize).collect();
        Strided { dims: dims.to_vec(), strides, offset: 0 }
    }

    /// The same read with extent-1 axes dropped and neighbouring axes that read as one
    /// axis merged, so the kernel's loops run as few and as long as possible.
    fn simplified(&self) -> Strided {
        let mut dims: Vec<usize> = Vec::with_capacity(self.dims.len());
        let mut st: Vec<isize> = Vec::with_capacity(self.dims.len());
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            if d == 1 {
                continue;
            }
            match (dims.last_mut(), st.last_mut()) {
                (Some(pd), Some(ps)) if *ps == s * d as isize => {
                    *pd *= d;
                    *ps = s;
                }
                _ => {
                    dims.push(d);
                    st.push(s);
                }
            }
        }
        Strided { dims, strides: st, offset: self.offset }
    }
}

/// Writes the strided read `view` of `src` (elements of `size` bytes) into `dst`, row-major.
///
/// Contract: every element `view` addresses lies inside `src`; `dst` holds exactly
/// `Π view.dims` elements; `src` and `dst` are aligned for their element size.
pub fn copy_strided(size: usize, src: &[u8], view: &Strided, dst: &mut [u8]) {
    let v = view.simplified();
    by_size!(size, T => copy_typed::<T>(bytemuck::cast_slice(src), &v, bytemuck::cast_slice_mut(dst)))
}

/// Source offset of the first element of output row `row`, where a row spans the last
/// `inner_axes` axes of `v`.
fn row_base(v: &Strided, inner_axes: usize, mut row: usize) -> isize {
    let mut off = v.offset;
    for a in (0..v.dims.len() - inner_axes).rev() {
        off += (row % v.dims[a]) as isize * v.strides[a];
        row /= v.dims[a];
    }
    off
}

/// Output tile edge of the blocked transpose (32 × 8-byte elements = 4 cache lines).
const TILE: usize = 32;

fn copy_typed<T: Pod + Send + Sync>(src: &[T], v: &Strided, dst: &mut [T]) {
    let rank = v.dims.len();
    if dst.is_empty() {
        return;
    }
    if rank == 0 {
        dst[0] = src[v.offset as usize];
        return;
    }
    // Transposed plane: output axis r-2 is contiguous in the source, output axis r-1 is
    // not. Walk it in tiles so both sides stay in cache.
    if rank >= 2 && v.strides[rank - 2] == 1 && v.strides[rank - 1] != 1 && v.dims[rank - 1] >= 4 && v.dims[rank - 2] >= 4 {
        let (rows, cols, cs) = (v.dims[rank - 2], v.dims[rank - 1], v.strides[rank - 1]);
        let block = |plane: usize, r0: usize, out: &mut [T]| {
            let base = row_base(v, 2, plane) + r0 as isize;
            let nr = out.len() / cols;
            for c0 in (0..cols).step_by(TILE) {
                for r in 0..nr {
                    let o = &mut out[r * cols..(r + 1) * cols];
                    for c in c0..(c0 + TILE).min(cols) {
                        o[c] = src[(base + r as isize + c as isize * cs) as usize];
                    }
                }
            }
        };
        let run_plane = |plane: usize, out: &mut [T]| {
            if out.len() < PAR_MIN {
                for (k, o) in out.chunks_mut(TILE * cols).enumerate() {
                    block(plane, k * TILE, o);
                }
            } else {
                out.par_chunks_mut(TILE * cols).enumerate().for_each(|(k, o)| block(plane, k * TILE, o));
            }
        };
        if dst.len() < PAR_MIN {
            dst.chunks_mut(rows * cols).enumerate().for_each(|(p, o)| run_plane(p, o));
        } else {
            dst.par_chunks_mut(rows * cols).enumerate().for_each(|(p, o)| run_plane(p, o));
        }
        return;
    }
    let (inner, is) = (v.dims[rank - 1], v.strides[rank - 1]);
    let row = |r: usize, out: &mut [T]| {
        let base = row_base(v, 1, r);
        match is {
            1 => out.copy_from_slice(&src[base as usize..base as usize + inner]),
            0 => out.fill(src[base as usize]),
            _ => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = src[(base + j as isize * is) as usize];
                }
            }
        }
    };
    if dst.len() < PAR_MIN {
        dst.chunks_mut(inner).enumerate().for_each(|(r, o)| row(r, o));
    } else {
        // Rows per task so that each task moves about PAR_MIN / 4 elements.
        let per = (PAR_MIN / 4 / inner).max(1);
        dst.par_chunks_mut(per * inner).enumerate().for_each(|(k, o)| {
            for (j, o) in o.chunks_mut(inner).enumerate() {
                row(k * per + j, o);
            }
        });
    }
}

/// Copies `x` into `out` unchanged: `Reshape` reinterprets a row-major buffer, so only the
/// dims (already `out.dims`, from the specialized graph) change.
pub fn reshape(x: In, out: &mut Out) -> Result<(), String> {
    if x.bytes.len() != out.bytes.len() {
        return Err(format!("cannot reshape {:?} into {:?}: element counts differ", x.dims, out.dims));
    }
    out.bytes.copy_from_slice(x.bytes);
    Ok(())
}

fn read(x: &In, v: Strided, out: &mut Out) -> Result<(), String> {
    copy_strided(x.dtype.size(), x.bytes, &v, out.bytes);
    Ok(())
}

/// `out.dims[i] = x.dims[perm[i]]`; `perm` is a permutation of `x`'s axes.
pub fn transpose(perm: &[usize], x: In, out: &mut Out) -> Result<(), String> {
    let s = strides(x.dims);
    let v = Strided {
        dims: perm.iter().map(|&p| x.dims[p]).collect(),
        strides: perm.iter().map(|&p| s[p] as isize).collect(),
        offset: 0,
    };
    read(&x, v, out)
}

/// `x[.., start + j·step, ..]` for `j < out.dims[axis]` (`Narrow` is `step = 1`); every
/// index read must lie in `[0, x.dims[axis])`.
pub fn slice(axis: usize, start: usize, step: i64, x: In, out: &mut Out) -> Result<(), String> {
    let len = out.dims[axis];
    let extent = x.dims[axis];
    let last = start as i128 + (len as i128 - 1) * step as i128;
    if len > 0 && (start >= extent || last < 0 || last >= extent as i128) {
        return Err(format!(
            "start {start} with step {step} and len {len} reads outside [0, {extent}) on axis {axis} of {:?}",
            x.dims
        ));
    }
    let mut v = Strided::contiguous(x.dims);
    v.dims[axis] = len;
    if len > 0 {
        v.offset = start as isize * v.strides[axis];
    }
    v.strides[axis] *= step as isize;
    read(&x, v, out)
}

/// Flips each of `axes`: `out[.., i, ..] = x[.., d−1−i, ..]`.
pub fn reverse(axes: &[usize], x: In, out: &mut Out) -> Result<(), String> {
    let mut v = Strided::contiguous(x.dims);
    for &a in axes {
        if x.dims[a] > 0 {
            v.offset += (x.dims[a] - 1) as isize * v.strides[a];
        }
        v.strides[a] = -v.strides[a];
    }
    read(&x, v, out)
}

/// NumPy `broadcast_to(x, out.dims)`: `x` is right-aligned against `out`, and its extent-1
/// axes (and missing leading ones) repeat.
pub fn expand(x: In, out: &mut Out) -> Result<(), String> {
    let lead = out.dims.len() - x.dims.len();
    let own = strides(x.dims);
    let v = Strided {
        dims: out.dims.to_vec(),
        strides: (0..out.dims.len())
            .map(|i| if i < lead || x.dims[i - lead] == 1 { 0 } else { own[i - lead] as isize })
            .collect(),
        offset: 0,
    };
    read(&x, v, out)
}

/// Joins `xs` along `axis` (all other dims equal, one dtype).
pub fn concat(axis: usize, xs: &[In], out: &mut Out) -> Result<(), String> {
    let size = out.dtype.size();
    let post: usize = out.dims[axis + 1..].iter().product::<usize>() * size;
    let widths: Vec<usize> = xs.iter().map(|x| x.dims[axis] * post).collect();
    let row: usize = widths.iter().sum();
    if row == 0 {
        return Ok(());
    }
    let fill = |o: usize, dst: &mut [u8]| {
        let mut at = 0;
        for (x, &w) in xs.iter().zip(&widths) {
            dst[at..at + w].copy_from_slice(&x.bytes[o * w..(o + 1) * w]);
            at += w;
        }
    };
    if out.bytes.len() < PAR_MIN * 4 {
        out.bytes.chunks_mut(row).enumerate().for_each(|(o, d)| fill(o, d));
    } else {
        out.bytes.par_chunks_mut(row).enumerate().for_each(|(o, d)| fill(o, d));
    }
    Ok(())
}

/// `KvAppend`'s write position: the `at` input (`[1]` I64) when given, else the `pos` attribute.
pub fn kv_position(pos: usize, at: Option<In>) -> Result<usize, String> {
    let Some(at) = at else { return Ok(pos) };
    let v = at.get::<i64>().first().copied().ok_or("the position input is empty")?;
    usize::try_from(v).map_err(|_| format!("the cache position {v} is negative"))
}

/// Writes the steps of `rows` into `cache` (of `dims`) at `at..` along `axis`, in place.
pub fn kv_write(axis: usize, at: usize, cache: &mut [u8], dims: &[usize], rows: In) -> Result<(), String> {
    let (cap, steps) = (dims[axis], rows.dims[axis]);
    if at + steps > cap {
        return Err(format!("{steps} steps at position {at} overflow the cache capacity {cap} along axis {axis} of {dims:?}"));
    }
    let inner: usize = dims[axis + 1..].iter().product::<usize>() * rows.dtype.size();
    let chunk = steps * inner;
    if chunk == 0 {
        return Ok(());
    }
    for (o, src) in rows.bytes.chunks_exact(chunk).enumerate() {
        let dst = (o * cap + at) * inner;
        cache[dst..dst + chunk].copy_from_slice(src);
    }
    Ok(())
}

/// `KvAppend` into its own output (the cache is not graph state): the first
/// `out.dims[axis]` steps of `cache`, with `rows` written at `at`.
pub fn kv_append(axis: usize, at: usize, cache: In, rows: In, out: &mut Out) -> Result<(), String> {
    slice(axis, 0, 1, cache, out)?;
    let dims = out.dims.to_vec();
    kv_write(axis, at, out.bytes, &dims, rows)
}

/// The bytes of `v` as one element of `dtype` (floats round to nearest; the IR checked
/// that integer and Bool fills are exact).
pub fn scalar_bytes(v: f64, dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::F16 => f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BF16 => bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::I8 => (v as i8).to_le_bytes().to_vec(),
        DType::U8 => (v as u8).to_le_bytes().to_vec(),
        DType::I16 => (v as i16).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::I64 => (v as i64).to_le_bytes().to_vec(),
        DType::U32 => (v as u32).to_le_bytes().to_vec(),
        DType::U16 => (v as u16).to_le_bytes().to_vec(),
        DType::U64 => (v as u64).to_le_bytes().to_vec(),
        DType::I4 | DType::I2 => (v as i8).to_le_bytes().to_vec(),
        DType::U4 | DType::U2 => vec![v as u8],
        DType::Bool => vec![(v != 0.0) as u8],
        DType::C64 => [(v as f32).to_le_bytes(), 0f32.to_le_bytes()].concat(),
        d @ (DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1) => {
            vec![rlx_ir::ops::quant::minifloat::DTypeEncoder::new(d).map_or(0, |e| e.encode(v))]
        }
    }
}

/// For one axis of extent `d` padded by `[before, after]`: the source index of each output
/// position, or `None` where `Constant` fills.
fn pad_sources(d: usize, before: usize, after: usize, mode: &PadMode) -> Vec<Option<usize>> {
    let (d_i, b_i) = (d as isize, before as isize);
    (0..before + d + after)
        .map(|o| {
            let i = o as isize - b_i; // position relative to the first source cell
            if (0..d_i).contains(&i) {
                return Some(i as usize);
            }
            match mode {
                PadMode::Constant(_) => None,
                // Mirror without the edge: -1 → 1, d → d-2 (inference keeps pads below d).
                PadMode::Reflect => Some(if i < 0 { -i } else { 2 * (d_i - 1) - i } as usize),
                PadMode::Replicate => Some(i.clamp(0, d_i - 1) as usize),
                PadMode::Circular => Some(i.rem_euclid(d_i) as usize),
            }
        })
        .collect()
}

/// Pads each axis `a` of `x` by `pads[a] = [before, after]` cells filled per `mode`
/// (NumPy `pad` modes constant / reflect / edge / wrap).
pub fn pad(pads: &[[usize; 2]], mode: &PadMode, x: In, out: &mut Out) -> Result<(), String> {
    let rank = x.dims.len();
    if rank == 0 {
        out.bytes.copy_from_slice(x.bytes);
        return Ok(());
    }
    let fill = scalar_bytes(if let PadMode::Constant(v) = mode { *v } else { 0.0 }, x.dtype);
    by_size!(x.dtype.size(), T => pad_typed::<T>(x.get::<T>(), x.dims, pads, mode, bytemuck::pod_read_unaligned(&fill), out.dims, out.get::<T>()));
    Ok(())
}

fn pad_typed<T: Pod + Send + Sync>(
    src: &[T],
    src_dims: &[usize],
    pads: &[[usize; 2]],
    mode: &PadMode,
    fill: T,
    out_dims: &[usize],
    dst: &mut [T],
) {
    let rank = out_dims.len();
    let inner = out_dims[rank - 1];
    if dst.is_empty() {
        return;
    }
    let maps: Vec<Vec<Option<usize>>> = (0..rank).map(|a| pad_sources(src_dims[a], pads[a][0], pads[a][1], mode)).collect();
    let src_strides = strides(src_dims);
    let before = pads[rank - 1][0];
    let last = &maps[rank - 1];
    let d = src_dims[rank - 1];
    let row = |r: usize, out: &mut [T]| {
        let mut rem = r;
        let mut base = 0usize;
        for a in (0..rank - 1).rev() {
            match maps[a][rem % out_dims[a]] {
                Some(i) => base += i * src_strides[a],
                None => {
                    out.fill(fill);
                    return;
                }
            }
            rem /= out_dims[a];
        }
        // The interior is one contiguous source row; only the halo goes cell by cell.
        out[before..before + d].copy_from_slice(&src[base..base + d]);
        for j in (0..before).chain(before + d..inner) {
            out[j] = last[j].map_or(fill, |i| src[base + i]);
        }
    };
    if dst.len() < PAR_MIN {
        dst.chunks_mut(inner).enumerate().for_each(|(r, o)| row(r, o));
    } else {
        dst.par_chunks_mut(inner).enumerate().for_each(|(r, o)| row(r, o));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strided read done one element at a time.
    fn naive(src: &[u32], v: &Strided) -> Vec<u32> {
        let n: usize = v.dims.iter().product();
        (0..n)
            .map(|mut o| {
                let mut off = v.offset;
                for a in (0..v.dims.len()).rev() {
                    off += (o % v.dims[a]) as isize * v.strides[a];
                    o /= v.dims[a];
                }
                src[off as usize]
            })
            .collect()
    }

    fn check(src_len: usize, v: Strided) {
        let src: Vec<u32> = (0..src_len as u32).collect();
        let mut dst = vec![0u32; v.dims.iter().product()];
        copy_strided(4, bytemuck::cast_slice(&src), &v, bytemuck::cast_slice_mut(&mut dst));
        assert_eq!(dst, naive(&src, &v), "{v:?}");
    }

    #[test]
    fn simplify_merges_and_drops_axes() {
        let v = Strided { dims: vec![2, 1, 3, 4], strides: vec![12, 99, 4, 1], offset: 5 };
        assert_eq!(v.simplified(), Strided { dims: vec![24], strides: vec![1], offset: 5 });
        let t = Strided { dims: vec![4, 3, 2], strides: vec![1, 8, 4], offset: 0 };
        assert_eq!(t.simplified(), Strided { dims: vec![4, 6], strides: vec![1, 4], offset: 0 });
    }

    #[test]
    fn every_path_matches_the_naive_read_small_and_threaded() {
        for (r, c) in [(5, 7), (300, 211)] {
            // 2-D transpose (tiled), with a batch.
            check(r * c, Strided { dims: vec![c, r], strides: vec![1, c as isize], offset: 0 });
            check(3 * r * c, Strided { dims: vec![3, c, r], strides: vec![(r * c) as isize, 1, c as isize], offset: 0 });
            // Reversed rows and a negative-step slice.
            check(r * c, Strided { dims: vec![r, c], strides: vec![c as isize, -1], offset: c as isize - 1 });
            check(r * c, Strided { dims: vec![r / 2, c], strides: vec![-2 * c as isize, 1], offset: ((r - 1) * c) as isize });
            // Broadcast inner and outer axes.
            check(c, Strided { dims: vec![r, c], strides: vec![0, 1], offset: 0 });
            check(r, Strided { dims: vec![r, c], strides: vec![1, 0], offset: 0 });
            // A general 4-D permutation.
            let (a, b) = (r / 5 + 1, 3);
            check(a * b * 4 * c, Strided {
                dims: vec![c, b, a, 4],
                strides: vec![1, (4 * c) as isize, (b * 4 * c) as isize, c as isize],
                offset: 0,
            });
        }
    }

    fn ins<'a>(dtype: DType, dims: &'a [usize], bytes: &'a [u8]) -> In<'a> {
        In { dtype, dims, bytes }
    }

    #[test]
    fn pad_and_concat_run_threaded() {
        let (r, c) = (181, 203);
        let x: Vec<f32> = (0..r * c).map(|i| i as f32).collect();
        let out_dims = [r + 3, c + 5];
        let mut out = vec![0f32; out_dims[0] * out_dims[1]];
        let mut o = Out { dtype: DType::F32, dims: &out_dims, bytes: bytemuck::cast_slice_mut(&mut out) };
        pad(&[[1, 2], [3, 2]], &PadMode::Circular, ins(DType::F32, &[r, c], bytemuck::cast_slice(&x)), &mut o).unwrap();
        for i in 0..out_dims[0] {
            for j in 0..out_dims[1] {
                let (si, sj) = ((i + r - 1) % r, (j + c - 3) % c);
                assert_eq!(out[i * out_dims[1] + j], x[si * c + sj]);
            }
        }
        let cat_dims = [r, 2 * c];
        let mut cat = vec![0f32; 2 * r * c];
        let mut o = Out { dtype: DType::F32, dims: &cat_dims, bytes: bytemuck::cast_slice_mut(&mut cat) };
        let x_dims = [r, c];
        let xi = ins(DType::F32, &x_dims, bytemuck::cast_slice(&x));
        concat(1, &[xi, xi], &mut o).unwrap();
        assert!((0..r).all(|i| cat[i * 2 * c..i * 2 * c + c] == x[i * c..(i + 1) * c] && cat[i * 2 * c + c..(i + 1) * 2 * c] == x[i * c..(i + 1) * c]));
    }

    #[test]
    fn slice_past_the_extent_is_an_error() {
        let x = [0u8; 4];
        let mut out = [0u8; 3];
        let mut o = Out { dtype: DType::U8, dims: &[3], bytes: &mut out };
        let e = slice(0, 1, 2, ins(DType::U8, &[4], &x), &mut o).unwrap_err();
        assert!(e.contains("start 1 with step 2 and len 3"), "{e}");
    }
}
