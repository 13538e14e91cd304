//! The BERT encoder: a tiny random-weight model against a float64 forward pass written here
//! from the Hugging Face `BertModel` + sentence-transformers pooling definitions (always
//! runs), and all-MiniLM-L6-v2 against sentence-transformers' embeddings in
//! `fixtures/models/minilm/` (from `tools/models/minilm_reference.py`), skipped with a message
//! when the model files are absent (a failure with `RLX_REQUIRE_MODELS=1`, as `.ci/run` sets).

mod common;

use rlx_io::SafetensorsFile;
use rlx_models::bert::{BertConfig, BertError, Pooling, SentenceEncoder, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx_ir::DType;
use rlx_runtime::{Session, Tensor};
use rlx_train::init::Rng;
use safetensors::tensor::{Dtype, TensorView};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn session() -> Session {
    Session::new(Arc::new(rlx_cpu::CpuBackend::new()))
}

fn tiny_config() -> BertConfig {
    let json = r#"{"vocab_size": 17, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 12, "max_position_embeddings": 9, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "model_type": "bert"}"#;
    BertConfig::from_json(json, Path::new("config.json")).unwrap()
}

/// Weights as `model.safetensors` stores them (dense matrices `[out, in]`), drawn at random.
fn random_weights(c: &BertConfig, rng: &mut Rng) -> BTreeMap<String, (Vec<usize>, Vec<f64>)> {
    let bert = c.build(Pooling { normalize: true }).unwrap();
    bert.params
        .iter()
        .map(|p| {
            let shape: Vec<usize> = if p.transposed { p.shape.iter().rev().copied().collect() } else { p.shape.clone() };
            let n = shape.iter().product();
            let centre = if p.name.ends_with("LayerNorm.weight") { 1.0 } else { 0.0 };
            let values = (0..n).map(|_| centre + 0.5 * rng.normal()).map(|v| f64::from(v as f32)).collect();
            (p.name.clone(), (shape, values))
        })
        .collect()
}

fn write_safetensors(path: &Path, weights: &BTreeMap<String, (Vec<usize>, Vec<f64>)>) {
    let bytes: BTreeMap<&String, Vec<u8>> = weights.iter().map(|(k, (_, v))| (k, v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect())).collect();
    let views = weights.iter().map(|(k, (shape, _))| (k.clone(), TensorView::new(Dtype::F32, shape.clone(), &bytes[k]).unwrap()));
    safetensors::tensor::serialize_to_file(views, &None, path).unwrap();
}

/// `erf` in f64: the Maclaurin series for |x| < 2.5, the continued fraction of erfc beyond.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 2.5 {
        let (mut term, mut sum) = (a, a);
        for n in 1..80 {
            term *= -a * a / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let mut k = a;
        for n in (1..100).rev() {
            k = a + (n as f64 / 2.0) / k;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * k)
    };
    r.copysign(x)
}

