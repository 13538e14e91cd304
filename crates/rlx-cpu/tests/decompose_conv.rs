//! The conv-family decompositions compute what the native kernels compute.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_ir::ops::conv::{
    Conv, Conv2dBackwardInput, Conv2dBackwardWeight, Conv3d, Conv3dBackwardInput, Conv3dBackwardWeight, ConvTranspose2d,
    ConvTranspose3d, Im2Col, Pool,
};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, OpKind, Shape, TensorType};
use rlx_runtime::Tensor;

/// Runs `g` natively and with each of `kinds` lowered through its decomposition. (The graphs
/// declare every input before the first op: the CPU executor's arena plan lets an input
/// declared after an op's last read of an earlier input share that input's bytes, and inputs
/// are all copied in before the first step.)
fn check(g: &Graph, kinds: &[OpKind], inputs: &[(&str, &Tensor)], tol: f64) {
    if !primitives_run() {
        return;
    }
    let native = run(g, inputs);
    for &kind in kinds {
        for (x, y) in run_decomposed(g, kind, inputs).iter().zip(&native) {
            assert_close(x, y, tol, tol);
        }
    }
}

/// Whether the CPU backend runs the primitives the conv decompositions emit. The shape,
/// index and reduce kernels come from other branches; until they are merged these tests
/// check nothing (and say so) rather than fail.
fn primitives_run() -> bool {
    let needed = [OpKind::Gather, OpKind::Reshape, OpKind::Transpose, OpKind::Expand, OpKind::Reduce, OpKind::Where, OpKind::MatMul];
    let missing: Vec<_> = needed.iter().filter(|k| !rlx_cpu::SUPPORTED_OPS.contains(k)).collect();
    if !missing.is_empty() {
        eprintln!("skipped: the CPU backend has no kernel for {missing:?} yet");
    }
    missing.is_empty()
}

fn f32s(dims: &[usize]) -> TensorType {
    TensorType::of(DType::F32, dims)
}

fn batch(b: &str, rest: &[usize]) -> TensorType {
    let mut dims = vec![Dim::Sym(b.into())];
    dims.extend(rest.iter().map(|&n| Dim::Static(n)));
    TensorType::new(DType::F32, Shape(dims))
}

fn tensor(dims: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(randn(dims.iter().product(), seed), dims).unwrap()
}

fn conv2(k: [usize; 2], s: [usize; 2], p: [usize; 2], d: [usize; 2], groups: usize) -> Conv {
    Conv { kernel_size: k.to_vec(), stride: s.to_vec(), padding: p.to_vec(), dilation: d.to_vec(), groups }
}

#[test]
fn convs_and_their_gradients_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", f32s(&[2, 4, 9, 8]));
    let w = g.input("w", f32s(&[6, 2, 3, 2]));
    let wt = g.input("wt", f32s(&[6, 2, 3, 3]));
    let y = g.conv(x, w, conv2([3, 2], [2, 1], [1, 0], [1, 2], 2)).unwrap();
    let (k, s, p, d, gr) = (vec![3, 2], vec![2, 1], vec![1, 0], vec![1, 2], 2);
    let dx = g
        .conv2d_backward_input(y, w, Conv2dBackwardInput {
            kernel_size: k.clone(),
            stride: s.clone(),
            padding: p.clone(),
            dilation: d.clone(),
            groups: gr,
            input_size: vec![9.into(), 8.into()],
        })
        .unwrap();
    let dw = g.conv2d_backward_weight(x, y, Conv2dBackwardWeight { kernel_size: k, stride: s, padding: p, dilation: d, groups: gr }).unwrap();
    let t = g
        .conv_transpose2d(y, wt, ConvTranspose2d {
            kernel_size: vec![3, 3],
            stride: vec![2, 3],
            padding: vec![1, 0],
            dilation: vec![1, 2],
            output_padding: vec![1, 2],
            groups: 3,
        })
        .unwrap();
    g.set_outputs(vec![y, dx, dw, t]).unwrap();
    let (tx, tw, twt) = (tensor(&[2, 4, 9, 8], 1), tensor(&[6, 2, 3, 2], 2), tensor(&[6, 2, 3, 3], 3));
    let inputs = [("x", &tx), ("w", &tw), ("wt", &twt)];
    check(
        &g,
        &[OpKind::Conv, OpKind::Conv2dBackwardInput, OpKind::Conv2dBackwardWeight, OpKind::ConvTranspose2d],
        &inputs,
        1e-5,
    );
}

#[test]
fn symbolic_batch_depthwise_conv_and_weight_gradient() {
    let mut g = Graph::new();
    let x = g.input("x", batch("B", &[3, 7, 7]));
    let w = g.input("w", f32s(&[6, 1, 3, 3]));
    let y = g.conv(x, w, conv2([3, 3], [2, 2], [1, 1], [1, 1], 3)).unwrap();
    let dw = g
        .conv2d_backward_weight(x, y, Conv2dBackwardWeight {
            kernel_size: vec![3, 3],
            stride: vec![2, 2],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            groups: 3,
        })
        .unwrap();
    g.set_outputs(vec![y, dw]).unwrap();
    let (tx, tw) = (tensor(&[2, 3, 7, 7], 4), tensor(&[6, 1, 3, 3], 5));
    check(&g, &[OpKind::Conv, OpKind::Conv2dBackwardWeight], &[("x", &tx), ("w", &tw)], 1e-5);
}

