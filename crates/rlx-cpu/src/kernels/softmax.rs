//! Softmax and the cross-entropy losses (OPS.md §11; `SoftmaxCrossEntropyBackward` §22).
//!
//! Float inputs only; halves compute in f32, f32 and f64 in themselves. Everything is
//! max-subtracted: `softmax = exp(x − m) / Σ exp(x − m)`, `logsumexp = m + ln Σ exp(x − m)`.
//! The losses see logits as rows `[rows, C]` (the flattened leading axes).

use super::real::{Real, Scalar};
use super::reduce::elem::{lanes, Elem};
use super::PAR_MIN;
use crate::view::{In, Out};
use half::{bf16, f16};
use rayon::prelude::*;
use rlx_ir::DType;

/// Runs `$body` with `$E` bound to the element type of a float dtype.
macro_rules! by_real {
    ($dtype:expr, $E:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $E = f32;
                $body
            }
            DType::F64 => {
                type $E = f64;
                $body
            }
            DType::F16 => {
                type $E = f16;
                $body
            }
            DType::BF16 => {
                type $E = bf16;
                $body
            }
            d => Err(format!("this kernel runs on float dtypes, not {d}")),
        }
    };
}

/// The larger of two values, NaN if either is (one compare-and-select, which vectorizes).
fn max_nan<A: Real>(a: A, b: A) -> A {
    if b > a || b.is_nan() { b } else { a }
}

/// The maximum of a row, NaN if it holds one.
fn row_max<A: Real>(row: impl Iterator<Item = A>) -> A {
    row.fold(A::of(f64::NEG_INFINITY), max_nan)
}

/// `(max, ln Σ exp(x − max))` of a row; the max propagates NaN. A row whose max is not
/// finite gives `(max, 0)`, so `logsumexp` is that max (−inf for an all −inf row).
fn max_and_log_sum<A: Real>(row: impl Iterator<Item = A> + Clone) -> (A, A) {
    let m = row_max(row.clone());
    if m.is_nan() || m.abs() == A::of(f64::INFINITY) {
        return (m, A::ZERO);
    }
    let s = row.fold(A::ZERO, |s, v| s + (v - m).exp());
    (m, s.ln())
}

/// Applies `f(block_index, x_block, out_block)` over blocks, in parallel when large.
fn blocks<X: Sync, Y: Send>(x: &[X], y: &mut [Y], (xn, yn): (usize, usize), f: impl Fn(usize, &[X], &mut [Y]) + Sync) {
    if xn == 0 || yn == 0 {
        return;
    }
    if x.len() >= PAR_MIN && x.len() > xn {
        y.par_chunks_mut(yn).zip(x.par_chunks(xn)).enumerate().for_each(|(i, (y, x))| f(i, x, y));
    } else {
        y.chunks_mut(yn).zip(x.chunks(xn)).enumerate().for_each(|(i, (y, x))| f(i, x, y));
    }
}

fn softmax_as<E: Elem>(axis: usize, x: In, out: &mut Out)
where
    E::Acc: Real,
{
    let (_, l, inner) = lanes(x.dims, axis);
    let n = l * inner;
    blocks(x.get::<E>(), out.get::<E>(), (n, n), |_, x, y| {
        if inner == 1 {
            let m = row_max(x.iter().map(|v| v.load()));
            let e: Vec<E::Acc> = x.iter().map(|v| (v.load() - m).exp()).collect();
            let s = e.iter().fold(<E::Acc as Real>::ZERO, |s, &v| s + v);
            y.iter_mut().zip(&e).for_each(|(y, &e)| *y = E::store(e / s));
            return;
        }
        // Lanes are columns of the [l, inner] block: walk it row by row, all columns at once.
        let mut m = vec![<E::Acc as Scalar>::of(f64::NEG_INFINITY); inner];
        for row in x.chunks(inner) {
            m.iter_mut().zip(row).for_each(|(m, v)| *m = max_nan(*m, v.load()));
        }
        let e: Vec<E::Acc> = x.iter().enumerate().map(|(i, v)| (v.load() - m[i % inner]).exp()).collect();
        let mut s = vec![<E::Acc as Real>::ZERO; inner];
        for row in e.chunks(inner) {
            s.iter_mut().zip(row).for_each(|(s, &v)| *s = *s + v);
        }
        y.iter_mut().zip(&e).enumerate().for_each(|(i, (y, &e))| *y = E::store(e / s[i % inner]));
    });
}

