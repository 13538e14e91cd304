//! Small ONNX models imported, compiled for the CPU and run, checked against onnxruntime's
//! outputs (fixtures from `tools/onnx/make_fixtures.py`: onnx 1.23.2, onnxruntime 1.32).

use rlx_cpu::{CpuBackend, CpuConstEval};
use rlx_io::onnx::{import, read_tensor, ImportOptions, OnnxGraph, TensorData};
use rlx_ir::OpKind;
use rlx_runtime::{Session, Tensor};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx").join(name)
}

fn run(g: &OnnxGraph, input: &TensorData) -> Vec<f32> {
    let mut compiled = Session::new(Arc::new(CpuBackend::new())).compile(&g.graph).unwrap();
    for (name, value) in &g.params {
        compiled.set_param(name, value.clone()).unwrap();
    }
    let x = Tensor::from_bytes(input.dtype, &input.dims, &input.bytes).unwrap();
    let out = compiled.run(&[(g.inputs[0].0.as_str(), &x)]).unwrap();
    out[0].to_vec::<f32>().unwrap()
}

fn expected(name: &str) -> (TensorData, Vec<f32>) {
    let input = read_tensor(fixture(name).join("input_0.pb")).unwrap();
    let out = read_tensor(fixture(name).join("output_0.pb")).unwrap();
    let values = out.bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    (input, values)
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: element count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-4 + 1e-4 * w.abs(), "{what}[{i}]: {g} vs onnxruntime {w}");
    }
}

/// Imports with the input's (`x`) concrete shape and folding through the CPU kernels.
fn check(name: &str, max_constant_bytes: usize) {
    let (input, want) = expected(name);
    let options = ImportOptions {
        input_shapes: HashMap::from([("x".to_string(), input.dims.clone())]),
        evaluator: Some(&CpuConstEval),
        max_constant_bytes,
        ..Default::default()
    };
    let g = import(fixture(name).join("model.onnx"), &options).unwrap();
    close(&run(&g, &input), &want, name);
}

#[test]
fn mlp_matches_onnxruntime() {
    check("mlp", 1 << 16);
}

#[test]
fn cnn_matches_onnxruntime_with_weights_as_params() {
    check("cnn", 0);
}

#[test]
fn folded_shape_arithmetic_matches_onnxruntime() {
    check("reshape_chain", 1 << 16);
}

#[test]
fn shape_arithmetic_needs_the_evaluator() {
    let e = import(fixture("reshape_chain").join("model.onnx"), &ImportOptions::default()).err().unwrap();
    assert!(matches!(&e, rlx_io::IoError::OnnxUnsupported { op, reason, .. } if op == "Reshape" && reason.contains("known at import")), "{e}");
}

#[test]
fn symbolic_batch_serves_any_size() {
    let (input, want) = expected("mlp");
    let g = import(fixture("mlp").join("model.onnx"), &ImportOptions::default()).unwrap();
    assert_eq!(g.inputs[0].1.to_string(), "f32[batch, 6]");
    close(&run(&g, &input), &want, "mlp with a symbolic batch");
}

/// Runs `g` on `x` and returns every output as f32s.
fn run_all(g: &OnnxGraph, x: &TensorData) -> Vec<Vec<f32>> {
    let mut compiled = Session::new(Arc::new(CpuBackend::new())).compile(&g.graph).unwrap();
    let x = Tensor::from_bytes(x.dtype, &x.dims, &x.bytes).unwrap();
    let outs = compiled.run(&[("x", &x)]).unwrap();
    outs.iter().map(|t| t.to_vec::<f32>().unwrap()).collect()
}

/// Imports fixture `name` (input `x`), runs it and compares every output with onnxruntime's;
/// returns the imported graph.
fn check_outputs(name: &str, outputs: usize) -> OnnxGraph {
    let dir = fixture(name);
    let x = read_tensor(dir.join("input_0.pb")).unwrap();
    let options = ImportOptions { evaluator: Some(&CpuConstEval), ..Default::default() };
    let g = import(dir.join("model.onnx"), &options).unwrap();
    let got = run_all(&g, &x);
    assert_eq!(got.len(), outputs, "{name}: output count");
    for (j, got) in got.iter().enumerate() {
        let want = read_tensor(dir.join(format!("output_{j}.pb"))).unwrap();
        let want: Vec<f32> = want.bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        close(got, &want, &format!("{name} output {j}"));
    }
    g
}

#[test]
fn control_flow_on_runtime_values_matches_onnxruntime() {
    let g = check_outputs("control", 5);
    let count = |kind: OpKind| g.graph.nodes().iter().filter(|n| n.op.kind() == kind).count();
    assert_eq!((count(OpKind::If), count(OpKind::While)), (1, 2), "If stays an If; Loop and Scan become While loops");
}

#[test]
fn sequence_ops_match_onnxruntime() {
    check_outputs("sequences", 2);
}
