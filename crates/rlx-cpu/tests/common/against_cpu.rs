//! What the device backends' tests share to check a graph against the CPU backend: the CPU
//! session, seeded random data and the tolerance comparison. Included by path from
//! rlx-cuda's and rlx-wgpu's `tests/common`.

use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// A session on the CPU alone: the reference.
pub fn cpu() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

/// Seeded values uniform in `[lo, hi)` (xorshift; a different seed per input).
pub fn uniform(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// An f32 tensor of `dims` filled by [`uniform`].
pub fn random(dims: &[usize], seed: u64, lo: f32, hi: f32) -> Tensor {
    Tensor::from_vec(uniform(dims.iter().product(), seed, lo, hi), dims).unwrap()
}

/// How close the device's value `a` must be to the CPU's `b`: `|a − b| ≤ rtol·max(|b|,
/// floor·scale)`, `scale` being the largest finite magnitude of that output. A `floor` of 1
/// is a normwise bound (for values that sum terms of both signs: norms, attention).
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub rtol: f64,
    pub floor: f64,
}

impl Tol {
    /// Relative to each value, down to a thousandth of the output's scale.
    pub const fn rel(rtol: f64) -> Tol {
        Tol { rtol, floor: 1e-3 }
    }

    /// Relative to the output's largest magnitude.
    pub const fn norm(rtol: f64) -> Tol {
        Tol { rtol, floor: 1.0 }
    }
}

/// Every output of `got` (from `device`) agrees with the CPU's `want` within `tol` (NaNs
/// and infinities exactly).
pub fn compare_on(device: &str, got: &[Tensor], want: &[Tensor], tol: Tol) {
    assert_eq!(got.len(), want.len());
    for (o, (x, y)) in got.iter().zip(want).enumerate() {
        assert_eq!((x.dtype(), x.shape()), (y.dtype(), y.shape()), "output {o}");
        let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
        let scale = y.iter().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in x.iter().zip(&y).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol.rtol * b.abs().max(tol.floor * scale);
            assert!(same, "output {o} element {i}: {device} {a}, cpu {b}");
        }
    }
}
