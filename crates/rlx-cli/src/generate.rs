//! `rlx generate`: text from a Llama-family model (a GGUF file or a Hugging Face checkpoint
//! folder), streamed as it is sampled, with the prefill and decode speeds, on the CPU or a GPU
//! (weights and KV caches in device memory, each decode step one replayed CUDA graph). With
//! `--chat` the prompt is a user message put through the model's chat template.

use indicatif::{ProgressBar, ProgressStyle};
use rlx::models::bpe::BpeTokenizer;
use rlx::models::chat::{encode_rendered, end_of_turn_tokens, ChatTemplate, Message};
use rlx::models::llama::{GgufModel, Generator, HfModel, Llama, LlamaConfig, Sampling, Weights};
use rlx::{Device, Session};
use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What to generate and how.
pub struct GenerateOptions {
    pub model: PathBuf,
    /// Used verbatim (special-token texts such as `<|im_start|>` become their ids), or with
    /// `chat` the user's message.
    pub prompt: String,
    /// Render `prompt` as one user turn through the chat template and stop at end of turn.
    pub chat: bool,
    /// Most new tokens (generation also stops at the end-of-sequence token).
    pub n: usize,
    pub sampling: Sampling,
    pub device: Device,
}

/// Loads a GGUF file or Hugging Face folder with a loading bar of tensors read.
pub fn load(model: &Path) -> Result<(BpeTokenizer, LlamaConfig, Weights), Box<dyn Error>> {
    let bar = ProgressBar::new(0).with_style(ProgressStyle::with_template("loading {msg} {bar:30} {pos}/{len} tensors")?);
    bar.set_message(model.display().to_string());
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let loaded = if model.is_dir() {
        let m = HfModel::open(model, progress)?;
        (m.tokenizer, m.config, m.weights)
    } else {
        let m = GgufModel::open(model, progress)?;
        (m.tokenizer, m.config, m.weights)
    };
    bar.finish_and_clear();
    Ok(loaded)
}

/// Prints token bytes as text, holding a split UTF-8 character until it is whole.
#[derive(Default)]
pub struct Printer {
    pending: Vec<u8>,
}

impl Printer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) => e.valid_up_to(),
        };
        print!("{}", String::from_utf8_lossy(&self.pending[..valid]));
        self.pending.drain(..valid);
        let _ = std::io::stdout().flush();
    }

    pub fn finish(&mut self) {
        println!("{}", String::from_utf8_lossy(&std::mem::take(&mut self.pending)));
    }
}

pub fn run(o: &GenerateOptions) -> Result<(), Box<dyn Error>> {
    let (tok, config, weights) = load(&o.model)?;
    let (prompt, stops) = if o.chat {
        let template = ChatTemplate::for_tokenizer(&tok)?;
        if template.fallback {
            eprintln!("(the model has no chat template: using ChatML)");
        }
        let text = template.render(&[Message::new("user", &o.prompt)], true)?;
        (encode_rendered(&tok, &text), end_of_turn_tokens(&tok))
    } else {
        (tok.encode(&o.prompt, true), tok.eos.into_iter().collect())
    };
    if prompt.is_empty() {
        return Err("the prompt has no tokens".into());
    }
    let capacity = (prompt.len() + o.n).min(config.context.max(prompt.len() + 1));
    let model = Llama::build(&config, &weights, capacity)?;
    drop(weights);
    let session = Session::new(o.device)?;
    let mut gen = Generator::new(model, &session)?;
    let mut printer = Printer::default();
    if !o.chat {
        print!("{}", o.prompt);
    }
    let (tokens, times) = gen.generate(&prompt, o.n, o.sampling, &stops, |t| printer.push(&tok.token_bytes(t, false)))?;
    printer.finish();
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
