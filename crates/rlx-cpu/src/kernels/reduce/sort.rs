//! `TopK`, `Sort` and `ArgSort`: orderings of lanes, with NaN the largest key and equal keys
//! kept in input order (a stable sort, in both directions).
//!
//! Keys are compared in the accumulator type (f32 for halves); values are moved as bytes of
//! the element size, so the output holds exactly the input's elements.

use super::elem::{by_dtype, lanes, Elem, OrdAcc};
use crate::kernels::PAR_MIN;
use crate::view::{In, Out};
use rayon::prelude::*;
use std::cmp::Ordering;

/// Compares lane positions `a` and `b` by key (NaN largest; reversed if `descending`),
/// then by position, which makes any sort stable.
fn by_key<A: OrdAcc>(keys: &[A], descending: bool) -> impl Fn(&usize, &usize) -> Ordering + '_ {
    move |&a, &b| {
        let c = keys[a].total_cmp(keys[b]);
        if descending { c.reverse() } else { c }.then(a.cmp(&b))
    }
}

/// Runs `f(i, chunk)` over `out` cut into chunks of `n` bytes, in parallel when `work` is large.
fn chunks(out: &mut [u8], n: usize, work: usize, f: impl Fn(usize, &mut [u8]) + Sync) {
    if n == 0 {
        return;
    }
    if work >= PAR_MIN {
        out.par_chunks_mut(n).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        out.chunks_mut(n).enumerate().for_each(|(i, c)| f(i, c));
    }
}

fn sort_lanes<E: Elem>(axis: usize, descending: bool, x: In, out: &mut Out, args: bool) -> Result<(), String>
where
    E::Acc: OrdAcc,
{
    let (_, l, inner) = lanes(x.dims, axis);
    let (size, xs, xb) = (x.dtype.size(), x.get::<E>(), x.bytes);
    let osz = if args { 8 } else { size };
    chunks(out.bytes, l * inner * osz, xs.len(), |o, yb| {
        let (mut keys, mut idx) = (Vec::with_capacity(l), Vec::with_capacity(l));
        for j in 0..inner {
            keys.clear();
            keys.extend((0..l).map(|t| xs[(o * l + t) * inner + j].load()));
            idx.clear();
            idx.extend(0..l);
            idx.sort_unstable_by(by_key(&keys, descending));
            for (t, &s) in idx.iter().enumerate() {
                let dst = &mut yb[(t * inner + j) * osz..][..osz];
                if args {
                    dst.copy_from_slice(&(s as i64).to_le_bytes());
                } else {
                    dst.copy_from_slice(&xb[((o * l + s) * inner + j) * size..][..size]);
                }
            }
        }
    });
    Ok(())
}

/// `Sort{axis, descending}`: `x` stably sorted along `axis`; NaNs last ascending, first
/// descending. Ordered dtypes; `out` like `x`.
pub fn sort(axis: usize, descending: bool, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => sort_lanes::<E>(axis, descending, x, out, false), C64 => Err("Sort needs ordered values, not c64".into()))
}

/// `ArgSort{axis, descending}`: the I64 permutation that [`sort`] applies along `axis`.
pub fn arg_sort(axis: usize, descending: bool, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => sort_lanes::<E>(axis, descending, x, out, true), C64 => Err("ArgSort needs ordered values, not c64".into()))
}

fn top_k_rows<E: Elem>(k: usize, x: In, values: &mut Out, indices: &mut Out) -> Result<(), String>
where
    E::Acc: OrdAcc,
{
    let l = *x.dims.last().ok_or("TopK needs an axis")?;
    if k > l {
        return Err(format!("k = {k} exceeds the last dim {l} of {:?}", x.dims));
    }
    if k == 0 || x.bytes.is_empty() {
        return Ok(());
    }
    let (size, xs, xb) = (x.dtype.size(), x.get::<E>(), x.bytes);
    let row = |r: usize, vals: &mut [u8], ids: &mut [i64]| {
        let keys: Vec<E::Acc> = xs[r * l..(r + 1) * l].iter().map(|v| v.load()).collect();
        let mut idx: Vec<usize> = (0..l).collect();
        let cmp = by_key(&keys, true);
        if k < l {
            idx.select_nth_unstable_by(k - 1, &cmp);
        }
        idx[..k].sort_unstable_by(&cmp);
        for (j, &s) in idx[..k].iter().enumerate() {
            ids[j] = s as i64;
            vals[j * size..(j + 1) * size].copy_from_slice(&xb[(r * l + s) * size..][..size]);
        }
    };
    let ids = indices.get::<i64>();
    if xs.len() >= PAR_MIN {
        values.bytes.par_chunks_mut(k * size).zip(ids.par_chunks_mut(k)).enumerate().for_each(|(r, (v, i))| row(r, v, i));
    } else {
        values.bytes.chunks_mut(k * size).zip(ids.chunks_mut(k)).enumerate().for_each(|(r, (v, i))| row(r, v, i));
    }
    Ok(())
}

