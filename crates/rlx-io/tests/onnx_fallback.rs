//! The ONNX backend node tests through a device that claims only elementwise ops, products,
//! softmax and norms (the test-only subset backend of `crates/rlx/tests/subset`), the CPU
//! running the rest as host fallback: every test gives exactly the CPU backend's outputs, or
//! fails to compile or run on both alike. The tests are those `tools/onnx/conformance.sh`
//! materializes under `target/onnx/tests/node`; skipped, saying so, where they are absent.

// Shared with crates/rlx's tests, which use all of it.
#[allow(dead_code)]
#[path = "../../rlx/tests/subset/mod.rs"]
mod subset;

use rlx_cpu::{CpuBackend, CpuConstEval};
use rlx_io::onnx::{self, ImportOptions, OnnxGraph, TensorData};
use rlx_ir::{DType, OpKind};
use rlx_runtime::{Session, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the device claims.
const CLAIMS: &[OpKind] = {
    use OpKind::*;
    &[
        Input, Param, Constant, Activation, Binary, Compare, Where, Cast, MatMul, FusedMatMulBiasAct, ElementwiseRegion,
        Softmax, LayerNorm, RmsNorm, BatchNormInference, GroupNorm,
    ]
};

fn node_tests() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/onnx/tests/node");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipped: {} is absent (tools/onnx/conformance.sh materializes it)", dir.display());
        None
    }
}

/// The test's inputs `input_<j>.pb` in order, or `None` when one is not a plain tensor.
fn inputs(case: &Path) -> Option<Vec<TensorData>> {
    let data = case.join("test_data_set_0");
    let mut out = Vec::new();
    for j in 0.. {
        let path = data.join(format!("input_{j}.pb"));
        if !path.is_file() {
            return (!data.join(format!("input_{j}")).exists()).then_some(out);
        }
        out.push(onnx::read_tensor(&path).ok()?);
    }
    None
}

/// Imports `model` for these inputs (their values as constants where the model needs them
/// at import), as `rlx onnx-run` does.
fn import(model: &Path, names: &[String], values: &[TensorData]) -> Option<OnnxGraph> {
    let mut options = ImportOptions { evaluator: Some(&CpuConstEval), ..Default::default() };
    options.input_shapes = names.iter().cloned().zip(values.iter().map(|t| t.dims.clone())).collect();
    match onnx::import(model, &options) {
        Ok(g) => Some(g),
        Err(e) if e.to_string().contains("known at import") => {
            let small = |t: &TensorData| t.dtype.is_int() || t.dtype == DType::Bool || t.numel() <= 64;
            options.input_values = names.iter().cloned().zip(values.iter().cloned()).filter(|(_, t)| small(t)).collect::<HashMap<_, _>>();
            onnx::import(model, &options).ok()
        }
        Err(_) => None,
    }
}

/// Compiles on `session`, sets the parameters and runs on the named inputs.
fn run(session: &Session, g: &OnnxGraph, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor>, String> {
    let mut compiled = session.compile(&g.graph).map_err(|e| e.to_string())?;
    for (name, value) in &g.params {
        compiled.set_param(name, value.clone()).map_err(|e| e.to_string())?;
    }
    compiled.run(inputs).map_err(|e| e.to_string())
}

/// The ONNX input names of a model, in order (the graph inputs that are not initializers).
fn input_names(g: &OnnxGraph, count: usize) -> Vec<String> {
    g.inputs.iter().take(count).map(|(n, _)| n.clone()).collect()
}

#[test]
fn node_tests_give_the_cpu_results_with_host_fallback() {
    let Some(dir) = node_tests() else { return };
    let cpu = Session::new(Arc::new(CpuBackend::new()));
    let (device, _) = subset::session(CLAIMS);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    let (mut compared, mut split, mut differ) = (0, 0, Vec::new());
    for case in cases {
        let model = case.join("model.onnx");
        let Some(values) = inputs(&case) else { continue };
        // A first import tells the input names; the second binds the test's shapes.
        let Ok(declared) = onnx::import(&model, &ImportOptions { evaluator: Some(&CpuConstEval), ..Default::default() }) else { continue };
        let names = input_names(&declared, values.len());
        let Some(g) = import(&model, &names, &values) else { continue };
        let tensors: Vec<(String, Tensor)> = names
            .iter()
            .zip(&values)
            .filter(|(n, _)| g.inputs.iter().any(|(i, _)| i == *n))
            .map(|(n, t)| (n.clone(), Tensor::from_bytes(t.dtype, &t.dims, &t.bytes).unwrap()))
            .collect();
        let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let want = run(&cpu, &g, &named);
        let got = run(&device, &g, &named);
        if device.compile(&g.graph).ok().and_then(|c| c.partition().cloned()).is_some() {
            split += 1;
        }
        compared += 1;
        let same = match (&got, &want) {
            (Ok(a), Ok(b)) => subset::same(a, b),
            (Err(_), Err(_)) => true,
            _ => false,
        };
        if !same {
            differ.push(format!("{}: device {:?} vs cpu {:?}", case.display(), got.map(|v| v.len()), want.map(|v| v.len())));
        }
    }
    eprintln!("{compared} node tests compared, {split} split between device and host");
    assert!(compared > 1000, "only {compared} node tests could be read");
    assert!(differ.is_empty(), "{} differ:\n{}", differ.len(), differ.join("\n"));
}