/// Float64 forward of one text (`ids`, `types` its real tokens, no padding): the pooled and
/// normalised embedding.
fn reference(c: &BertConfig, w: &BTreeMap<String, (Vec<usize>, Vec<f64>)>, ids: &[i64], types: &[i64]) -> Vec<f64> {
    let h = c.hidden_size;
    let get = |name: &str| &w[name].1;
    let layer_norm = |x: &mut [f64], name: &str| {
        let (g, b) = (get(&format!("{name}.weight")), get(&format!("{name}.bias")));
        let mean = x.iter().sum::<f64>() / h as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
        for (i, v) in x.iter_mut().enumerate() {
            *v = (*v - mean) / (var + c.layer_norm_eps).sqrt() * g[i] + b[i];
        }
    };
    // y = W x + b with W stored [out, in].
    let linear = |x: &[f64], name: &str| -> Vec<f64> {
        let (wt, b) = (&w[&format!("{name}.weight")], get(&format!("{name}.bias")));
        let (out, inn) = (wt.0[0], wt.0[1]);
        (0..out).map(|o| b[o] + (0..inn).map(|i| wt.1[o * inn + i] * x[i]).sum::<f64>()).collect()
    };
    let s = ids.len();
    let mut x: Vec<Vec<f64>> = (0..s)
        .map(|t| {
            let mut e: Vec<f64> = (0..h)
                .map(|j| {
                    get("embeddings.word_embeddings.weight")[ids[t] as usize * h + j]
                        + get("embeddings.position_embeddings.weight")[t * h + j]
                        + get("embeddings.token_type_embeddings.weight")[types[t] as usize * h + j]
                })
                .collect();
            layer_norm(&mut e, "embeddings.LayerNorm");
            e
        })
        .collect();
    let heads = c.num_attention_heads;
    let d = h / heads;
    for l in 0..c.num_hidden_layers {
        let at = format!("encoder.layer.{l}.attention");
        let q: Vec<Vec<f64>> = x.iter().map(|r| linear(r, &format!("{at}.self.query"))).collect();
        let k: Vec<Vec<f64>> = x.iter().map(|r| linear(r, &format!("{at}.self.key"))).collect();
        let v: Vec<Vec<f64>> = x.iter().map(|r| linear(r, &format!("{at}.self.value"))).collect();
        let mut ctx = vec![vec![0.0; h]; s];
        for hd in 0..heads {
            let cols = hd * d..(hd + 1) * d;
            for qi in 0..s {
                let scores: Vec<f64> = (0..s).map(|ki| cols.clone().map(|j| q[qi][j] * k[ki][j]).sum::<f64>() / (d as f64).sqrt()).collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|v| (v - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for j in cols.clone() {
                    ctx[qi][j] = (0..s).map(|ki| e[ki] / z * v[ki][j]).sum();
                }
            }
        }
        for t in 0..s {
            let a = linear(&ctx[t], &format!("{at}.output.dense"));
            let mut r: Vec<f64> = a.iter().zip(&x[t]).map(|(a, b)| a + b).collect();
            layer_norm(&mut r, &format!("{at}.output.LayerNorm"));
            let up: Vec<f64> = linear(&r, &format!("encoder.layer.{l}.intermediate.dense")).into_iter().map(|u| 0.5 * u * (1.0 + erf(u / 2f64.sqrt()))).collect();
            let down = linear(&up, &format!("encoder.layer.{l}.output.dense"));
            let mut o: Vec<f64> = down.iter().zip(&r).map(|(a, b)| a + b).collect();
            layer_norm(&mut o, &format!("encoder.layer.{l}.output.LayerNorm"));
            x[t] = o;
        }
    }
    let mean: Vec<f64> = (0..h).map(|j| x.iter().map(|r| r[j]).sum::<f64>() / s as f64).collect();
    let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
    mean.iter().map(|v| v / norm).collect()
}

#[test]
fn tiny_random_bert_matches_a_float64_forward_at_two_shapes() {
    tiny_random_bert_against_float64(DType::F32, 2e-5);
}

/// The graph computing in bf16 (weights cast once, f32 norm statistics and pooling) stays
/// within bf16's rounding of the float64 forward.
#[test]
fn tiny_random_bert_in_bf16_tracks_the_float64_forward() {
    tiny_random_bert_against_float64(DType::BF16, 3e-2);
}

fn tiny_random_bert_against_float64(compute: DType, tol: f64) {
    let c = tiny_config();
    let mut rng = Rng::new(7);
    let weights = random_weights(&c, &mut rng);
    let dir = std::env::temp_dir().join(format!("rlx-models-bert-{}-{compute:?}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    write_safetensors(&path, &weights);

    let bert = c.build_in(Pooling { normalize: true }, compute).unwrap();
    let mut compiled = session().compile(&bert.graph).unwrap();
    for (name, t) in bert.weights(&SafetensorsFile::open(&path).unwrap()).unwrap() {
        compiled.set_param(&name, t).unwrap();
    }
    for (lens, seq) in [(vec![7, 4, 1], 7), (vec![3, 3], 3)] {
        let batch = lens.len();
        let mut ids = vec![0i64; batch * seq];
        let mut types = vec![0i64; batch * seq];
        let mut mask = vec![0i64; batch * seq];
        for (b, &len) in lens.iter().enumerate() {
            for t in 0..seq {
                // Padding positions get arbitrary ids too: the mask alone must hide them.
                ids[b * seq + t] = (rng.next_u64() % c.vocab_size as u64) as i64;
                types[b * seq + t] = (rng.next_u64() % 2) as i64;
                mask[b * seq + t] = i64::from(t < len);
            }
        }
        let tensor = |v: &[i64]| Tensor::from_slice(v, &[batch, seq]).unwrap();
        let out = compiled.run(&[(INPUT_IDS, &tensor(&ids)), (ATTENTION_MASK, &tensor(&mask)), (TOKEN_TYPE_IDS, &tensor(&types))]).unwrap();
        assert_eq!(out[0].shape(), [batch, c.hidden_size]);
        let got = out[0].to_vec::<f32>().unwrap();
        for (b, &len) in lens.iter().enumerate() {
            let want = reference(&c, &weights, &ids[b * seq..b * seq + len], &types[b * seq..b * seq + len]);
            for (j, w) in want.iter().enumerate() {
                let g = f64::from(got[b * c.hidden_size + j]);
                assert!((g - w).abs() < tol, "{compute:?} seq {seq} item {b} [{j}]: rlx {g} vs f64 {w}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn configs_and_weights_are_checked_naming_the_file() {
    let bad = r#"{"vocab_size": 5, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 3,
        "intermediate_size": 4, "max_position_embeddings": 4, "type_vocab_size": 1, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#;
    let err = BertConfig::from_json(bad, Path::new("m/config.json")).unwrap_err();
    assert!(err.to_string().starts_with("m/config.json: sizes must be positive and hidden_size 8 a multiple of num_attention_heads 3"), "{err}");
    let relu = bad.replace("\"num_attention_heads\": 3", "\"num_attention_heads\": 2").replace("\"gelu\"", "\"relu\"");
    let err = BertConfig::from_json(&relu, Path::new("m/config.json")).unwrap_err();
    assert_eq!(err.to_string(), "m/config.json: hidden_act `relu` is not supported (the exact-erf `gelu` is)");
    let err = BertConfig::from_json("{\"vocab_size\": 5}", Path::new("m/config.json")).unwrap_err();
    assert!(matches!(err, BertError::Json { .. }) && err.to_string().starts_with("m/config.json: missing field"), "{err}");
    let err = SentenceEncoder::load("/nonexistent-rlx-model", &session()).err().unwrap();
    assert!(err.to_string().starts_with("/nonexistent-rlx-model/config.json: "), "{err}");

    let c = tiny_config();
    let mut weights = random_weights(&c, &mut Rng::new(1));
    weights.get_mut("encoder.layer.1.intermediate.dense.weight").unwrap().0 = vec![8, 12];
    let dir = std::env::temp_dir().join(format!("rlx-models-bert-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    write_safetensors(&path, &weights);
    let err = c.build(Pooling { normalize: false }).unwrap().weights(&SafetensorsFile::open(&path).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: tensor `encoder.layer.1.intermediate.dense.weight` is [8, 12], expected [12, 8]", path.display())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/minilm").join(name)
}

#[test]
fn minilm_matches_sentence_transformers() {
    let worst = minilm_against_sentence_transformers(rlx_cpu::Products::F32, true);
    assert!(worst.is_none_or(|c| c >= 0.99999), "cosine {worst:?}");
}

/// `rlx embed --precision int8`: every product of a weight in 8-bit integers (dynamic
/// quantisation) keeps each of the 24 reference sentences' embeddings at cosine ≥ 0.99 to
/// sentence-transformers' f32 ones (issue 23's bar).
#[test]
fn minilm_in_int8_tracks_sentence_transformers() {
    let worst = minilm_against_sentence_transformers(rlx_cpu::Products::Int8, false);
    eprintln!("int8 MiniLM: the lowest cosine to sentence-transformers is {worst:?}");
    assert!(worst.is_none_or(|c| c >= 0.99), "cosine {worst:?}");
}

/// `rlx embed --precision bf16` on the CPU: products of weights on operands rounded to bf16.
#[test]
fn minilm_with_bf16_products_tracks_sentence_transformers() {
    let worst = minilm_against_sentence_transformers(rlx_cpu::Products::Bf16, false);
    eprintln!("MiniLM with bf16 products: the lowest cosine to sentence-transformers is {worst:?}");
    assert!(worst.is_none_or(|c| c >= 0.999), "cosine {worst:?}");
}

/// The lowest cosine of all-MiniLM-L6-v2's embeddings of the reference sentences, computed with
/// `products`, to sentence-transformers' (`None` where the model is absent); with `ids`, the
/// token ids are checked too, and every embedding's norm.
fn minilm_against_sentence_transformers(products: rlx_cpu::Products, ids: bool) -> Option<f64> {
    let dir = common::minilm()?;
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap();
    let sentences: Vec<&str> = reference["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let want_ids: Vec<Vec<u32>> = serde_json::from_value(reference["ids"].clone()).unwrap();
    let want = SafetensorsFile::open(fixture("embeddings.safetensors")).unwrap();
    let want = want.slice::<f32>("embeddings").unwrap();

    let session = Session::new(Arc::new(rlx_cpu::CpuBackend::with_products(products)));
    let mut enc = SentenceEncoder::load(&dir, &session).unwrap();
    if ids {
        assert_eq!(enc.max_len, 256);
        for (s, want_ids) in sentences.iter().zip(&want_ids) {
            assert_eq!(&enc.tokenizer.encode(s, enc.max_len), want_ids, "token ids of {s:?}");
        }
    }
    let got = enc.embed(&sentences).unwrap();
    let mut worst = f64::INFINITY;
    for (i, (g, w)) in got.iter().zip(want.chunks_exact(384)).enumerate() {
        let dot: f64 = g.iter().zip(w).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
        let norm = |v: &[f32]| v.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
        worst = worst.min(dot / (norm(g) * norm(w)));
        assert!((norm(g) - 1.0).abs() < 1e-5, "sentence {i}: norm {}", norm(g));
    }
    Some(worst)
}
