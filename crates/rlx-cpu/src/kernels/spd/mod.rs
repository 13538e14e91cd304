//! SPD-manifold kernels (OPS.md §16; backward ops §22): SPDNet layers, Riemannian batch-norm
//! and AIRM geometry. `BiMap` has no kernel (it lowers to `MatMul` + `Transpose`).
//!
//! Contract shared by every kernel here: matrices are row-major `[n,n]` (batches `[B,n,n]`),
//! F32 or F64, one dtype across all operands and outputs; everything is computed in f64 and
//! cast back. Every matrix function is spectral (`f(X) = U·f(Λ)·Uᵀ`, [`spectral`]) on the
//! symmetric part `½(X + Xᵀ)` of its argument, and every gradient is assembled from
//! Daleckii–Krein adjoints. Batches run across threads when large.
//!
//! Data-dependent errors (never NaN): a non-finite entry in any operand; a matrix outside the
//! domain its op needs, reported with the offending eigenvalue:
//! - floored, so any symmetric input is accepted: `ReEig` (`max(λ, eps)`), `LogEig`
//!   (`log max(λ, eps)`) and their backward ops (which take the saved `λ`, `U` as given);
//! - `M` and `G` of `SpdBatchNorm` and its backward ops must be SPD (`λ > 0`); eigenvalues in
//!   `(0, eps)` are then floored at `eps` inside `M^{−1/2}` and `G^{1/2}`;
//! - SPD (`λ > 0`): every `X_i` of the Karcher means, `P` and `X` of `SpdLogMap`, `P` of
//!   `SpdExpMap`, `P` and `Q` of `SpdParallelTransport`, `Logm`/`Invsqrtm` inputs of
//!   `SpdMatrixFnBatch`, the same operands of the backward ops, and `Sqrtm`'s input in its
//!   backward op (the derivative of `√λ` is unbounded at 0);
//! - positive semi-definite (`λ ≥ 0`): `Sqrtm`'s input in the forward op;
//! - any symmetric matrix: `V` of `SpdExpMap` and `Expm` inputs, unless `exp` overflows f64;
//! - Karcher weights must be ≥ 0 with a positive sum.
//!
//! A Karcher mean that has not met `tol` after `iters` steps returns its last iterate.

mod geometry;
mod layers;
mod mat;
mod spectral;

pub use geometry::*;
pub use layers::*;

use super::PAR_MIN;
use crate::view::{In, Out};
use mat::Mat;
use rayon::prelude::*;
use rlx_ir::DType;

/// The elements of `x` in f64; a non-finite entry is an error naming `name` and its index.
fn read(name: &str, x: In) -> Result<Vec<f64>, String> {
    let v: Vec<f64> = match x.dtype {
        DType::F32 => x.get::<f32>().iter().map(|&v| f64::from(v)).collect(),
        DType::F64 => x.get::<f64>().to_vec(),
        d => return Err(format!("{name} must be f32 or f64, got {d}")),
    };
    match v.iter().position(|v| !v.is_finite()) {
        None => Ok(v),
        Some(i) => {
            let mut idx = vec![0; x.dims.len()];
            let mut rest = i;
            for (k, &d) in x.dims.iter().enumerate().rev() {
                idx[k] = rest % d;
                rest /= d;
            }
            Err(format!("{name}{idx:?} is {}", v[i]))
        }
    }
}

/// The `[.., n, n]` operand `x` as its `n×n` slices.
fn mats(name: &str, x: In) -> Result<Vec<Mat>, String> {
    let n = x.dims.last().copied().unwrap_or(1);
    let count: usize = x.dims[..x.dims.len().saturating_sub(2)].iter().product();
    let v = read(name, x)?;
    Ok((0..count).map(|i| Mat::new(n, v[i * n * n..(i + 1) * n * n].to_vec())).collect())
}

/// The `[n,n]` operand `x`.
fn mat(name: &str, x: In) -> Result<Mat, String> {
    let n = x.dims.last().copied().unwrap_or(1);
    Ok(Mat::new(n, read(name, x)?))
}

/// Writes `values` (f64) into `out`, rounding to its dtype.
fn write<'a>(out: &mut Out, values: impl IntoIterator<Item = &'a f64>) {
    match out.dtype {
        DType::F32 => out.get::<f32>().iter_mut().zip(values).for_each(|(o, &v)| *o = v as f32),
        _ => out.get::<f64>().iter_mut().zip(values).for_each(|(o, &v)| *o = v),
    }
}

/// Writes matrices one after another into `out`.
fn write_mats(out: &mut Out, ms: &[Mat]) {
    write(out, ms.iter().flat_map(|m| &m.a));
}

/// `f(0), …, f(count − 1)` for work on `n×n` matrices, across threads when the batch is big
/// enough; the first error by index wins.
fn per_slice<T: Send>(count: usize, n: usize, f: impl Fn(usize) -> Result<T, String> + Sync) -> Result<Vec<T>, String> {
    let results: Vec<Result<T, String>> = if count > 1 && count * n * n * n >= PAR_MIN / 8 {
        (0..count).into_par_iter().map(&f).collect()
    } else {
        (0..count).map(&f).collect()
    };
    results.into_iter().collect()
}
