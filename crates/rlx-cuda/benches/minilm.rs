//! The MiniLM-L6 encoder on the GPU (`cargo bench -p rlx-cuda --bench minilm -- [f32|bf16] [--profile]`):
//! all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads, FFN 1536) with seeded random
//! weights, inputs uploaded once, and each forward a submit and a wait; the median of 20 after
//! warm-up, at 1 × 128, 32 × 128 and 256 × 128 tokens. tools/gpu/minilm.py times PyTorch's
//! `BertModel` of the same shape the same way (CUDA events around each forward). `--only B`
//! runs the `B × 128` case alone (for a profiler's capture).

/// The GPU tests' session (cuda:0 with the CPU as host), or a skip saying why.
#[path = "../tests/common/mod.rs"]
mod common;

use rlx_ir::DType;
use rlx_opt::partition::Place;
use rlx_models::bert::{BertConfig, Pooling, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx_runtime::Tensor;
use std::path::Path;
use std::time::Instant;

const CONFIG: &str = r#"{"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
    "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2,
    "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#;

fn main() {
    let compute = match std::env::args().skip(1).find(|a| !a.starts_with("--")).as_deref() {
        Some("f32") => DType::F32,
        _ => DType::BF16,
    };
    let Some(session) = common::gpu() else { return };
    let config = BertConfig::from_json(CONFIG, Path::new("minilm-l6 shape")).expect("the MiniLM shape is a valid config");
    let bert = config.build_in(Pooling { normalize: true }, compute).expect("the encoder builds");
    let mut c = session.compile(&bert.graph).expect("the encoder compiles for CUDA");
    for (i, p) in bert.params.iter().enumerate() {
        let n: usize = p.shape.iter().product();
        let centre = if p.name.ends_with("LayerNorm.weight") { 1.0 } else { 0.0 };
        let v: Vec<f32> = common::uniform(n, i as u64 + 1, -0.05, 0.05).into_iter().map(|x| x + centre).collect();
        c.set_param(&p.name, Tensor::from_vec(v, &p.shape).expect("a weight")).expect("the weight fits");
    }
    let host = c.partition().map_or(0, |p| p.segments.iter().filter(|s| s.place == Place::Host).count());
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).and_then(|b| b.parse::<usize>().ok());
    for (batch, seq) in [(1usize, 128usize), (32, 128), (256, 128)].into_iter().filter(|(b, _)| only.is_none_or(|o| o == *b)) {
        let n = batch * seq;
        let ids: Vec<i64> = common::uniform(n, 99, 0.0, 30522.0).into_iter().map(|x| x as i64).collect();
        let up = |v: Vec<i64>| c.upload(&Tensor::from_vec(v, &[batch, seq]).expect("ids")).expect("ids upload");
        let (ids, mask, types) = (up(ids), up(vec![1; n]), up(vec![0; n]));
        let inputs = [(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)];
        for _ in 0..3 {
            c.submit(&inputs).expect("the encoder runs");
        }
        c.sync().expect("the device finishes");
        let mut ms: Vec<f64> = (0..20)
            .map(|_| {
                let t = Instant::now();
                c.submit(&inputs).expect("the encoder runs");
                c.sync().expect("the device finishes");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!("minilm-l6 {batch}x{seq} {compute:?}: rlx {:.3} ms (median of 20; {host} host segments)", ms[ms.len() / 2]);
        if batch == 256 && std::env::args().any(|a| a == "--profile") {
            c.set_profiling(true);
            c.submit(&inputs).expect("the encoder runs");
            c.sync().expect("the device finishes");
            print!("{}", c.profile());
            c.set_profiling(false);
        }
    }
}
