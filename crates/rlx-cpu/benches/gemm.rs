//! rlx side of the f32 GEMM benchmark: `MatMul` of row-major `[m, k] × [k, n]` through the
//! CPU backend's kernel entry point, timed per call after a warm-up; prints one JSON line per
//! shape with the median time and GFLOP/s (2·m·k·n flops per call).
//! `tools/bench/gemm.py` runs it beside NumPy's sgemm and prints ratios.
//!
//! Usage: `cargo bench -p rlx-cpu --bench gemm -- [--threads T] [--reps R] [--warmup W]
//! [--shape M,K,N]...`; without `--threads` rayon's default (`RAYON_NUM_THREADS`) applies,
//! without `--shape` the shapes of docs/BENCHMARKS.md run.

use rlx_cpu::kernels::matmul::matmul;
use rlx_cpu::view::{In, Out};
use rlx_ir::DType;
use std::time::Instant;

/// Square products and the transformer shapes (MiniLM: d 384, FFN 1536; 128 and 4096 tokens).
const SHAPES: [[usize; 3]; 9] = [
    [512, 512, 512],
    [1024, 1024, 1024],
    [2048, 2048, 2048],
    [128, 384, 384],
    [128, 384, 1536],
    [128, 1536, 384],
    [4096, 384, 384],
    [4096, 384, 1536],
    [4096, 1536, 384],
];

struct Options {
    threads: Option<usize>,
    reps: usize,
    warmup: usize,
    shapes: Vec<[usize; 3]>,
}

fn options() -> Result<Options, String> {
    let mut o = Options { threads: None, reps: 20, warmup: 3, shapes: Vec::new() };
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--threads" => o.threads = Some(number(&value)?),
            "--reps" => o.reps = number(&value)?.max(1),
            "--warmup" => o.warmup = number(&value)?,
            "--shape" => {
                let dims = value.split(',').map(number).collect::<Result<Vec<_>, _>>()?;
                o.shapes.push(dims.try_into().map_err(|_| format!("--shape {value}: expected M,K,N"))?);
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.shapes.is_empty() {
        o.shapes = SHAPES.to_vec();
    }
    Ok(o)
}

/// Uniform values in [-1, 1) from a fixed xorshift stream.
fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Median seconds of one `MatMul` call at `[m, k] × [k, n]`.
fn time_matmul([m, k, n]: [usize; 3], reps: usize, warmup: usize) -> Result<f64, String> {
    let (a, b) = (random(m * k, 1), random(k * n, 2));
    let mut c = vec![0.0f32; m * n];
    let (da, db, dc) = ([m, k], [k, n], [m, n]);
    let mut times = Vec::with_capacity(reps);
    for i in 0..warmup + reps {
        let ia = In { dtype: DType::F32, dims: &da, bytes: bytemuck::cast_slice(&a) };
        let ib = In { dtype: DType::F32, dims: &db, bytes: bytemuck::cast_slice(&b) };
        let mut out = Out { dtype: DType::F32, dims: &dc, bytes: bytemuck::cast_slice_mut(&mut c) };
        let t = Instant::now();
        matmul(ia, ib, &mut out)?;
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = options()?;
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(t) = o.threads {
        pool = pool.num_threads(t);
    }
    let pool = pool.build()?;
    let threads = pool.current_num_threads();
    for shape in &o.shapes {
        let secs = pool.install(|| time_matmul(*shape, o.reps, o.warmup))?;
        let [m, k, n] = *shape;
        let gflops = 2.0 * (m * k * n) as f64 / secs / 1e9;
        println!(
            "{{\"peer\": \"rlx\", \"m\": {m}, \"k\": {k}, \"n\": {n}, \"threads\": {threads}, \"median_ms\": {:.4}, \"gflops\": {gflops:.2}}}",
            secs * 1e3
        );
    }
    Ok(())
}
