//! What the GPU test files share: a session on cuda:0 (or a skip, saying why), seeded random
//! data, and the comparison of a graph's results on the GPU against the CPU backend's.

#![allow(dead_code)]

use rlx_cpu::CpuBackend;
use rlx_cuda::CudaBackend;
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType, ValueId};
use rlx_opt::Outcome;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// A session on cuda:0 with the CPU as host, or `None` (printing why) without a device.
pub fn gpu() -> Option<Session> {
    match CudaBackend::new(0) {
        Ok(b) => Some(Session::new(Arc::new(b)).with_host(Arc::new(CpuBackend::new()))),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A session on the CPU alone: the reference.
pub fn cpu() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

/// Seeded values uniform in `[lo, hi)`.
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

pub fn f32_input(g: &mut Graph, name: &str, dims: &[usize]) -> ValueId {
    g.input(name, TensorType::new(DType::F32, Shape::of(dims)))
}

/// How close the GPU's value `a` must be to the CPU's `b`: `|a − b| ≤ rtol·max(|b|,
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

/// Runs `g` on the GPU and on the CPU with the same inputs; every output agrees within
/// `tol` (NaNs and infinities exactly). Asserts the whole graph ran on the device when
/// `native`.
pub fn agree(gpu: &Session, g: &Graph, inputs: &[(&str, Tensor)], tol: Tol, native: bool) {
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    let mut on_gpu = gpu.compile(g).unwrap();
    if native {
        assert!(on_gpu.partition().is_none(), "part of the graph ran on the host:\n{}", on_gpu.partition().unwrap());
    }
    let got = on_gpu.run(&named).unwrap();
    let want = cpu().compile(g).unwrap().run(&named).unwrap();
    compare(&got, &want, tol);
}

/// As [`agree`] within `tol`, asserting that the whole graph ran on the device and that
/// every kind of `kinds` ran natively (not decomposed into others).
pub fn agree_native(gpu: &Session, g: &Graph, inputs: &[(&str, Tensor)], tol: Tol, kinds: &[OpKind]) {
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    let mut on_gpu = gpu.compile(g).unwrap();
    assert!(on_gpu.partition().is_none(), "part of the graph ran on the host:\n{}", on_gpu.partition().unwrap());
    for &kind in kinds {
        let ran = on_gpu.report().count(kind, Outcome::Native) + on_gpu.report().count(kind, Outcome::Fused);
        assert!(ran > 0, "{kind:?} did not run natively:\n{}", on_gpu.report());
    }
    let got = on_gpu.run(&named).unwrap();
    let want = cpu().compile(g).unwrap().run(&named).unwrap();
    compare(&got, &want, tol);
}

/// Every output of `got` agrees with `want` within `tol`.
pub fn compare(got: &[Tensor], want: &[Tensor], tol: Tol) {
    assert_eq!(got.len(), want.len());
    for (o, (x, y)) in got.iter().zip(want).enumerate() {
        assert_eq!((x.dtype(), x.shape()), (y.dtype(), y.shape()), "output {o}");
        let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
        let scale = y.iter().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in x.iter().zip(&y).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol.rtol * b.abs().max(tol.floor * scale);
            assert!(same, "output {o} element {i}: cuda {a}, cpu {b}");
        }
    }
}