/// `Softmax{axis}`: `exp(x − max) / Σ exp(x − max)` along `axis` (Python-style); float
/// dtypes, `out` like `x`. A row holding NaN, or only −inf, gives NaN.
pub fn softmax(axis: i32, x: In, out: &mut Out) -> Result<(), String> {
    let axis = rlx_ir::norm_axis(axis as i64, x.dims.len())?;
    by_real!(x.dtype, E => {
        softmax_as::<E>(axis, x, out);
        Ok(())
    })
}

/// Class ids of an index tensor (any integer dtype, or F32 truncated toward zero).
fn class_ids(labels: In) -> Result<Vec<i64>, String> {
    Ok(match labels.dtype {
        DType::I8 => labels.get::<i8>().iter().map(|&v| v as i64).collect(),
        DType::U8 => labels.get::<u8>().iter().map(|&v| v as i64).collect(),
        DType::I16 => labels.get::<i16>().iter().map(|&v| v as i64).collect(),
        DType::I32 => labels.get::<i32>().iter().map(|&v| v as i64).collect(),
        DType::I64 => labels.get::<i64>().to_vec(),
        DType::U32 => labels.get::<u32>().iter().map(|&v| v as i64).collect(),
        DType::U16 => labels.get::<u16>().iter().map(|&v| v as i64).collect(),
        DType::U64 => labels.get::<u64>().iter().map(|&v| i64::try_from(v).unwrap_or(i64::MAX)).collect(),
        DType::F32 => {
            let v = labels.get::<f32>();
            if let Some(r) = v.iter().position(|x| !x.is_finite()) {
                return Err(format!("row {r}: label {} is not a class id", v[r]));
            }
            v.iter().map(|&x| x as i64).collect()
        }
        d => return Err(format!("labels must be integer class ids, not {d}")),
    })
}

/// Per row: `Some(label)` for a class in `[0, C)`, `None` for `ignore_index`; any other
/// label is an error naming the first such row (checked before anything is computed).
fn checked_labels(labels: In, c: usize, ignore_index: Option<i64>) -> Result<Vec<Option<usize>>, String> {
    class_ids(labels)?
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            if Some(l) == ignore_index {
                Ok(None)
            } else if (0..c as i64).contains(&l) {
                Ok(Some(l as usize))
            } else {
                let ignore = ignore_index.map(|i| format!(" and is not ignore_index {i}")).unwrap_or_default();
                Err(format!("row {r}: label {l} is outside the classes [0, {c}){ignore}"))
            }
        })
        .collect()
}

fn classes(logits: &In) -> usize {
    logits.dims.last().copied().unwrap_or(1)
}

/// `loss[r] = logsumexp(logits[r]) − logits[r, label[r]]`, 0 for ignored rows.
fn sparse_loss<E: Elem>(logits: In, labels: &[Option<usize>], out: &mut Out)
where
    E::Acc: Real,
{
    let c = classes(&logits);
    blocks(logits.get::<E>(), out.get::<E>(), (c, 1), |r, x, y| {
        y[0] = match labels[r] {
            None => E::store(<E::Acc as Real>::ZERO),
            Some(l) => {
                let (m, ls) = max_and_log_sum(x.iter().map(|v| v.load()));
                E::store(m + ls - x[l].load())
            }
        };
    });
}

/// `SoftmaxCrossEntropyWithLogits{ignore_index}`: `logits [.., C]` float, `labels [..]`
/// integer (or F32) class ids; `out [..]` per-row `logsumexp − logit[label]`, 0 where the
/// label is `ignore_index`. Any other label outside `[0, C)` is an error naming its row.
pub fn softmax_cross_entropy_with_logits(ignore_index: Option<i64>, logits: In, labels: In, out: &mut Out) -> Result<(), String> {
    let labels = checked_labels(labels, classes(&logits), ignore_index)?;
    by_real!(logits.dtype, E => {
        sparse_loss::<E>(logits, &labels, out);
        Ok(())
    })
}

fn dense_loss<E: Elem>(logits: In, targets: In, out: &mut Out)
where
    E::Acc: Real,
{
    let c = classes(&logits);
    let t = targets.get::<E>();
    blocks(logits.get::<E>(), out.get::<E>(), (c, 1), |r, x, y| {
        let (m, ls) = max_and_log_sum(x.iter().map(|v| v.load()));
        let lse = m + ls;
        let (mut ts, mut tx) = (<E::Acc as Real>::ZERO, <E::Acc as Real>::ZERO);
        for (&xv, &tv) in x.iter().zip(&t[r * c..(r + 1) * c]) {
            ts = ts + tv.load();
            tx = tx + tv.load() * xv.load();
        }
        y[0] = E::store(lse * ts - tx);
    });
}

