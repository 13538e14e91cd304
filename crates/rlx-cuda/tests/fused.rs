//! Fused elementwise regions against the CPU backend on fresh random inputs: chains with
//! broadcast and scalar operands (an AdamW update), casts to bf16 inside a chain, integer
//! arithmetic and selects; each must have run as `ElementwiseRegion` kernels. Products with a
//! bias and an activation, each as one `FusedMatMulBiasAct`. Also a mixed-precision GPT step
//! on the GPU against the same step on the CPU. Skips, saying so, without a CUDA device.

mod common;

use common::{agree_native, cpu, f32_input, gpu, random, Tol};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType};
use rlx_opt::decompose::build::scalar;
use rlx_runtime::Tensor;

#[test]
fn an_adamw_update_runs_as_regions_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let dims = [37, 65];
    let mut g = Graph::new();
    let [p, grad, m, v] = ["p", "g", "m", "v"].map(|n| f32_input(&mut g, n, &dims));
    let lr = f32_input(&mut g, "lr", &[]);
    let c = |g: &mut Graph, x: f64| scalar(g, DType::F32, x).unwrap();
    let (b1, nb1, b2, nb2, eps, wd) = (c(&mut g, 0.9), c(&mut g, 0.1), c(&mut g, 0.999), c(&mut g, 0.001), c(&mut g, 1e-8), c(&mut g, 0.01));
    let bin = |g: &mut Graph, op, a, b| g.binary(op, a, b).unwrap();
    let (bm, gm) = (bin(&mut g, BinaryOp::Mul, m, b1), bin(&mut g, BinaryOp::Mul, grad, nb1));
    let m_new = bin(&mut g, BinaryOp::Add, bm, gm);
    let g2 = bin(&mut g, BinaryOp::Mul, grad, grad);
    let (bv, gv) = (bin(&mut g, BinaryOp::Mul, v, b2), bin(&mut g, BinaryOp::Mul, g2, nb2));
    let v_new = bin(&mut g, BinaryOp::Add, bv, gv);
    let root = g.activation(ActivationKind::Sqrt, v_new).unwrap();
    let denom = bin(&mut g, BinaryOp::Add, root, eps);
    let dir = bin(&mut g, BinaryOp::Div, m_new, denom);
    let pw = bin(&mut g, BinaryOp::Mul, p, wd);
    let dir = bin(&mut g, BinaryOp::Add, dir, pw);
    let step = bin(&mut g, BinaryOp::Mul, dir, lr);
    let p_new = bin(&mut g, BinaryOp::Sub, p, step);
    g.set_outputs(vec![p_new, m_new, v_new]).unwrap();
    let inputs = [
        ("p", random(&dims, 1, -1.0, 1.0)),
        ("g", random(&dims, 2, -0.5, 0.5)),
        ("m", random(&dims, 3, -0.1, 0.1)),
        ("v", random(&dims, 4, 0.0, 0.05)),
        ("lr", Tensor::scalar(3e-2f32)),
    ];
    agree_native(&gpu, &g, &inputs, Tol::rel(1e-5), &[OpKind::ElementwiseRegion]);
}

#[test]
fn a_bias_gelu_cast_chain_rounds_to_bf16_as_separate_kernels_would() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[4, 9, 48]);
    let b = f32_input(&mut g, "b", &[48]);
    let r = g.input("r", TensorType::new(DType::BF16, Shape::of(&[4, 9, 48])));
    let y = g.binary(BinaryOp::Add, x, b).unwrap();
    let y = g.activation(ActivationKind::Gelu, y).unwrap();
    let y = g.cast(y, DType::BF16).unwrap();
    let y = g.binary(BinaryOp::Mul, y, r).unwrap();
    let y = g.cast(y, DType::F32).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let bits: Vec<u8> = random(&[4, 9, 48], 7, -2.0, 2.0).to_vec::<f32>().unwrap().iter().flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes()).collect();
    let rs = Tensor::from_bytes(DType::BF16, &[4, 9, 48], &bits).unwrap();
    let inputs = [("x", random(&[4, 9, 48], 5, -3.0, 3.0)), ("b", random(&[48], 6, -1.0, 1.0)), ("r", rs)];
    agree_native(&gpu, &g, &inputs, Tol::rel(1e-2), &[OpKind::ElementwiseRegion]);
}

