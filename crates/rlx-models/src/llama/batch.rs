//! Continuous batching: one graph runs the tokens of several sequences in one step, each
//! sequence at its own position with its own KV cache, and a scheduler ([`Batcher`]) lets
//! sequences join and leave between steps.
//!
//! The caches of all sequences share one pool per layer (`[slots, H_kv·D]`, graph state as
//! the single-sequence caches are). A step's new keys and values are appended as one
//! contiguous run of slots; attention reads the union of the step's sequences' slots
//! (gathered, sequence by sequence, each from a multiple of 128 rows) under a mask that shows each token only its own
//! sequence's earlier positions, so its result is the one the sequence gets alone. Everything
//! here is host bookkeeping and graph inputs: any backend that runs the graph batches. A
//! backend that claims `Attention`'s `kv_rows` form (the CPU) gets the gathers folded into
//! the attention at compile time, which then reads the pools in place.
//!
//! Step shapes are bucketed (tokens and union rows padded to powers of two) so that the
//! executor keeps a bounded set of plans, one per bucket, however long a server runs.

use super::{Attend, Builder, LlamaConfig, ParamValue, RopeScaling, Weights, OUT_ROWS, POS, TOKENS};
use super::generate::{sample, Rng, Sampling};
use super::kv_pool::KvPool;
use crate::error::{ModelError, Result};
use rlx_ir::{DType, Dim, Graph, Shape, TensorType};
use rlx_runtime::{CompiledGraph, Profile, Session, Tensor};
use std::collections::VecDeque;

/// `[T]` I64: the position of each of the step's tokens in its sequence.
pub const POSITIONS: &str = "positions";
/// `[U]` I64: the pool slots attention reads, each sequence's in position order.
pub const KV_ROWS: &str = "kv_rows";
/// `[T, U]` F32: 0 where a token sees a row of `kv_rows`, −1e9 where it does not.
pub const MASK: &str = "mask";
/// `[T, U]` F32: the sliding layers' mask (models with sliding-window layers only).
pub const MASK_LOCAL: &str = "mask_local";

/// The additive mask value of a hidden row.
const HIDDEN: f32 = -1e9;
/// The fewest union rows a step is padded to.
const MIN_ROWS: usize = 64;
/// Each sequence's rows start at a multiple of this in the union (hidden rows between), so a
/// kernel that walks keys in tiles from the first visible one splits a sequence's keys where
/// it would alone, and its sums round the same.
const SEGMENT: usize = 128;

/// A decoder over a pooled KV cache, before compilation.
pub struct PooledLlama {
    pub config: LlamaConfig,
    pub graph: Graph,
    pub params: Vec<(String, ParamValue)>,
    /// Slots of each layer's pool.
    pub slots: usize,
    /// Positions a sequence may reach (rope table rows).
    pub context: usize,
}

