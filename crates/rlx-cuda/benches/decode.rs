//! Batch-1 decode on the GPU (`cargo bench -p rlx-cuda --bench decode -- [steps]`): a
//! random-weight Llama-3.2-1B-shaped model in bf16 and a SmolLM2-135M-shaped one of random
//! Q4_1 blocks (GGUF's shapes and block types), KV caches of 512 positions. Each prefills a
//! 16-token prompt, then decodes (`common/decode.rs`; the step is one CUDA graph replayed).
//! tools/gpu/bench.sh runs it beside tools/gpu/decode.py (PyTorch).

#[path = "common/decode.rs"]
mod decode;

use rlx_cpu::CpuBackend;
use rlx_cuda::CudaBackend;
use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use rlx_models::llama::LlamaConfig;
use rlx_runtime::Session;
use std::sync::Arc;

fn main() {
    let steps: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(128);
    let backend = match CudaBackend::new(0) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let cases = [
        ("llama-3.2-1b-shape bf16", LlamaConfig::llama_3_2_1b(), None, DType::BF16),
        ("smollm2-135m-shape q4_1", LlamaConfig::smollm2_135m(), Some(GgufType::Q4_1), DType::F32),
    ];
    for (name, config, blocks, dtype) in cases {
        backend.usage().reset_peak();
        let session = Session::new(backend.clone()).with_host(Arc::new(CpuBackend::new()));
        if let Err(e) = decode::bench(&session, backend.usage(), name, &config, blocks, dtype, steps) {
            println!("decode {name}: failed: {e}");
        }
    }
}
