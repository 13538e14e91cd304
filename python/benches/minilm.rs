//! The Rust side of the MiniLM comparison (bench/minilm.py): a sentence-transformers folder
//! loaded as `rlx.Embedder` loads it, then its compiled graph timed on one pre-tokenised batch.
//!
//!     minilm MODEL_DIR BATCH SEQ [RUNS]
//!
//! Prints the median and minimum milliseconds of one run.

use rlx::models::bert::{SentenceEncoder, ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS};
use rlx::{Device, Session, Tensor};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let [dir, batch, seq, rest @ ..] = args.as_slice() else {
        return Err("usage: minilm MODEL_DIR BATCH SEQ [RUNS]".into());
    };
    let (batch, seq): (usize, usize) = (batch.parse()?, seq.parse()?);
    let runs: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(20);
    let session = Session::new(Device::Cpu)?;
    let mut encoder = SentenceEncoder::load(dir, &session)?;
    let ids = Tensor::from_vec((0..batch * seq).map(|i| 1000 + (i * 7919 % 20000) as i64).collect::<Vec<_>>(), &[batch, seq])?;
    let mask = Tensor::from_vec(vec![1i64; batch * seq], &[batch, seq])?;
    let types = Tensor::zeros(rlx::DType::I64, &[batch, seq]);
    let inputs = [(INPUT_IDS, &ids), (ATTENTION_MASK, &mask), (TOKEN_TYPE_IDS, &types)];
    let compiled = encoder.compiled();
    compiled.run(&inputs)?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(compiled.run(&inputs)?);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!("rust run: median {:.3} ms, min {:.3} ms over {runs} runs", times[runs / 2], times[0]);
    Ok(())
}
