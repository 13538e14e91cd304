//! Token generation: prefill the prompt in one run (in chunks where sliding layers keep ring
//! caches), then decode one token per run against the KV cache. Greedy decoding reads back
//! the graph's own argmax ([`GREEDY`]), one id a step; other sampling reads the logits.
//!
//! Sampling runs on the host, not as the IR's `Sample` op: that op's seed is an attribute, so
//! every decode step of one compiled graph would draw the same uniform number; one host RNG
//! stream across the steps needs no recompilation and reads only the `[vocab]` logits row.

use super::{Llama, GREEDY, LOGITS};
use crate::error::{ModelError, Result};
use rlx_runtime::{CompiledGraph, DeviceTensor, Session, Tensor};
/// The seeded SplitMix64 stream sampling draws from (the one parameter initialisers use).
pub use rlx_train::init::Rng;
use std::time::{Duration, Instant};

/// How the next token is picked from the logits (OPS.md §12 `Sample` semantics).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 (or `top_k == 1`) is greedy: the first largest logit.
    pub temperature: f32,
    /// Keep the `top_k` largest logits (ties at the cutoff survive); 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest most-probable set reaching `top_p`; 1 keeps all.
    pub top_p: f32,
    pub seed: u64,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 };
}

/// Wall time of the prefill run and of each decode run.
#[derive(Clone, Debug, Default)]
pub struct StepTimes {
    pub prefill: Duration,
    pub prefill_tokens: usize,
    pub decode: Vec<Duration>,
}

/// A compiled decoder and how far its KV cache is filled.
pub struct Generator {
    pub model: Llama,
    compiled: CompiledGraph,
    pos: usize,
}

impl Generator {
    /// Compiles `model` on `session` with empty caches, moving its parameter values into the
    /// compiled graph (blocks of a mapped model file copied, then released from memory). The
    /// model's graph is dropped once compiled (`model.graph` is left empty): the compiled
    /// graph holds its legalized form ([`Generator::compiled`]), and a second copy of a
    /// decoder's graph is half a megabyte for a 30-layer model.
    pub fn new(mut model: Llama, session: &Session) -> Result<Generator> {
        let mut compiled = session.compile(&std::mem::take(&mut model.graph))?;
        for (name, value) in std::mem::take(&mut model.params) {
            value.set(&mut compiled, &name)?;
        }
        Ok(Generator { model, compiled, pos: 0 })
    }

    /// The working memory the backend plans for a step of `tokens` tokens (at most
    /// [`Llama::step_limit`] from position 0), besides the weights and caches.
    pub fn arena_bytes(&mut self, tokens: usize) -> Result<usize> {
        let inputs = self.model.step_inputs(&vec![0; tokens], 0, 1)?;
        let named: Vec<(&str, &rlx_runtime::Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        Ok(self.compiled.arena_bytes(&named)?.unwrap_or(0))
    }

    /// The compiled graph (its partition, profile, device values for `submit`).
    pub fn compiled(&mut self) -> &mut CompiledGraph {
        &mut self.compiled
    }

    /// Forgets the cached sequence (the mask hides old slots, so nothing is cleared).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Tokens cached so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Keeps the first `pos` cached tokens and forgets the rest (the mask hides the later
    /// slots), so that a conversation re-feeds only what changed. Not possible when sliding
    /// layers keep ring caches (their slots of earlier positions may be overwritten): then
    /// the cache is emptied. Returns the position kept.
    pub fn rewind(&mut self, pos: usize) -> usize {
        self.pos = if self.model.ring.is_none() { pos.min(self.pos) } else { 0 };
        self.pos
    }

    /// Runs `tokens` after the cached ones and returns the logits of the last, `[vocab]`: in one
    /// step, or in steps of [`Llama::step_limit`] tokens where the sliding layers have ring caches.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        Ok(self.feed_for(tokens, LOGITS)?.to_vec::<f32>()?)
    }

    /// Runs `tokens` after the cached ones and returns the greedy next token (the last one's
    /// first largest logit, as [`argmax`] picks it), computed where the graph runs: from a GPU
    /// only that id comes back, not the vocabulary's logits.
    pub fn feed_greedy(&mut self, tokens: &[u32]) -> Result<u32> {
        let id = self.feed_for(tokens, GREEDY)?.to_vec::<i64>()?;
        let id = id.first().copied().ok_or_else(|| ModelError::Generate("the graph returned no token".into()))?;
        u32::try_from(id).map_err(|_| ModelError::Generate(format!("the graph picked token {id}")))
    }

    /// Runs `tokens` in as many steps as [`Llama::step_limit`] asks and reads back output
    /// `which` of the last step alone (the steps' inputs uploaded, their outputs left where
    /// they were computed).
    fn feed_for(&mut self, tokens: &[u32], which: usize) -> Result<Tensor> {
        let mut rest = tokens;
        loop {
            // At least one token, so that a full cache or an empty `tokens` is step_inputs' error.
            let (step, next) = rest.split_at(rest.len().min(self.model.step_limit(self.pos).max(1)));
            let inputs = self.model.step_inputs(step, self.pos, 1)?;
            let uploaded = inputs.iter().map(|(n, t)| Ok((*n, self.compiled.upload(t)?))).collect::<Result<Vec<_>>>()?;
            let named: Vec<(&str, &DeviceTensor)> = uploaded.iter().map(|(n, t)| (*n, t)).collect();
            let out = self.compiled.submit(&named)?;
            self.pos += step.len();
            rest = next;
            if rest.is_empty() {
                let value = out.get(which).ok_or_else(|| ModelError::Generate(format!("the graph returned no output {which}")))?;
                return Ok(self.compiled.download(value)?);
            }
        }
    }

