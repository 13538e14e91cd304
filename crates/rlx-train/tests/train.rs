//! Training steps against host references of the optimizer formulas, learning on a small
//! regression, and bit-exact resumption from a checkpoint.

use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use rlx_train::{Init, Optimizer, Precision, Remat, Schedule, TrainConfig, Trainer};
use std::sync::Arc;

/// `loss = Σ (p − t)²`, so `∂loss/∂p = 2(p − t)`.
const QUADRATIC: &str = r#"%0 = Param(name:"p",ty:(dtype:F32,shape:[4]))()
    %1 = Input(name:"t",ty:(dtype:F32,shape:[4]))()
    %2 = Binary(op:Sub)(%0, %1)
    %3 = Binary(op:Mul)(%2, %2)
    %4 = Reduce(op:Sum,axes:[0],keep_dim:false)(%3)
    return %4"#;

fn trainer(src: &str, config: TrainConfig) -> Trainer {
    let g = rlx_ir::text::parse(src).unwrap();
    let loss = g.outputs()[0];
    Trainer::new(&Session::new(Arc::new(CpuBackend::new())), &g, loss, config).unwrap()
}

const P0: [f32; 4] = [0.5, -1.0, 2.0, 0.25];
const T: [f32; 4] = [1.5, 0.5, -0.5, 0.0];

/// Runs `steps` steps of the quadratic from `P0`; returns the parameter after each step.
fn run(config: TrainConfig, steps: usize) -> Vec<Vec<f32>> {
    let mut tr = trainer(QUADRATIC, config);
    tr.set_param("p", Tensor::from_slice(&P0, &[4]).unwrap()).unwrap();
    let t = Tensor::from_slice(&T, &[4]).unwrap();
    (0..steps)
        .map(|_| {
            tr.step(&[("t", &t)]).unwrap();
            tr.param("p").unwrap().to_vec::<f32>().unwrap()
        })
        .collect()
}

/// PyTorch's update rules in f64 on the same quadratic.
fn host_reference(opt: &Optimizer, lr: f64, steps: usize) -> Vec<Vec<f64>> {
    let mut p: Vec<f64> = P0.iter().map(|&v| f64::from(v)).collect();
    let (mut s1, mut s2) = (vec![0.0; 4], vec![0.0; 4]);
    let mut out = Vec::new();
    for step in 1..=steps {
        for i in 0..4 {
            let mut g = 2.0 * (p[i] - f64::from(T[i]));
            match *opt {
                Optimizer::Sgd { momentum, nesterov, weight_decay } => {
                    g += f64::from(weight_decay) * p[i];
                    s1[i] = f64::from(momentum) * s1[i] + g;
                    let d = if nesterov { g + f64::from(momentum) * s1[i] } else { s1[i] };
                    p[i] -= lr * d;
                }
                Optimizer::Adam { beta1, beta2, eps, weight_decay } | Optimizer::AdamW { beta1, beta2, eps, weight_decay } => {
                    let (b1, b2, wd) = (f64::from(beta1), f64::from(beta2), f64::from(weight_decay));
                    let decoupled = matches!(opt, Optimizer::AdamW { .. });
                    if !decoupled {
                        g += wd * p[i];
                    }
                    s1[i] = b1 * s1[i] + (1.0 - b1) * g;
                    s2[i] = b2 * s2[i] + (1.0 - b2) * g * g;
                    let mh = s1[i] / (1.0 - b1.powi(step as i32));
                    let vh = s2[i] / (1.0 - b2.powi(step as i32));
                    let mut d = mh / (vh.sqrt() + f64::from(eps));
                    if decoupled {
                        d += wd * p[i];
                    }
                    p[i] -= lr * d;
                }
            }
        }
        out.push(p.clone());
    }
    out
}

#[test]
fn optimizer_steps_follow_the_reference_formulas() {
    let opts = [
        Optimizer::Sgd { momentum: 0.0, nesterov: false, weight_decay: 0.0 },
        Optimizer::Sgd { momentum: 0.9, nesterov: false, weight_decay: 0.01 },
        Optimizer::Sgd { momentum: 0.8, nesterov: true, weight_decay: 0.0 },
        Optimizer::Adam { beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.05 },
        Optimizer::AdamW { beta1: 0.8, beta2: 0.95, eps: 1e-6, weight_decay: 0.1 },
    ];
    for opt in opts {
        let got = run(TrainConfig::new(opt.clone(), Schedule::Constant(0.05)), 5);
        let want = host_reference(&opt, 0.05, 5);
        for (s, (g, w)) in got.iter().zip(&want).enumerate() {
            for (a, b) in g.iter().zip(w) {
                assert!((f64::from(*a) - b).abs() < 1e-5 * b.abs().max(1.0), "{opt:?} step {s}: {g:?} vs {w:?}");
            }
        }
    }
}

