//! Continuous batching on tiny random Llamas: sequences decoded together, joining and leaving
//! between steps, give the tokens each gives alone, which are the tokens the single-sequence
//! decoder (a separate graph with its own caches and masks) gives.

use rlx_cpu::CpuBackend;
use rlx_ir::ops::quant::GgufType;
use rlx_models::llama::batch::{BatchConfig, Batcher, Event, Finish, PooledDecoder, PooledLlama, SeqId, SeqRequest};
use rlx_models::llama::{Generator, Llama, LlamaConfig, Rng, Sampling, SlidingWindow, Weights};
use rlx_runtime::Session;
use std::collections::HashMap;
use std::sync::Arc;

fn session() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

fn tiny(vocab: usize) -> LlamaConfig {
    LlamaConfig { vocab, d_model: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, d_ff: 128, rope_dim: 16, context: 256, ..LlamaConfig::llama_3_2_1b() }
}

/// Prompts of random lengths and tokens (fresh for each seed).
fn prompts(seed: u64, n: usize, vocab: usize) -> Vec<Vec<u32>> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (0..2 + (rng.uniform() * 40.0) as usize).map(|_| (rng.uniform() * vocab as f64) as u32 % vocab as u32).collect()).collect()
}

fn batcher(config: &LlamaConfig, w: &Weights, slots: usize, cfg: BatchConfig) -> Batcher {
    let model = PooledLlama::build(config, w, slots, config.context).unwrap();
    Batcher::new(PooledDecoder::new(model, &session()).unwrap(), cfg)
}

/// Steps until idle; each sequence's tokens and finish. `submit_at[i]` is the step at which
/// request `i` arrives.
fn serve(b: &mut Batcher, reqs: &[SeqRequest], submit_at: &[usize]) -> Vec<(Vec<u32>, Finish)> {
    let mut ids: Vec<Option<SeqId>> = vec![None; reqs.len()];
    let mut out: HashMap<SeqId, (Vec<u32>, Option<Finish>)> = HashMap::new();
    let mut step = 0;
    let mut batched = 0;
    while ids.iter().any(Option::is_none) || !b.is_idle() {
        for (i, r) in reqs.iter().enumerate() {
            if ids[i].is_none() && submit_at[i] <= step {
                ids[i] = Some(b.submit(r.clone()).unwrap());
            }
        }
        let (events, stats) = b.step().unwrap();
        batched = batched.max(stats.decoded);
        for Event { id, token, finish } in events {
            let e = out.entry(id).or_default();
            e.0.extend(token);
            assert!(e.1.is_none(), "an event after the end");
            e.1 = finish;
        }
        step += 1;
        assert!(step < 10_000, "the batcher does not finish");
    }
    if reqs.len() > 1 {
        assert!(batched > 1, "no decode step ran two sequences");
    }
    ids.iter().map(|id| out.remove(&id.unwrap()).map(|(t, f)| (t, f.expect("finished"))).unwrap()).collect()
}

fn greedy(prompt: &[u32], max_tokens: usize) -> SeqRequest {
    SeqRequest { prompt: prompt.to_vec(), max_tokens, sampling: Sampling::GREEDY, stop: Vec::new() }
}

/// The single-sequence decoder's greedy tokens.
fn reference(config: &LlamaConfig, w: &Weights, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut gen = Generator::new(Llama::build(config, w, prompt.len() + n).unwrap(), &session()).unwrap();
    gen.generate(prompt, n, Sampling::GREEDY, &[], |_| {}).unwrap().0
}

fn batched_equals_alone_equals_reference(config: &LlamaConfig, blocks: Option<GgufType>, seed: u64) {
    let w = Weights::random(config, seed, blocks);
    let ps = prompts(seed + 1, 6, config.vocab);
    let lens = [9, 17, 3, 12, 20, 6];
    let reqs: Vec<SeqRequest> = ps.iter().zip(lens).map(|(p, n)| greedy(p, n)).collect();
    let cfg = BatchConfig { block: 8, max_batch: 4, prefill_chunk: 16 };
    let together = serve(&mut batcher(config, &w, 512, cfg.clone()), &reqs, &[0, 0, 1, 3, 3, 9]);
    let mut one = batcher(config, &w, 512, cfg);
    for (i, r) in reqs.iter().enumerate() {
        let alone = serve(&mut one, std::slice::from_ref(r), &[0]);
        assert_eq!(together[i], alone[0], "request {i}: batched vs alone");
        assert_eq!(alone[0].0, reference(config, &w, &r.prompt, r.max_tokens), "request {i}: pooled vs single-sequence decoder");
        assert_eq!(alone[0].1, Finish::Length);
    }
    let distinct: std::collections::HashSet<&Vec<u32>> = together.iter().map(|t| &t.0).collect();
    assert!(distinct.len() > 1, "every request gave the same tokens");
}

