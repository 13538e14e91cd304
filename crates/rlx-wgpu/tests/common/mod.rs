//! What the wgpu test files share: one session per test binary on wgpu:0 with the CPU as
//! host (or a skip, saying why, where the machine has no adapter), seeded random data, and
//! the comparison of a graph's results against the CPU backend's.

#![allow(dead_code)]

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType, ValueId};
use rlx_runtime::{Backend, Session, Tensor};
use rlx_wgpu::WgpuBackend;
use std::sync::{Arc, OnceLock};

/// The CPU reference, seeded data and tolerances, shared with rlx-cuda's tests.
#[path = "../../../rlx-cpu/tests/common/against_cpu.rs"]
mod against_cpu;
// Not every test binary reads every one of these.
#[allow(unused_imports)]
pub use against_cpu::{cpu, random, uniform, Tol};

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

pub fn input(g: &mut Graph, name: &str, dtype: DType, dims: &[usize]) -> ValueId {
    g.input(name, TensorType::new(dtype, Shape::of(dims)))
}

/// f32 kernels: within 1e-5 of the CPU's value, relative to the output's scale.
pub const F32: Tol = Tol::norm(1e-5);
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

/// Every output of `got` agrees with the CPU's `want` within `tol` (NaNs and infinities
/// exactly).
pub fn compare(got: &[Tensor], want: &[Tensor], tol: Tol) {
    against_cpu::compare_on("wgpu", got, want, tol);
}
