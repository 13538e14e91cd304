//! The elementwise decompositions compute what the native kernels compute.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_ir::{DType, Graph, OpKind, TensorType};
use rlx_runtime::Tensor;

#[test]
fn fma_and_relu_backward_match_their_kernels() {
    let mut g = Graph::new();
    let a = g.input("a", TensorType::of(DType::F32, &[3, 5]));
    let b = g.input("b", TensorType::of(DType::F32, &[5]));
    let f = g.fma(a, b, a).unwrap();
    let r = g.relu_backward(a, f).unwrap();
    g.set_outputs(vec![f, r]).unwrap();
    let ta = Tensor::from_vec(randn(15, 1), &[3, 5]).unwrap();
    let tb = Tensor::from_vec(randn(5, 2), &[5]).unwrap();
    let inputs = [("a", &ta), ("b", &tb)];
    let native = run(&g, &inputs);
    for kind in [OpKind::Fma, OpKind::ReluBackward] {
        let lowered = run_decomposed(&g, kind, &inputs);
        for (x, y) in lowered.iter().zip(&native) {
            assert_close(x, y, 1e-6, 1e-6);
        }
    }
}
