//! Shared by the norm/attention decomposition tests: random inputs for a text-IR graph and a
//! native-vs-decomposed comparison.

use super::{assert_close, randn, run, run_decomposed};
use rlx_cpu::SUPPORTED_OPS;
use rlx_ir::{DType, OpKind};
use rlx_runtime::Tensor;

/// Whether the CPU backend claims every kind in `kinds`; if not, says which are missing (the
/// numeric comparison then waits for those kernels).
pub fn claims_all(test: &str, kinds: &[OpKind]) -> bool {
    let missing: Vec<&str> = kinds.iter().filter(|k| !SUPPORTED_OPS.contains(k)).map(|k| k.name()).collect();
    if !missing.is_empty() {
        eprintln!("{test}: skipped, the CPU backend has no kernel yet for {}", missing.join(", "));
    }
    missing.is_empty()
}

/// A deterministic tensor for input `name` of type `ty`: `var*` inputs are positive, Bool
/// inputs alternate with a run of `false`, float inputs are `randn` values.
pub fn tensor_for(name: &str, ty: &rlx_ir::TensorType, seed: u64) -> Tensor {
    let dims = ty.shape.as_static().expect("test inputs have static shapes");
    let n: usize = dims.iter().product();
    let mut v = randn(n, seed);
    if name.starts_with("var") {
        v.iter_mut().for_each(|x| *x = x.abs() + 0.1);
    }
    match ty.dtype {
        DType::F32 => Tensor::from_vec(v, &dims).unwrap(),
        DType::F64 => Tensor::from_vec(v.into_iter().map(f64::from).collect::<Vec<_>>(), &dims).unwrap(),
        DType::F16 => Tensor::from_vec(v.into_iter().map(half::f16::from_f32).collect::<Vec<_>>(), &dims).unwrap(),
        DType::Bool => Tensor::from_bools(&(0..n).map(|i| i % 3 != 0 && i >= n / 2).collect::<Vec<_>>(), &dims).unwrap(),
        d => panic!("no test data for {d}"),
    }
}

/// Runs the graph `src` natively and with `kind` decomposed, on the same random inputs.
pub fn matches_kernel(src: &str, kind: OpKind, rtol: f64, atol: f64) {
    let g = rlx_ir::text::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let data: Vec<(String, Tensor)> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, (n, v))| (n.to_string(), tensor_for(n, g.ty(*v), 11 + i as u64)))
        .collect();
    let inputs: Vec<(&str, &Tensor)> = data.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let native = run(&g, &inputs);
    let lowered = run_decomposed(&g, kind, &inputs);
    for (x, y) in lowered.iter().zip(&native) {
        assert_close(x, y, rtol, atol);
    }
}
