//! The `Q8Blocks` product (`DequantMatMul` with 8-bit activation blocks, the weight laid out
//! once in panels) per GGUF weight type, at SmolLM2-135M's FFN-down shape (the one of its
//! shapes K-quants can hold: k = 1536) and at two larger ones: median time of a decode product
//! (1 row) and a prefill product (128 rows), and the ratio to the first type's (`Q4_1`) at the same shape.
//! Weights are random blocks (finite f16 scales), activations random.
//!
//! `cargo bench -p rlx-cpu --bench quant -- [--threads N] [--reps R] [--rows 1,8] [--types Q4_1,Q8_0]`;
//! prints one JSON line per type, shape and row count (`--rows` and `--types` replace the
//! defaults: 1 and 128 rows, every type).

use rlx_cpu::kernels::quant::{dequant_matmul_prepacked, prepack};
use rlx_cpu::view::{In, Out};
use rlx_ir::ops::quant::{Activations, DequantMatMul, GgufType, QuantScheme};
use rlx_ir::DType;
use std::time::Instant;

/// `(n, k)`: SmolLM2-135M's `ffn_down` ([576, 1536]), then a 2048² and an `[8192, 2048]` product.
const SHAPES: [(usize, usize); 3] = [(576, 1536), (2048, 2048), (8192, 2048)];
const ROWS: [usize; 2] = [1, 128];
const TYPES: [GgufType; 7] = [GgufType::Q4_1, GgufType::Q4_0, GgufType::Q5_0, GgufType::Q8_0, GgufType::Q4_K, GgufType::Q5_K, GgufType::Q6_K];

/// Offsets of the f16 scales in a block of `t`.
fn halves(t: GgufType) -> &'static [usize] {
    match t {
        GgufType::Q4_1 | GgufType::Q5_1 | GgufType::Q4_K | GgufType::Q5_K => &[0, 2],
        GgufType::Q6_K => &[208],
        _ => &[0],
    }
}

/// `len` pseudo-random bytes of a xorshift stream from `seed`.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

/// `n` rows of `k` random weights of type `t` with small finite scales.
fn weight(t: GgufType, n: usize, k: usize) -> Vec<u8> {
    let mut w = bytes(n * k / t.block_size() * t.block_bytes(), k as u64 ^ t.block_bytes() as u64);
    for blk in w.chunks_exact_mut(t.block_bytes()) {
        for &at in halves(t) {
            let v = f32::from(blk[at]) / 255.0 * 0.02 + 0.001;
            blk[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    w
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `reps` products `[rows, k] · wᵀ` with `w` of type `t` laid out once.
fn time(t: GgufType, (n, k): (usize, usize), rows: usize, reps: usize) -> Result<f64, String> {
    let op = DequantMatMul { scheme: QuantScheme::Gguf(t), out_dim: None, activations: Activations::Q8Blocks };
    let w = weight(t, n, k);
    let wd = [n, w.len() / n];
    let panels = prepack(&op, In { dtype: DType::U8, dims: &wd, bytes: &w }, n).ok_or("no panels")??;
    let x: Vec<f32> = bytes(rows * k, 7).iter().map(|&b| f32::from(b) / 128.0 - 1.0).collect();
    let mut y = vec![0f32; rows * n];
    let (xd, yd) = ([rows, k], [rows, n]);
    let mut times = Vec::with_capacity(reps);
    for rep in 0..reps + reps / 4 + 2 {
        let xi = In { dtype: DType::F32, dims: &xd, bytes: bytemuck::cast_slice(&x) };
        let mut out = Out { dtype: DType::F32, dims: &yd, bytes: bytemuck::cast_slice_mut(&mut y) };
        let start = Instant::now();
        dequant_matmul_prepacked(&panels, &[xi], &mut out)?;
        if rep >= reps / 4 + 2 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    Ok(median(times))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse::<usize>().ok());
    let reps = flag("--reps").unwrap_or(200);
    let list = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>());
    let rows_list = match list("--rows") {
        Some(v) => v.iter().map(|r| r.parse::<usize>()).collect::<Result<Vec<_>, _>>()?,
        None => ROWS.to_vec(),
    };
    let types: Vec<GgufType> = match list("--types") {
        Some(v) => v.iter().map(|n| TYPES.into_iter().find(|t| format!("{t:?}") == *n).ok_or_else(|| format!("--types: no {n} among {TYPES:?}"))).collect::<Result<_, _>>()?,
        None => TYPES.to_vec(),
    };
    let mut pool = rayon::ThreadPoolBuilder::new();
    if let Some(t) = flag("--threads") {
        pool = pool.num_threads(t);
    }
    let pool = pool.build()?;
    let threads = pool.current_num_threads();
    for shape in SHAPES {
        for &rows in &rows_list {
            let reps = if rows <= 8 { reps } else { (reps / 10).max(5) };
            let mut base = None;
            for &t in &types {
                if shape.1 % t.block_size() != 0 {
                    continue;
                }
                // Inside a run's context, as a compiled graph calls it: the pool's other workers spin.
                let secs = pool.install(|| rlx_cpu::awake::run(|| time(t, shape, rows, reps)))?;
                let base = *base.get_or_insert(secs);
                let gb_s = (shape.0 * shape.1 / t.block_size() * t.block_bytes()) as f64 / secs / 1e9;
                println!(
                    "{{\"type\": \"{t:?}\", \"n\": {}, \"k\": {}, \"rows\": {rows}, \"threads\": {threads}, \"median_us\": {:.2}, \"weight_gb_s\": {gb_s:.2}, \"time_vs_first_type\": {:.3}}}",
                    shape.0,
                    shape.1,
                    secs * 1e6,
                    secs / base
                );
            }
        }
    }
    Ok(())
}
