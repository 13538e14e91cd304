//! `grad`, `hvp` and per-example gradients `vmap(grad)` against JAX (float64) on a small MLP
//! and a pre-norm transformer block: the committed fixtures of `tools/fixtures/transforms.py`.

use rlx_autodiff::{grad, hvp, vmap, TANGENT};
use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Dim, Graph};
use rlx_runtime::{CompiledGraph, Session, Tensor};
use safetensors::SafeTensors;
use std::sync::Arc;

/// One fixture: its graphs, named tensors and parameter names.
pub struct Fixture {
    pub graph: Graph,
    pub example: Graph,
    pub params: Vec<String>,
    bytes: Vec<u8>,
}

impl Fixture {
    pub fn load(name: &str) -> Fixture {
        let path = format!("{}/../../fixtures/autodiff/{name}.safetensors", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let meta = meta.metadata().clone().expect("fixture metadata");
        let parse = |key: &str| rlx_ir::text::parse(&meta[key]).unwrap_or_else(|e| panic!("{name} {key}: {e}"));
        let params = meta["params"].trim_matches(|c| c == '[' || c == ']').split(", ").map(|s| s.trim_matches('"').to_string()).collect();
        Fixture { graph: parse("ir"), example: parse("ir_example"), params, bytes }
    }

    pub fn tensor(&self, name: &str) -> Tensor {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
        let view = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(view.dtype(), safetensors::Dtype::F64, "{name}");
        Tensor::from_bytes(DType::F64, view.shape(), view.data()).unwrap()
    }

    /// The graph's input names, in graph order.
    pub fn inputs(&self) -> Vec<String> {
        self.graph.inputs().into_iter().map(|(n, _)| n.to_string()).collect()
    }

    /// `g` compiled with this fixture's parameters set.
    pub fn compile(&self, g: &Graph) -> CompiledGraph {
        let mut c = Session::new(Arc::new(CpuBackend::new())).compile(g).unwrap_or_else(|e| panic!("{e}\n{g}"));
        for p in &self.params {
            c.set_param(p, self.tensor(&format!("param.{p}"))).unwrap();
        }
        c
    }
}

/// Equal within 1e-9 of the reference's scale (safetensors stores a scalar as `[1]`, so only
/// the element counts are compared as shapes).
pub fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.numel(), want.numel(), "{what}: {:?} vs {:?}", got.shape(), want.shape());
    let (got, want) = (got.to_f64_vec(), want.to_f64_vec());
    let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let scale = want.iter().map(|b| b.abs()).fold(0.0, f64::max).max(1e-3);
    assert!(diff <= 1e-9 * scale, "{what}: max |rlx − jax| = {diff:.3e} (max |jax| {scale:.3e})");
}

fn check(name: &str) {
    let f = Fixture::load(name);
    let loss = f.graph.outputs()[0];
    let wrt: Vec<&str> = f.params.iter().map(String::as_str).collect();
    let inputs: Vec<(String, Tensor)> = f.inputs().into_iter().map(|n| (n.clone(), f.tensor(&format!("input.{n}")))).collect();
    let named = |extra: &[(String, Tensor)]| -> Vec<(String, Tensor)> { inputs.iter().chain(extra).cloned().collect() };
    let run = |c: &mut CompiledGraph, values: &[(String, Tensor)]| -> Vec<Tensor> {
        let v: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
        c.run(&v).unwrap()
    };

    let out = run(&mut f.compile(&grad(&f.graph, loss, &wrt).unwrap()), &named(&[]));
    assert_close(&out[0], &f.tensor("output.loss"), &format!("{name} loss"));
    for (p, g) in f.params.iter().zip(&out[1..]) {
        assert_close(g, &f.tensor(&format!("grad.{p}")), &format!("{name} grad.{p}"));
    }

    let tangents: Vec<(String, Tensor)> = f.params.iter().map(|p| (format!("{TANGENT}{p}"), f.tensor(&format!("tangent.{p}")))).collect();
    let out = run(&mut f.compile(&hvp(&f.graph, loss, &wrt).unwrap()), &named(&tangents));
    let n = f.params.len();
    for (p, h) in f.params.iter().zip(&out[n..]) {
        assert_close(h, &f.tensor(&format!("hvp.{p}")), &format!("{name} hvp.{p}"));
    }
}

/// Per-example gradients: `grad` of the one-example loss, mapped over the batch of inputs.
fn check_per_example(name: &str) {
    let f = Fixture::load(name);
    let loss = f.example.outputs()[0];
    let wrt: Vec<&str> = f.params.iter().map(String::as_str).collect();
    let inputs = f.inputs();
    let batch: Vec<(&str, usize)> = inputs.iter().map(|n| (n.as_str(), 0)).collect();
    let size = f.tensor(&format!("input.{}", inputs[0])).shape()[0];
    let per_example = vmap(&grad(&f.example, loss, &wrt).unwrap(), &batch, Dim::Static(size)).unwrap();
    let values: Vec<(String, Tensor)> = inputs
        .iter()
        .map(|n| {
            let t = f.tensor(&format!("input.{n}"));
            let mut dims = t.shape().to_vec();
            dims.insert(1, 1);
            (n.clone(), Tensor::from_bytes(DType::F64, &dims, t.bytes()).unwrap())
        })
        .collect();
    let named: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let out = f.compile(&per_example).run(&named).unwrap();
    for (p, g) in f.params.iter().zip(&out[1..]) {
        assert_close(g, &f.tensor(&format!("per_example_grad.{p}")), &format!("{name} per-example grad.{p}"));
    }
}

#[test]
fn per_example_gradients_by_vmap_of_grad_match_jax() {
    check_per_example("mlp");
    check_per_example("block");
}

#[test]
fn mlp_gradient_and_hessian_vector_product_match_jax() {
    check("mlp");
}

#[test]
fn transformer_block_gradient_and_hessian_vector_product_match_jax() {
    check("block");
}
