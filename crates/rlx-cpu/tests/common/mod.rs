//! Helpers shared by the CPU integration tests.
#![allow(dead_code)]

/// Random inputs for text-IR graphs and native-vs-decomposed runs (norm, attention).
pub mod graphs;

use rlx_cpu::{CpuBackend, SUPPORTED_OPS};
use rlx_ir::{Graph, OpKind};
use rlx_runtime::{CompileOptions, Session, Tensor};
use std::sync::Arc;

/// A CPU session that does not optimize, so the graph runs as written.
pub fn session() -> Session {
    Session::new(Arc::new(CpuBackend::new())).with_options(CompileOptions { optimize: false, fuse: false, dispatch_report: false })
}

/// Runs `g` on the CPU with named inputs.
pub fn run(g: &Graph, inputs: &[(&str, &Tensor)]) -> Vec<Tensor> {
    session().compile(g).unwrap_or_else(|e| panic!("compile: {e}\n{g}")).run(inputs).unwrap_or_else(|e| panic!("run: {e}"))
}

/// Runs `g` with `kind` lowered through its rlx-opt decomposition instead of the CPU kernel.
/// Panics if the legalized graph still contains `kind`.
pub fn run_decomposed(g: &Graph, kind: OpKind, inputs: &[(&str, &Tensor)]) -> Vec<Tensor> {
    let claims: Vec<OpKind> = SUPPORTED_OPS.iter().copied().filter(|&k| k != kind).collect();
    let (legal, _) = rlx_opt::legalize(g, "cpu-without", &claims[..]).unwrap_or_else(|e| panic!("legalize: {e}"));
    assert!(legal.nodes().iter().all(|n| n.op.kind() != kind), "{kind} survived legalization:\n{legal}");
    run(&legal, inputs)
}

/// Asserts `a == b` or `|a − b| ≤ atol + rtol·|b|` elementwise, so equal infinities pass
/// (as do NaN pairs); shapes and dtypes must be equal.
pub fn assert_close(a: &Tensor, b: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(a.ty(), b.ty());
    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        assert!(*x == y || (x - y).abs() <= atol + rtol * y.abs() || (x.is_nan() && y.is_nan()), "element {i}: {x} vs {y}");
    }
}

/// Deterministic pseudo-random f32 values in ±[0.1, 2) (never zero).
pub fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            let m = 0.1 + 1.9 * u;
            if s & 1 == 0 { m } else { -m }
        })
        .collect()
}
