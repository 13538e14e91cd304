//! The batch-1 decode bench shared by the GPU backends: a model of random weights prefills a
//! 16-token prompt, then decodes; prints the median step of the generation loop (inputs
//! uploaded, the step replayed, the greedy token picked on the device and downloaded), steps
//! submitted back to back on device values, the peak device memory beside weights + KV caches
//! + planned arenas, and where the steps' time goes (per op kind, launched one by one).

use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use rlx_models::llama::{Generator, Llama, LlamaConfig, Weights, OUT_ROWS, POS, TOKENS};
use rlx_opt::partition::Place;
use rlx_runtime::{Session, Tensor, Usage};
use std::time::{Duration, Instant};

/// KV-cache positions, and the prompt's tokens.
const CAPACITY: usize = 512;
const PROMPT: usize = 16;

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Builds `config` (its products over `blocks` where given, else in `dtype`) on `session`,
/// whose backend counts its device memory in `usage`, and times `steps` decode steps.
pub fn bench(session: &Session, usage: &Usage, name: &str, config: &LlamaConfig, blocks: Option<GgufType>, dtype: DType, steps: usize) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let weights = Weights::random(config, 1, blocks);
    let model = Llama::build_as(config, &weights, CAPACITY, dtype)?;
    drop(weights);
    let caches = model.cache_bytes();
    let weight_bytes: usize = model.params.iter().filter(|(n, _)| !n.ends_with("_cache")).map(|(_, v)| v.byte_len()).sum();
    let before = usage.in_use();
    let mut gen = Generator::new(model, session)?;
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 7919 + 13) % config.vocab as u32).collect();
    let mut next = gen.feed_greedy(&prompt)?;
    let host = gen.compiled().partition().map_or(0, |p| p.segments.iter().filter(|s| s.place == Place::Host).count());
    let mut times = Vec::with_capacity(steps);
    for i in 0..steps + 8 {
        let t = Instant::now();
        next = gen.feed_greedy(&[next])?;
        if i >= 8 {
            times.push(t.elapsed());
        }
    }
    let step = median(times);
    let pos = gen.position();
    let compiled = gen.compiled();
    let token = compiled.upload(&Tensor::from_vec(vec![i64::from(next)], &[1])?)?;
    let rows = compiled.upload(&Tensor::from_vec(vec![0i64], &[1])?)?;
    let positions = (0..steps).map(|i| compiled.upload(&Tensor::from_vec(vec![(pos + i) as i64], &[1])?)).collect::<Result<Vec<_>, _>>()?;
    compiled.sync()?;
    let t = Instant::now();
    for p in &positions {
        compiled.submit(&[(TOKENS, &token), (POS, p), (OUT_ROWS, &rows)])?;
    }
    compiled.sync()?;
    let submitted = t.elapsed();
    let in_use = usage.in_use() - before;
    let (arena_decode, arena_prefill) = (gen.arena_bytes(1)?, gen.arena_bytes(PROMPT)?);
    let planned = weight_bytes + caches + arena_decode + arena_prefill;
    println!(
        "decode {name}: {:.1} tok/s (median step {:.3} ms: inputs up, graph replayed, the greedy token down); {:.1} tok/s submitted back to back; host segments {host}",
        1.0 / step.as_secs_f64(),
        step.as_secs_f64() * 1e3,
        steps as f64 / submitted.as_secs_f64(),
    );
    println!(
        "memory {name}: peak {:.1} MB (in use {:.1} MB) vs weights {:.1} + KV caches {:.1} + arenas {:.2} (decode) + {:.2} (prefill) = {:.1} MB, ratio {:.3}; held before the model {:.1} MB; set-up {:.1} s",
        mb(usage.peak() - before),
        mb(in_use),
        mb(weight_bytes),
        mb(caches),
        mb(arena_decode),
        mb(arena_prefill),
        mb(planned),
        (usage.peak() - before) as f64 / planned as f64,
        mb(before),
        started.elapsed().as_secs_f64(),
    );
    gen.compiled().set_profiling(true);
    for _ in 0..4 {
        next = gen.feed_greedy(&[next])?;
    }
    println!("profile {name} (per step, nodes launched one by one and waited on):\n{}", gen.compiled().profile());
    Ok(())
}

