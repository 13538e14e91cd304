//! Copies of one compiled MiniLM-shaped BERT graph (6 layers, hidden 384, 12 heads, a 1,000-token
//! vocabulary; 11.2 M weights, 43 MiB) that share one set of weights (`CompiledGraph::share`)
//! run concurrently on several threads: every output is bit-identical to a single-threaded run
//! of the same inputs, and the copies add under one set of weights to resident memory (four
//! copies that each held their own would add four). The only test in its binary, so no other
//! test's memory moves the figure.

use rlx_models::bert::{BertConfig, Pooling, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx_runtime::{CompiledGraph, Session, Tensor};
use rlx_train::init::Rng;
use std::path::Path;
use std::sync::Arc;

const THREADS: usize = 4;
const RUNS_PER_THREAD: usize = 3;

fn minilm_shaped() -> BertConfig {
    let json = r#"{"vocab_size": 1000, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
        "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert"}"#;
    BertConfig::from_json(json, Path::new("config.json")).unwrap()
}

/// `[batch, seq]` ids, a mask hiding a different tail in each row, and token types.
fn inputs(seed: u64, batch: usize, seq: usize) -> [Tensor; 3] {
    let mut rng = Rng::new(seed);
    let ids: Vec<i64> = (0..batch * seq).map(|_| (rng.next_u64() % 1000) as i64).collect();
    let mask: Vec<i64> = (0..batch * seq).map(|i| i64::from(i % seq < seq - (i / seq) % seq.min(5))).collect();
    let types: Vec<i64> = (0..batch * seq).map(|i| i64::from(i % seq >= seq / 2)).collect();
    [ids, mask, types].map(|v| Tensor::from_vec(v, &[batch, seq]).unwrap())
}

fn run(c: &mut CompiledGraph, x: &[Tensor; 3]) -> Vec<u32> {
    let out = c.run(&[(INPUT_IDS, &x[0]), (ATTENTION_MASK, &x[1]), (TOKEN_TYPE_IDS, &x[2])]).unwrap();
    out[0].as_slice::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
}

#[test]
fn copies_sharing_weights_run_from_several_threads_bit_identically_in_one_set_of_weights() {
    let bert = minilm_shaped().build(Pooling { normalize: true }).unwrap();
    let session = Session::new(Arc::new(rlx_cpu::CpuBackend::new()));
    let mut single = session.compile(&bert.graph).unwrap();
    let mut rng = Rng::new(21);
    let mut weight_bytes = 0;
    for p in &bert.params {
        let n: usize = p.shape.iter().product();
        let centre = if p.name.ends_with("LayerNorm.weight") { 1.0 } else { 0.0 };
        let v: Vec<f32> = (0..n).map(|_| (centre + 0.05 * rng.normal()) as f32).collect();
        weight_bytes += 4 * n;
        single.set_param(&p.name, Tensor::from_vec(v, &p.shape).unwrap()).unwrap();
    }
    let weight_mib = weight_bytes as f64 / (1 << 20) as f64;
    // Each thread's inputs differ in batch and length, so the copies also specialise plans for
    // shapes the original never ran, at once.
    let cases: Vec<[Tensor; 3]> = (0..THREADS).map(|t| inputs(100 + t as u64, 1 + t % 2, 16 + 8 * t)).collect();
    let want: Vec<Vec<u32>> = cases.iter().map(|x| run(&mut single, x)).collect();

    let before = rss_mib();
    let copies: Vec<CompiledGraph> = (0..THREADS).map(|_| single.share().unwrap()).collect();
    let got: Vec<Vec<Vec<u32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = copies
            .into_iter()
            .zip(&cases)
            .map(|(mut c, x)| s.spawn(move || (0..RUNS_PER_THREAD).map(|_| run(&mut c, x)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let grew = rss_mib() - before;
    for (t, (runs, want)) in got.iter().zip(&want).enumerate() {
        for (r, got) in runs.iter().enumerate() {
            assert_eq!(got, want, "thread {t}, run {r}: differs from the single-threaded run");
        }
    }
    eprintln!("VmRSS {before:.1} MiB with one copy; {THREADS} sharing copies run: {grew:+.1} MiB (weights {weight_mib:.1} MiB)");
    assert!(grew < weight_mib, "{THREADS} copies sharing weights added {grew:.1} MiB, not under one set of weights ({weight_mib:.1} MiB)");
}
