//! Attention on the GPU through rlx (`cargo bench -p rlx-cuda --bench sdpa`): bf16, head-major
//! `[B, H, S, D]`, causal B8 H16 S2048 D128 and non-causal B32 H12 S512 D64, the forward
//! alone (`Attention`) and forward + backward (`Attention` and `AttentionBackwardAll` in one
//! graph, as a training step runs them). Ten submits on device values between waits, the
//! median over nine such rounds; a submit copies its inputs into the graph's memory, so the
//! same submits of a graph that only reads them are timed too and taken off.
//! tools/gpu/attention.py times PyTorch's SDPA backends the same way; tools/gpu/bench.sh runs
//! both (with `RLX_CUDNN=0` for rlx's own kernels).

/// The GPU tests' session (cuda:0 with the CPU as host), or a skip saying why.
#[path = "../tests/common/mod.rs"]
mod common;

use rlx_cpu::CpuBackend;
use rlx_ir::ops::attention::{Attention, AttentionBackwardAll, MaskKind};
use rlx_ir::{DType, Graph, Shape, TensorType};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;
use std::time::Instant;

/// Submits per timed round, and rounds.
const SUBMITS: usize = 10;
const ROUNDS: usize = 9;

/// `len` values uniform in ±1 as a bf16 tensor (cast on the CPU).
fn values(dims: &[usize], seed: u64) -> Tensor {
    let len: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::of(&[len])));
    let y = g.cast(x, DType::BF16).expect("a cast");
    g.set_outputs(vec![y]).expect("one output");
    let t = Tensor::from_vec(v, &[len]).expect("a vector");
    let y = Session::new(Arc::new(CpuBackend::new())).compile(&g).expect("a cast compiles").run(&[("x", &t)]).expect("a cast runs").remove(0);
    Tensor::from_bytes(DType::BF16, dims, y.bytes()).expect("the values fit")
}

/// The median seconds of one submit of `g` over `inputs`.
fn time(session: &Session, g: &Graph, inputs: &[(&str, &Tensor)]) -> f64 {
    let mut c = session.compile(g).expect("the attention graph compiles for CUDA");
    let held: Vec<_> = inputs.iter().map(|(n, t)| (*n, c.upload(t).expect("an input uploads"))).collect();
    let named: Vec<_> = held.iter().map(|(n, t)| (*n, t)).collect();
    for _ in 0..3 {
        c.submit(&named).expect("the graph runs");
    }
    c.sync().expect("the device finishes");
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..SUBMITS {
                c.submit(&named).expect("the graph runs");
            }
            c.sync().expect("the device finishes");
            started.elapsed().as_secs_f64() / SUBMITS as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

/// A graph over inputs `names` of type `ty` that does next to nothing (one row of each): what
/// a submit costs besides the attention, mostly copying the inputs into the graph's memory.
fn baseline(ty: &TensorType, names: &[&str]) -> Graph {
    let mut g = Graph::new();
    let rows = names
        .iter()
        .map(|n| {
            let x = g.input(n, ty.clone());
            g.narrow(x, 2, 0, 1).expect("a row")
        })
        .collect();
    g.set_outputs(rows).expect("the rows");
    g
}

fn main() {
    let Some(session) = common::gpu() else { return };
    match rlx_cuda::cudnn_version() {
        Some(v) => println!("rlx   attention through cuDNN {}.{}.{} where it takes the shape", v / 10000, v / 100 % 100, v % 100),
        None => println!("rlx   attention on rlx's own kernels (cuDNN not loaded or RLX_CUDNN=0)"),
    }
    for (b, h, s, d, causal) in [(8, 16, 2048, 128, true), (32, 12, 512, 64, false)] {
        let dims = [b, h, s, d];
        let mask_kind = if causal { MaskKind::Causal } else { MaskKind::None };
        let ty = TensorType::new(DType::BF16, Shape::of(&dims));
        let data: Vec<Tensor> = (0..4).map(|i| values(&dims, 11 + i)).collect();
        let inputs: Vec<(&str, &Tensor)> = ["q", "k", "v", "dy"].into_iter().zip(&data).collect();
        let mut g = Graph::new();
        let mut x: Vec<_> = inputs[..3].iter().map(|(n, _)| g.input(n, ty.clone())).collect();
        let y = g.attention(Attention::new(h, d, mask_kind), x[0], x[1], x[2], None).expect("attention");
        g.set_outputs(vec![y]).expect("one output");
        let forward = time(&session, &g, &inputs[..3]);
        x.push(g.input("dy", ty.clone()));
        let grads = g.attention_backward_all(AttentionBackwardAll { num_heads: h, head_dim: d, mask_kind }, x[0], x[1], x[2], x[3], None).expect("gradients");
        g.set_outputs([vec![y], grads].concat()).expect("four outputs");
        let both = time(&session, &g, &inputs);
        // FlashAttention's count: 4·B·H·S²·D for the forward (half when causal), 2.5 times
        // that for the backward.
        let flops = 4.0 * (b * h * s * s * d) as f64 * if causal { 0.5 } else { 1.0 };
        let shape = format!("{} B{b} H{h} S{s} D{d} bf16", if causal { "causal" } else { "full" });
        for (what, total, n, work) in [("fwd    ", forward, 3, flops), ("fwd+bwd", both, 4, 3.5 * flops)] {
            let copies = time(&session, &baseline(&ty, &["q", "k", "v", "dy"][..n]), &inputs[..n]);
            let net = total - copies;
            println!(
                "rlx   attention {what} {shape}: median {:.3} ms; {:.3} ms less the inputs' copies into the graph ({:.3} ms), {:.0} TFLOP/s",
                total * 1e3,
                net * 1e3,
                copies * 1e3,
                work / net / 1e12
            );
        }
    }
}
