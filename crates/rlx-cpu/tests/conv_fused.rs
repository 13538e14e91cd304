//! `FusedConvBiasAct` against its decomposition (`Conv`, bias `Add`, residual `Add`,
//! `Activation`) run unfused: the f32 epilogue inside the GEMM for batches of one and several,
//! groups and strides, and the unfused fallback of f64 and f16.

mod common;

use common::graphs::matches_kernel;
use rlx_ir::ops::elementwise::ActivationKind as A;
use rlx_ir::ops::fused::FusedConvBiasAct;
use rlx_ir::{DType, Graph, OpKind, TensorType};

/// The text of `act(conv(x, w) + b [+ r])` over `x [n, c_in, h, w]`, with the conv's
/// `[c_out, k, stride, groups]`.
fn graph(dtype: DType, [n, c_in, h, wd]: [usize; 4], [c_out, k, stride, groups]: [usize; 4], act: Option<A>, residual: bool) -> String {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(dtype, &[n, c_in, h, wd]));
    let w = g.input("w", TensorType::of(dtype, &[c_out, c_in / groups, k, k]));
    let b = g.input("b", TensorType::of(dtype, &[c_out]));
    let (p, o) = (k / 2, |e: usize| (e + 2 * (k / 2) - k) / stride + 1);
    let r = residual.then(|| g.input("r", TensorType::of(dtype, &[n, c_out, o(h), o(wd)])));
    let attrs = FusedConvBiasAct {
        kernel_size: vec![k, k],
        stride: vec![stride, stride],
        padding: vec![p, p],
        dilation: vec![1, 1],
        groups,
        activation: act,
        has_residual: false,
    };
    let y = g.fused_conv_bias_act(attrs, x, w, b, r).unwrap();
    g.set_outputs(vec![y]).unwrap();
    g.to_string()
}

#[test]
fn fused_conv_matches_its_decomposition() {
    let kind = OpKind::FusedConvBiasAct;
    matches_kernel(&graph(DType::F32, [1, 16, 20, 19], [24, 3, 1, 1], Some(A::Relu), true), kind, 1e-5, 1e-5);
    matches_kernel(&graph(DType::F32, [1, 3, 33, 30], [8, 7, 2, 1], Some(A::Relu), false), kind, 1e-5, 1e-5);
    matches_kernel(&graph(DType::F32, [3, 8, 9, 10], [12, 3, 2, 4], Some(A::Tanh), true), kind, 1e-5, 1e-5);
    matches_kernel(&graph(DType::F32, [2, 10, 7, 7], [6, 1, 1, 1], None, false), kind, 1e-5, 1e-5);
    matches_kernel(&graph(DType::F64, [2, 4, 6, 5], [6, 3, 1, 2], Some(A::Relu), true), kind, 1e-12, 1e-12);
    matches_kernel(&graph(DType::F16, [1, 4, 6, 5], [4, 3, 2, 1], Some(A::Gelu), true), kind, 0.0, 0.0);
}