#[test]
fn f32_weights_batched_alone_and_single_sequence_agree() {
    batched_equals_alone_equals_reference(&tiny(97), None, 11);
}

#[test]
fn q8_0_blocks_batched_alone_and_single_sequence_agree() {
    batched_equals_alone_equals_reference(&tiny(96), Some(GgufType::Q8_0), 23);
}

#[test]
fn q4_1_blocks_batched_alone_and_single_sequence_agree() {
    batched_equals_alone_equals_reference(&tiny(128), Some(GgufType::Q4_1), 5);
}

#[test]
fn q5_0_blocks_batched_alone_and_single_sequence_agree() {
    batched_equals_alone_equals_reference(&tiny(96), Some(GgufType::Q5_0), 37);
}

/// A tiny model whose matrices hold whole 256-blocks, the K-quants' super-blocks.
fn tiny_k(vocab: usize) -> LlamaConfig {
    LlamaConfig { d_model: 256, head_dim: 64, d_ff: 512, rope_dim: 64, ..tiny(vocab) }
}

#[test]
fn k_quant_blocks_batched_alone_and_single_sequence_agree() {
    for (t, seed) in [(GgufType::Q4_K, 43), (GgufType::Q5_K, 47), (GgufType::Q6_K, 53)] {
        batched_equals_alone_equals_reference(&tiny_k(96), Some(t), seed);
    }
}

#[test]
fn sliding_window_layers_batched_alone_and_single_sequence_agree() {
    let mut c = tiny(97);
    c.variant.sliding = Some(SlidingWindow { window: 5, layers: vec![true, false], rope_base: Some(10_000.0) });
    batched_equals_alone_equals_reference(&c, None, 31);
}

#[test]
fn a_small_pool_queues_requests_and_serves_them_all_alike() {
    let c = tiny(97);
    let w = Weights::random(&c, 41, None);
    let ps = prompts(42, 8, c.vocab);
    let reqs: Vec<SeqRequest> = ps.iter().map(|p| greedy(p, 10)).collect();
    let cfg = BatchConfig { block: 8, max_batch: 8, prefill_chunk: 8 };
    // 128 slots: two or three sequences at a time of ≤ 51 slots each.
    let mut small = batcher(&c, &w, 128, cfg.clone());
    let got = serve(&mut small, &reqs, &[0; 8]);
    assert_eq!(small.pool().reserved_blocks(), 0, "every reservation given back");
    assert_eq!(small.pool().free_slots(), 128, "every slot given back");
    let want = serve(&mut batcher(&c, &w, 1024, cfg), &reqs, &[0; 8]);
    assert_eq!(got, want);
}

#[test]
fn stop_tokens_end_a_sequence_without_being_emitted() {
    let c = tiny(97);
    let w = Weights::random(&c, 7, None);
    let p = &prompts(8, 1, c.vocab)[0];
    let free = reference(&c, &w, p, 12);
    let stop = free[4];
    let first = free.iter().position(|&t| t == stop).unwrap();
    let mut b = batcher(&c, &w, 256, BatchConfig::default());
    let got = serve(&mut b, &[SeqRequest { stop: vec![stop], ..greedy(p, 12) }], &[0]);
    assert_eq!(got[0], (free[..first].to_vec(), Finish::Stop));
}

#[test]
fn cancelled_and_refused_requests_give_back_the_pool() {
    let c = tiny(97);
    let w = Weights::random(&c, 3, None);
    let mut b = batcher(&c, &w, 64, BatchConfig { block: 8, ..BatchConfig::default() });
    let p = prompts(4, 1, c.vocab).remove(0);
    assert!(b.submit(greedy(&[], 4)).is_err(), "an empty prompt");
    assert!(b.submit(greedy(&p, 0)).is_err(), "no tokens to generate");
    assert!(b.submit(greedy(&[500], 4)).is_err(), "a token outside the vocabulary");
    assert!(b.submit(greedy(&vec![1; 300], 4)).is_err(), "longer than the context");
    assert!(b.submit(greedy(&vec![1; 70], 4)).is_err(), "more than the pool");
    let a = b.submit(greedy(&p, 20)).unwrap();
    let z = b.submit(greedy(&p, 20)).unwrap();
    for _ in 0..3 {
        b.step().unwrap();
    }
    assert!(b.cancel(a) && b.cancel(z));
    assert!(!b.cancel(a), "cancelled twice");
    assert!(b.is_idle());
    assert_eq!((b.pool().free_slots(), b.pool().reserved_blocks()), (64, 0));
}

