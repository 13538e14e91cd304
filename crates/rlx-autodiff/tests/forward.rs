//! `jvp` and `hvp` against central differences along the tangent direction.

#[path = "gradcheck/harness.rs"]
#[allow(dead_code)]
mod harness;

use harness::Rng;
use rlx_autodiff::{grad, hvp, jvp, TANGENT};
use rlx_cpu::CpuBackend;
use rlx_ir::Graph;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

fn compile(g: &Graph) -> rlx_runtime::CompiledGraph {
    Session::new(Arc::new(CpuBackend::new())).compile(g).unwrap_or_else(|e| panic!("{e}\n{g}"))
}

fn run(c: &mut rlx_runtime::CompiledGraph, values: &[(String, Tensor)]) -> Vec<Vec<f64>> {
    let named: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
    c.run(&named).unwrap().iter().map(Tensor::to_f64_vec).collect()
}

fn random(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Tensor::from_vec((0..dims.iter().product()).map(|_| rng.normal()).collect::<Vec<f64>>(), dims).unwrap()
}

/// `values` with each `wrt` input moved by `h·tangent`.
fn moved(values: &[(String, Tensor)], tangents: &[(String, Tensor)], h: f64) -> Vec<(String, Tensor)> {
    values
        .iter()
        .map(|(n, t)| match tangents.iter().find(|(m, _)| m == n) {
            Some((_, d)) => {
                let v: Vec<f64> = t.to_f64_vec().iter().zip(d.to_f64_vec()).map(|(a, b)| a + h * b).collect();
                (n.clone(), Tensor::from_vec(v, t.shape()).unwrap())
            }
            None => (n.clone(), t.clone()),
        })
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    let diff: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
    assert!(diff <= 1e-6 * norm.max(1.0), "{what}: off by {diff:.3e} (|fd| {norm:.3e})\n{got:?}\n{want:?}");
}

const BLOCK: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,4]))()
    %1 = Input(name:"w",ty:(dtype:F64,shape:[4,5]))()
    %2 = Input(name:"g",ty:(dtype:F64,shape:[5]))()
    %3 = MatMul()(%0, %1)
    %4 = LayerNorm(axis:-1,eps:0.00001)(%3, %2, %2)
    %5 = Activation(kind:Tanh)(%4)
    %6 = Softmax(axis:-1)(%5)
    %7 = Reduce(op:Sum,axes:[0],keep_dim:false)(%6)
    return %6, %7"#;

#[test]
fn jvp_matches_central_differences_along_the_tangent() {
    let g = rlx_ir::text::parse(BLOCK).unwrap();
    let wrt = ["x", "w", "g"];
    let j = jvp(&g, &wrt).unwrap();
    let mut rng = Rng::new(11);
    let values: Vec<(String, Tensor)> = [("x", vec![3, 4]), ("w", vec![4, 5]), ("g", vec![5])]
        .iter()
        .map(|(n, d)| (n.to_string(), random(&mut rng, d)))
        .collect();
    let tangents: Vec<(String, Tensor)> = values.iter().map(|(n, t)| (n.clone(), random(&mut rng, t.shape()))).collect();
    let mut with_t = values.clone();
    with_t.extend(tangents.iter().map(|(n, t)| (format!("{TANGENT}{n}"), t.clone())));
    let got = run(&mut compile(&j), &with_t);
    let mut f = compile(&g);
    let h = 1e-5;
    let (plus, minus) = (run(&mut f, &moved(&values, &tangents, h)), run(&mut f, &moved(&values, &tangents, -h)));
    for o in 0..2 {
        let fd: Vec<f64> = plus[o].iter().zip(&minus[o]).map(|(a, b)| (a - b) / (2.0 * h)).collect();
        assert_close(&got[2 + o], &fd, &format!("tangent of output {o}"));
    }
}

const MLP: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
    %1 = Input(name:"w1",ty:(dtype:F64,shape:[3,5]))()
    %2 = Input(name:"w2",ty:(dtype:F64,shape:[5,2]))()
    %3 = Input(name:"labels",ty:(dtype:I64,shape:[4]))()
    %4 = MatMul()(%0, %1)
    %5 = Activation(kind:Gelu)(%4)
    %6 = MatMul()(%5, %2)
    %7 = SoftmaxCrossEntropyWithLogits(ignore_index:None)(%6, %3)
    %8 = Reduce(op:Mean,axes:[0],keep_dim:false)(%7)
    return %8"#;

#[test]
fn hvp_of_an_mlp_loss_matches_differences_of_its_gradient() {
    let g = rlx_ir::text::parse(MLP).unwrap();
    let loss = g.outputs()[0];
    let wrt = ["w1", "w2"];
    let hv = hvp(&g, loss, &wrt).unwrap();
    let grads = grad(&g, loss, &wrt).unwrap();
    let mut rng = Rng::new(5);
    let mut values: Vec<(String, Tensor)> =
        [("x", vec![4, 3]), ("w1", vec![3, 5]), ("w2", vec![5, 2])].iter().map(|(n, d)| (n.to_string(), random(&mut rng, d))).collect();
    values.push(("labels".into(), Tensor::from_vec(vec![0i64, 1, 1, 0], &[4]).unwrap()));
    let tangents: Vec<(String, Tensor)> =
        wrt.iter().map(|n| (n.to_string(), random(&mut rng, values.iter().find(|(m, _)| m == n).unwrap().1.shape()))).collect();
    let mut with_t = values.clone();
    with_t.extend(tangents.iter().map(|(n, t)| (format!("{TANGENT}{n}"), t.clone())));
    let got = run(&mut compile(&hv), &with_t);
    let mut gc = compile(&grads);
    let h = 1e-5;
    let (plus, minus) = (run(&mut gc, &moved(&values, &tangents, h)), run(&mut gc, &moved(&values, &tangents, -h)));
    for k in 0..wrt.len() {
        let fd: Vec<f64> = plus[1 + k].iter().zip(&minus[1 + k]).map(|(a, b)| (a - b) / (2.0 * h)).collect();
        assert_close(&got[wrt.len() + k], &fd, &format!("H·t for {}", wrt[k]));
    }
}