#[test]
fn three_d_convs_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", f32s(&[1, 4, 3, 4, 5]));
    let w = g.input("w", f32s(&[6, 2, 2, 3, 2]));
    let wt = g.input("wt", f32s(&[6, 1, 2, 2, 3]));
    let y = g.conv3d(x, w, Conv3d { stride: [1, 2, 1], padding: [1, 0, 1], dilation: [1, 1, 2], groups: 2 }).unwrap();
    let t = g
        .conv_transpose3d(y, wt, ConvTranspose3d { stride: [2, 1, 2], padding: [0, 0, 1], dilation: [1; 3], output_padding: [1, 0, 1], groups: 2 })
        .unwrap();
    let (k, s, p, d) = (vec![2, 3, 2], vec![1, 2, 1], vec![1, 0, 1], vec![1, 1, 2]);
    let dx = g
        .conv3d_backward_input(y, w, Conv3dBackwardInput {
            kernel_size: k.clone(),
            stride: s.clone(),
            padding: p.clone(),
            dilation: d.clone(),
            groups: 2,
            input_size: vec![3.into(), 4.into(), 5.into()],
        })
        .unwrap();
    let dw = g.conv3d_backward_weight(x, y, Conv3dBackwardWeight { kernel_size: k, stride: s, padding: p, dilation: d, groups: 2 }).unwrap();
    g.set_outputs(vec![y, t, dx, dw]).unwrap();
    let (tx, tw, twt) = (tensor(&[1, 4, 3, 4, 5], 6), tensor(&[6, 2, 2, 3, 2], 7), tensor(&[6, 1, 2, 2, 3], 8));
    check(
        &g,
        &[OpKind::Conv3d, OpKind::ConvTranspose3d, OpKind::Conv3dBackwardInput, OpKind::Conv3dBackwardWeight],
        &[("x", &tx), ("w", &tw), ("wt", &twt)],
        1e-5,
    );
}

#[test]
fn pools_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", batch("B", &[3, 7, 6]));
    let v = g.input("v", f32s(&[1, 2, 4, 5, 6]));
    let i = g.input("i", TensorType::of(DType::I32, &[1, 2, 5, 5]));
    let pool = |kind, k: &[usize], s: &[usize], p: &[usize]| Pool { kind, kernel_size: k.to_vec(), stride: s.to_vec(), padding: p.to_vec() };
    let mut outs = Vec::new();
    for kind in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Prod] {
        outs.push(g.pool(x, pool(kind, &[3, 2], &[2, 1], &[1, 1])).unwrap());
    }
    for kind in [ReduceOp::Max, ReduceOp::Mean] {
        outs.push(g.pool(v, pool(kind, &[2, 2, 3], &[1, 2, 2], &[1, 0, 1])).unwrap());
    }
    outs.push(g.pool(i, pool(ReduceOp::Sum, &[2, 3], &[1, 2], &[1, 1])).unwrap());
    outs.push(g.pool(i, pool(ReduceOp::Max, &[3, 3], &[2, 2], &[1, 1])).unwrap());
    g.set_outputs(outs).unwrap();
    let (tx, tv) = (tensor(&[2, 3, 7, 6], 9), tensor(&[1, 2, 4, 5, 6], 10));
    let ti = Tensor::from_vec((0..50).map(|k| (k * 37 % 23) - 11).collect::<Vec<i32>>(), &[1, 2, 5, 5]).unwrap();
    check(&g, &[OpKind::Pool], &[("x", &tx), ("v", &tv), ("i", &ti)], 1e-5);
    if !primitives_run() {
        return;
    }
    // The depthwise conv that Mean/Sum pools become must lower too.
    let claims_without_pool_and_conv = [OpKind::Pool, OpKind::Conv3d];
    let native = run(&g, &[("x", &tx), ("v", &tv), ("i", &ti)]);
    let lowered = {
        let claims: Vec<OpKind> =
            rlx_cpu::SUPPORTED_OPS.iter().copied().filter(|k| !claims_without_pool_and_conv.contains(k) && *k != OpKind::Conv).collect();
        rlx_opt::legalize(&g, "cpu-without", &claims[..]).unwrap().0
    };
    for (a, b) in run(&lowered, &[("x", &tx), ("v", &tv), ("i", &ti)]).iter().zip(&native) {
        assert_close(a, b, 1e-5, 1e-5);
    }
}

#[test]
fn resizes_and_im2col_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", batch("B", &[3, 4, 5]));
    let v = g.input("v", TensorType::of(DType::I32, &[2, 1, 3, 4, 5]));
    let c = g.input("c", f32s(&[2, 3, 6, 7]));
    let r = g.resize_nearest2x(x).unwrap();
    let i = g.interpolate3d(v, [5, 4, 2]).unwrap();
    let col = g.im2col(c, Im2Col { kernel_size: vec![3, 2], stride: vec![2, 1], padding: vec![1, 1], dilation: vec![1, 2] }).unwrap();
    g.set_outputs(vec![r, i, col]).unwrap();
    let (tx, tc) = (tensor(&[2, 3, 4, 5], 11), tensor(&[2, 3, 6, 7], 12));
    let tv = Tensor::from_vec((0..120).collect::<Vec<i32>>(), &[2, 1, 3, 4, 5]).unwrap();
    check(&g, &[OpKind::ResizeNearest2x, OpKind::Interpolate3d, OpKind::Im2Col], &[("x", &tx), ("v", &tv), ("c", &tc)], 0.0);
}
