//! The index decompositions compute what the native kernels compute.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_ir::ops::index::ScatterReduction;
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType};
use rlx_runtime::Tensor;

fn check(g: &Graph, kind: OpKind, inputs: &[(&str, &Tensor)], tol: f64) {
    let native = run(g, inputs);
    for (x, y) in run_decomposed(g, kind, inputs).iter().zip(&native) {
        assert_close(x, y, tol, tol);
    }
}

fn ids(values: &[i64], dims: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), dims).unwrap()
}

#[test]
fn gather_nd_with_batches_and_negatives() {
    let mut g = Graph::new();
    let d = g.input("d", TensorType::of(DType::F32, &[3, 4, 5, 2]));
    let i = g.input("i", TensorType::of(DType::I32, &[2, 3, 2]));
    let d1 = g.input("d1", TensorType::of(DType::F32, &[2, 4, 5]));
    let i1 = g.input("i1", TensorType::of(DType::I64, &[2, 3, 1]));
    let y0 = g.gather_nd(d, i, 0).unwrap();
    let y1 = g.gather_nd(d1, i1, 1).unwrap();
    g.set_outputs(vec![y0, y1]).unwrap();
    let iv: Vec<i32> = vec![0, 1, -1, -4, 2, 3, 1, 0, -3, 2, 2, -1];
    let inputs = [
        ("d", &Tensor::from_vec(randn(120, 1), &[3, 4, 5, 2]).unwrap()),
        ("i", &Tensor::from_vec(iv, &[2, 3, 2]).unwrap()),
        ("d1", &Tensor::from_vec(randn(40, 2), &[2, 4, 5]).unwrap()),
        ("i1", &ids(&[3, -1, 0, 2, -4, 1], &[2, 3, 1])),
    ];
    check(&g, OpKind::GatherNd, &inputs, 0.0);
}

#[test]
fn element_gather_and_scatter_add() {
    let mut g = Graph::new();
    let d = g.input("d", TensorType::of(DType::F32, &[3, 6]));
    let i = g.input("i", TensorType::of(DType::I64, &[2, 4]));
    let u = g.input("u", TensorType::of(DType::F32, &[2, 4]));
    let ge = g.gather_elements(d, i, -1).unwrap();
    let se = g.scatter_elements(d, i, u, 1, ScatterReduction::Add).unwrap();
    g.set_outputs(vec![ge, se]).unwrap();
    let inputs = [
        ("d", &Tensor::from_vec(randn(18, 3), &[3, 6]).unwrap()),
        ("i", &ids(&[0, -1, 2, 2, 5, -6, 1, 1], &[2, 4])),
        ("u", &Tensor::from_vec(randn(8, 4), &[2, 4]).unwrap()),
    ];
    check(&g, OpKind::GatherElements, &inputs, 0.0);
    check(&g, OpKind::ScatterElements, &inputs, 1e-6);
    let mut g0 = Graph::new();
    let d = g0.input("d", TensorType::of(DType::F32, &[3, 6]));
    let i = g0.input("i", TensorType::of(DType::I64, &[2, 4]));
    let ge0 = g0.gather_elements(d, i, 0).unwrap();
    g0.set_outputs(vec![ge0]).unwrap();
    let inputs0 = [inputs[0], ("i", &ids(&[0, 2, -1, 1, 2, -3, 1, 0], &[2, 4]))];
    check(&g0, OpKind::GatherElements, &inputs0, 0.0);
}

#[test]
fn scatter_nd_add_rows_and_elements() {
    let mut g = Graph::new();
    let d = g.input("d", TensorType::of(DType::F64, &[5, 3, 2]));
    let i = g.input("i", TensorType::of(DType::I64, &[4, 1]));
    let u = g.input("u", TensorType::of(DType::F64, &[4, 3, 2]));
    let i2 = g.input("i2", TensorType::of(DType::I32, &[3, 3]));
    let u2 = g.input("u2", TensorType::of(DType::F64, &[3]));
    let rows = g.scatter_nd(d, i, u, ScatterReduction::Add).unwrap();
    let elems = g.scatter_nd(d, i2, u2, ScatterReduction::Add).unwrap();
    g.set_outputs(vec![rows, elems]).unwrap();
    let f64s = |n, seed| randn(n, seed).into_iter().map(f64::from).collect::<Vec<_>>();
    let inputs = [
        ("d", &Tensor::from_vec(f64s(30, 5), &[5, 3, 2]).unwrap()),
        ("i", &ids(&[1, -1, 1, 0], &[4, 1])),
        ("u", &Tensor::from_vec(f64s(24, 6), &[4, 3, 2]).unwrap()),
        ("i2", &Tensor::from_vec(vec![0i32, 2, 1, -1, 0, 0, 0, 2, -1], &[3, 3]).unwrap()),
        ("u2", &Tensor::from_vec(f64s(3, 7), &[3]).unwrap()),
    ];
    check(&g, OpKind::ScatterNd, &inputs, 1e-15);
}

#[test]
fn gather_backward_on_each_axis() {
    let mut g = Graph::new();
    let dy0 = g.input("dy0", TensorType::of(DType::F32, &[2, 3, 4]));
    let i0 = g.input("i0", TensorType::of(DType::I32, &[2, 3]));
    let dy1 = g.input("dy1", TensorType::of(DType::F32, &[4, 2, 3, 6]));
    let b0 = g.gather_backward(dy0, i0, 0, Shape::of(&[5, 4])).unwrap();
    let b1 = g.gather_backward(dy1, i0, -2, Shape::of(&[4, 5, 6])).unwrap();
    g.set_outputs(vec![b0, b1]).unwrap();
    let inputs = [
        ("dy0", &Tensor::from_vec(randn(24, 8), &[2, 3, 4]).unwrap()),
        ("i0", &Tensor::from_vec(vec![4i32, 0, 4, 1, 4, 0], &[2, 3]).unwrap()),
        ("dy1", &Tensor::from_vec(randn(144, 9), &[4, 2, 3, 6]).unwrap()),
    ];
    check(&g, OpKind::GatherBackward, &inputs, 1e-6);
}

#[test]
fn scatter_none_keeps_the_last_duplicate() {
    let mut g = Graph::new();
    let d = g.input("d", TensorType::of(DType::F32, &[4, 3]));
    let i = g.input("i", TensorType::of(DType::I64, &[4, 1]));
    let u = g.input("u", TensorType::of(DType::F32, &[4, 3]));
    let ie = g.input("ie", TensorType::of(DType::I64, &[2, 3]));
    let ue = g.input("ue", TensorType::of(DType::F32, &[2, 3]));
    let nd = g.scatter_nd(d, i, u, ScatterReduction::None).unwrap();
    let se = g.scatter_elements(d, ie, ue, 0, ScatterReduction::None).unwrap();
    g.set_outputs(vec![nd, se]).unwrap();
    let inputs = [
        ("d", &Tensor::from_vec(randn(12, 10), &[4, 3]).unwrap()),
        ("i", &ids(&[2, 0, -2, 3], &[4, 1])),
        ("u", &Tensor::from_vec(randn(12, 11), &[4, 3]).unwrap()),
        ("ie", &ids(&[1, 3, 1, 1, -1, 0], &[2, 3])),
        ("ue", &Tensor::from_vec(randn(6, 12), &[2, 3]).unwrap()),
    ];
    check(&g, OpKind::ScatterNd, &inputs, 0.0);
    check(&g, OpKind::ScatterElements, &inputs, 0.0);
}
