//! rlx on wgpu:0 (`cargo bench -p rlx-wgpu --bench wgpu -- [N] [steps]`): the chained `N × N`
//! products of rlx-cuda's GEMM bench in f32 and f16 (default 4096), then batch-1 decode of a
//! SmolLM2-135M-shaped model of random Q4_1 blocks (rlx-cuda's decode bench, the same code).
//! tools/gpu/wgpu.sh runs it on the H200's Vulkan beside PyTorch's cuBLAS figures.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../rlx-cuda/benches/common/decode.rs"]
mod decode;
#[path = "../../rlx-cuda/benches/common/gemm_chain.rs"]
mod gemm_chain;

use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use rlx_models::llama::LlamaConfig;

fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = numbers.first().copied().unwrap_or(4096);
    let steps = numbers.get(1).copied().unwrap_or(64);
    let (Some(backend), Some(session)) = (common::backend(), common::gpu()) else { return };
    println!("adapter: {}", backend.adapter());
    for dtype in [DType::F32, DType::F16] {
        gemm_chain::run(&session, n, dtype);
    }
    let name = "smollm2-135m-shape q4_1";
    if let Err(e) = decode::bench(&session, backend.usage(), name, &LlamaConfig::smollm2_135m(), Some(GgufType::Q4_1), DType::F32, steps) {
        println!("decode {name}: failed: {e}");
    }
}
