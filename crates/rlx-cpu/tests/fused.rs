//! The fused kernels against their decompositions run unfused, on random inputs whose last
//! axis has odd lengths (and sizes past the threading threshold), broadcast operands and
//! every dtype path; and a post-norm encoder layer compiled with and without fusion.

mod common;

use common::graphs::{matches_kernel, tensor_for};
use common::assert_close;
use rlx_cpu::CpuBackend;
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::ops::elementwise::{ActivationKind as A, BinaryOp, CmpOp};
use rlx_ir::ops::fused::{ChainStep as S, Operand::Input as In, Operand::Step};
use rlx_ir::{DType, Graph, OpKind, TensorType, ValueId};
use rlx_runtime::{CompileOptions, Session, Tensor};
use std::sync::Arc;

/// Last-axis lengths that straddle the kernels' lane and block widths.
const WIDTHS: [usize; 5] = [1, 7, 63, 129, 1000];

/// The text of `g` returning `y`.
fn text(mut g: Graph, y: ValueId) -> String {
    g.set_outputs(vec![y]).unwrap();
    g.to_string()
}

#[test]
fn matmul_bias_act_matches_its_decomposition() {
    let acts = [Some(A::Gelu), None, Some(A::Silu), Some(A::Tanh), Some(A::GeluApprox)];
    let dtypes = [DType::F32, DType::F32, DType::F64, DType::F32, DType::F32];
    for ((&n, act), dtype) in WIDTHS.iter().zip(acts).zip(dtypes) {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(dtype, &[2, 35, 9]));
        let w = g.input("w", TensorType::of(dtype, &[9, n]));
        let b = g.input("b", TensorType::of(dtype, &[n]));
        let y = g.fused_matmul_bias_act(x, w, b, act).unwrap();
        matches_kernel(&text(g, y), OpKind::FusedMatMulBiasAct, 1e-6, 1e-6);
    }
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F16, &[5, 6]));
    let w = g.input("w", TensorType::of(DType::F16, &[6, 7]));
    let b = g.input("b", TensorType::of(DType::F16, &[7]));
    let y = g.fused_matmul_bias_act(x, w, b, Some(A::Relu)).unwrap();
    matches_kernel(&text(g, y), OpKind::FusedMatMulBiasAct, 0.0, 0.0);
}

#[test]
fn swiglu_matches_its_decomposition() {
    for (i, &n) in WIDTHS.iter().enumerate() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F32, &[3, 41, 2 * n]));
        let y = g.fused_swiglu(x, i % 2 == 0, None).unwrap();
        matches_kernel(&text(g, y), OpKind::FusedSwiGLU, 1e-6, 1e-7);
    }
    for (dtype, cast) in [(DType::F32, Some(DType::F16)), (DType::F64, Some(DType::F32)), (DType::F16, None)] {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(dtype, &[3, 14]));
        let y = g.fused_swiglu(x, true, cast).unwrap();
        matches_kernel(&text(g, y), OpKind::FusedSwiGLU, 0.0, 0.0);
    }
}

#[test]
fn residual_norms_match_their_decompositions() {
    for op in [OpKind::FusedResidualLN, OpKind::FusedResidualRmsNorm] {
        let norm = |g: &mut Graph, x, r, bias, gamma, beta| match op {
            OpKind::FusedResidualLN => g.fused_residual_ln(x, r, bias, gamma, beta, 1e-5),
            _ => g.fused_residual_rms_norm(x, r, bias, gamma, beta, 1e-5),
        };
        for (i, &d) in WIDTHS.iter().enumerate() {
            // The residual is full, a row broadcast over the batch, a single row, or per batch.
            let residual = [vec![4, 37, d], vec![37, d], vec![1, d], vec![4, 1, d], vec![d]][i].clone();
            let mut g = Graph::new();
            let x = g.input("x", TensorType::of(DType::F32, &[4, 37, d]));
            let r = g.input("residual", TensorType::of(DType::F32, &residual));
            let bias = (i % 2 == 1).then(|| g.input("bias", TensorType::of(DType::F32, &[d])));
            let gamma = g.input("gamma", TensorType::of(DType::F32, &[d]));
            let beta = g.input("beta", TensorType::of(DType::F32, &[d]));
            let y = norm(&mut g, x, r, bias, gamma, beta).unwrap();
            matches_kernel(&text(g, y), op, 1e-4, 1e-5);
        }
        // A column residual and f64 run the unfused kernels.
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::F64, &[3, 5]));
        let r = g.input("residual", TensorType::of(DType::F64, &[3, 1]));
        let gamma = g.input("gamma", TensorType::of(DType::F64, &[5]));
        let y = norm(&mut g, x, r, None, gamma, gamma).unwrap();
        matches_kernel(&text(g, y), op, 0.0, 0.0);
    }
}

