//! A GPT-2-small-shaped training step on the GPU (`cargo bench -p rlx-cuda --bench train_step
//! -- [batch] [layers]`): 12 layers, 12 heads, d 768, FFN 3072, vocab 50257, T 1024, batch 16
//! by default, random init and tokens, bf16 products over f32 master weights, AdamW. Prints
//! the step graph's launches by kind, the median step time and tokens/s over ten steps, the
//! peak device memory beside weights + optimizer state + the planned arena, and one profiled
//! step's time by kind. Without a device it prints the launches by kind that CUDA's claims
//! and fusion give and stops. tools/gpu/bench.sh runs it beside tools/gpu/train_step.py.

use rlx_cpu::CpuBackend;
use rlx_cuda::{CudaBackend, CudaClaims};
use rlx_ir::{Graph, Op};
use rlx_models::gpt::{GptConfig, TARGETS, TOKENS};
use rlx_opt::claims::{input_dtypes, Claim};
use rlx_opt::Claims;
use rlx_runtime::{Backend, Session, Tensor};
use rlx_train::init::Rng;
use rlx_train::{Optimizer, Precision, Schedule, StepGraph, TrainConfig, Trainer};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

const TIMED: usize = 10;

/// Nodes of `g` that launch something, by kind, with those CUDA leaves to the host marked.
fn launches(g: &Graph) -> String {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for node in g.nodes() {
        if matches!(node.op, Op::Input(_) | Op::Param(_) | Op::Constant(_)) {
            continue;
        }
        let host = CudaClaims.claim(&node.op, &input_dtypes(g, node)) != Claim::Native;
        *kinds.entry(format!("{}{}", node.op.kind(), if host { " (host)" } else { "" })).or_default() += 1;
    }
    let total: usize = kinds.values().sum();
    let mut by: Vec<_> = kinds.into_iter().collect();
    by.sort_by_key(|k| std::cmp::Reverse(k.1));
    let list: Vec<String> = by.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!("{total} launches: {}", list.join(", "))
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let batch = args.first().copied().unwrap_or(16);
    let layers = args.get(1).copied().unwrap_or(12);
    let cfg = GptConfig { vocab: 50257, context: 1024, d_model: 768, heads: 12, layers, d_ff: 3072 };
    let gpt = cfg.build().expect("the GPT builds");
    let config = TrainConfig::new(Optimizer::adamw(0.01), Schedule::Constant(3e-4)).with_precision(Precision::bf16());
    let shape = format!("GPT-2-small shape ({layers} layers, B{batch} x T{}, bf16 mixed, AdamW)", cfg.context);
    let backend = match CudaBackend::new(0) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("skipped the timing: {e}");
            let step = StepGraph::new(&gpt.graph, gpt.loss, &config).expect("the step builds");
            let cpu = CpuBackend::new();
            let opt = rlx_opt::optimize(&step.graph, cpu.const_eval()).expect("the step optimizes");
            let (legal, _) = rlx_opt::legalize::legalize_with_host(&opt, "cuda", &CudaClaims, Some(cpu.claims())).expect("the step legalizes");
            let fused = rlx_opt::fuse(&legal, &CudaClaims).expect("the step fuses");
            println!("rlx   train step {shape}: unfused {}", launches(&legal));
            println!("rlx   train step {shape}: fused {}", launches(&fused));
            return;
        }
    };
    let session = Session::new(backend.clone()).with_host(Arc::new(CpuBackend::new()));
    let started = Instant::now();
    let mut tr = Trainer::new(&session, &gpt.graph, gpt.loss, config).expect("the step compiles");
    let compile = started.elapsed().as_secs_f64();
    println!("rlx   train step {shape}: {} (compiled in {compile:.1} s)", launches(tr.graph()));
    let mut rng = Rng::new(1);
    for p in &gpt.params {
        tr.set_param(&p.name, p.init.tensor(&p.shape, &mut rng)).expect("a parameter fits");
    }
    let tokens: Vec<i64> = (0..batch * cfg.context).map(|i| ((i as u64 * 2654435761 + 7) % cfg.vocab as u64) as i64).collect();
    let targets: Vec<i64> = tokens.iter().skip(1).chain(tokens.first()).copied().collect();
    let tokens = Tensor::from_vec(tokens, &[batch, cfg.context]).expect("tokens");
    let targets = Tensor::from_vec(targets, &[batch, cfg.context]).expect("targets");
    let b = [(TOKENS, &tokens), (TARGETS, &targets)];
    let arena = tr.arena_bytes(&b).expect("the step plans").unwrap_or(0);
    backend.usage().reset_peak();
    let mut losses = Vec::new();
    for _ in 0..3 {
        losses.push(tr.step(&b).expect("a step runs"));
    }
    let mut times: Vec<f64> = (0..TIMED)
        .map(|_| {
            let t = Instant::now();
            losses.push(tr.step(&b).expect("a step runs"));
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let s = times[TIMED / 2];
    let tokens_per_step = (batch * cfg.context) as f64;
    let params = cfg.parameter_count() as f64;
    let mib = |b: f64| b / (1 << 20) as f64;
    let (weights, state) = (params * 4.0, params * 8.0);
    let planned = weights + state + arena as f64;
    let peak = backend.usage().peak() as f64;
    println!("rlx   train step {shape}: median {:.1} ms, {:.0} tok/s; loss {:.3} -> {:.3}", s * 1e3, tokens_per_step / s, losses[0], losses[losses.len() - 1]);
    println!(
        "rlx   train step memory: peak {:.0} MiB; weights {:.0} + AdamW state {:.0} + arena {:.0} = {:.0} MiB (peak {:.2}x)",
        mib(peak), mib(weights), mib(state), mib(arena as f64), mib(planned), peak / planned
    );
    if tr.set_profiling(true) {
        tr.step(&b).expect("a profiled step runs");
        let profile = tr.profile();
        println!("rlx   train step profile (synchronised per launch):\n{profile}");
    }
}
