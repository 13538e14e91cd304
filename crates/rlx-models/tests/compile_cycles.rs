//! Compile-and-run cycles of a MiniLM-shaped BERT graph (6 layers, hidden 384, a 1,000-token
//! vocabulary) keep resident memory flat: after a warm-up, 30 more cycles (each compiling the
//! graph, setting its 11M weights and running a [2, 32] batch) move `VmRSS` by under 8 MiB,
//! where one leaked copy of the weights would add 43. The only test in its binary, so no other
//! test's memory moves the figure. The 10,000-cycle form is `examples/compile_cycles.rs`.

use rlx_models::bert::{BertConfig, Pooling, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx_runtime::{Session, Tensor};
use rlx_train::init::Rng;
use std::path::Path;
use std::sync::Arc;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
}

#[test]
fn compile_and_run_cycles_keep_resident_memory_flat() {
    let json = r#"{"vocab_size": 1000, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
        "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert"}"#;
    let config = BertConfig::from_json(json, Path::new("config.json")).unwrap();
    let mut rng = Rng::new(5);
    let weights: Vec<(String, Tensor)> = config
        .build(Pooling { normalize: true })
        .unwrap()
        .params
        .iter()
        .map(|p| (p.name.clone(), Tensor::from_vec((0..p.shape.iter().product()).map(|_| (0.05 * rng.normal()) as f32).collect::<Vec<f32>>(), &p.shape).unwrap()))
        .collect();
    let (batch, seq) = (2, 32);
    let ids = Tensor::from_vec((0..batch * seq).map(|i| (i * 37 % 1000) as i64).collect::<Vec<i64>>(), &[batch, seq]).unwrap();
    let ones = Tensor::from_vec(vec![1i64; batch * seq], &[batch, seq]).unwrap();
    let zeros = Tensor::from_vec(vec![0i64; batch * seq], &[batch, seq]).unwrap();
    let session = Session::new(Arc::new(rlx_cpu::CpuBackend::new()));
    let mut first = None;
    let mut cycle = || {
        let bert = config.build(Pooling { normalize: true }).unwrap();
        let mut c = session.compile(&bert.graph).unwrap();
        for (name, value) in &weights {
            c.set_param(name, value.clone()).unwrap();
        }
        let out = c.run(&[(INPUT_IDS, &ids), (ATTENTION_MASK, &ones), (TOKEN_TYPE_IDS, &zeros)]).unwrap();
        let out = out[0].to_vec::<f32>().unwrap();
        assert_eq!(*first.get_or_insert_with(|| out.clone()), out, "a later cycle's output differs");
    };
    for _ in 0..5 {
        cycle();
    }
    let before = rss_mib();
    for _ in 0..30 {
        cycle();
    }
    let grew = rss_mib() - before;
    eprintln!("VmRSS over 30 cycles after 5: {before:.1} MiB, {grew:+.1} MiB");
    assert!(grew < 8.0, "resident memory grew by {grew:.1} MiB over 30 compile-and-run cycles");
}