/// A region over `x [rows, n]`, a broadcast row `b [n]`, a scalar `c [1]` and a Bool mask
/// `m [rows, n]` that uses every step kind, ending in `last` (which reads step 7).
fn region(rows: usize, n: usize, dtype: DType, last: S) -> String {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(dtype, &[rows, n]));
    let b = g.input("b", TensorType::of(dtype, &[n]));
    let c = g.input("c", TensorType::of(dtype, &[1]));
    let m = g.input("m", TensorType::of(DType::Bool, &[rows, n]));
    let chain = vec![
        S::Binary(BinaryOp::Add, In(0), In(1)),
        S::Activation(A::Tanh, Step(0)),
        S::Binary(BinaryOp::Mul, Step(1), In(2)),
        S::Compare(CmpOp::Gt, Step(2), In(0)),
        S::Where(Step(3), Step(2), In(1)),
        S::Where(In(3), Step(4), Step(0)),
        S::Binary(BinaryOp::Max, Step(5), In(2)),
        S::Activation(A::Silu, Step(6)),
        last,
    ];
    let y = g.elementwise_region(chain, &[x, b, c, m], None).unwrap();
    text(g, y)
}

#[test]
fn elementwise_region_matches_its_decomposition() {
    for &n in &WIDTHS {
        matches_kernel(&region(5, n, DType::F32, S::Cast(DType::F32, Step(7))), OpKind::ElementwiseRegion, 0.0, 0.0);
    }
    // Past the threading threshold, ending in a comparison (a Bool output).
    let compare = S::Compare(CmpOp::Lt, Step(7), In(1));
    matches_kernel(&region(40, 1000, DType::F32, compare), OpKind::ElementwiseRegion, 0.0, 0.0);
    // The generic path: f64 operands, and an f32 chain that rounds to f16 at the end.
    matches_kernel(&region(3, 129, DType::F64, S::Cast(DType::F32, Step(7))), OpKind::ElementwiseRegion, 0.0, 0.0);
    matches_kernel(&region(3, 300, DType::F32, S::Cast(DType::F16, Step(7))), OpKind::ElementwiseRegion, 0.0, 0.0);
}

/// `x·w + b` with the weight and bias as named inputs.
fn linear(g: &mut Graph, x: ValueId, name: &str, inp: usize, out: usize) -> ValueId {
    let w = g.input(&format!("{name}_w"), TensorType::of(DType::F32, &[inp, out]));
    let b = g.input(&format!("{name}_b"), TensorType::of(DType::F32, &[out]));
    let y = g.matmul(x, w).unwrap();
    g.binary(BinaryOp::Add, y, b).unwrap()
}

#[test]
fn post_norm_encoder_layer_fuses_and_matches_unfused() {
    // A BERT layer (padding-masked attention, GELU MLP, LayerNorm after each residual add).
    let (b, s, e, heads, ffn) = (2, 9, 24, 4, 40);
    let mut g = Graph::new();
    let h = g.input("hidden", TensorType::of(DType::F32, &[b, s, e]));
    let mask = g.input("mask", TensorType::of(DType::Bool, &[b, s]));
    let [q, k, v] = ["q", "k", "v"].map(|n| linear(&mut g, h, n, e, e));
    let a = g.attention(Attention::new(heads, e / heads, MaskKind::Custom), q, k, v, Some(mask)).unwrap();
    let o = linear(&mut g, a, "o", e, e);
    let s1 = g.binary(BinaryOp::Add, h, o).unwrap();
    let ln = |g: &mut Graph, x, n: &str| {
        let gamma = g.input(&format!("{n}_g"), TensorType::of(DType::F32, &[e]));
        let beta = g.input(&format!("{n}_b"), TensorType::of(DType::F32, &[e]));
        g.layer_norm(x, gamma, beta, -1, 1e-12).unwrap()
    };
    let h1 = ln(&mut g, s1, "ln1");
    let f = linear(&mut g, h1, "fc1", e, ffn);
    let f = g.activation(A::Gelu, f).unwrap();
    let f = linear(&mut g, f, "fc2", ffn, e);
    let s2 = g.binary(BinaryOp::Add, h1, f).unwrap();
    let y = ln(&mut g, s2, "ln2");
    g.set_outputs(vec![y]).unwrap();

    let compile = |fuse| {
        let options = CompileOptions { optimize: true, fuse, dispatch_report: false };
        Session::new(Arc::new(CpuBackend::new())).with_options(options).compile(&g).unwrap()
    };
    let (mut fused, mut plain) = (compile(true), compile(false));
    let count = |k: OpKind| fused.graph().nodes().iter().filter(|n| n.op.kind() == k).count();
    assert_eq!((count(OpKind::FusedMatMulBiasAct), count(OpKind::FusedResidualLN)), (6, 2), "{}", fused.graph());
    assert_eq!((count(OpKind::MatMul), count(OpKind::LayerNorm), count(OpKind::Binary)), (0, 0, 0), "{}", fused.graph());

    let data: Vec<(String, Tensor)> =
        g.inputs().iter().enumerate().map(|(i, (n, v))| (n.to_string(), tensor_for(n, g.ty(*v), 40 + i as u64))).collect();
    let inputs: Vec<(&str, &Tensor)> = data.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let (x, y) = (fused.run(&inputs).unwrap(), plain.run(&inputs).unwrap());
    assert_close(&x[0], &y[0], 1e-4, 1e-5);
}
