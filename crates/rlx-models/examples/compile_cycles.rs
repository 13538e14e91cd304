//! The long form of `tests/compile_cycles.rs`: compiles a MiniLM-shaped BERT graph, sets its
//! weights and runs it, `N` times over (default 10,000), printing resident memory every 500
//! cycles; fails if it grew by more than 32 MiB from cycle 100 to the end.
//!
//!     cargo run --release -p rlx-models --example compile_cycles -- [N]

use rlx_models::bert::{BertConfig, Pooling, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx_runtime::{Session, Tensor};
use rlx_train::init::Rng;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// `VmRSS` from `/proc/self/status`, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status is readable");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS is listed");
    line.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()).expect("VmRSS is in kB") * 1024
}

fn main() {
    let cycles: usize = std::env::args().nth(1).map_or(10_000, |a| a.parse().expect("N is a count"));
    let json = r#"{"vocab_size": 1000, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
        "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert"}"#;
    let config = BertConfig::from_json(json, Path::new("config.json")).expect("the config parses");
    let mut rng = Rng::new(7);
    let weights: Vec<(String, Tensor)> = config
        .build(Pooling { normalize: true })
        .expect("the graph builds")
        .params
        .iter()
        .map(|p| {
            let v: Vec<f32> = (0..p.shape.iter().product()).map(|_| (0.05 * rng.normal()) as f32).collect();
            (p.name.clone(), Tensor::from_vec(v, &p.shape).expect("sizes match"))
        })
        .collect();
    let (batch, seq) = (2, 32);
    let ids = Tensor::from_vec((0..batch * seq).map(|i| (i * 37 % 1000) as i64).collect(), &[batch, seq]).expect("sizes match");
    let ones = Tensor::from_vec(vec![1i64; batch * seq], &[batch, seq]).expect("sizes match");
    let zeros = Tensor::from_vec(vec![0i64; batch * seq], &[batch, seq]).expect("sizes match");
    let session = Session::new(Arc::new(rlx_cpu::CpuBackend::new()));
    let start = Instant::now();
    let mut base = None;
    for i in 1..=cycles {
        let bert = config.build(Pooling { normalize: true }).expect("the graph builds");
        let mut c = session.compile(&bert.graph).expect("the graph compiles");
        for (name, value) in &weights {
            c.set_param(name, value.clone()).expect("the weight fits");
        }
        let out = c.run(&[(INPUT_IDS, &ids), (ATTENTION_MASK, &ones), (TOKEN_TYPE_IDS, &zeros)]).expect("the graph runs");
        assert!(out[0].as_slice::<f32>().expect("f32 output").iter().all(|v| v.is_finite()));
        if i == 100.min(cycles) {
            base = Some(rss());
        }
        if i % 500 == 0 || i == cycles {
            println!("cycle {i}: VmRSS {:.1} MiB, {:.1} ms/cycle", rss() as f64 / 1048576.0, start.elapsed().as_secs_f64() * 1e3 / i as f64);
        }
    }
    let (base, end) = (base.expect("at least one cycle"), rss());
    let grew = end as f64 / 1048576.0 - base as f64 / 1048576.0;
    println!("VmRSS from cycle {} to {cycles}: {grew:+.1} MiB", 100.min(cycles));
    assert!(grew < 32.0, "resident memory grew by {grew:.1} MiB over {cycles} cycles");
}
