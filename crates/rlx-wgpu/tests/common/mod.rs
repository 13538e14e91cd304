//! What the wgpu test files share: one session per test binary on wgpu:0 with the CPU as
//! host (or a skip, saying why, where the machine has no adapter), seeded random data, and
//! the comparison of a graph's results against the CPU backend's.

#![allow(dead_code)]

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType, ValueId};
use rlx_runtime::{Backend, Session, Tensor};
use rlx_wgpu::WgpuBackend;
use std::sync::{Arc, OnceLock};

/// The backend on wgpu:0, opened once per test binary; `None` (printing why) without one.
pub fn backend() -> Option<Arc<WgpuBackend>> {
    static OPENED: OnceLock<Result<Arc<WgpuBackend>, String>> = OnceLock::new();
    match OPENED.get_or_init(|| WgpuBackend::new(0).map(Arc::new).map_err(|e| e.to_string())) {
        Ok(b) => Some(b.clone()),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A session on wgpu:0 with the CPU as host, or `None` (printing why) without an adapter.
pub fn gpu() -> Option<Session> {
    let b: Arc<dyn Backend> = backend()?;
    Some(Session::new(b).with_host(Arc::new(CpuBackend::new())))
}

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

pub fn input(g: &mut Graph, name: &str, dtype: DType, dims: &[usize]) -> ValueId {
    g.input(name, TensorType::new(dtype, Shape::of(dims)))
}

/// `|a − b| ≤ rtol·max(|b|, floor·scale)`, `scale` the largest finite magnitude of the
/// output: a floor of 1 bounds the error by the output's scale (sums of both signs).
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub rtol: f64,
    pub floor: f64,
}

/// f32 kernels: within 1e-5 of the CPU's value, relative to the output's scale.
pub const F32: Tol = Tol { rtol: 1e-5, floor: 1.0 };
/// Exact agreement (data movement, integers, comparisons).
pub const EXACT: Tol = Tol { rtol: 0.0, floor: 0.0 };

/// Runs `g` on wgpu and on the CPU with the same inputs and compares every output within
/// `tol`; asserts that the whole graph ran on the device and that each of `kinds` ran
/// natively there.
pub fn agree(gpu: &Session, g: &Graph, inputs: &[(&str, Tensor)], tol: Tol, kinds: &[OpKind]) {
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    let mut on_gpu = gpu.compile(g).unwrap();
    assert!(on_gpu.partition().is_none(), "part of the graph ran on the host:\n{}", on_gpu.partition().unwrap());
    for &kind in kinds {
        let ran = on_gpu.graph().nodes().iter().any(|n| n.op.kind() == kind);
        assert!(ran, "{kind:?} did not run natively:\n{}", on_gpu.report());
    }
    let got = on_gpu.run(&named).unwrap();
    let want = cpu().compile(g).unwrap().run(&named).unwrap();
    compare(&got, &want, tol);
}

/// Every output of `got` agrees with `want` within `tol` (NaNs and infinities exactly).
pub fn compare(got: &[Tensor], want: &[Tensor], tol: Tol) {
    assert_eq!(got.len(), want.len());
    for (o, (x, y)) in got.iter().zip(want).enumerate() {
        assert_eq!((x.dtype(), x.shape()), (y.dtype(), y.shape()), "output {o}");
        let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
        let scale = y.iter().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in x.iter().zip(&y).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol.rtol * b.abs().max(tol.floor * scale);
            assert!(same, "output {o} element {i}: wgpu {a}, cpu {b}");
        }
    }
}
