//! `rlx demo` (the default job): trains a character-level GPT on seven Shakespeare plays that
//! ship inside the binary, on the CPU, with a progress bar; then writes the loss curve as SVG
//! and prints text sampled from the model.

use super::plot::{self, Reference, Series};
use indicatif::{ProgressBar, ProgressStyle};
use rlx::models::gpt::{GptConfig, TARGETS, TOKENS};
use rlx::models::ParamSpec;
use rlx::prelude::*;
use rlx::train::init::Rng;
use rlx::train::{Optimizer, Schedule, TrainConfig, Trainer};
use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

/// The training text (see `data/README.md`).
pub const TEXT: &str = include_str!("../../data/shakespeare.txt");

/// What to train and how long.
#[derive(Clone, Debug)]
pub struct CharLmOptions {
    pub model: GptConfig,
    pub steps: usize,
    pub batch: usize,
    pub peak_lr: f32,
    /// Evaluate the held-out loss every this many steps (and after the last).
    pub eval_every: usize,
    /// Characters to generate per sample after training (0: none).
    pub sample_chars: usize,
    pub seed: u64,
    /// Where to write `loss.svg`; nothing is written when `None`.
    pub out_dir: Option<PathBuf>,
    /// No progress bar and no printing (for tests).
    pub quiet: bool,
    /// Where to train (what the device does not run goes to the CPU).
    pub device: Device,
}