#[test]
fn seeded_sampling_is_the_same_batched_and_alone() {
    let c = tiny(97);
    let w = Weights::random(&c, 13, None);
    let ps = prompts(14, 4, c.vocab);
    let reqs: Vec<SeqRequest> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| SeqRequest { sampling: Sampling { temperature: 1.5, top_k: 0, top_p: 0.95, seed: 100 + i as u64 }, ..greedy(p, 12) })
        .collect();
    let together = serve(&mut batcher(&c, &w, 512, BatchConfig::default()), &reqs, &[0, 1, 2, 2]);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(together[i], serve(&mut batcher(&c, &w, 512, BatchConfig::default()), std::slice::from_ref(r), &[0])[0], "request {i}");
    }
}

#[test]
fn sixteen_sequences_with_caches_past_one_key_tile_agree_batched_and_alone() {
    // Decode steps of 9 to 16 rows (the attention kernel's block path) over caches of up to
    // 190 keys, more than one 128-key tile.
    let c = tiny(97);
    let w = Weights::random(&c, 61, Some(GgufType::Q8_0));
    let mut rng = Rng::new(62);
    let reqs: Vec<SeqRequest> = (0..16).map(|_| {
        let len = 100 + (rng.uniform() * 60.0) as usize;
        greedy(&(0..len).map(|_| (rng.uniform() * 97.0) as u32 % 97).collect::<Vec<_>>(), 30)
    }).collect();
    let cfg = BatchConfig { block: 16, max_batch: 16, prefill_chunk: 64 };
    let together = serve(&mut batcher(&c, &w, 4096, cfg.clone()), &reqs, &[0; 16]);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(together[i], serve(&mut batcher(&c, &w, 4096, cfg.clone()), std::slice::from_ref(r), &[0])[0], "request {i}");
    }
}

#[test]
fn short_prompts_share_a_step_with_the_decoding_sequences() {
    let c = tiny(97);
    let w = Weights::random(&c, 71, None);
    let ps = prompts(72, 4, c.vocab);
    let reqs: Vec<SeqRequest> = ps.iter().map(|p| greedy(p, 8)).collect();
    let mut b = batcher(&c, &w, 512, BatchConfig { block: 8, max_batch: 8, prefill_chunk: 256 });
    b.submit(reqs[0].clone()).unwrap();
    let (events, first) = b.step().unwrap();
    assert_eq!((first.prompt_tokens, first.decoded, events.len()), (ps[0].len(), 0, 1), "the first prompt alone, then its first token");
    for r in &reqs[1..] {
        b.submit(r.clone()).unwrap();
    }
    let (_, mixed) = b.step().unwrap();
    let prompts: usize = ps[1..].iter().map(Vec::len).sum();
    assert_eq!((mixed.decoded, mixed.prompt_tokens, mixed.sequences), (1, prompts, 4), "one decode token beside three whole prompts");
    assert_eq!(mixed.tokens + mixed.padding, (1 + prompts).next_power_of_two());
    // And each reply is the one it gets alone.
    let mut got: HashMap<SeqId, Vec<u32>> = HashMap::new();
    while !b.is_idle() {
        for e in b.step().unwrap().0 {
            got.entry(e.id).or_default().extend(e.token);
        }
    }
    for (i, r) in reqs.iter().enumerate().skip(1) {
        let alone = serve(&mut batcher(&c, &w, 512, BatchConfig::default()), std::slice::from_ref(r), &[0]);
        assert_eq!(got[&(i as SeqId)][..], alone[0].0[1..], "request {i}");
    }
}

#[test]
fn a_batch_as_large_as_the_prompt_chunk_still_feeds_prompts() {
    // 4 sequences decoding with steps of at most 4 prompt tokens: a fifth request's prompt
    // still moves on every step (beside them, in a step of 8), and its reply is its reply alone.
    let c = tiny(97);
    let w = Weights::random(&c, 81, None);
    let ps = prompts(82, 5, c.vocab);
    // Long enough replies that the first four all decode before any ends.
    let reqs: Vec<SeqRequest> = ps.iter().enumerate().map(|(i, p)| greedy(p, if i < 4 { 120 } else { 20 })).collect();
    let cfg = BatchConfig { block: 8, max_batch: 4, prefill_chunk: 4 };
    let mut b = batcher(&c, &w, 2048, cfg.clone());
    for r in &reqs[..4] {
        b.submit(r.clone()).unwrap();
    }
    let mut steps = 0;
    while b.step().unwrap().1.decoded < 4 {
        steps += 1;
        assert!(steps < 200, "the four never decode together");
    }
    let late = b.submit(reqs[4].clone()).unwrap();
    let mut got = Vec::new();
    let mut fed = 0;
    while !b.is_idle() {
        let (events, stats) = b.step().unwrap();
        if fed < ps[4].len() {
            assert!(stats.prompt_tokens > 0, "a step held the waiting prompt back: {stats:?}");
            fed += stats.prompt_tokens;
        }
        got.extend(events.into_iter().filter(|e| e.id == late).filter_map(|e| e.token));
    }
    let alone = serve(&mut batcher(&c, &w, 512, cfg), &reqs[4..], &[0]);
    assert_eq!(got, alone[0].0);
}
