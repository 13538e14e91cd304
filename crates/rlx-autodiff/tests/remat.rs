//! The memory the gradient graph needs, read off the CPU planner's arena: plain `grad` keeps
//! no more than the activations its rules read plus a few temporaries, and rematerialisation
//! gives the same gradients in measurably less memory.

use rlx_autodiff::{grad, grad_with, GradOptions, Remat};
use rlx_cpu::CpuBackend;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{Graph, OpKind, TensorType, ValueId};
use rlx_runtime::{CompiledGraph, Session, Tensor};
use std::sync::Arc;

const BATCH: usize = 256;
const WIDTH: usize = 32;
const F64: usize = 8;

/// A depth-`layers` stack on `x [BATCH, WIDTH]` with loss `Σ (h_L − t)²`: plain layers
/// `h' = relu(h·W + b)`, or residual blocks `h' = h + tanh(h·W + b)`. Returns the graph, the
/// loss, the names to differentiate and each layer's output.
fn stack(layers: usize, residual: bool) -> (Graph, ValueId, Vec<String>, Vec<ValueId>) {
    let mut g = Graph::new();
    let ty = |dims: &[usize]| TensorType::of(rlx_ir::DType::F64, dims);
    let mut h = g.input("x", ty(&[BATCH, WIDTH]));
    let t = g.input("t", ty(&[BATCH, WIDTH]));
    let mut names = Vec::new();
    let mut outs = Vec::new();
    for l in 0..layers {
        let w = g.param(&format!("w{l}"), ty(&[WIDTH, WIDTH]));
        let b = g.param(&format!("b{l}"), ty(&[WIDTH]));
        names.extend([format!("w{l}"), format!("b{l}")]);
        let z = g.matmul(h, w).unwrap();
        let a = g.binary(BinaryOp::Add, z, b).unwrap();
        h = if residual {
            let f = g.activation(ActivationKind::Tanh, a).unwrap();
            g.binary(BinaryOp::Add, h, f).unwrap()
        } else {
            g.activation(ActivationKind::Relu, a).unwrap()
        };
        outs.push(h);
    }
    let d = g.binary(BinaryOp::Sub, h, t).unwrap();
    let sq = g.binary(BinaryOp::Mul, d, d).unwrap();
    let loss = g.reduce(ReduceOp::Sum, sq, &[0, 1], false).unwrap();
    g.set_outputs(vec![loss]).unwrap();
    (g, loss, names, outs)
}

/// xorshift64*, mapped to `[-scale, scale)`.
struct Rng(u64);

impl Rng {
    fn tensor(&mut self, dims: &[usize], scale: f64) -> Tensor {
        let n = dims.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                let u = (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
                scale * (2.0 * u - 1.0)
            })
            .collect();
        Tensor::from_vec(v, dims).unwrap()
    }
}

/// A compiled gradient graph, its arena bytes for the stack's shapes and its outputs.
struct Measured {
    compiled: CompiledGraph,
    arena: usize,
    outputs: Vec<Tensor>,
}

fn measure(g: &Graph, layers: usize, seed: u64) -> Measured {
    let mut compiled = Session::new(Arc::new(CpuBackend::new())).compile(g).unwrap_or_else(|e| panic!("{e}\n{g}"));
    let mut rng = Rng(seed);
    for l in 0..layers {
        compiled.set_param(&format!("w{l}"), rng.tensor(&[WIDTH, WIDTH], 0.4)).unwrap();
        compiled.set_param(&format!("b{l}"), rng.tensor(&[WIDTH], 0.1)).unwrap();
    }
    let x = rng.tensor(&[BATCH, WIDTH], 1.0);
    let t = rng.tensor(&[BATCH, WIDTH], 1.0);
    let inputs = [("x", &x), ("t", &t)];
    let arena = compiled.arena_bytes(&inputs).unwrap().expect("the CPU plans one arena");
    let outputs = compiled.run(&inputs).unwrap();
    Measured { compiled, arena, outputs }
}

fn gradient(layers: usize, residual: bool, remat: Remat) -> Graph {
    let (g, loss, names, _) = stack(layers, residual);
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    grad_with(&g, loss, &wrt, &GradOptions { remat }).unwrap()
}

const ACT: usize = BATCH * WIDTH * F64;
const WEIGHT: usize = WIDTH * WIDTH * F64;
const BIAS: usize = 64;

