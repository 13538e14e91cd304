//! GEMM on the GPU through rlx (`cargo bench -p rlx-cuda --bench gemm -- [M N K] [dtype]`):
//! an input (a device value, so nothing crosses the host) times a parameter, each run's
//! MatMul step timed alone (the executor's profiling waits for the step), median of the runs. tools/gpu/bench.sh runs it beside
//! PyTorch's figure for the same shapes (tools/gpu/gemm.py).

use rlx_cpu::CpuBackend;
use rlx_cuda::CudaBackend;
use rlx_ir::{DType, Graph, Shape, TensorType};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let size = |i: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(8192usize);
    let (m, n, k) = (size(0), size(1), size(2));
    let dtype = match args.get(3).map(String::as_str) {
        Some("f32") => DType::F32,
        Some("f16") => DType::F16,
        _ => DType::BF16,
    };
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let session = Session::new(Arc::new(backend)).with_host(Arc::new(CpuBackend::new()));
    let mut g = Graph::new();
    let a = g.input("a", TensorType::new(dtype, Shape::of(&[m, k])));
    let b = g.param("b", TensorType::new(dtype, Shape::of(&[k, n])));
    let y = g.matmul(a, b).expect("a product of matching dims");
    g.set_outputs(vec![y]).expect("one output");
    let mut c = session.compile(&g).expect("the product compiles for CUDA");
    let fill = |len: usize, seed: u64| {
        let values: Vec<f32> = (0..len).map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f32 / 1000.0 - 0.5).collect();
        let t = Tensor::from_vec(values, &[len]).expect("a vector");
        let mut cast = Graph::new();
        let x = cast.input("x", TensorType::new(DType::F32, Shape::of(&[len])));
        let y = cast.cast(x, dtype).expect("a cast");
        cast.set_outputs(vec![y]).expect("one output");
        Session::new(Arc::new(CpuBackend::new())).compile(&cast).expect("a cast compiles").run(&[("x", &t)]).expect("a cast runs").remove(0)
    };
    let (ta, tb) = (fill(m * k, 1), fill(k * n, 2));
    let a = c.upload(&Tensor::from_bytes(dtype, &[m, k], ta.bytes()).expect("a fits")).expect("a uploads");
    c.set_param_bytes("b", dtype, &[k, n], tb.bytes()).expect("b fits");
    let mut times: Vec<Duration> = Vec::new();
    for rep in 0..30 {
        c.set_profiling(true);
        c.submit(&[("a", &a)]).expect("the product runs");
        let step = c.profile().by_op().into_iter().find(|(op, _, _)| op == "MatMul").map(|(_, _, t)| t).expect("the MatMul step was timed");
        if rep >= 5 {
            times.push(step);
        }
    }
    c.sync().expect("the device finishes");
    times.sort();
    let median = times[times.len() / 2];
    let tflops = 2.0 * (m * n * k) as f64 / median.as_secs_f64() / 1e12;
    println!("rlx   matmul {dtype} {m}x{n}x{k}: median {:.3} ms, {tflops:.0} TFLOP/s", median.as_secs_f64() * 1e3);
}
