//! Compositions of `vmap` with `grad`, `jvp` and `hvp`, each against an explicit loop over
//! the examples of the untransformed-by-vmap graph.

#[path = "gradcheck/harness.rs"]
#[allow(dead_code)]
mod harness;

use harness::Rng;
use rlx_autodiff::{grad, hvp, jvp, vmap, TANGENT};
use rlx_cpu::CpuBackend;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{Dim, Graph};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// Examples per map.
const B: usize = 4;

/// One example's loss: a two-layer MLP on `x [1, 3]` with cross-entropy against `label [1]`.
const MLP: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[1,3]))()
    %1 = Input(name:"w1",ty:(dtype:F64,shape:[3,5]))()
    %2 = Input(name:"w2",ty:(dtype:F64,shape:[5,2]))()
    %3 = Input(name:"label",ty:(dtype:I64,shape:[1]))()
    %4 = MatMul()(%0, %1)
    %5 = Activation(kind:Tanh)(%4)
    %6 = MatMul()(%5, %2)
    %7 = SoftmaxCrossEntropyWithLogits(ignore_index:None)(%6, %3)
    %8 = Reduce(op:Sum,axes:[0],keep_dim:false)(%7)
    return %8"#;

type Named = Vec<(String, Tensor)>;

fn run(g: &Graph, values: &Named) -> Vec<Vec<f64>> {
    let mut c = Session::new(Arc::new(CpuBackend::new())).compile(g).unwrap_or_else(|e| panic!("{e}\n{g}"));
    let named: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
    c.run(&named).unwrap().iter().map(Tensor::to_f64_vec).collect()
}

fn random(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Tensor::from_vec((0..dims.iter().product()).map(|_| rng.normal()).collect::<Vec<f64>>(), dims).unwrap()
}

/// Shared weights, then per example `x` and `label`.
fn draw(rng: &mut Rng) -> (Named, Vec<Named>) {
    let shared = vec![("w1".to_string(), random(rng, &[3, 5])), ("w2".to_string(), random(rng, &[5, 2]))];
    let examples = (0..B)
        .map(|_| {
            let label = Tensor::from_vec(vec![(rng.uniform() * 2.0) as i64], &[1]).unwrap();
            vec![("x".to_string(), random(rng, &[1, 3])), ("label".to_string(), label)]
        })
        .collect();
    (shared, examples)
}

/// The per-example values stacked along a new axis 0.
fn stacked(examples: &[Named]) -> Named {
    (0..examples[0].len())
        .map(|i| {
            let first = &examples[0][i].1;
            let bytes: Vec<u8> = examples.iter().flat_map(|ex| ex[i].1.bytes().to_vec()).collect();
            let shape: Vec<usize> = std::iter::once(examples.len()).chain(first.shape().iter().copied()).collect();
            (examples[0][i].0.clone(), Tensor::from_bytes(first.dtype(), &shape, &bytes).unwrap())
        })
        .collect()
}

fn joined(a: &Named, b: &Named) -> Named {
    a.iter().chain(b).cloned().collect()
}

/// Runs `g` once per example and concatenates each output over the examples.
fn looped(g: &Graph, shared: &Named, examples: &[Named]) -> Vec<Vec<f64>> {
    let mut out: Vec<Vec<f64>> = vec![Vec::new(); g.outputs().len()];
    for ex in examples {
        for (o, v) in out.iter_mut().zip(run(g, &joined(shared, ex))) {
            o.extend(v);
        }
    }
    out
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let diff: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
    assert!(diff <= 1e-9 * norm.max(1.0), "{what}: off by {diff:.3e} (|loop| {norm:.3e})\n{got:?}\n{want:?}");
}

fn mlp() -> Graph {
    rlx_ir::text::parse(MLP).unwrap()
}

#[test]
fn per_example_gradients_are_vmap_of_grad() {
    let g = mlp();
    let gg = grad(&g, g.outputs()[0], &["w1", "w2"]).unwrap();
    let per_example = vmap(&gg, &[("x", 0), ("label", 0)], Dim::Static(B)).unwrap();
    let (shared, examples) = draw(&mut Rng::new(1));
    let got = run(&per_example, &joined(&shared, &stacked(&examples)));
    let want = looped(&gg, &shared, &examples);
    for (o, name) in ["loss", "dw1", "dw2"].iter().enumerate() {
        assert_close(&got[o], &want[o], name);
    }
}

