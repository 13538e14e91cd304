//! Forward time of one MiniLM-shaped post-norm encoder layer (hidden 384, 12 heads, FFN 1536,
//! GELU, padding mask) on the CPU, compiled with and without fusion.
//!
//! `cargo bench -p rlx-cpu --bench fused_block [-- REPEATS]`. The two executables run
//! interleaved in one process and the medians are compared; the outputs are checked to agree.

use rlx_cpu::CpuBackend;
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, Graph, OpKind, TensorType, ValueId};
use rlx_runtime::{CompileOptions, CompiledGraph, Session, Tensor};
use std::sync::Arc;
use std::time::Instant;

const BATCH: usize = 8;
const SEQ: usize = 128;
const HIDDEN: usize = 384;
const HEADS: usize = 12;
const FFN: usize = 1536;

/// `x·w + b` with `w [in, out]` and `b [out]` as named parameters.
fn linear(g: &mut Graph, x: ValueId, name: &str, inp: usize, out: usize) -> ValueId {
    let w = g.param(&format!("{name}.w"), TensorType::of(DType::F32, &[inp, out]));
    let b = g.param(&format!("{name}.b"), TensorType::of(DType::F32, &[out]));
    let y = g.matmul(x, w).expect("matmul");
    g.binary(BinaryOp::Add, y, b).expect("bias")
}

fn layer_norm(g: &mut Graph, x: ValueId, name: &str) -> ValueId {
    let gamma = g.param(&format!("{name}.g"), TensorType::of(DType::F32, &[HIDDEN]));
    let beta = g.param(&format!("{name}.b"), TensorType::of(DType::F32, &[HIDDEN]));
    g.layer_norm(x, gamma, beta, -1, 1e-12).expect("layer norm")
}

/// One BERT layer as the MiniLM checkpoints lay it out (separate q, k, v projections).
fn encoder_layer() -> Graph {
    let mut g = Graph::new();
    let h = g.input("hidden", TensorType::of(DType::F32, &[BATCH, SEQ, HIDDEN]));
    let mask = g.input("mask", TensorType::of(DType::F32, &[BATCH, SEQ]));
    let [q, k, v] = ["q", "k", "v"].map(|n| linear(&mut g, h, n, HIDDEN, HIDDEN));
    let a = g.attention(Attention::new(HEADS, HIDDEN / HEADS, MaskKind::Custom), q, k, v, Some(mask)).expect("attention");
    let o = linear(&mut g, a, "o", HIDDEN, HIDDEN);
    let s1 = g.binary(BinaryOp::Add, h, o).expect("residual");
    let h1 = layer_norm(&mut g, s1, "ln1");
    let f = linear(&mut g, h1, "fc1", HIDDEN, FFN);
    let f = g.activation(ActivationKind::Gelu, f).expect("gelu");
    let f = linear(&mut g, f, "fc2", FFN, HIDDEN);
    let s2 = g.binary(BinaryOp::Add, h1, f).expect("residual");
    let y = layer_norm(&mut g, s2, "ln2");
    g.set_outputs(vec![y]).expect("output");
    g
}

/// Deterministic values in ±`scale`.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn compile(g: &Graph, fuse: bool) -> CompiledGraph {
    let options = CompileOptions { optimize: true, fuse, dispatch_report: false };
    let mut c = Session::new(Arc::new(CpuBackend::new())).with_options(options).compile(g).expect("compile");
    for (i, (name, v)) in g.params().into_iter().enumerate() {
        let dims = g.ty(v).shape.as_static().expect("static params");
        let n = dims.iter().product();
        let scale = if dims.len() == 2 { 1.0 / (dims[0] as f32).sqrt() } else { 0.5 };
        c.set_param(name, Tensor::from_vec(values(n, 100 + i as u64, scale), &dims).expect("param")).expect("set");
    }
    c
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let repeats: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(30);
    let g = encoder_layer();
    let (mut fused, mut plain) = (compile(&g, true), compile(&g, false));
    let kinds: Vec<String> = fused
        .graph()
        .nodes()
        .iter()
        .map(|n| n.op.kind())
        .filter(|k| k.family() == "fused" || *k == OpKind::Attention)
        .map(|k| k.name().to_string())
        .collect();
    println!("fused graph: {} nodes ({}), unfused: {} nodes", fused.graph().len(), kinds.join(", "), plain.graph().len());

    let hidden = Tensor::from_vec(values(BATCH * SEQ * HIDDEN, 1, 1.0), &[BATCH, SEQ, HIDDEN]).expect("hidden");
    let keep: Vec<f32> = (0..BATCH * SEQ).map(|i| if i % SEQ < SEQ - 8 * (i / SEQ) { 1.0 } else { 0.0 }).collect();
    let mask = Tensor::from_vec(keep, &[BATCH, SEQ]).expect("mask");
    let inputs = [("hidden", &hidden), ("mask", &mask)];
    let (a, b) = (fused.run(&inputs).expect("run"), plain.run(&inputs).expect("run"));
    let diff = a[0].to_f64_vec().iter().zip(b[0].to_f64_vec()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    println!("max |fused − unfused| = {diff:.2e}");

    let (mut tf, mut tp) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let t = Instant::now();
        fused.run(&inputs).expect("run");
        tf.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        plain.run(&inputs).expect("run");
        tp.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (mf, mp) = (median(tf), median(tp));
    println!(
        "encoder layer [{BATCH}×{SEQ}, {HIDDEN}], {repeats} runs, {} threads: fused {mf:.2} ms, unfused {mp:.2} ms (median), unfused/fused = {:.3}",
        rayon::current_num_threads(),
        mp / mf
    );
}
