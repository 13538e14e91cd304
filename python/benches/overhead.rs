//! The Rust side of the calling-overhead benchmark (bench/overhead.py): an ONNX model imported
//! and compiled as `rlx.InferenceSession` does, then `CompiledGraph::run` timed on one input.
//!
//!     cargo bench -p rlx-python --bench overhead -- MODEL.onnx INPUT_NAME D0,D1,... [RUNS]
//!
//! Prints the median and minimum nanoseconds of one run (f32 input of ones).

use rlx::{Session, Tensor};
use rlx_io::onnx::{self, ImportOptions};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let [model, input, dims, rest @ ..] = args.as_slice() else {
        return Err("usage: overhead MODEL.onnx INPUT_NAME D0,D1,... [RUNS]".into());
    };
    let dims: Vec<usize> = dims.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let runs: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(100_000);
    let imported = onnx::import(model, &ImportOptions { evaluator: Some(&rlx::cpu::CpuConstEval), ..ImportOptions::default() })?;
    let mut compiled = Session::new(rlx::Device::Cpu)?.compile(&imported.graph)?;
    for (name, value) in &imported.params {
        compiled.set_param(name, value.clone())?;
    }
    let x = Tensor::from_vec(vec![1.0f32; dims.iter().product()], &dims)?;
    let named = [(input.as_str(), &x)];
    for _ in 0..runs / 10 {
        compiled.run(&named)?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(compiled.run(&named)?);
        times.push(t.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    println!("rust run: median {} ns, min {} ns over {runs} runs", times[runs / 2], times[0]);
    Ok(())
}
