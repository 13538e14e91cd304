//! The GEMM bench shared by the GPU backends: a graph of ten chained `N × N` products
//! (`x ← x·w`), submitted on a device value three times between waits, so that launch,
//! copy-in and copy-out costs spread over thirty products; the median over seven such rounds.

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, Shape, TensorType};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;
use std::time::Instant;

/// Products per graph, and graphs submitted per timed round.
const CHAIN: usize = 10;
const SUBMITS: usize = 3;

/// `len` values in ±0.5 as a `dtype` tensor (cast on the CPU).
fn values(len: usize, seed: u64, dtype: DType) -> Tensor {
    let v: Vec<f32> = (0..len).map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 1000.0 - 0.5).collect();
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::of(&[len])));
    let y = g.cast(x, dtype).expect("a cast");
    g.set_outputs(vec![y]).expect("one output");
    let t = Tensor::from_vec(v, &[len]).expect("a vector");
    Session::new(Arc::new(CpuBackend::new())).compile(&g).expect("a cast compiles").run(&[("x", &t)]).expect("a cast runs").remove(0)
}

/// Times the chain of `n × n × n` products on `session` and prints the median product.
pub fn run(session: &Session, n: usize, dtype: DType) {
    let mut g = Graph::new();
    let mut x = g.input("x", TensorType::new(dtype, Shape::of(&[n, n])));
    let w = g.param("w", TensorType::new(dtype, Shape::of(&[n, n])));
    for _ in 0..CHAIN {
        x = g.matmul(x, w).expect("square products chain");
    }
    g.set_outputs(vec![x]).expect("one output");
    let mut c = session.compile(&g).expect("the chain compiles");
    let w = values(n * n, 2, dtype);
    c.set_param_bytes("w", dtype, &[n, n], w.bytes()).expect("w fits");
    let x = values(n * n, 1, dtype);
    let x = c.upload(&Tensor::from_bytes(dtype, &[n, n], x.bytes()).expect("x fits")).expect("x uploads");
    for _ in 0..2 {
        c.submit(&[("x", &x)]).expect("the chain runs");
    }
    c.sync().expect("the device finishes");
    let mut rounds: Vec<f64> = (0..7)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..SUBMITS {
                c.submit(&[("x", &x)]).expect("the chain runs");
            }
            c.sync().expect("the device finishes");
            started.elapsed().as_secs_f64() / (SUBMITS * CHAIN) as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    let s = rounds[rounds.len() / 2];
    println!("rlx   matmul {dtype} {n}x{n}x{n}: median {:.3} ms, {:.1} TFLOP/s", s * 1e3, 2.0 * (n * n * n) as f64 / s / 1e12);
}
