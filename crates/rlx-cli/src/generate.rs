//! `rlx generate`: text from a Llama-family model (a GGUF file or a Hugging Face checkpoint
//! folder), streamed as it is sampled, with the prefill and decode speeds, on the CPU or a GPU
//! (weights and KV caches in device memory, each decode step one replayed CUDA graph).

use indicatif::{ProgressBar, ProgressStyle};
use rlx::models::llama::{GgufModel, Generator, HfModel, Llama, Sampling};
use rlx::{Device, Session};
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

/// What to generate and how.
pub struct GenerateOptions {
    pub model: PathBuf,
    /// Used verbatim; special-token texts such as `<|im_start|>` become their ids.
    pub prompt: String,
    /// Most new tokens (generation also stops at the end-of-sequence token).
    pub n: usize,
    pub sampling: Sampling,
    pub device: Device,
}

pub fn run(o: &GenerateOptions) -> Result<(), Box<dyn Error>> {
    let bar = ProgressBar::new(0).with_style(ProgressStyle::with_template("loading {msg} {bar:30} {pos}/{len} tensors")?);
    bar.set_message(o.model.display().to_string());
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let (tok, config, weights) = if o.model.is_dir() {
        let m = HfModel::open(&o.model, progress)?;
        (m.tokenizer, m.config, m.weights)
    } else {
        let m = GgufModel::open(&o.model, progress)?;
        (m.tokenizer, m.config, m.weights)
    };
    bar.finish_and_clear();
    let prompt = tok.encode(&o.prompt, true);
    if prompt.is_empty() {
        return Err("the prompt has no tokens".into());
    }
    let capacity = (prompt.len() + o.n).min(config.context.max(prompt.len() + 1));
    let model = Llama::build(&config, &weights, capacity)?;
    drop(weights);
    let session = Session::new(o.device)?;
    let mut gen = Generator::new(model, &session)?;
    let mut pending: Vec<u8> = Vec::new();
    let mut out = std::io::stdout();
    print!("{}", o.prompt);
    let (tokens, times) = gen.generate(&prompt, o.n, o.sampling, tok.eos, |t| {
        pending.extend(tok.token_bytes(t, false));
        let valid = match std::str::from_utf8(&pending) {
            Ok(s) => s.len(),
            Err(e) => e.valid_up_to(),
        };
        print!("{}", String::from_utf8_lossy(&pending[..valid]));
        pending.drain(..valid);
        let _ = out.flush();
    })?;
    println!("{}", String::from_utf8_lossy(&pending));
    let prefill = times.prefill.as_secs_f64();
    let decode: f64 = times.decode.iter().map(|d| d.as_secs_f64()).sum();
    eprintln!(
        "\nprefill: {} tokens in {:.3} s ({:.1} tok/s); decode: {} tokens in {:.3} s ({:.1} tok/s)",
        times.prefill_tokens,
        prefill,
        times.prefill_tokens as f64 / prefill.max(1e-9),
        times.decode.len(),
        decode,
        times.decode.len() as f64 / decode.max(1e-9),
    );
    eprintln!("generated {} tokens", tokens.len());
    let prefill_step = prompt.len().min(gen.model.step_limit(0));
    let (prefill_arena, decode_arena) = (gen.arena_bytes(prefill_step)?, gen.arena_bytes(1)?);
    let mb = |bytes: usize| bytes as f64 / 1e6;
    eprintln!(
        "memory: KV cache {:.1} MB ({} positions), arena {:.2} MB (prefill step of {prefill_step} tokens) / {:.2} MB (decode step)",
        mb(gen.model.cache_bytes()),
        gen.model.capacity,
        mb(prefill_arena),
        mb(decode_arena),
    );
    if let Some((in_use, peak)) = session.backend().device_memory() {
        eprintln!("device memory ({}): peak {:.1} MB, {:.1} MB in use", o.device, mb(peak), mb(in_use));
    }
    if let Some(peak) = peak_rss() {
        eprintln!("peak resident memory: {:.1} MB", mb(peak));
    }
    Ok(())
}

/// The process's peak resident memory (`VmHWM`), where `/proc` tells it.
fn peak_rss() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim().parse::<usize>().ok()?;
    Some(kib * 1024)
}