/// `TopK{k}`: per row of the last axis, the `k` largest entries in descending order into
/// `values` (`x`'s dtype) and their I64 positions into `indices`; ties → smaller index, NaN
/// largest (ONNX `TopK`, `torch.topk`). Ordered dtypes.
pub fn top_k(k: usize, x: In, values: &mut Out, indices: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => top_k_rows::<E>(k, x, values, indices), C64 => Err("TopK needs ordered values, not c64".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    const NAN: f32 = f32::NAN;

    fn sorted(x: &[f32], dims: &[usize], axis: usize, descending: bool) -> (Vec<f32>, Vec<i64>) {
        let xin = In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) };
        let (mut v, mut i) = (vec![0f32; x.len()], vec![0i64; x.len()]);
        sort(axis, descending, xin, &mut Out { dtype: DType::F32, dims, bytes: bytemuck::cast_slice_mut(&mut v) }).unwrap();
        arg_sort(axis, descending, xin, &mut Out { dtype: DType::I64, dims, bytes: bytemuck::cast_slice_mut(&mut i) }).unwrap();
        (v, i)
    }

    fn same(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn sorts_are_stable_with_nan_largest() {
        let x = [2.0, NAN, 1.0, 2.0, -0.0, 0.0];
        let (v, i) = sorted(&x, &[6], 0, false);
        assert!(same(&v, &[-0.0, 0.0, 1.0, 2.0, 2.0, NAN]), "{v:?}");
        assert_eq!(i, [4, 5, 2, 0, 3, 1]);
        let (v, i) = sorted(&x, &[6], 0, true);
        assert!(same(&v, &[NAN, 2.0, 2.0, 1.0, -0.0, 0.0]), "{v:?}");
        assert_eq!(i, [1, 0, 3, 2, 4, 5]);
    }

    #[test]
    fn sorts_along_a_middle_axis() {
        // [2, 3, 2]: sort along axis 1.
        let x = [3.0, 0.0, 1.0, 5.0, 2.0, 4.0, 9.0, 8.0, 7.0, 6.0, 8.0, 7.0];
        let (v, i) = sorted(&x, &[2, 3, 2], 1, false);
        assert_eq!(v, [1.0, 0.0, 2.0, 4.0, 3.0, 5.0, 7.0, 6.0, 8.0, 7.0, 9.0, 8.0]);
        assert_eq!(i, [1, 0, 2, 2, 0, 1, 1, 1, 2, 2, 0, 0]);
    }

    #[test]
    fn top_k_orders_ties_by_index() {
        let x = [1.0, 3.0, 3.0, NAN, 0.5, /* row 2 */ 4.0, 4.0, 4.0, -1.0, 5.0];
        let dims = [2, 5];
        let (mut v, mut i) = (vec![0f32; 6], vec![0i64; 6]);
        top_k(
            3,
            In { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice(&x) },
            &mut Out { dtype: DType::F32, dims: &[2, 3], bytes: bytemuck::cast_slice_mut(&mut v) },
            &mut Out { dtype: DType::I64, dims: &[2, 3], bytes: bytemuck::cast_slice_mut(&mut i) },
        )
        .unwrap();
        assert!(same(&v, &[NAN, 3.0, 3.0, 5.0, 4.0, 4.0]), "{v:?}");
        assert_eq!(i, [3, 1, 2, 4, 0, 1]);
    }
}