#[test]
fn clipping_scales_the_gradient_to_the_global_norm() {
    // One plain SGD step with the gradient 2(p − t) clipped to norm 1.
    let opt = Optimizer::Sgd { momentum: 0.0, nesterov: false, weight_decay: 0.0 };
    let got = run(TrainConfig::new(opt, Schedule::Constant(0.5)).with_clip_norm(1.0), 1);
    let g: Vec<f64> = P0.iter().zip(T).map(|(p, t)| 2.0 * f64::from(p - t)).collect();
    let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
    for i in 0..4 {
        let want = f64::from(P0[i]) - 0.5 * g[i] / (norm + 1e-6);
        assert!((f64::from(got[0][i]) - want).abs() < 1e-6, "{:?}", got[0]);
    }
}

/// A two-layer tanh network fitting `y = sin(3x)` on 32 points.
const MLP: &str = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[32,1]))()
    %1 = Input(name:"y",ty:(dtype:F32,shape:[32,1]))()
    %2 = Param(name:"w1",ty:(dtype:F32,shape:[1,16]))()
    %3 = Param(name:"b1",ty:(dtype:F32,shape:[16]))()
    %4 = Param(name:"w2",ty:(dtype:F32,shape:[16,1]))()
    %5 = MatMul()(%0, %2)
    %6 = Binary(op:Add)(%5, %3)
    %7 = Activation(kind:Tanh)(%6)
    %8 = MatMul()(%7, %4)
    %9 = Binary(op:Sub)(%8, %1)
    %10 = Binary(op:Mul)(%9, %9)
    %11 = Reduce(op:Mean,axes:[0,1],keep_dim:false)(%10)
    return %11"#;

fn mlp_trainer() -> (Trainer, Tensor, Tensor) {
    let schedule = Schedule::WarmupCosine { peak: 0.05, min: 0.005, warmup: 10, total: 300 };
    let mut tr = trainer(MLP, TrainConfig::new(Optimizer::adamw(1e-4), schedule).with_clip_norm(5.0));
    let mut rng = rlx_train::init::Rng::new(7);
    for (name, shape) in [("w1", vec![1, 16]), ("b1", vec![16]), ("w2", vec![16, 1])] {
        tr.set_param(name, Init::XavierUniform.tensor(&shape, &mut rng)).unwrap();
    }
    let xs: Vec<f32> = (0..32).map(|i| i as f32 / 16.0 - 1.0).collect();
    let ys: Vec<f32> = xs.iter().map(|x| (3.0 * x).sin()).collect();
    (tr, Tensor::from_vec(xs, &[32, 1]).unwrap(), Tensor::from_vec(ys, &[32, 1]).unwrap())
}

#[test]
fn adamw_fits_a_small_regression() {
    let (mut tr, x, y) = mlp_trainer();
    let first = tr.step(&[("x", &x), ("y", &y)]).unwrap();
    let mut last = first;
    for _ in 0..299 {
        last = tr.step(&[("x", &x), ("y", &y)]).unwrap();
    }
    assert!(last < 0.05 * first, "loss {first} → {last}");
}