/// `SoftmaxCrossEntropy`: `logits, targets [.., C]` of one float dtype; `out [..]` per-row
/// `−Σ_c t·log_softmax(logits) = lse·Σ_c t − Σ_c t·logits` (targets need not sum to 1).
pub fn softmax_cross_entropy(logits: In, targets: In, out: &mut Out) -> Result<(), String> {
    by_real!(logits.dtype, E => {
        dense_loss::<E>(logits, targets, out);
        Ok(())
    })
}

fn sparse_grad<E: Elem>(logits: In, labels: &[Option<usize>], d_loss: In, out: &mut Out)
where
    E::Acc: Real,
{
    let c = classes(&logits);
    let dl = d_loss.get::<E>();
    blocks(logits.get::<E>(), out.get::<E>(), (c, c), |r, x, y| {
        let Some(l) = labels[r] else {
            y.iter_mut().for_each(|y| *y = E::store(<E::Acc as Real>::ZERO));
            return;
        };
        let (m, ls) = max_and_log_sum(x.iter().map(|v| v.load()));
        let g = dl[r].load();
        for (j, (y, v)) in y.iter_mut().zip(x).enumerate() {
            let p = (v.load() - m - ls).exp();
            let hot = if j == l { <E::Acc as Real>::ONE } else { <E::Acc as Real>::ZERO };
            *y = E::store((p - hot) * g);
        }
    });
}

/// `SoftmaxCrossEntropyBackward{ignore_index}`: inputs `logits [.., C]`, `labels [..]`,
/// `d_loss [..]`; `out` like `logits`, `(softmax(logits[r]) − onehot(label[r]))·d_loss[r]`.
/// Rows whose label is `ignore_index` or outside `[0, C)` get 0 (OPS.md §22).
pub fn softmax_cross_entropy_backward(ignore_index: Option<i64>, logits: In, labels: In, d_loss: In, out: &mut Out) -> Result<(), String> {
    let c = classes(&logits);
    let labels: Vec<Option<usize>> = class_ids(labels)?
        .into_iter()
        .map(|l| (Some(l) != ignore_index && (0..c as i64).contains(&l)).then_some(l as usize))
        .collect();
    by_real!(logits.dtype, E => {
        sparse_grad::<E>(logits, &labels, d_loss, out);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_in<'a>(x: &'a [f32], dims: &'a [usize]) -> In<'a> {
        In { dtype: DType::F32, dims, bytes: bytemuck::cast_slice(x) }
    }

    #[test]
    fn softmax_over_rows_and_columns_agree() {
        let x = [1.0f32, 2.0, 3.0, -1.0, 0.0, 1000.0];
        let mut rows = [0f32; 6];
        softmax(-1, f32_in(&x, &[2, 3]), &mut Out { dtype: DType::F32, dims: &[2, 3], bytes: bytemuck::cast_slice_mut(&mut rows) }).unwrap();
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        let s: f32 = e.iter().sum();
        assert!((rows[0] - e[0] / s).abs() < 1e-7 && (rows[2] - e[2] / s).abs() < 1e-7);
        assert_eq!(&rows[3..], [0.0, 0.0, 1.0]);
        // The transposed layout, softmax over axis 0.
        let xt = [1.0f32, -1.0, 2.0, 0.0, 3.0, 1000.0];
        let mut cols = [0f32; 6];
        softmax(0, f32_in(&xt, &[3, 2]), &mut Out { dtype: DType::F32, dims: &[3, 2], bytes: bytemuck::cast_slice_mut(&mut cols) }).unwrap();
        assert_eq!([cols[0], cols[2], cols[4], cols[1], cols[3], cols[5]], rows);
    }

    #[test]
    fn bad_labels_name_their_row() {
        let x = [0.0f32; 6];
        let labels = [1i64, -100, 3];
        let mut y = [0f32; 3];
        let l = In { dtype: DType::I64, dims: &[3], bytes: bytemuck::cast_slice(&labels) };
        let mut out = Out { dtype: DType::F32, dims: &[3], bytes: bytemuck::cast_slice_mut(&mut y) };
        let e = softmax_cross_entropy_with_logits(Some(-100), f32_in(&x, &[3, 2]), l, &mut out).unwrap_err();
        assert_eq!(e, "row 2: label 3 is outside the classes [0, 2) and is not ignore_index -100");
        let ok = [1i64, -100, 0];
        let l = In { dtype: DType::I64, dims: &[3], bytes: bytemuck::cast_slice(&ok) };
        softmax_cross_entropy_with_logits(Some(-100), f32_in(&x, &[3, 2]), l, &mut out).unwrap();
        assert_eq!(y, [2f32.ln(), 0.0, 2f32.ln()]);
    }
}