    /// Feeds `prompt`, then samples up to `n` tokens (stopping after any of `stop`), calling
    /// `on_token` with each as it comes. Returns the new tokens and the time of each run.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampling: Sampling,
        stop: &[u32],
        mut on_token: impl FnMut(u32),
    ) -> Result<(Vec<u32>, StepTimes)> {
        let mut rng = Rng::new(sampling.seed);
        let mut times = StepTimes { prefill_tokens: prompt.len(), ..StepTimes::default() };
        let start = Instant::now();
        let greedy = sampling.temperature <= 0.0 || sampling.top_k == 1;
        let mut pick = |g: &mut Generator, tokens: &[u32]| -> Result<u32> {
            if greedy {
                g.feed_greedy(tokens)
            } else {
                Ok(sample(&g.feed(tokens)?, &sampling, &mut rng))
            }
        };
        let mut tok = pick(self, prompt)?;
        times.prefill = start.elapsed();
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(tok);
            on_token(tok);
            if stop.contains(&tok) || i + 1 == n {
                break;
            }
            let start = Instant::now();
            tok = pick(self, &[tok])?;
            times.decode.push(start.elapsed());
        }
        Ok((out, times))
    }
}

/// The index of the first largest value.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Picks a token from `logits` as `Sample` does: temperature, top-k, softmax, top-p, one draw.
pub fn sample(logits: &[f32], s: &Sampling, rng: &mut Rng) -> u32 {
    if s.temperature <= 0.0 || s.top_k == 1 || logits.len() <= 1 {
        return argmax(logits);
    }
    let t = f64::from(s.temperature.max(1e-6));
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if s.top_k > 0 && s.top_k < order.len() {
        let cut = logits[order[s.top_k - 1]];
        order.retain(|&i| logits[i] >= cut);
    }
    let top = f64::from(logits[order[0]]) / t;
    let mut probs: Vec<f64> = order.iter().map(|&i| (f64::from(logits[i]) / t - top).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    if s.top_p < 1.0 {
        let mut acc = 0.0;
        let keep = probs
            .iter()
            .position(|&p| {
                acc += p;
                acc >= f64::from(s.top_p)
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(keep);
        order.truncate(keep);
        let kept: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= kept);
    }
    let u = rng.uniform();
    let mut acc = 0.0;
    for (&i, &p) in order.iter().zip(&probs) {
        acc += p;
        if acc >= u {
            return i as u32;
        }
    }
    order[order.len() - 1] as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Draw frequencies of `draws` samples.
    fn frequencies(logits: &[f32], s: &Sampling, draws: usize) -> Vec<f64> {
        let mut rng = Rng::new(s.seed);
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..draws {
            counts[sample(logits, s, &mut rng) as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    /// Every frequency within 4 standard errors of its probability.
    fn assert_matches(freq: &[f64], probs: &[f64], draws: usize) {
        for (i, (&f, &p)) in freq.iter().zip(probs).enumerate() {
            let se = (p * (1.0 - p) / draws as f64).sqrt().max(1e-9);
            assert!((f - p).abs() <= 4.0 * se + 1e-12, "token {i}: frequency {f} vs probability {p}");
        }
    }

    #[test]
    fn greedy_takes_the_first_largest() {
        let logits = [0.5, 3.0, -1.0, 3.0];
        assert_eq!(sample(&logits, &Sampling::GREEDY, &mut Rng::new(1)), 1);
        assert_eq!(sample(&logits, &Sampling { temperature: 0.7, top_k: 1, top_p: 1.0, seed: 3 }, &mut Rng::new(3)), 1);
    }

    #[test]
    fn temperature_and_top_k_follow_the_softmax() {
        let logits = [1.0f32, 2.0, 0.5, -0.25, 1.5];
        let draws = 40_000;
        let t = 0.8;
        let softmax = |keep: &[usize]| -> Vec<f64> {
            let e: Vec<f64> = (0..logits.len()).map(|i| if keep.contains(&i) { (f64::from(logits[i]) / t).exp() } else { 0.0 }).collect();
            let z: f64 = e.iter().sum();
            e.iter().map(|v| v / z).collect()
        };
        let all = Sampling { temperature: t as f32, top_k: 0, top_p: 1.0, seed: 11 };
        assert_matches(&frequencies(&logits, &all, draws), &softmax(&[0, 1, 2, 3, 4]), draws);
        let top2 = Sampling { top_k: 2, ..all };
        assert_matches(&frequencies(&logits, &top2, draws), &softmax(&[1, 4]), draws);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        let probs = [0.5f64, 0.3, 0.15, 0.05];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        let s = Sampling { temperature: 1.0, top_k: 0, top_p: 0.75, seed: 5 };
        let draws = 40_000;
        assert_matches(&frequencies(&logits, &s, draws), &[0.625, 0.375, 0.0, 0.0], draws);
    }

    #[test]
    fn a_seed_gives_one_sequence() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let s = Sampling { temperature: 1.2, top_k: 20, top_p: 0.9, seed: 42 };
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..32).map(|_| sample(&logits, &s, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }
}
