//! GEMM on the GPU through rlx (`cargo bench -p rlx-cuda --bench gemm -- [N] [dtype]`, default
//! 8192 bf16): the chain of `common/gemm_chain.rs`. tools/gpu/bench.sh runs it beside
//! PyTorch's figure for the same product (tools/gpu/gemm.py, CUDA events).

/// The GPU tests' session (cuda:0 with the CPU as host), or a skip saying why.
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "common/gemm_chain.rs"]
mod gemm_chain;

use rlx_ir::DType;

/// The size and dtype from the command line (`[N] [bf16|f16|f32]`), `n` and `dtype` where absent.
fn args(n: usize, dtype: DType) -> (usize, DType) {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let n = args.first().and_then(|s| s.parse().ok()).unwrap_or(n);
    let dtype = match args.get(1).map(String::as_str) {
        Some("f32") => DType::F32,
        Some("f16") => DType::F16,
        Some("bf16") => DType::BF16,
        _ => dtype,
    };
    (n, dtype)
}

fn main() {
    let (n, dtype) = args(8192, DType::BF16);
    let Some(session) = common::gpu() else { return };
    gemm_chain::run(&session, n, dtype);
}
