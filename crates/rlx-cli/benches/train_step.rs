//! rlx side of the training-step benchmark: one compiled step (forward, backward, clipping,
//! AdamW) of the `rlx demo` character GPT on batches of the demo text, timed per step.
//! Prints one JSON line; `tools/bench/train_step.py` runs it beside PyTorch and prints ratios.
//! Threads: `RAYON_NUM_THREADS`. Usage: `cargo bench -p rlx-cli --bench train_step -- [steps]
//! [warmup] [--profile]`; `--profile` then prints where a few more steps' time goes (per op
//! kind and the slowest nodes, each node timed on its own).

use rlx::models::gpt::{TARGETS, TOKENS};
use rlx::prelude::*;
use rlx::train::init::Rng;
use rlx::train::{Optimizer, Schedule, TrainConfig, Trainer};
use rlx_cli::demo::charlm::{CharLmOptions, Corpus, TEXT};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (steps, warmup) = (args.first().copied().unwrap_or(30), args.get(1).copied().unwrap_or(5));
    let corpus = Corpus::new(TEXT);
    let opts = CharLmOptions::default();
    let cfg = rlx::models::gpt::GptConfig { vocab: corpus.alphabet.len(), ..opts.model };
    let model = cfg.build()?;
    let session = Session::new(Device::Cpu)?;
    let t = Instant::now();
    let config = TrainConfig::new(Optimizer::adamw(0.01), Schedule::Constant(1e-3)).with_clip_norm(1.0);
    let mut trainer = Trainer::new(&session, &model.graph, model.loss, config)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut rng = Rng::new(0);
    for p in &model.params {
        trainer.set_param(&p.name, p.init.tensor(&p.shape, &mut rng))?;
    }
    let mut times = Vec::new();
    for i in 0..warmup + steps {
        let (x, y) = corpus.windows(0..corpus.ids.len(), opts.batch, cfg.context, &mut rng)?;
        let t = Instant::now();
        trainer.step(&[(TOKENS, &x), (TARGETS, &y)])?;
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    if std::env::args().any(|a| a == "--profile") {
        trainer.set_profiling(true);
        for _ in 0..5 {
            let (x, y) = corpus.windows(0..corpus.ids.len(), opts.batch, cfg.context, &mut rng)?;
            trainer.step(&[(TOKENS, &x), (TARGETS, &y)])?;
        }
        eprintln!("{}", trainer.profile());
    }
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into());
    println!(
        "{{\"peer\": \"rlx\", \"threads\": \"{threads}\", \"median_ms\": {:.3}, \"tokens_per_s\": {:.0}, \"compile_ms\": {compile_ms:.1}}}",
        median * 1e3,
        (opts.batch * cfg.context) as f64 / median
    );
    Ok(())
}
