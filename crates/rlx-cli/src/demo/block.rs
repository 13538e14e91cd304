//! `rlx demo block`: builds a small pre-norm transformer block with random weights, compiles it for
//! the CPU (showing what legalization did with each op) and runs it at two batch × sequence
//! sizes with one compiled graph.

use rlx::ir::ops::attention::{Attention, MaskKind};
use rlx::ir::ops::reduce::ReduceOp;
use rlx::prelude::*;
use std::error::Error;
use std::time::Instant;

const D: usize = 64;
const HEADS: usize = 4;
const FF: usize = 128;
const VOCAB: usize = 50;

/// Deterministic pseudo-random weights in ±`scale`.
fn weights(n: usize, seed: u64, scale: f32) -> Vec<f32> {
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

fn block() -> Result<Graph, Box<dyn Error>> {
    let mut g = Graph::new();
    let act = TensorType::new(DType::F32, Shape(vec![Dim::sym("batch"), Dim::sym("seq"), Dim::Static(D)]));
    let x = g.input("x", act);
    let p = |g: &mut Graph, name: &str, dims: &[usize]| g.param(name, TensorType::of(DType::F32, dims));
    let (ln_g, ln_b) = (p(&mut g, "ln.gamma", &[D]), p(&mut g, "ln.beta", &[D]));
    let h = g.layer_norm(x, ln_g, ln_b, -1, 1e-5)?;
    let (wq, wk, wv, wo) = (p(&mut g, "wq", &[D, D]), p(&mut g, "wk", &[D, D]), p(&mut g, "wv", &[D, D]), p(&mut g, "wo", &[D, D]));
    let (q, k, v) = (g.matmul(h, wq)?, g.matmul(h, wk)?, g.matmul(h, wv)?);
    let a = g.attention(Attention::new(HEADS, D / HEADS, MaskKind::Causal), q, k, v, None)?;
    let a = g.matmul(a, wo)?;
    let x = g.binary(BinaryOp::Add, x, a)?;
    let (rms_g, zero) = (p(&mut g, "rms.gamma", &[D]), g.constant_f32(&[D], &[0.0; D])?);
    let h = g.rms_norm(x, rms_g, zero, -1, 1e-6)?;
    let (w_up, w_down) = (p(&mut g, "w_up", &[D, 2 * FF]), p(&mut g, "w_down", &[FF, D]));
    let up = g.matmul(h, w_up)?;
    let ff = g.fused_swiglu(up, false, None)?;
    let ff = g.matmul(ff, w_down)?;
    let x = g.binary(BinaryOp::Add, x, ff)?;
    let w_vocab = p(&mut g, "w_vocab", &[D, VOCAB]);
    let logits = g.matmul(x, w_vocab)?;
    let probs = g.softmax(logits, -1)?;
    let next = g.arg_max(probs, 2, false)?;
    let confidence = g.reduce(ReduceOp::Max, probs, &[2], false)?;
    g.set_outputs(vec![next, confidence])?;
    Ok(g)
}

pub fn run() -> Result<(), Box<dyn Error>> {
    println!("rlx demo — a pre-norm transformer block (LayerNorm, causal attention, RmsNorm, SwiGLU)");
    println!("with random weights: build the graph, compile it for the CPU, run it.\n");
    let g = block()?;
    println!("1. Built a graph of {} nodes; `batch` and `seq` are symbolic dims. Its first lines:\n", g.len());
    for line in g.to_string().lines().filter(|l| !l.contains("Param(")).take(6) {
        println!("     {line}");
    }

    let t = Instant::now();
    let mut compiled = Session::new(Device::Cpu)?.compile(&g)?;
    println!("\n2. Compiled in {:.1} ms (verify → optimize → legalize; each new shape plans its arena on first run).", t.elapsed().as_secs_f64() * 1e3);
    println!("   What legalization did with each op kind (FusedSwiGLU has no CPU kernel, so it is rewritten into primitives):\n");
    for line in compiled.report().to_string().lines().skip(1) {
        println!("   {line}");
    }

    let params: Vec<(String, Vec<usize>)> = compiled.params().map(|(n, t)| (n.to_string(), t.shape.as_static().unwrap_or_default())).collect();
    for (i, (name, dims)) in params.iter().enumerate() {
        let n: usize = dims.iter().product();
        let values = if name.contains("gamma") { vec![1.0; n] } else if name.contains("beta") { vec![0.0; n] } else { weights(n, i as u64 + 1, 0.15) };
        compiled.set_param(name, Tensor::from_vec(values, dims)?)?;
    }
    println!("\n3. Set {} parameters with random values.\n", params.len());

    for (batch, seq) in [(1usize, 8usize), (4, 32)] {
        let x = Tensor::from_vec(weights(batch * seq * D, 99, 1.0), &[batch, seq, D])?;
        compiled.run(&[("x", &x)])?;
        let t = Instant::now();
        let runs = 20;
        let mut out = Vec::new();
        for _ in 0..runs {
            out = compiled.run(&[("x", &x)])?;
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / runs as f64;
        let tokens = out[0].to_vec::<i64>()?;
        let conf = out[1].to_vec::<f32>()?;
        println!("4. batch = {batch}, seq = {seq}: {ms:.3} ms per run ({:.0} tokens/s)", (batch * seq) as f64 / ms * 1e3);
        println!("   argmax token of the first positions: {:?}", &tokens[..seq.min(8)]);
        println!("   its probability:                     {:?}", conf[..seq.min(8)].iter().map(|p| (p * 1000.0).round() / 1000.0).collect::<Vec<_>>());
    }
    println!("\nThe first positions agree across sizes: the inputs share their first rows and the mask is causal.");
    println!("One compiled graph served both shapes. `rlx ops` lists all 177 op kinds and how the CPU runs each.");
    Ok(())
}