impl PooledLlama {
    /// The decoder of `config` over `weights` with pools of `slots` slots, for sequences of
    /// up to `context` positions. Inputs: [`TOKENS`] `[T]`, [`POSITIONS`] `[T]`, [`POS`] `[1]`
    /// (the slot of the step's first token; the others follow), [`KV_ROWS`] `[U]`, [`MASK`]
    /// `[T, U]` (and [`MASK_LOCAL`]), [`OUT_ROWS`] `[R]`; output `[R, vocab]` logits.
    pub fn build(config: &LlamaConfig, weights: &Weights, slots: usize, context: usize) -> Result<PooledLlama> {
        let c = config;
        let var = &c.variant;
        let mut b = Builder { g: Graph::new(), w: weights, params: Vec::new(), norm_plus_one: var.norm_plus_one, dtype: DType::F32 };
        let (t, u) = (Dim::sym("T"), Dim::sym("U"));
        let tokens = b.g.input(TOKENS, TensorType::new(DType::I64, Shape(vec![t.clone()])));
        let positions = b.g.input(POSITIONS, TensorType::new(DType::I64, Shape(vec![t.clone()])));
        let at = b.g.input(POS, TensorType::of(DType::I64, &[1]));
        let rows = b.g.input(KV_ROWS, TensorType::new(DType::I64, Shape(vec![u.clone()])));
        let mask_ty = TensorType::new(DType::F32, Shape(vec![t, u]));
        let mask = b.g.input(MASK, mask_ty.clone());
        let out_rows = b.g.input(OUT_ROWS, TensorType::new(DType::I64, Shape(vec![Dim::sym("R")])));
        let (cos, sin) = if var.llama_cpp_numerics && var.rope_scaling == RopeScaling::None {
            super::llama_cpp_rope_tables(c.rope_base, c.rope_dim, context)
        } else {
            super::rope_tables(c.rope_base, c.rope_dim, &var.rope_scaling, context)
        };
        let (cos, sin) = b.rope_rows(&cos, &sin, c.rope_dim / 2, positions)?;
        let global = Attend { cos, sin, mask, at, slots, rows: Some(rows) };
        let local = match &var.sliding {
            Some(w) => {
                let (cos, sin) = match w.rope_base {
                    Some(base) => {
                        let (cos, sin) = super::rope_tables(base, c.rope_dim, &RopeScaling::None, context);
                        b.rope_rows(&cos, &sin, c.rope_dim / 2, positions)?
                    }
                    None => (cos, sin),
                };
                Attend { cos, sin, mask: b.g.input(MASK_LOCAL, mask_ty), ..global }
            }
            None => global,
        };
        let logits = b.decoder(c, tokens, out_rows, &global, &local)?;
        // The scheduler samples from the logits on the host: the greedy token the decoder
        // also outputs (an arg-max over every row's vocabulary) would be computed for nothing.
        b.g.set_outputs(vec![logits])?;
        Ok(PooledLlama { config: c.clone(), graph: b.g, params: b.params, slots, context })
    }

    /// Bytes of the pools: keys and values of every layer for every slot.
    pub fn pool_bytes(&self) -> usize {
        slot_bytes(&self.config) * self.slots
    }
}

/// Bytes one pool slot takes over all layers (keys and values, F32).
pub fn slot_bytes(c: &LlamaConfig) -> usize {
    2 * c.layers * c.kv_heads * c.head_dim * DType::F32.size()
}

/// One sequence's part of a step: `tokens` at positions `start..`, its cache in `slots`
/// (position `p` in `slots[p]`, the new tokens' slots included).
pub struct Part<'a> {
    pub tokens: &'a [u32],
    pub start: usize,
    pub slots: &'a [usize],
    /// Whether the logits of its last token are wanted.
    pub logits: bool,
}

/// A compiled pooled decoder.
pub struct PooledDecoder {
    pub config: LlamaConfig,
    compiled: CompiledGraph,
    slots: usize,
    context: usize,
    window: Option<usize>,
}

impl PooledDecoder {
    /// Compiles `model` on `session`, moving its parameter values into the compiled graph.
    pub fn new(mut model: PooledLlama, session: &Session) -> Result<PooledDecoder> {
        let mut compiled = session.compile(&model.graph)?;
        for (name, value) in std::mem::take(&mut model.params) {
            value.set(&mut compiled, &name)?;
        }
        let window = model.config.variant.sliding.as_ref().map(|w| w.window);
        Ok(PooledDecoder { config: model.config, compiled, slots: model.slots, context: model.context, window })
    }

