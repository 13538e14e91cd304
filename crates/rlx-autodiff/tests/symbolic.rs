//! Reverse mode over graphs with a symbolic batch: one gradient graph serves every batch size.

use rlx_autodiff::grad;
use rlx_cpu::CpuBackend;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, Shape, TensorType};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// `loss = Σ_j w_j · mean_b x[b, j]²` over `x: f64[B, 4]`, by a `Mean` over the symbolic axis
/// (kept, or reduced together with the static one and rescaled).
fn loss_graph(keep_dim: bool) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F64, Shape(vec![Dim::sym("B"), Dim::Static(4)])));
    let w = g.input("w", TensorType::of(DType::F64, &[1, 4]));
    let sq = g.binary(BinaryOp::Mul, x, x).unwrap();
    let weighted = g.binary(BinaryOp::Mul, sq, w).unwrap();
    let loss = if keep_dim {
        let m = g.reduce(ReduceOp::Mean, weighted, &[0], true).unwrap();
        g.reduce(ReduceOp::Sum, m, &[0, 1], false).unwrap()
    } else {
        let m = g.reduce(ReduceOp::Mean, weighted, &[0, 1], false).unwrap();
        let four = g.constant(TensorType::of(DType::F64, &[]), 4.0f64.to_le_bytes().to_vec()).unwrap();
        g.binary(BinaryOp::Mul, m, four).unwrap()
    };
    g.set_outputs(vec![loss]).unwrap();
    g
}

#[test]
fn mean_over_a_symbolic_batch_divides_by_the_run_time_size() {
    let session = Session::new(Arc::new(CpuBackend::new()));
    let w = [0.5, -1.5, 2.0, 0.25];
    for keep_dim in [true, false] {
        let g = grad(&loss_graph(keep_dim), loss_graph(keep_dim).outputs()[0], &["x"]).unwrap();
        let mut compiled = session.compile(&g).unwrap_or_else(|e| panic!("{e}\n{g}"));
        for batch in [2usize, 5] {
            let xs: Vec<f64> = (0..batch * 4).map(|i| ((i * 7 + 3) % 11) as f64 / 5.0 - 1.0).collect();
            let x = Tensor::from_slice(&xs, &[batch, 4]).unwrap();
            let wt = Tensor::from_slice(&w, &[1, 4]).unwrap();
            let out = compiled.run(&[("x", &x), ("w", &wt)]).unwrap();
            let want_loss: f64 = xs.iter().enumerate().map(|(i, v)| w[i % 4] * v * v).sum::<f64>() / batch as f64;
            assert!((out[0].to_f64_vec()[0] - want_loss).abs() < 1e-12, "keep_dim {keep_dim}, B = {batch}");
            let got = out[1].to_f64_vec();
            for (i, v) in xs.iter().enumerate() {
                let want = 2.0 * w[i % 4] * v / batch as f64;
                assert!((got[i] - want).abs() < 1e-12, "keep_dim {keep_dim}, B = {batch}: {got:?}");
            }
        }
    }
}
