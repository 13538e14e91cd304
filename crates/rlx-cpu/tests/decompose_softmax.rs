//! The softmax-family decompositions compute what the native kernels compute.
//!
//! The sparse losses' one-hot needs `Reshape`; those cases are skipped with a note while the
//! CPU backend does not claim it.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_cpu::SUPPORTED_OPS;
use rlx_ir::{DType, Graph, OpKind, TensorType};
use rlx_runtime::Tensor;

#[test]
fn softmax_and_dense_loss_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[3, 5, 4]));
    let t = g.input("t", TensorType::of(DType::F32, &[3, 5, 4]));
    let s1 = g.softmax(x, 1).unwrap();
    let s2 = g.softmax(x, -1).unwrap();
    let l = g.softmax_cross_entropy(x, t).unwrap();
    g.set_outputs(vec![s1, s2, l]).unwrap();
    let tx = Tensor::from_vec(randn(60, 1).iter().map(|v| v * 4.0).collect::<Vec<_>>(), &[3, 5, 4]).unwrap();
    let tt = Tensor::from_vec(randn(60, 2).iter().map(|v| v.abs()).collect::<Vec<_>>(), &[3, 5, 4]).unwrap();
    let inputs = [("x", &tx), ("t", &tt)];
    let native = run(&g, &inputs);
    for kind in [OpKind::Softmax, OpKind::SoftmaxCrossEntropy] {
        for (a, b) in run_decomposed(&g, kind, &inputs).iter().zip(&native) {
            assert_close(a, b, 1e-5, 1e-6);
        }
    }
}

#[test]
fn sparse_loss_and_gradient_match_their_kernels() {
    if !SUPPORTED_OPS.contains(&OpKind::Reshape) {
        eprintln!("sparse losses: skipped, the CPU backend does not claim Reshape yet");
        return;
    }
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[2, 3, 7]));
    let labels = g.input("labels", TensorType::of(DType::I64, &[2, 3]));
    let padded = g.input("padded", TensorType::of(DType::I32, &[2, 3]));
    let wild = g.input("wild", TensorType::of(DType::I64, &[2, 3]));
    let dl = g.input("dl", TensorType::of(DType::F32, &[2, 3]));
    let l0 = g.softmax_cross_entropy_with_logits(x, labels, Some(-100)).unwrap();
    let l1 = g.softmax_cross_entropy_with_logits(x, padded, Some(4)).unwrap();
    let g0 = g.softmax_cross_entropy_backward(x, wild, dl, Some(-100)).unwrap();
    let g1 = g.softmax_cross_entropy_backward(x, padded, dl, Some(4)).unwrap();
    g.set_outputs(vec![l0, l1, g0, g1]).unwrap();
    let tx = Tensor::from_vec(randn(42, 3).iter().map(|v| v * 3.0).collect::<Vec<_>>(), &[2, 3, 7]).unwrap();
    let tl = Tensor::from_vec(vec![4i64, -100, 0, 6, 4, 2], &[2, 3]).unwrap();
    // The forward rejects 7 (out of range); the gradient gives its row 0.
    let tw = Tensor::from_vec(vec![4i64, -100, 0, 6, 7, 2], &[2, 3]).unwrap();
    let tp = Tensor::from_vec(vec![4i32, 1, 0, 6, 4, 2], &[2, 3]).unwrap();
    let td = Tensor::from_vec(randn(6, 4), &[2, 3]).unwrap();
    let inputs = [("x", &tx), ("labels", &tl), ("padded", &tp), ("wild", &tw), ("dl", &td)];
    let native = run(&g, &inputs);
    for kind in [OpKind::SoftmaxCrossEntropyWithLogits, OpKind::SoftmaxCrossEntropyBackward] {
        for (a, b) in run_decomposed(&g, kind, &inputs).iter().zip(&native) {
            assert_close(a, b, 1e-5, 1e-6);
        }
    }
}
