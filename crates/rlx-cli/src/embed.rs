//! `rlx embed`: sentence embeddings from a sentence-transformers BERT folder (e.g.
//! all-MiniLM-L6-v2), with each vector's first values and norm and the pairwise cosine
//! similarities, or the full vectors as JSON.

use rlx::models::bert::{BertError, SentenceEncoder};
use rlx::cpu::Products;
use rlx::{DType, Device, RuntimeError, Session};
use std::path::Path;
use std::time::Instant;

/// What `rlx embed` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(transparent)]
    Model(#[from] BertError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("give at least one text to embed")]
    NoText,
}

/// What `rlx embed` computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compute {
    F32,
    /// On a GPU the whole encoder in bf16; on the CPU its products of weights on operands
    /// rounded to bf16 (AVX512-BF16), the rest in f32.
    Bf16,
    F16,
    /// f32 activations, the products of weights in 8-bit integers (CPU only).
    Int8,
}

impl Compute {
    /// The graph's dtype and the products of weights on `device`.
    fn on(self, device: Device) -> (DType, Products) {
        match (self, device) {
            (Compute::F32, _) => (DType::F32, Products::F32),
            (Compute::Bf16, Device::Cpu) => (DType::F32, Products::Bf16),
            (Compute::Bf16, _) => (DType::BF16, Products::F32),
            (Compute::F16, _) => (DType::F16, Products::F32),
            (Compute::Int8, _) => (DType::F32, Products::Int8),
        }
    }
}

/// Loads the model in `dir` on `device`, computing in `compute`, and embeds `texts`; prints a
/// summary, or JSON with `json`.
pub fn run(dir: &Path, texts: &[String], json: bool, device: Device, compute: Compute) -> Result<(), EmbedError> {
    if texts.is_empty() {
        return Err(EmbedError::NoText);
    }
    let (dtype, products) = compute.on(device);
    let session = Session::with_products(device, products)?;
    let t = Instant::now();
    let mut encoder = SentenceEncoder::load_in(dir, &session, dtype)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t = Instant::now();
    let vectors = encoder.embed(&refs)?;
    let embed_ms = t.elapsed().as_secs_f64() * 1e3;
    if json {
        println!("{}", to_json(texts, &vectors));
        return Ok(());
    }
    println!("{} texts, {} dims (load {load_ms:.0} ms, embed {embed_ms:.1} ms)", texts.len(), encoder.bert.config.hidden_size);
    for (i, (text, v)) in texts.iter().zip(&vectors).enumerate() {
        let head: Vec<String> = v.iter().take(6).map(|x| format!("{x:+.4}")).collect();
        println!("[{i}] norm {:.4}  [{}, …]  {}", norm(v), head.join(", "), preview(text));
    }
    println!("\ncosine similarity");
    print!("     ");
    for j in 0..vectors.len() {
        print!(" {:>7}", format!("[{j}]"));
    }
    println!();
    for (i, a) in vectors.iter().enumerate() {
        print!("{:>5}", format!("[{i}]"));
        for b in &vectors {
            print!(" {:>7.4}", cosine(a, b));
        }
        println!();
    }
    Ok(())
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
    dot / (norm(a) * norm(b)).max(f64::MIN_POSITIVE)
}

/// The text on one line, cut to 60 characters.
fn preview(text: &str) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match flat.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// `[{"text": …, "embedding": […]}, …]`, the floats in their shortest f32 form.
fn to_json(texts: &[String], vectors: &[Vec<f32>]) -> String {
    #[derive(serde::Serialize)]
    struct Item<'a> {
        text: &'a str,
        embedding: &'a [f32],
    }
    let items: Vec<Item> = texts.iter().zip(vectors).map(|(text, v)| Item { text, embedding: v }).collect();
    serde_json::to_string(&items).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_known_vectors_and_previews() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-12);
        assert_eq!(preview("a\tb"), "a b");
        assert_eq!(preview(&"é".repeat(61)), format!("{}…", "é".repeat(60)));
    }

    #[test]
    fn a_missing_model_folder_is_named() {
        let err = run(Path::new("/nonexistent-model"), &["x".into()], false, Device::Cpu, Compute::F32).unwrap_err();
        assert!(err.to_string().starts_with("/nonexistent-model/config.json: "), "{err}");
    }
}