    /// Slots of each layer's pool.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Positions a sequence may reach.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Runs one step: every part's tokens, whose new slots must follow one another from the
    /// first part's on; then `pad` more tokens (id 0, at position 0, seeing one row) in the
    /// slots after them, so that the step's size is a bucket. Returns the `[vocab]` logits of
    /// each part that wants them, in order.
    pub fn step(&mut self, parts: &[Part], pad: usize) -> Result<Vec<Vec<f32>>> {
        let inputs = self.inputs(parts, pad)?;
        let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let out = self.compiled.run(&named)?;
        let logits = out.into_iter().next().ok_or_else(|| ModelError::Generate("the graph returned no logits".into()))?;
        let logits = logits.to_vec::<f32>()?;
        let vocab = self.config.vocab;
        let mut rows = Vec::new();
        let mut row = 0;
        for p in parts {
            if p.logits {
                rows.push(logits.get(row * vocab..(row + 1) * vocab).ok_or_else(|| ModelError::Generate("too few logit rows".into()))?.to_vec());
            }
            row += usize::from(p.logits);
        }
        Ok(rows)
    }

    /// The graph inputs of a step (see [`PooledDecoder::step`]).
    fn inputs(&self, parts: &[Part], pad: usize) -> Result<Vec<(&'static str, Tensor)>> {
        let bad = |why: String| Err(ModelError::Generate(why));
        let Some(first) = parts.first() else { return bad("a step of no sequences".into()) };
        let at = *first.slots.get(first.start).ok_or_else(|| ModelError::Generate("the first part has no slot for its tokens".into()))?;
        let mut next = at;
        for p in parts {
            if p.tokens.is_empty() || p.slots.len() != p.start + p.tokens.len() || p.slots.len() > self.context {
                return bad(format!("a part of {} tokens at {} with {} slots (context {})", p.tokens.len(), p.start, p.slots.len(), self.context));
            }
            for &s in &p.slots[p.start..] {
                if s != next {
                    return bad("the step's new slots are not one run".into());
                }
                next += 1;
            }
        }
        let t = next - at + pad;
        if next + pad > self.slots {
            return bad(format!("slots {at}..{} are past the pool's {}", next + pad, self.slots));
        }
        let offsets: Vec<usize> = parts
            .iter()
            .scan(0, |end, p| {
                let at = *end;
                *end = (at + p.slots.len()).next_multiple_of(SEGMENT);
                Some(at)
            })
            .collect();
        let used = parts.last().map_or(0, |p| offsets[offsets.len() - 1] + p.slots.len());
        let u = bucket(used).max(MIN_ROWS);
        let (mut tokens, mut positions) = (Vec::with_capacity(t), Vec::with_capacity(t));
        let mut rows: Vec<i64> = vec![0; u];
        let mut mask = vec![HIDDEN; t * u];
        let mut local = self.window.map(|_| vec![HIDDEN; t * u]);
        let mut out_rows = Vec::new();
        for (p, &offset) in parts.iter().zip(&offsets) {
            for (row, &s) in rows[offset..].iter_mut().zip(p.slots) {
                *row = s as i64;
            }
            for (i, &tok) in p.tokens.iter().enumerate() {
                let (r, q) = (tokens.len(), p.start + i);
                tokens.push(i64::from(tok));
                positions.push(q as i64);
                mask[r * u + offset..r * u + offset + q + 1].fill(0.0);
                if let (Some(m), Some(w)) = (local.as_mut(), self.window) {
                    m[r * u + offset + (q + 1).saturating_sub(w)..r * u + offset + q + 1].fill(0.0);
                }
            }
            if p.logits {
                out_rows.push(tokens.len() as i64 - 1);
            }
        }
        // Each padding token sees the union's first row, so that its keys are one row, not
        // the union: a fully hidden row spans every key, and one such query in a step made
        // the attention kernel score every query against the whole union.
        for r in tokens.len()..t {
            mask[r * u] = 0.0;
            if let Some(m) = local.as_mut() {
                m[r * u] = 0.0;
            }
        }
        tokens.resize(t, 0);
        positions.resize(t, 0);
        if out_rows.is_empty() {
            out_rows.push(0);
        }
        let r = out_rows.len();
        let mut inputs = vec![
            (TOKENS, Tensor::from_vec(tokens, &[t])?),
            (POSITIONS, Tensor::from_vec(positions, &[t])?),
            (POS, Tensor::from_vec(vec![at as i64], &[1])?),
            (KV_ROWS, Tensor::from_vec(rows, &[u])?),
            (MASK, Tensor::from_vec(mask, &[t, u])?),
            (OUT_ROWS, Tensor::from_vec(out_rows, &[r])?),
        ];
        if let Some(m) = local {
            inputs.push((MASK_LOCAL, Tensor::from_vec(m, &[t, u])?));
        }
        Ok(inputs)
    }
}