impl Default for CharLmOptions {
    fn default() -> Self {
        CharLmOptions {
            model: GptConfig { vocab: 0, context: 64, d_model: 128, heads: 4, layers: 4, d_ff: 512 },
            steps: 500,
            batch: 32,
            peak_lr: 6e-3,
            eval_every: 50,
            sample_chars: 400,
            seed: 1,
            out_dir: Some(PathBuf::from("rlx-demo")),
            quiet: false,
            device: Device::Cpu,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct CharLmReport {
    /// Training loss (nats per character) of every step.
    pub losses: Vec<f32>,
    /// `(step, held-out loss)` at each evaluation.
    pub eval: Vec<(usize, f32)>,
    /// Entropy of the text's character frequencies, in nats: the loss of the best model that
    /// ignores context.
    pub unigram_entropy: f64,
    pub tokens_per_second: f64,
    pub samples: Vec<String>,
}

/// The text as ids into its sorted alphabet, with the alphabet.
pub struct Corpus {
    pub alphabet: Vec<u8>,
    pub ids: Vec<i64>,
}

impl Corpus {
    pub fn new(text: &str) -> Corpus {
        let mut alphabet: Vec<u8> = text.bytes().collect();
        alphabet.sort_unstable();
        alphabet.dedup();
        let mut index = [0i64; 256];
        for (i, &c) in alphabet.iter().enumerate() {
            index[c as usize] = i as i64;
        }
        Corpus { ids: text.bytes().map(|c| index[c as usize]).collect(), alphabet }
    }

    /// Entropy in nats of the id frequencies.
    pub fn unigram_entropy(&self) -> f64 {
        let mut counts = vec![0usize; self.alphabet.len()];
        for &id in &self.ids {
            counts[id as usize] += 1;
        }
        let n = self.ids.len() as f64;
        counts.iter().filter(|&&c| c > 0).map(|&c| c as f64 / n).map(|p| -p * p.ln()).sum()
    }

    /// `batch` random windows of `span` ids from `ids[range]`: `(tokens, next tokens)`.
    pub fn windows(&self, range: std::ops::Range<usize>, batch: usize, span: usize, rng: &mut Rng) -> Result<(Tensor, Tensor), Box<dyn Error>> {
        let (mut x, mut y) = (Vec::with_capacity(batch * span), Vec::with_capacity(batch * span));
        let starts = range.len() - span - 1;
        for _ in 0..batch {
            let s = range.start + (rng.next_u64() as usize) % starts;
            x.extend_from_slice(&self.ids[s..s + span]);
            y.extend_from_slice(&self.ids[s + 1..s + span + 1]);
        }
        Ok((Tensor::from_vec(x, &[batch, span])?, Tensor::from_vec(y, &[batch, span])?))
    }
}

/// Trains on [`TEXT`] as `opts` says.
pub fn train(opts: &CharLmOptions) -> Result<CharLmReport, Box<dyn Error>> {
    let corpus = Corpus::new(TEXT);
    let model_cfg = GptConfig { vocab: corpus.alphabet.len(), ..opts.model };
    let model = model_cfg.build()?;
    let session = Session::new(opts.device)?;
    let schedule = Schedule::WarmupCosine { peak: opts.peak_lr, min: opts.peak_lr / 10.0, warmup: (opts.steps as u64 / 10).max(1), total: opts.steps as u64 };
    let config = TrainConfig::new(Optimizer::adamw(0.01), schedule).with_clip_norm(1.0);
    let t = Instant::now();
    let mut trainer = Trainer::new(&session, &model.graph, model.loss, config)?;
    let mut eval_graph = model.graph.clone();
    eval_graph.set_outputs(vec![model.logits, model.loss])?;
    let mut evaluator = session.compile(&eval_graph)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut rng = Rng::new(opts.seed);
    for p in &model.params {
        trainer.set_param(&p.name, p.init.tensor(&p.shape, &mut rng))?;
    }

    let held_out = corpus.ids.len() - corpus.ids.len() / 20;
    let (ctx, batch) = (model_cfg.context, opts.batch);
    let say = |s: String| if !opts.quiet { println!("{s}") };
    say(format!(
        "rlx demo — a character-level GPT ({} layers, d_model {}, {} heads, context {}; {:.2} M parameters) learns\n\
         Shakespeare on {}: {} characters, {} distinct; the last 5% are held out.\n\
         Compiled the training step (forward, backward, AdamW) in {compile_ms:.0} ms.\n",
        model_cfg.layers, model_cfg.d_model, model_cfg.heads, ctx, model_cfg.parameter_count() as f64 / 1e6, opts.device, corpus.ids.len(), corpus.alphabet.len()
    ));
    let bar = if opts.quiet { ProgressBar::hidden() } else { ProgressBar::new(opts.steps as u64) };
    bar.set_style(ProgressStyle::with_template("{bar:32} step {pos}/{len} · {msg} · {elapsed_precise} (eta {eta})")?);
    let mut losses = Vec::with_capacity(opts.steps);
    let mut eval = Vec::new();
    let mut eval_rng = Rng::new(opts.seed ^ 0x5eed);
    let eval_batches: Vec<(Tensor, Tensor)> =
        (0..4).map(|_| corpus.windows(held_out..corpus.ids.len(), batch, ctx, &mut eval_rng)).collect::<Result<_, _>>()?;
    let started = Instant::now();
    for step in 0..opts.steps {
        let (x, y) = corpus.windows(0..held_out, batch, ctx, &mut rng)?;
        let loss = trainer.step(&[(TOKENS, &x), (TARGETS, &y)])?;
        if !loss.is_finite() {
            return Err(format!("the loss became {loss} at step {step}").into());
        }
        losses.push(loss);
        let tok_s = ((step + 1) * batch * ctx) as f64 / started.elapsed().as_secs_f64();
        bar.set_message(format!("loss {loss:.3} · {:.1}k tok/s", tok_s / 1e3));
        bar.inc(1);
        if (step + 1) % opts.eval_every == 0 || step + 1 == opts.steps {
            copy_params(&trainer, &mut evaluator, &model.params)?;
            let mut total = 0.0;
            for (x, y) in &eval_batches {
                total += evaluator.run(&[(TOKENS, x), (TARGETS, y)])?[1].to_f64_vec()[0];
            }
            let held = (total / eval_batches.len() as f64) as f32;
            let line = format!("step {:>5}: held-out loss {held:.3} nats/char", step + 1);
            if bar.is_hidden() {
                say(line);
            } else {
                bar.println(line);
            }
            eval.push((step + 1, held));
        }
    }
    bar.finish();
    let tokens_per_second = (opts.steps * batch * ctx) as f64 / started.elapsed().as_secs_f64();
    let unigram_entropy = corpus.unigram_entropy();
    let last = eval.last().map_or(f32::NAN, |e| e.1);
    say(format!(
        "\nHeld-out loss {last:.3} nats/char ({:.2} bits) against the unigram entropy {unigram_entropy:.3} nats ({:.2} bits); {:.0} tokens/s.",
        last / std::f32::consts::LN_2,
        unigram_entropy / std::f64::consts::LN_2,
        tokens_per_second
    ));
    let mut samples = Vec::new();
    for prompt in ["ROMEO.\n", "To be"].iter().take(if opts.sample_chars > 0 { 2 } else { 0 }) {
        let text = sample(&corpus, &mut evaluator, ctx, prompt, opts.sample_chars, 0.8, &mut rng)?;
        say(format!("\n--- sample (temperature 0.8) ---\n{text}"));
        samples.push(text);
    }
    let report = CharLmReport { losses, eval, unigram_entropy, tokens_per_second, samples };
    if let Some(dir) = &opts.out_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("loss.svg");
        std::fs::write(&path, loss_chart(&report)).map_err(|e| format!("{}: {e}", path.display()))?;
        say(format!("\nWrote the loss curve to {}.", path.display()));
    }
    Ok(report)
}

fn copy_params(trainer: &Trainer, to: &mut CompiledGraph, params: &[ParamSpec]) -> Result<(), Box<dyn Error>> {
    for p in params {
        to.set_param(&p.name, trainer.param(&p.name)?)?;
    }
    Ok(())
}

/// Continues `prompt` by `n` characters drawn from the model at `temperature`. The model
/// always sees `ctx` ids: the text so far (its last `ctx` characters) padded on the right,
/// which the causal mask hides from the position read.
fn sample(corpus: &Corpus, model: &mut CompiledGraph, ctx: usize, prompt: &str, n: usize, temperature: f64, rng: &mut Rng) -> Result<String, Box<dyn Error>> {
    let id_of = |c: u8| corpus.alphabet.iter().position(|&a| a == c).map(|i| i as i64);
    let mut ids: Vec<i64> = prompt.bytes().map(|c| id_of(c).ok_or_else(|| format!("the prompt's {:?} is not in the alphabet", c as char))).collect::<Result<_, _>>()?;
    let vocab = corpus.alphabet.len();
    let zeros = Tensor::from_vec(vec![0i64; ctx], &[1, ctx])?;
    for _ in 0..n {
        let start = ids.len().saturating_sub(ctx);
        let mut window = ids[start..].to_vec();
        let pos = window.len() - 1;
        window.resize(ctx, 0);
        let x = Tensor::from_vec(window, &[1, ctx])?;
        let logits = model.run(&[(TOKENS, &x), (TARGETS, &zeros)])?[0].to_f64_vec();
        let row = &logits[pos * vocab..(pos + 1) * vocab];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = row.iter().map(|l| ((l - max) / temperature).exp()).collect();
        let mut u = rng.uniform() * weights.iter().sum::<f64>();
        let mut next = vocab - 1;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                next = i;
                break;
            }
            u -= w;
        }
        ids.push(next as i64);
    }
    Ok(ids.iter().map(|&i| corpus.alphabet[i as usize] as char).collect())
}