#[test]
fn grad_of_the_summed_vmap_is_the_sum_of_gradients() {
    let mut mapped = vmap(&mlp(), &[("x", 0), ("label", 0)], Dim::Static(B)).unwrap();
    let losses = mapped.outputs()[0];
    let total = mapped.reduce(ReduceOp::Sum, losses, &[0], false).unwrap();
    mapped.set_outputs(vec![total]).unwrap();
    let gg = grad(&mapped, total, &["w1", "w2"]).unwrap();
    let (shared, examples) = draw(&mut Rng::new(2));
    let got = run(&gg, &joined(&shared, &stacked(&examples)));
    let g = mlp();
    let each = grad(&g, g.outputs()[0], &["w1", "w2"]).unwrap();
    let want = looped(&each, &shared, &examples);
    for (o, name) in [(1, "dw1"), (2, "dw2")] {
        let n = got[o].len();
        let sum: Vec<f64> = (0..n).map(|j| (0..B).map(|b| want[o][b * n + j]).sum()).collect();
        assert_close(&got[o], &sum, name);
    }
}

#[test]
fn jvp_of_vmap_is_the_per_example_jvp() {
    let mapped = vmap(&mlp(), &[("x", 0), ("label", 0)], Dim::Static(B)).unwrap();
    let tangents = jvp(&mapped, &["x", "w1"]).unwrap();
    let mut rng = Rng::new(3);
    let (shared, mut examples) = draw(&mut rng);
    let tw1 = (format!("{TANGENT}w1"), random(&mut rng, &[3, 5]));
    for ex in &mut examples {
        ex.push((format!("{TANGENT}x"), random(&mut rng, &[1, 3])));
    }
    let with_tw1 = joined(&shared, &vec![tw1]);
    let got = run(&tangents, &joined(&with_tw1, &stacked(&examples)));
    let want = looped(&jvp(&mlp(), &["x", "w1"]).unwrap(), &with_tw1, &examples);
    assert_close(&got[0], &want[0], "losses");
    assert_close(&got[1], &want[1], "tangent of the losses");
}

#[test]
fn vmap_of_hvp_is_the_per_example_hessian_product() {
    let g = mlp();
    let hv = hvp(&g, g.outputs()[0], &["w1"]).unwrap();
    let tw1 = format!("{TANGENT}w1");
    let per_example = vmap(&hv, &[("x", 0), ("label", 0), (&tw1, 0)], Dim::Static(B)).unwrap();
    let mut rng = Rng::new(4);
    let (shared, mut examples) = draw(&mut rng);
    for ex in &mut examples {
        ex.push((tw1.clone(), random(&mut rng, &[3, 5])));
    }
    let got = run(&per_example, &joined(&shared, &stacked(&examples)));
    let want = looped(&hv, &shared, &examples);
    assert_close(&got[0], &want[0], "gradients");
    assert_close(&got[1], &want[1], "H·t");
}

#[test]
fn a_chosen_in_axis_maps_like_axis_zero() {
    let g = mlp();
    let mapped = vmap(&g, &[("x", 2), ("label", 1)], Dim::Static(B)).unwrap();
    let (shared, examples) = draw(&mut Rng::new(5));
    let mut inputs = shared.clone();
    let xs: Vec<f64> = examples.iter().flat_map(|ex| ex[0].1.to_f64_vec()).collect();
    let moved: Vec<f64> = (0..3).flat_map(|j| (0..B).map(move |b| (b, j))).map(|(b, j)| xs[b * 3 + j]).collect();
    inputs.push(("x".into(), Tensor::from_vec(moved, &[1, 3, B]).unwrap()));
    let labels: Vec<i64> = examples.iter().map(|ex| ex[1].1.to_vec::<i64>().unwrap()[0]).collect();
    inputs.push(("label".into(), Tensor::from_vec(labels, &[1, B]).unwrap()));
    let got = run(&mapped, &inputs);
    assert_close(&got[0], &looped(&g, &shared, &examples)[0], "losses");
}

/// A random draw shaped like a batched template is the draw each example makes alone (one key).
#[test]
fn random_draws_are_shared_like_a_loop_with_one_key() {
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,3]))()
    %1 = RngNormal(mean:0.0,scale:1.0,key:7,op_seed:None,shape:None)(%0)
    %2 = Binary(op:Add)(%0, %1)
    return %2"#;
    let g = rlx_ir::text::parse(src).unwrap();
    let mapped = vmap(&g, &[("x", 0)], Dim::Static(B)).unwrap();
    let mut rng = Rng::new(6);
    let examples: Vec<Named> = (0..B)
        .map(|_| vec![("x".to_string(), Tensor::from_vec((0..6).map(|_| rng.normal() as f32).collect::<Vec<f32>>(), &[2, 3]).unwrap())])
        .collect();
    let got = run(&mapped, &stacked(&examples));
    assert_close(&got[0], &looped(&g, &Vec::new(), &examples)[0], "x + draw");
}