/// The bucket a step size is padded to: the next power of two.
pub fn bucket(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// The largest bucket not above `n` (`n ≥ 1`).
fn bucket_below(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// How a [`Batcher`] schedules.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    /// Slots per pool block: the unit of reservations.
    pub block: usize,
    /// Most sequences in one decode step.
    pub max_batch: usize,
    /// Most tokens of a step that feeds prompts (a power of two; at least the bucket of the
    /// step's decode tokens and one prompt token).
    pub prefill_chunk: usize,
}

impl Default for BatchConfig {
    fn default() -> BatchConfig {
        BatchConfig { block: 16, max_batch: 16, prefill_chunk: 256 }
    }
}

/// What a sequence generates.
#[derive(Clone, Debug)]
pub struct SeqRequest {
    pub prompt: Vec<u32>,
    /// Most new tokens (also bounded by the context).
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Tokens that end the sequence; they are not emitted.
    pub stop: Vec<u32>,
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// A stop token.
    Stop,
    /// `max_tokens` or the context reached.
    Length,
}

/// A sequence's id within its [`Batcher`].
pub type SeqId = u64;

/// What one step gave a sequence: a new token, its end, or both.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub id: SeqId,
    pub token: Option<u32>,
    pub finish: Option<Finish>,
}

/// What one step ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepStats {
    /// Sequences in the step: decoding ones and those whose prompt it fed.
    pub sequences: usize,
    /// Sequences that decoded a token in it.
    pub decoded: usize,
    /// Real tokens run (prompt and decode), of them prompt tokens, then padding.
    pub tokens: usize,
    pub prompt_tokens: usize,
    pub padding: usize,
    /// Whether it fed prompt tokens.
    pub prefill: bool,
}

/// A sequence being served.
struct Seq {
    id: SeqId,
    req: SeqRequest,
    /// The prompt, then each generated token.
    tokens: Vec<u32>,
    /// The slot of each position fed so far.
    slots: Vec<usize>,
    generated: usize,
    /// The most new tokens it may take (`max_tokens` within the context).
    limit: usize,
    rng: Rng,
    /// The step it was last decoded in (round robin when more wait than a step takes).
    served: u64,
}

impl Seq {
    /// Slots reserved for it: the prompt and every generated token but the last.
    fn reservation(&self) -> usize {
        self.req.prompt.len() + self.limit.saturating_sub(1)
    }

    fn prefilling(&self) -> bool {
        self.slots.len() < self.req.prompt.len()
    }
}

/// The continuous-batching scheduler: a queue of requests, the running sequences and the KV
/// pool. Each [`Batcher::step`] runs one decode token of up to `max_batch` sequences and,
/// while prompts are pending, up to `prefill_chunk` prompt tokens beside them (several
/// prompts, the last perhaps cut), so that a new request starts without stalling the others
/// for its whole prompt and short prompts do not each pad a step of their own.
pub struct Batcher {
    decoder: PooledDecoder,
    pool: KvPool,
    cfg: BatchConfig,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    next_id: SeqId,
    steps: u64,
}

impl Batcher {
    /// A scheduler over `decoder`, whose pools are cut into blocks of `cfg.block` slots.
    pub fn new(decoder: PooledDecoder, cfg: BatchConfig) -> Batcher {
        let pool = KvPool::new(decoder.slots() / cfg.block.max(1), cfg.block.max(1));
        Batcher { decoder, pool, cfg, waiting: VecDeque::new(), running: Vec::new(), next_id: 0, steps: 0 }
    }