/// Training loss (smoothed over 10 steps), held-out loss and the unigram entropy.
pub fn loss_chart(r: &CharLmReport) -> String {
    let smooth: Vec<(f64, f64)> = (0..r.losses.len())
        .map(|i| {
            let w = &r.losses[i.saturating_sub(9)..=i];
            ((i + 1) as f64, w.iter().map(|&l| f64::from(l)).sum::<f64>() / w.len() as f64)
        })
        .collect();
    let eval: Vec<(f64, f64)> = r.eval.iter().map(|&(s, l)| (s as f64, f64::from(l))).collect();
    plot::svg(
        "rlx demo: character-level GPT on Shakespeare",
        "step",
        "loss (nats per character)",
        &[Series { label: "train (10-step mean)", color: "#d62728", points: &smooth }, Series { label: "held out", color: "#1f77b4", points: &eval }],
        &[Reference { label: "unigram entropy", y: r.unigram_entropy }],
    )
}

/// `rlx demo`: trains with the defaults, `steps` overriding the step count.
pub fn run(steps: Option<usize>, out_dir: PathBuf, device: Device) -> Result<(), Box<dyn Error>> {
    let defaults = CharLmOptions::default();
    let opts = CharLmOptions { steps: steps.unwrap_or(defaults.steps), out_dir: Some(out_dir), device, ..defaults };
    train(&opts).map(|_| ())
}
