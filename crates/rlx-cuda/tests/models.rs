//! Whole models on the GPU against the CPU: the tiny Llama / Qwen2 / Qwen3 / Gemma3 fixtures
//! decoding token by token (KV caches in device memory, each step a replayed CUDA graph) and a
//! small GPT's training steps (weights and AdamW state updated on the device). Skips without
//! a CUDA device.

mod common;

use common::{cpu, gpu};
use rlx_models::llama::{argmax, Generator, HfModel, Llama};
use rlx_runtime::Tensor;
use std::path::PathBuf;

fn hf_folder(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/hf-tiny").join(name)
}

/// The largest difference between `got` and `want` over `want`'s largest magnitude.
fn normwise(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

#[test]
fn tiny_llama_qwen_and_gemma_decode_on_the_gpu_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    for name in ["llama", "qwen2", "qwen3", "gemma3_text"] {
        let hf = HfModel::open(&hf_folder(name), |_, _| {}).unwrap();
        let build = || Llama::build(&hf.config, &hf.weights, 32).unwrap();
        let (mut want, mut got) = (Generator::new(build(), &cpu()).unwrap(), Generator::new(build(), &gpu).unwrap());
        let prompt = [1u32, 5, 9, 2];
        let (mut w, mut g) = (want.feed(&prompt).unwrap(), got.feed(&prompt).unwrap());
        assert!(normwise(&g, &w) < 1e-4, "{name}: prompt logits differ by {}", normwise(&g, &w));
        for step in 0..8 {
            let next = argmax(&w);
            w = want.feed(&[next]).unwrap();
            g = got.feed(&[next]).unwrap();
            assert!(normwise(&g, &w) < 1e-4, "{name}: step {step} logits differ by {}", normwise(&g, &w));
        }
    }
}

#[test]
fn a_gpt_trains_on_the_gpu_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    use rlx_models::gpt::{GptConfig, TARGETS, TOKENS};
    use rlx_train::init::Rng;
    use rlx_train::{Optimizer, Schedule, TrainConfig, Trainer};
    let gpt = GptConfig { vocab: 29, context: 16, d_model: 32, heads: 4, layers: 2, d_ff: 64 }.build().unwrap();
    let config = || TrainConfig::new(Optimizer::adamw(0.01), Schedule::Constant(3e-3)).with_clip_norm(1.0);
    let mut want = Trainer::new(&cpu(), &gpt.graph, gpt.loss, config()).unwrap();
    let mut got = Trainer::new(&gpu, &gpt.graph, gpt.loss, config()).unwrap();
    let mut rng = Rng::new(3);
    for p in &gpt.params {
        let t = p.init.tensor(&p.shape, &mut rng);
        want.set_param(&p.name, t.clone()).unwrap();
        got.set_param(&p.name, t).unwrap();
    }
    for step in 0..5i64 {
        let tokens: Vec<i64> = (0..64).map(|i| (i * 7 + step * 3) % 29).collect();
        let targets: Vec<i64> = tokens.iter().map(|t| (t * 2 + 1) % 29).collect();
        let (tokens, targets) = (Tensor::from_vec(tokens, &[4, 16]).unwrap(), Tensor::from_vec(targets, &[4, 16]).unwrap());
        let batch = [(TOKENS, &tokens), (TARGETS, &targets)];
        let (a, b) = (got.step(&batch).unwrap(), want.step(&batch).unwrap());
        assert!((a - b).abs() <= 1e-4 * b.abs(), "step {step}: loss {a} on the GPU, {b} on the CPU");
    }
    for p in &gpt.params {
        let (a, b) = (got.param(&p.name).unwrap().to_vec::<f32>().unwrap(), want.param(&p.name).unwrap().to_vec::<f32>().unwrap());
        assert!(normwise(&a, &b) < 1e-4, "{}: differs by {}", p.name, normwise(&a, &b));
    }
}