#[test]
fn resuming_from_a_checkpoint_is_bit_exact() {
    let dir = std::env::temp_dir().join(format!("rlx-train-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("step5.safetensors");
    let (mut a, x, y) = mlp_trainer();
    for _ in 0..5 {
        a.step(&[("x", &x), ("y", &y)]).unwrap();
    }
    a.save(&path).unwrap();
    let straight: Vec<f32> = (0..4).map(|_| a.step(&[("x", &x), ("y", &y)]).unwrap()).collect();
    let (mut b, _, _) = mlp_trainer();
    b.load(&path).unwrap();
    assert_eq!(b.steps(), 5);
    let resumed: Vec<f32> = (0..4).map(|_| b.step(&[("x", &x), ("y", &y)]).unwrap()).collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&straight), bits(&resumed));
    for name in a.updated() {
        assert_eq!(a.param(name).unwrap().bytes(), b.param(name).unwrap().bytes(), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_truncated_checkpoint_is_an_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("rlx-train-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.safetensors");
    let (mut a, _, _) = mlp_trainer();
    a.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = a.load(&path).unwrap_err().to_string();
    assert!(err.contains("bad.safetensors"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An eight-layer tanh network on `x [64, 16]` with a squared-error loss.
fn deep_mlp() -> (rlx_ir::Graph, rlx_ir::ValueId) {
    use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
    let mut g = rlx_ir::Graph::new();
    let ty = |dims: &[usize]| rlx_ir::TensorType::of(rlx_ir::DType::F32, dims);
    let mut h = g.input("x", ty(&[64, 16]));
    let y = g.input("y", ty(&[64, 16]));
    for l in 0..8 {
        let w = g.param(&format!("w{l}"), ty(&[16, 16]));
        let b = g.param(&format!("b{l}"), ty(&[16]));
        let z = g.matmul(h, w).unwrap();
        let a = g.binary(BinaryOp::Add, z, b).unwrap();
        h = g.activation(ActivationKind::Tanh, a).unwrap();
    }
    let d = g.binary(BinaryOp::Sub, h, y).unwrap();
    let sq = g.binary(BinaryOp::Mul, d, d).unwrap();
    let loss = g.reduce(rlx_ir::ops::reduce::ReduceOp::Mean, sq, &[0, 1], false).unwrap();
    g.set_outputs(vec![loss]).unwrap();
    (g, loss)
}

/// Seeded inputs, targets and initial parameters for [`deep_mlp`].
fn deep_mlp_data(seed: u64) -> (Tensor, Tensor, Vec<(String, Tensor)>) {
    let mut rng = rlx_train::init::Rng::new(seed);
    let x = Init::Normal(1.0).tensor(&[64, 16], &mut rng);
    let y = Init::Normal(0.5).tensor(&[64, 16], &mut rng);
    let params: Vec<(String, Tensor)> = (0..8)
        .flat_map(|l| [(format!("w{l}"), Init::XavierUniform.tensor(&[16, 16], &mut rng)), (format!("b{l}"), Init::Normal(0.1).tensor(&[16], &mut rng))])
        .collect();
    (x, y, params)
}

#[test]
fn rematerialised_steps_update_the_parameters_identically_in_less_memory() {
    let (g, loss) = deep_mlp();
    let config = TrainConfig::new(Optimizer::adamw(1e-2), Schedule::Constant(0.01));
    let (x, y, params) = deep_mlp_data(3);
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut trained = Vec::new();
    for remat in [Remat::KeepAll, Remat::Sqrt] {
        let mut tr = Trainer::new(&session, &g, loss, config.clone().with_remat(remat)).unwrap();
        for (name, t) in &params {
            tr.set_param(name, t.clone()).unwrap();
        }
        let arena = tr.arena_bytes(&[("x", &x), ("y", &y)]).unwrap().unwrap();
        let losses: Vec<f32> = (0..3).map(|_| tr.step(&[("x", &x), ("y", &y)]).unwrap()).collect();
        let state: Vec<Tensor> = tr.updated().iter().map(|n| tr.param(n).unwrap()).collect();
        trained.push((arena, losses, state));
    }
    let (plain, remat) = (&trained[0], &trained[1]);
    assert!(plain.1[2] < plain.1[0], "the loss does not fall: {:?}", plain.1);
    assert_eq!(plain.1, remat.1);
    assert_eq!(plain.2, remat.2);
    // Measured: 38 144 bytes with remat, 78 016 without.
    assert!(remat.0 < plain.0, "arena {} with remat, {} without", remat.0, plain.0);
}

#[test]
fn a_mixed_precision_step_tracks_the_f32_step_over_f32_master_weights() {
    let (g, loss) = deep_mlp();
    let config = TrainConfig::new(Optimizer::adamw(1e-2), Schedule::Constant(0.01));
    let (x, y, params) = deep_mlp_data(11);
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut runs = Vec::new();
    for precision in [Precision::Full, Precision::bf16()] {
        let mut tr = Trainer::new(&session, &g, loss, config.clone().with_precision(precision)).unwrap();
        let bf16_products = tr.graph().nodes().iter().filter(|n| n.op.kind() == rlx_ir::OpKind::MatMul && n.outputs[0].dtype == rlx_ir::DType::BF16).count();
        assert_eq!(bf16_products > 0, precision != Precision::Full, "{bf16_products} bf16 matmuls under {precision:?}");
        for (name, t) in &params {
            tr.set_param(name, t.clone()).unwrap();
        }
        let losses: Vec<f32> = (0..10).map(|_| tr.step(&[("x", &x), ("y", &y)]).unwrap()).collect();
        for name in tr.updated() {
            assert_eq!(tr.param(name).unwrap().dtype(), rlx_ir::DType::F32, "{name} under {precision:?}");
        }
        runs.push((losses, tr.param("w3").unwrap().to_vec::<f32>().unwrap()));
    }
    let ((full, w_full), (mixed, w_mixed)) = (&runs[0], &runs[1]);
    assert!(full[9] < 0.9 * full[0], "the f32 loss does not fall: {full:?}");
    for (a, b) in full.iter().zip(mixed) {
        assert!((a - b).abs() <= 2e-2 * a.abs(), "f32 losses {full:?}, mixed {mixed:?}");
    }
    assert_ne!(full, mixed, "the mixed step computed in f32");
    // Adam moves every weight by about lr a step whatever the gradient's size, so the two
    // runs' weights are compared against how far the f32 run moved them.
    let w0 = params.iter().find(|(n, _)| n == "w3").unwrap().1.to_vec::<f32>().unwrap();
    let mean = |v: Vec<f32>| v.iter().sum::<f32>() / v.len() as f32;
    let moved = mean(w_full.iter().zip(&w0).map(|(a, b)| (a - b).abs()).collect());
    let apart = mean(w_full.iter().zip(w_mixed).map(|(a, b)| (a - b).abs()).collect());
    assert!(apart <= 0.1 * moved, "w3 moved {moved} on average in f32, and the mixed run ends {apart} from it");
}