    /// The model's configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.decoder.config
    }

    /// Positions a sequence may reach.
    pub fn context(&self) -> usize {
        self.decoder.context()
    }

    /// The pool: its size and reservations.
    pub fn pool(&self) -> &KvPool {
        &self.pool
    }

    /// Turns per-node timing of the following steps on (from zero) or off; false where the
    /// backend cannot time its nodes.
    pub fn set_profiling(&mut self, on: bool) -> bool {
        self.decoder.compiled.set_profiling(on)
    }

    /// Where the steps since profiling was turned on spent their time, by node.
    pub fn profile(&self) -> Profile {
        self.decoder.compiled.profile()
    }

    /// Queues `req`; it starts once its prompt and `max_tokens` fit the pool's unreserved
    /// blocks. A request that can never fit (an empty prompt, a prompt that fills the context,
    /// more than the whole pool) is an error.
    pub fn submit(&mut self, req: SeqRequest) -> Result<SeqId> {
        let context = self.decoder.context();
        if req.prompt.is_empty() {
            return Err(ModelError::Generate("the prompt has no tokens".into()));
        }
        if req.max_tokens == 0 {
            return Err(ModelError::Generate("max_tokens must be at least 1".into()));
        }
        if req.prompt.len() >= context {
            return Err(ModelError::Generate(format!("the prompt has {} tokens; the context holds {context} positions", req.prompt.len())));
        }
        if let Some(&t) = req.prompt.iter().find(|&&t| t as usize >= self.decoder.config.vocab) {
            return Err(ModelError::Generate(format!("token {t} is outside the vocabulary of {}", self.decoder.config.vocab)));
        }
        let limit = req.max_tokens.min(context - req.prompt.len());
        let id = self.next_id;
        self.next_id += 1;
        let seq = Seq { id, tokens: req.prompt.clone(), slots: Vec::new(), generated: 0, limit, rng: Rng::new(req.sampling.seed), served: 0, req };
        if self.pool.blocks_for(seq.reservation()) > self.pool.blocks() {
            return Err(ModelError::Generate(format!(
                "{} prompt tokens and {} new ones need {} KV slots; the pool has {}",
                seq.req.prompt.len(),
                limit,
                seq.reservation(),
                self.pool.slots()
            )));
        }
        self.waiting.push_back(seq);
        Ok(id)
    }

    /// Drops sequence `id`, queued or running, giving back its slots; false if unknown.
    pub fn cancel(&mut self, id: SeqId) -> bool {
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return true;
        }
        match self.running.iter().position(|s| s.id == id) {
            Some(i) => {
                let s = self.running.swap_remove(i);
                self.release(&s);
                true
            }
            None => false,
        }
    }

    /// Sequences queued and running.
    pub fn pending(&self) -> (usize, usize) {
        (self.waiting.len(), self.running.len())
    }

    /// Whether nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    fn release(&mut self, s: &Seq) {
        self.pool.give_back(&s.slots);
        self.pool.unreserve(s.reservation());
    }

    /// Admits queued requests in order while their reservations fit, then runs one step.
    /// Returns the events of the step (none when idle) and what it ran.
    pub fn step(&mut self) -> Result<(Vec<Event>, StepStats)> {
        while let Some(front) = self.waiting.front() {
            if !self.pool.reserve(front.reservation()) {
                break;
            }
            let seq = self.waiting.pop_front().ok_or_else(|| ModelError::Generate("the queue emptied".into()))?;
            self.running.push(seq);
        }
        self.steps += 1;
        self.mixed_step()
    }

    /// One step of up to `max_batch` decoding sequences (least recently served first), one
    /// token each, and as many prompt tokens of prefilling sequences (in order of arrival,
    /// the last one's prompt perhaps cut) as fill the step up to `prefill_chunk` tokens, or
    /// the bucket of the decode tokens and one more, whichever is larger. Prompt tokens take
    /// the room a decode step pads, and several short prompts share one step rather than each
    /// padding its own bucket.
    fn mixed_step(&mut self) -> Result<(Vec<Event>, StepStats)> {
        let mut ready: Vec<usize> = (0..self.running.len()).filter(|&i| !self.running[i].prefilling()).collect();
        ready.sort_by_key(|&i| (self.running[i].served, self.running[i].id));
        ready.truncate(self.cfg.max_batch.max(1));
        let left = |s: &Seq| s.req.prompt.len() - s.slots.len();
        let prompt: usize = self.running.iter().filter(|s| s.prefilling()).map(left).sum();
        if ready.is_empty() && prompt == 0 {
            return Ok((Vec::new(), StepStats::default()));
        }
        let limit = if prompt == 0 { ready.len() } else { self.cfg.prefill_chunk.max(1).max(bucket(ready.len() + 1)) };
        let (start, got) = self.take_bucketed(limit.min(ready.len() + prompt))?;
        // Decode tokens first; prompt tokens fill what is left of the run, at least one while
        // a prompt waits (else a batch as large as the chunk, or a run cut short by a
        // fragmented pool, would hold every prompt back).
        ready.truncate(if prompt > 0 { got - 1 } else { got });
        ready.sort_unstable();
        let mut room = got - ready.len();
        let mut chunks: Vec<(usize, usize)> = Vec::new();
        for (i, s) in self.running.iter().enumerate() {
            if room == 0 {
                break;
            }
            if s.prefilling() {
                let n = left(s).min(room);
                chunks.push((i, n));
                room -= n;
            }
        }
        let mut next = start;
        for &i in &ready {
            let s = &mut self.running[i];
            s.slots.push(next);
            s.served = self.steps;
            next += 1;
        }
        let mut fed = Vec::with_capacity(chunks.len());
        for &(i, n) in &chunks {
            let s = &mut self.running[i];
            fed.push(s.slots.len());
            s.slots.extend(next..next + n);
            next += n;
        }
        let mut parts: Vec<Part> = ready
            .iter()
            .map(|&i| {
                let s = &self.running[i];
                let p = s.slots.len() - 1;
                Part { tokens: &s.tokens[p..p + 1], start: p, slots: &s.slots, logits: true }
            })
            .collect();
        for (&(i, n), &from) in chunks.iter().zip(&fed) {
            let s = &self.running[i];
            parts.push(Part { tokens: &s.tokens[from..from + n], start: from, slots: &s.slots, logits: from + n == s.req.prompt.len() });
        }
        let used = next - start;
        let result = self.decoder.step(&parts, got - used);
        let wanted: Vec<usize> = ready.iter().copied().chain(chunks.iter().zip(&fed).filter(|&(&(i, n), &from)| from + n == self.running[i].req.prompt.len()).map(|(&(i, _), _)| i)).collect();
        drop(parts);
        self.pool.give_back(&(next..start + got).collect::<Vec<_>>());
        let logits = result?;
        let prompt_tokens = used - ready.len();
        let stats = StepStats { sequences: ready.len() + chunks.len(), decoded: ready.len(), tokens: used, prompt_tokens, padding: got - used, prefill: prompt_tokens > 0 };
        let rows: Vec<(usize, Vec<f32>)> = wanted.into_iter().zip(logits).collect();
        Ok((self.sampled(&rows), stats))
    }

    /// A run of `bucket(n)` slots, or of the largest bucket that a free run holds.
    fn take_bucketed(&mut self, n: usize) -> Result<(usize, usize)> {
        let want = bucket(n);
        let (start, got) = self.pool.take_run(want).ok_or_else(|| ModelError::Generate("the KV pool has no free slot".into()))?;
        let keep = bucket_below(got);
        self.pool.give_back(&(start + keep..start + got).collect::<Vec<_>>());
        Ok((start, keep))
    }

    /// Samples the next token of each `(running index, logits)`, and ends the sequences that
    /// stop or reach their limit.
    fn sampled(&mut self, rows: &[(usize, Vec<f32>)]) -> Vec<Event> {
        let mut events = Vec::with_capacity(rows.len());
        let mut done = Vec::new();
        for (i, logits) in rows {
            let s = &mut self.running[*i];
            let tok = sample(logits, &s.req.sampling, &mut s.rng);
            if s.req.stop.contains(&tok) {
                events.push(Event { id: s.id, token: None, finish: Some(Finish::Stop) });
                done.push(*i);
                continue;
            }
            s.tokens.push(tok);
            s.generated += 1;
            let finish = (s.generated >= s.limit).then_some(Finish::Length);
            events.push(Event { id: s.id, token: Some(tok), finish });
            if finish.is_some() {
                done.push(*i);
            }
        }
        done.sort_unstable_by(|a, b| b.cmp(a));
        for i in done {
            let s = self.running.swap_remove(i);
            self.release(&s);
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compiled pooled decoder of a tiny random Llama (2 layers, 4 heads of 16).
    fn tiny_decoder(slots: usize) -> PooledDecoder {
        let c = LlamaConfig { vocab: 64, d_model: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, d_ff: 128, rope_dim: 16, context: 256, ..LlamaConfig::llama_3_2_1b() };
        let w = Weights::random(&c, 7, None);
        let session = Session::new(std::sync::Arc::new(rlx_cpu::CpuBackend::new()));
        PooledDecoder::new(PooledLlama::build(&c, &w, slots, c.context).unwrap(), &session).unwrap()
    }

    #[test]
    fn each_token_sees_its_own_sequence_and_padding_one_row() {
        let d = tiny_decoder(256);
        // Three sequences of 5, 2 and 130 positions, each decoding one token, padded to 4.
        let (a, b, c): (Vec<usize>, Vec<usize>, Vec<usize>) = ((100..104).chain([0]).collect(), vec![110, 1], (120..249).chain([2]).collect());
        let parts = [
            Part { tokens: &[1], start: 4, slots: &a, logits: true },
            Part { tokens: &[2], start: 1, slots: &b, logits: true },
            Part { tokens: &[3], start: 129, slots: &c, logits: true },
        ];
        let inputs = d.inputs(&parts, 1).unwrap();
        let get = |name: &str| inputs.iter().find(|(n, _)| *n == name).map(|(_, t)| t).unwrap();
        let (rows, mask) = (get(KV_ROWS).to_vec::<i64>().unwrap(), get(MASK).to_vec::<f32>().unwrap());
        // Segments from 0, 128 and 256; 256 + 130 rows bucketed to 512.
        assert_eq!(rows.len(), 512);
        let u = rows.len();
        let seen = |r: usize| -> Vec<usize> { (0..u).filter(|&j| mask[r * u + j] == 0.0).collect() };
        assert_eq!(seen(0), (0..5).collect::<Vec<_>>());
        assert_eq!(seen(1), vec![128, 129]);
        assert_eq!(seen(2), (256..386).collect::<Vec<_>>());
        assert_eq!(seen(3), vec![0], "the padding token sees one row");
        assert_eq!((&rows[..5], &rows[128..130], rows[385]), (&[100i64, 101, 102, 103, 0][..], &[110i64, 1][..], 2));
    }

    #[test]
    fn the_cpu_reads_the_pools_in_place() {
        // Each layer's gathers of its pooled keys and values fold into its attention.
        let d = tiny_decoder(256);
        let g = d.compiled.graph();
        let attention: Vec<usize> = g.nodes().iter().filter(|n| n.op.kind() == rlx_ir::OpKind::Attention).map(|n| n.inputs.len()).collect();
        assert_eq!(attention, [5, 5], "q, k, v, mask, kv_rows:\n{g}");
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!((bucket(0), bucket(1), bucket(5), bucket(8), bucket(9)), (1, 1, 8, 8, 16));
        assert_eq!((bucket_below(1), bucket_below(5), bucket_below(8), bucket_below(9)), (1, 4, 8, 8));
    }
}
