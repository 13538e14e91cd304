//! Walks along one axis: the running scans (`Cumsum`, `CumProd`, `CumMax`, `CumsumBackward`)
//! and the arg-extrema (`ArgMax`, `ArgMin`).
//!
//! `x` is seen as `[outer, l, inner]` around the axis; each of the `outer` blocks is
//! independent, so large inputs split across threads by block.

use super::elem::{by_dtype, lanes, Acc, Elem, OrdAcc};
use crate::kernels::PAR_MIN;
use crate::view::{In, Out};
use num_complex::Complex32;
use rayon::prelude::*;

/// Applies `block(x_block, out_block)` to each `[l, inner]` block, in parallel when large.
fn per_block<A: Sync, B: Send>(x: &[A], out: &mut [B], xn: usize, on: usize, block: impl Fn(&[A], &mut [B]) + Sync) {
    if xn == 0 || on == 0 {
        return;
    }
    if x.len() >= PAR_MIN && x.len() / xn > 1 {
        out.par_chunks_mut(on).zip(x.par_chunks(xn)).for_each(|(o, x)| block(x, o));
    } else {
        out.chunks_mut(on).zip(x.chunks(xn)).for_each(|(o, x)| block(x, o));
    }
}

/// The running fold of every lane of a `[l, inner]` block: inclusive `y_i = x_0 ⊕ … ⊕ x_i`,
/// exclusive `y_i = x_0 ⊕ … ⊕ x_{i−1}` (`y_0 = id`); `reverse` runs from the end.
fn scan_block<E: Elem>(
    x: &[E],
    y: &mut [E],
    (l, inner): (usize, usize),
    (exclusive, reverse): (bool, bool),
    id: E::Acc,
    f: &(impl Fn(E::Acc, E::Acc) -> E::Acc + Sync),
) {
    let mut acc = vec![id; inner];
    for step in 0..l {
        let j = if reverse { l - 1 - step } else { step };
        let (xr, yr) = (&x[j * inner..(j + 1) * inner], &mut y[j * inner..(j + 1) * inner]);
        for ((a, &v), o) in acc.iter_mut().zip(xr).zip(yr) {
            if exclusive {
                *o = E::store(*a);
                *a = f(*a, v.load());
            } else {
                *a = f(*a, v.load());
                *o = E::store(*a);
            }
        }
    }
}

fn scan<E: Elem>(axis: i32, (exclusive, reverse): (bool, bool), x: In, out: &mut Out, id: E::Acc, f: impl Fn(E::Acc, E::Acc) -> E::Acc + Sync) -> Result<(), String> {
    let axis = rlx_ir::norm_axis(axis as i64, x.dims.len())?;
    let (_, l, inner) = lanes(x.dims, axis);
    let n = l * inner;
    per_block(x.get::<E>(), out.get::<E>(), n, n, |x, y| scan_block(x, y, (l, inner), (exclusive, reverse), id, &f));
    Ok(())
}

/// `Cumsum{axis, exclusive}`: running sum along `axis` (Python-style), any dtype but Bool;
/// `out` like `x`. Halves accumulate in f32, integers wrap.
pub fn cumsum(axis: i32, exclusive: bool, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => scan::<E>(axis, (exclusive, false), x, out, Acc::ZERO, Acc::add),
        C64 => scan::<Complex32>(axis, (exclusive, false), x, out, Acc::ZERO, Acc::add))
}

/// `CumsumBackward{axis, exclusive}`: the reverse running sum of `ȳ` — inclusive
/// `Σ_{j≥i}`, exclusive `Σ_{j>i}` — for float and C64 `ȳ`; `out` like `ȳ`.
pub fn cumsum_backward(axis: i32, exclusive: bool, dy: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(dy.dtype, E => scan::<E>(axis, (exclusive, true), dy, out, Acc::ZERO, Acc::add),
        C64 => scan::<Complex32>(axis, (exclusive, true), dy, out, Acc::ZERO, Acc::add))
}

/// `CumProd{axis, exclusive}`: running product (exclusive starts at 1), any dtype but Bool.
pub fn cum_prod(axis: i32, exclusive: bool, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => scan::<E>(axis, (exclusive, false), x, out, Acc::ONE, Acc::mul),
        C64 => scan::<Complex32>(axis, (exclusive, false), x, out, Acc::ONE, Acc::mul))
}

/// `CumMax{axis, exclusive}`: running maximum, propagating NaN; exclusive starts at −inf
/// (the integer minimum, false). Ordered dtypes only.
pub fn cum_max(axis: i32, exclusive: bool, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => scan::<E>(axis, (exclusive, false), x, out, <E as Elem>::Acc::LOWEST, OrdAcc::max),
        C64 => Err("CumMax needs ordered values, not c64".into()))
}

/// The index along `l` of each lane's extreme in a `[l, inner]` block: the first element
/// `better` than all before it, where NaN beats everything and is never beaten (`better`
/// only sees numbers).
fn arg_block<E: Elem>(x: &[E], y: &mut [i64], (l, inner): (usize, usize), better: impl Fn(E::Acc, E::Acc) -> bool)
where
    E::Acc: OrdAcc,
{
    let mut best: Vec<E::Acc> = x[..inner].iter().map(|v| v.load()).collect();
    y.iter_mut().for_each(|i| *i = 0);
    for j in 1..l {
        for ((b, i), &v) in best.iter_mut().zip(y.iter_mut()).zip(&x[j * inner..(j + 1) * inner]) {
            let v = v.load();
            if !b.is_nan() && (v.is_nan() || better(v, *b)) {
                *b = v;
                *i = j as i64;
            }
        }
    }
}

