//! The attention of a batched decode step as `rlx serve`'s pooled decoder runs it: B
//! sequences of one query each, their cached keys gathered into one `[U, H_kv·D]` union
//! (each sequence's rows from a multiple of 128, padding rows hidden), an additive `[B, U]`
//! mask showing each query its own sequence's rows. SmolLM2-135M's heads (9 query heads of
//! 64 over 3 KV heads). Prints the median time of one node per batch size and that per
//! sequence.
//!
//! `cargo bench -p rlx-cpu --bench attention_decode -- [--reps R] [--batch 1,8,16] [--keys 90]`

use rlx_cpu::kernels::attention::attention;
use rlx_cpu::view::{In, Out};
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::DType;
use std::time::Instant;

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const D: usize = 64;
const SEGMENT: usize = 128;

fn data(n: usize, seed: u64) -> Vec<f32> {
    (0..n).map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 500.0) - 1.0).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (mut reps, mut batches, mut keys) = (300, vec![1, 8, 16], 90);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} takes a value"));
        match a.as_str() {
            "--reps" => reps = value().parse().expect("--reps takes a count"),
            "--batch" => batches = value().split(',').map(|b| b.parse().expect("--batch takes sizes")).collect(),
            "--keys" => keys = value().parse().expect("--keys takes a count"),
            _ => {}
        }
    }
    let a = Attention::new(HEADS, D, MaskKind::Bias);
    for b in batches {
        let u = (b * SEGMENT).next_power_of_two().max(64);
        let (q, k, v) = (data(b * HEADS * D, 1), data(u * KV_HEADS * D, 2), data(u * KV_HEADS * D, 3));
        let mut mask = vec![-1e9f32; b * u];
        for s in 0..b {
            mask[s * u + s * SEGMENT..s * u + s * SEGMENT + keys].fill(0.0);
        }
        let (qd, kd, md) = ([b, HEADS * D], [u, KV_HEADS * D], [b, u]);
        let ins = [
            In { dtype: DType::F32, dims: &qd, bytes: bytemuck::cast_slice(&q) },
            In { dtype: DType::F32, dims: &kd, bytes: bytemuck::cast_slice(&k) },
            In { dtype: DType::F32, dims: &kd, bytes: bytemuck::cast_slice(&v) },
            In { dtype: DType::F32, dims: &md, bytes: bytemuck::cast_slice(&mask) },
        ];
        let mut y = vec![0f32; b * HEADS * D];
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let start = Instant::now();
            let mut outs = [Out { dtype: DType::F32, dims: &qd, bytes: bytemuck::cast_slice_mut(&mut y) }];
            attention(&a, &ins, &mut outs).expect("attention runs");
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let us = median(times);
        println!("{{\"batch\": {b}, \"union_rows\": {u}, \"keys\": {keys}, \"median_us\": {us:.2}, \"us_per_sequence\": {:.2}}}", us / b as f64);
    }
}