#[test]
fn integer_division_compares_and_selects_fuse_with_their_own_rules() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let ty = TensorType::new(DType::I32, Shape::of(&[5, 31]));
    let (a, b) = (g.input("a", ty.clone()), g.input("b", ty));
    let q = g.binary(BinaryOp::Div, a, b).unwrap();
    let r = g.binary(BinaryOp::Mod, a, b).unwrap();
    let lt = g.compare(CmpOp::Lt, q, r).unwrap();
    let y = g.select(lt, q, r).unwrap();
    let y = g.binary(BinaryOp::Mul, y, a).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let ints = |seed, lo, hi| {
        let v: Vec<i32> = random(&[5, 31], seed, lo, hi).to_vec::<f32>().unwrap().into_iter().map(|x| x as i32).collect();
        Tensor::from_vec(v, &[5, 31]).unwrap()
    };
    agree_native(&gpu, &g, &[("a", ints(8, -1000.0, 1000.0)), ("b", ints(9, -9.0, 9.0))], Tol::rel(0.0), &[OpKind::ElementwiseRegion]);
}

#[test]
fn a_mixed_precision_gpt_step_on_the_gpu_tracks_the_cpu() {
    let Some(gpu) = gpu() else { return };
    use rlx_models::gpt::{GptConfig, TARGETS, TOKENS};
    use rlx_train::init::Rng;
    use rlx_train::{Optimizer, Precision, Schedule, TrainConfig, Trainer};
    let gpt = GptConfig { vocab: 31, context: 32, d_model: 64, heads: 4, layers: 2, d_ff: 128 }.build().unwrap();
    let config = || TrainConfig::new(Optimizer::adamw(0.01), Schedule::Constant(3e-3)).with_precision(Precision::bf16());
    let mut want = Trainer::new(&cpu(), &gpt.graph, gpt.loss, config()).unwrap();
    let mut got = Trainer::new(&gpu, &gpt.graph, gpt.loss, config()).unwrap();
    let regions = got.graph().nodes().iter().filter(|n| n.op.kind() == OpKind::ElementwiseRegion).count();
    assert!(regions > 0, "no elementwise region in the step");
    let mut rng = Rng::new(5);
    for p in &gpt.params {
        let t = p.init.tensor(&p.shape, &mut rng);
        want.set_param(&p.name, t.clone()).unwrap();
        got.set_param(&p.name, t).unwrap();
    }
    for step in 0..4i64 {
        let tokens: Vec<i64> = (0..128).map(|i| (i * 5 + step * 3) % 31).collect();
        let targets: Vec<i64> = tokens.iter().map(|t| (t * 3 + 1) % 31).collect();
        let (tokens, targets) = (Tensor::from_vec(tokens, &[4, 32]).unwrap(), Tensor::from_vec(targets, &[4, 32]).unwrap());
        let batch = [(TOKENS, &tokens), (TARGETS, &targets)];
        let (a, b) = (got.step(&batch).unwrap(), want.step(&batch).unwrap());
        assert!((a - b).abs() <= 1e-2 * b.abs(), "step {step}: loss {a} on the GPU, {b} on the CPU");
    }
    for p in &gpt.params {
        assert_eq!(got.param(&p.name).unwrap().dtype(), DType::F32, "{}", p.name);
    }
}

#[test]
fn biased_products_with_each_epilogue_agree_with_the_cpu() {
    let Some(gpu) = gpu() else { return };
    // Few rows take the GEMV and the bias kernel; more take cuBLASLt's epilogues (bias, ReLU,
    // tanh-GELU) or its bias and then the activation kernel (exact GELU, SiLU).
    let activations = [None, Some(ActivationKind::Relu), Some(ActivationKind::GeluApprox), Some(ActivationKind::Gelu), Some(ActivationKind::Silu)];
    for dtype in [DType::BF16, DType::F16] {
        for activation in activations {
            for (x_dims, n) in [(vec![1, 96], 136), (vec![3, 40], 64), (vec![2, 70, 96], 136), (vec![200, 64], 48)] {
                let k = *x_dims.last().unwrap();
                let mut g = Graph::new();
                let x = f32_input(&mut g, "x", &x_dims);
                let w = f32_input(&mut g, "w", &[k, n]);
                let b = f32_input(&mut g, "b", &[n]);
                let [x, w, b] = [x, w, b].map(|v| g.cast(v, dtype).unwrap());
                let y = g.matmul(x, w).unwrap();
                let mut y = g.binary(BinaryOp::Add, y, b).unwrap();
                if let Some(kind) = activation {
                    y = g.activation(kind, y).unwrap();
                }
                let y = g.cast(y, DType::F32).unwrap();
                g.set_outputs(vec![y]).unwrap();
                let seed = (k * n + x_dims.len()) as u64;
                let inputs = [("x", random(&x_dims, seed, -1.0, 1.0)), ("w", random(&[k, n], seed + 1, -0.3, 0.3)), ("b", random(&[n], seed + 2, -1.0, 1.0))];
                agree_native(&gpu, &g, &inputs, Tol::norm(2e-2), &[OpKind::FusedMatMulBiasAct]);
            }
        }
    }
}
