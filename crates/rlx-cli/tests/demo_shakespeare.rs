//! The Shakespeare demo in reduced form: a one-layer model for a few dozen steps must learn.

use rlx::models::gpt::GptConfig;
use rlx_cli::demo::charlm::{train, CharLmOptions, Corpus, TEXT};

#[test]
fn a_small_character_model_learns_the_text() {
    let opts = CharLmOptions {
        model: GptConfig { vocab: 0, context: 32, d_model: 32, heads: 2, layers: 1, d_ff: 64 },
        steps: 60,
        batch: 8,
        peak_lr: 1e-2,
        eval_every: 30,
        sample_chars: 40,
        seed: 7,
        out_dir: None,
        quiet: true,
        device: rlx::Device::Cpu,
    };
    let r = train(&opts).unwrap();
    let mean = |s: &[f32]| s.iter().sum::<f32>() / s.len() as f32;
    let (first, last) = (mean(&r.losses[..5]), mean(&r.losses[r.losses.len() - 5..]));
    assert!(first > 4.0, "an untrained model is near ln(76) = 4.33 nats, got {first}");
    assert!(last < first - 1.0, "the loss fell only from {first} to {last}");
    assert!(r.eval[1].1 < r.eval[0].1 && r.eval[1].1 < r.unigram_entropy as f32 + 0.2, "held-out losses {:?}", r.eval);
    assert_eq!(r.samples.len(), 2);
    assert!(r.samples.iter().all(|s| s.len() >= 40 && s.is_ascii()));
}

#[test]
fn the_corpus_round_trips_and_its_entropy_is_that_of_its_letter_counts() {
    let c = Corpus::new(TEXT);
    assert_eq!(c.alphabet.len(), 76);
    let back: String = c.ids.iter().map(|&i| c.alphabet[i as usize] as char).collect();
    assert_eq!(back, TEXT);
    let tiny = Corpus::new("aab");
    let want = -(2.0f64 / 3.0 * (2.0f64 / 3.0).ln() + 1.0 / 3.0 * (1.0f64 / 3.0).ln());
    assert!((tiny.unigram_entropy() - want).abs() < 1e-12);
}