/// Every parameter's gradient, all alive at the end as outputs.
fn gradients(layers: usize) -> usize {
    layers * (WEIGHT + BIAS)
}

#[test]
fn plain_gradient_keeps_only_what_the_backward_sweep_reads() {
    for layers in [4, 16] {
        let m = measure(&gradient(layers, false, Remat::KeepAll), layers, 1);
        // Alive when the backward sweep starts: x and each layer's pre-activation (read by
        // ReluBackward) and output (read by the next MatMul's weight gradient).
        let must = (1 + 2 * layers) * ACT;
        // At most: those, t and h_L − t, the gradients, and four activation-sized and two
        // weight-sized temporaries at a time.
        let bound = must + 2 * ACT + gradients(layers) + 4 * ACT + 2 * WEIGHT;
        assert!(m.arena <= bound, "{layers} layers: arena {} > bound {bound}", m.arena);
        assert!(m.arena >= must, "{layers} layers: arena {} below what must be kept ({must})", m.arena);
    }
}

/// Bit-identical gradients (the same kernels on the same values) in a smaller arena.
fn assert_same_gradients_in_less_memory(layers: usize, residual: bool, remat: Remat, most: f64) {
    let plain = measure(&gradient(layers, residual, Remat::KeepAll), layers, 7);
    let low = measure(&gradient(layers, residual, remat.clone()), layers, 7);
    assert_eq!(plain.outputs.len(), 1 + 2 * layers);
    for (i, (a, b)) in plain.outputs.iter().zip(&low.outputs).enumerate() {
        assert!(a.to_f64_vec().iter().any(|v| *v != 0.0), "output {i} is all zeros");
        assert_eq!(a, b, "output {i} differs with {remat:?}");
    }
    let ratio = low.arena as f64 / plain.arena as f64;
    eprintln!(
        "{layers} {} layers, {remat:?}: arena {} → {} bytes ({:.0} % of plain)",
        if residual { "residual" } else { "relu" },
        plain.arena,
        low.arena,
        100.0 * ratio
    );
    assert!(ratio <= most, "{remat:?}: arena {} is {ratio:.2} of plain {}", low.arena, plain.arena);
    let products = [OpKind::MatMul, OpKind::FusedMatMulBiasAct];
    let matmuls = |c: &CompiledGraph| c.graph().nodes().iter().filter(|n| products.contains(&n.op.kind())).count();
    assert!(matmuls(&low.compiled) > matmuls(&plain.compiled), "the optimizer merged the recomputed ops back");
}

#[test]
fn sqrt_remat_gives_the_same_gradients_in_less_memory() {
    // Measured: 30 % and 38 % of the plain arena.
    assert_same_gradients_in_less_memory(24, false, Remat::Sqrt, 0.4);
    assert_same_gradients_in_less_memory(16, true, Remat::Sqrt, 0.5);
}

#[test]
fn user_marked_boundaries_give_the_same_gradients_in_less_memory() {
    let layers = 16;
    let (g, loss, names, outs) = stack(layers, false);
    let marks: Vec<ValueId> = outs.iter().copied().skip(3).step_by(4).collect();
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    let plain = measure(&grad(&g, loss, &wrt).unwrap(), layers, 3);
    let low = measure(&grad_with(&g, loss, &wrt, &GradOptions { remat: Remat::Keep(marks) }).unwrap(), layers, 3);
    assert_eq!(plain.outputs, low.outputs);
    // Kept: x and the four marked outputs; recomputed: one block of four layers (two
    // activations each) at a time, read through one barrier copy; three temporaries.
    // Measured: 38 % of plain.
    let bound = (1 + 4 + 2 * 4 + 1 + 3) * ACT + gradients(layers) + 2 * WEIGHT;
    assert!(low.arena <= bound, "arena {} > bound {bound} (plain {})", low.arena, plain.arena);
    assert!(bound < plain.arena);
}

#[test]
fn nothing_marked_recomputes_the_whole_forward_from_the_inputs() {
    let layers = 6;
    let (g, loss, names, _) = stack(layers, true);
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    let plain = measure(&grad(&g, loss, &wrt).unwrap(), layers, 5);
    let all = measure(&grad_with(&g, loss, &wrt, &GradOptions { remat: Remat::Keep(Vec::new()) }).unwrap(), layers, 5);
    assert_eq!(plain.outputs, all.outputs);
}
