//! Signal processing and complex numbers (OPS.md §17 and the signal rows of §22).
//!
//! Real spectra use the 2N real-block layout along the last axis (`[re_0..re_{N−1},
//! im_0..im_{N−1}]`), C64 tensors interleaved `Complex32`. The transforms and the spectral
//! ops compute in f64 (OPS.md §0's host FFT convention) and round once into the output dtype;
//! the C64 elementwise ops work per element.

mod fft;
mod mel;
mod partitioned;

pub use fft::{fft, fft_butterfly_stage};
pub use mel::{log_mel, log_mel_backward, welch_peaks};
pub use partitioned::partitioned_conv;

use super::{par_map, par_map2, PAR_MIN};
use crate::view::{In, Out};
use half::{bf16, f16};
use num_complex::Complex32;
use rayon::prelude::*;
use rlx_ir::DType;

/// Calls `f(i, row_i)` for each `len`-long row of `out`, on rayon threads when `work`
/// (operations in all) pays for them.
fn each_row(out: &mut [f64], len: usize, work: usize, f: impl Fn(usize, &mut [f64]) + Sync + Send) {
    if len == 0 {
        return;
    }
    if work < PAR_MIN {
        out.chunks_mut(len).enumerate().for_each(|(i, r)| f(i, r));
    } else {
        out.par_chunks_mut(len).enumerate().for_each(|(i, r)| f(i, r));
    }
}

/// The elements of a float operand widened to f64.
fn widen(x: &In) -> Result<Vec<f64>, String> {
    Ok(match x.dtype {
        DType::F32 => x.get::<f32>().iter().map(|&v| f64::from(v)).collect(),
        DType::F64 => x.get::<f64>().to_vec(),
        DType::F16 => x.get::<f16>().iter().map(|v| v.to_f64()).collect(),
        DType::BF16 => x.get::<bf16>().iter().map(|v| v.to_f64()).collect(),
        d => return Err(format!("expected a float tensor, got {d}")),
    })
}

/// Writes `v` into a float output, rounding each value to its dtype.
fn narrow(v: &[f64], out: &mut Out) -> Result<(), String> {
    match out.dtype {
        DType::F32 => par_map(v, out.get::<f32>(), |x| x as f32),
        DType::F64 => out.get::<f64>().copy_from_slice(v),
        DType::F16 => par_map(v, out.get::<f16>(), f16::from_f64),
        DType::BF16 => par_map(v, out.get::<bf16>(), bf16::from_f64),
        d => return Err(format!("expected a float output, got {d}")),
    }
    Ok(())
}

/// `ComplexNormSq`: C64 `z` → F32 `re² + im²` (squared and summed in f64, rounded once).
pub fn complex_norm_sq(z: In, out: &mut Out) -> Result<(), String> {
    par_map(z.get::<Complex32>(), out.get::<f32>(), |z| (f64::from(z.re).powi(2) + f64::from(z.im).powi(2)) as f32);
    Ok(())
}

/// `ComplexNormSqBackward`: C64 `z`, F32 `g` of the same shape → C64 `2·g·z`, the gradient
/// w.r.t. the pair `(re, im)` (PyTorch's convention, OPS.md §23.2 item 16).
pub fn complex_norm_sq_backward(z: In, g: In, out: &mut Out) -> Result<(), String> {
    par_map2(z.get::<Complex32>(), g.get::<f32>(), out.get::<Complex32>(), |z, g| z * (2.0 * g));
    Ok(())
}

/// `Conjugate`: C64 → C64 `re − i·im`.
pub fn conjugate(z: In, out: &mut Out) -> Result<(), String> {
    par_map(z.get::<Complex32>(), out.get::<Complex32>(), |z| z.conj());
    Ok(())
}