fn arg<E: Elem>(axis: usize, x: In, out: &mut Out, better: impl Fn(E::Acc, E::Acc) -> bool + Sync) -> Result<(), String>
where
    E::Acc: OrdAcc,
{
    let (_, l, inner) = lanes(x.dims, axis);
    if l == 0 && inner > 0 && out.numel() > 0 {
        return Err(format!("the axis {axis} of {:?} is empty: no extreme to index", x.dims));
    }
    per_block(x.get::<E>(), out.get::<i64>(), l * inner, inner, |x, y| arg_block::<E>(x, y, (l, inner), &better));
    Ok(())
}

/// `ArgMax{axis}`: I64 index of the maximum along `axis` (`keep_dim` changes no byte); ties
/// give the lowest index, and the first NaN wins (`np.argmax`). Ordered dtypes.
pub fn arg_max(axis: usize, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => arg::<E>(axis, x, out, |a, b| OrdAcc::total_cmp(a, b).is_gt()), C64 => Err("ArgMax needs ordered values, not c64".into()))
}

/// `ArgMin{axis}`: as [`arg_max`] for the minimum.
pub fn arg_min(axis: usize, x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => arg::<E>(axis, x, out, |a, b| OrdAcc::total_cmp(a, b).is_lt()), C64 => Err("ArgMin needs ordered values, not c64".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    fn run_f32(f: impl Fn(In, &mut Out) -> Result<(), String>, x: &[f32], dims: &[usize]) -> Vec<f32> {
        let mut y = vec![0f32; x.len()];
        let mut o = Out { dtype: DType::F32, dims, bytes: bytemuck::cast_slice_mut(&mut y) };
        f(In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) }, &mut o).unwrap();
        y
    }

    #[test]
    fn scans_along_any_axis() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(run_f32(|x, o| cumsum(-1, false, x, o), &x, &[2, 3]), [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        assert_eq!(run_f32(|x, o| cumsum(0, true, x, o), &x, &[2, 3]), [0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
        assert_eq!(run_f32(|x, o| cumsum_backward(1, false, x, o), &x, &[2, 3]), [6.0, 5.0, 3.0, 15.0, 11.0, 6.0]);
        assert_eq!(run_f32(|x, o| cumsum_backward(1, true, x, o), &x, &[2, 3]), [5.0, 3.0, 0.0, 11.0, 6.0, 0.0]);
        assert_eq!(run_f32(|x, o| cum_prod(1, true, x, o), &x, &[2, 3]), [1.0, 1.0, 2.0, 1.0, 4.0, 20.0]);
        let m = [1.0, f32::NAN, 0.0, -1.0, 3.0, 2.0];
        let y = run_f32(|x, o| cum_max(1, false, x, o), &m, &[2, 3]);
        assert!(y[0] == 1.0 && y[1].is_nan() && y[2].is_nan());
        assert_eq!(&y[3..], [-1.0, 3.0, 3.0]);
        assert_eq!(run_f32(|x, o| cum_max(1, true, x, o), &m, &[2, 3])[3..], [f32::NEG_INFINITY, -1.0, 3.0]);
    }

    #[test]
    fn exclusive_integer_cummax_starts_at_the_minimum() {
        let x: [i16; 3] = [5, -7, 9];
        let mut y = [0i16; 3];
        let mut o = Out { dtype: DType::I16, dims: &[3], bytes: bytemuck::cast_slice_mut(&mut y) };
        cum_max(0, true, In { dtype: DType::I16, dims: &[3], bytes: bytemuck::cast_slice(&x) }, &mut o).unwrap();
        assert_eq!(y, [i16::MIN, 5, 5]);
    }

    fn arg_f32(max: bool, x: &[f32], dims: &[usize], axis: usize) -> Vec<i64> {
        let out_dims: Vec<usize> = dims.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &d)| d).collect();
        let mut y = vec![-1i64; out_dims.iter().product()];
        let mut o = Out { dtype: DType::I64, dims: &out_dims, bytes: bytemuck::cast_slice_mut(&mut y) };
        let x = In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) };
        if max { arg_max(axis, x, &mut o) } else { arg_min(axis, x, &mut o) }.unwrap();
        y
    }

    #[test]
    fn arg_extrema_take_the_first_tie_and_the_first_nan() {
        let x = [3.0, 1.0, 3.0, 1.0, f32::NAN, 0.0, f32::NAN, 2.0];
        assert_eq!(arg_f32(true, &x, &[2, 4], 1), [0, 0]);
        assert_eq!(arg_f32(false, &x, &[2, 4], 1), [1, 0]);
        assert_eq!(arg_f32(true, &x, &[2, 4], 0), [1, 0, 1, 1]);
        assert_eq!(arg_f32(false, &x, &[2, 4], 0), [1, 1, 1, 0]);
        assert_eq!(arg_f32(true, &[f32::NAN, f32::NAN, 1.0], &[3], 0), [0]);
    }
}
