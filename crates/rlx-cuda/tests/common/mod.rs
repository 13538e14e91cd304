//! What the GPU test files share: a session on cuda:0 (or a skip, saying why), and the
//! comparison of a graph's results on the GPU against the CPU backend's (with seeded data and
//! tolerances from rlx-cpu's `against_cpu`).

#![allow(dead_code)]

use rlx_cpu::CpuBackend;
use rlx_cuda::CudaBackend;
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType, ValueId};
use rlx_opt::Outcome;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// The CPU reference, seeded data and tolerances, shared with rlx-wgpu's tests.
#[path = "../../../rlx-cpu/tests/common/against_cpu.rs"]
mod against_cpu;
// Not every test binary reads every one of these.
#[allow(unused_imports)]
pub use against_cpu::{cpu, random, uniform, Tol};

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

pub fn f32_input(g: &mut Graph, name: &str, dims: &[usize]) -> ValueId {
    g.input(name, TensorType::new(DType::F32, Shape::of(dims)))
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

/// Every output of `got` agrees with the CPU's `want` within `tol`.
pub fn compare(got: &[Tensor], want: &[Tensor], tol: Tol) {
    against_cpu::compare_on("cuda", got, want, tol);
}
