//! Decode's kernels on the GPU against the CPU backend: the bf16 GEMV of few-row products,
//! `DequantMatMul` over GGUF Q4_0 / Q4_1 / Q8_0 blocks as stored (exact and 8-bit-block
//! activations), whole random-weight Llama decoders (bf16, and GGUF blocks) step by step with
//! no host segment, and the device-memory count. Skips without a CUDA device.

mod common;

use common::{agree, cpu, gpu, uniform, Tol};
use rlx_cuda::CudaBackend;
use rlx_ir::ops::quant::{Activations, DequantMatMul, GgufType, QuantScheme};
use rlx_ir::{DType, Graph, Shape, TensorType};
use rlx_models::llama::{argmax, Generator, Llama, LlamaConfig, Weights};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// Random `count` blocks of `t`: finite f16 scales (and Q4_1 minimums) of either sign between
/// 2⁻⁵ and 2, arbitrary code bytes.
fn blocks(t: GgufType, count: usize, seed: u64) -> Vec<u8> {
    let bytes: Vec<u8> = uniform(count * t.block_bytes(), seed, 0.0, 256.0).into_iter().map(|v| v as u8).collect();
    let heads = if t == GgufType::Q4_1 { 2 } else { 1 };
    let mut out = bytes;
    for (b, block) in out.chunks_exact_mut(t.block_bytes()).enumerate() {
        for h in 0..heads {
            let r = (b as u64 * 2 + h as u64).wrapping_mul(0x9e37_79b9) >> 7;
            let bits: u16 = ((r as u16 & 1) << 15) | (((10 + r % 7) as u16) << 10) | ((r >> 3) as u16 & 0x3ff);
            block[2 * h..2 * h + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    out
}

/// Decode's kernels compile with NVRTC for sm_90 (no GPU needed; skips without NVRTC).
#[test]
fn decode_kernels_compile_for_sm_90() {
    use rlx_cuda::source::{decode, matmul, quant};
    use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
    use rlx_ir::ops::fused::{ChainStep, ElementwiseRegion, Operand, RegionPrologue, MAX_REGION_INPUTS};
    let chain = vec![ChainStep::Activation(ActivationKind::Silu, Operand::Input(0)), ChainStep::Binary(BinaryOp::Mul, Operand::Step(0), Operand::Input(1))];
    let swiglu = ElementwiseRegion { chain, num_inputs: 2, scalar_input_mask: 0, input_modulus: [0; MAX_REGION_INPUTS], prologue: RegionPrologue::None, prologue_input: 0 };
    let mut sources = Vec::new();
    for d in [DType::BF16, DType::F16] {
        let dtypes = [d, d];
        sources.extend([matmul::Prologue::Plain, matmul::Prologue::Rms, matmul::Prologue::Region(&swiglu, &dtypes)].into_iter().filter_map(|p| matmul::products(d, p)));
    }
    for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0] {
        sources.extend([Activations::Exact, Activations::Q8Blocks].into_iter().filter_map(|a| quant::dequant_matmul(t, a)));
    }
    for d in [DType::F32, DType::F16, DType::BF16] {
        sources.extend([None, Some(DType::F32), Some(d)].into_iter().filter_map(|bias| decode::attention(d, bias)));
    }
    assert_eq!(sources.len(), 6 + 6 + 9);
    for s in &sources {
        match rlx_cuda::compile(&s.code, "sm_90") {
            Err(e) if e.contains("not installed") => return eprintln!("skipped: {e}"),
            Err(e) => panic!("the {} kernel does not compile: {e}", s.name),
            Ok(_) => {}
        }
    }
}

#[test]
fn quantized_products_read_gguf_blocks_as_the_cpu_does() {
    let Some(gpu) = gpu() else { return };
    for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0] {
        for activations in [Activations::Exact, Activations::Q8Blocks] {
            for (m, n, k) in [(1, 37, 256), (3, 8, 96), (5, 300, 64), (1, 576, 1536)] {
                let mut g = Graph::new();
                let x = g.input("x", TensorType::new(DType::F32, Shape::of(&[m, k])));
                let row = t.row_bytes(k).unwrap();
                let w = g.input("w", TensorType::new(DType::U8, Shape::of(&[n, row])));
                let y = g.dequant_matmul(DequantMatMul { scheme: QuantScheme::Gguf(t), out_dim: None, activations }, x, &[w]).unwrap();
                g.set_outputs(vec![y]).unwrap();
                let xs = Tensor::from_vec(uniform(m * k, (m * n + k) as u64, -2.0, 2.0), &[m, k]).unwrap();
                let ws = Tensor::from_bytes(DType::U8, &[n, row], &blocks(t, n * k / 32, n as u64)).unwrap();
                agree(&gpu, &g, &[("x", xs), ("w", ws)], Tol::norm(1e-5), true);
            }
        }
    }
}

#[test]
fn few_row_half_precision_products_agree_with_the_cpu() {
    let Some(gpu) = gpu() else { return };
    for dtype in [DType::BF16, DType::F16] {
        for (m, k, n) in [(1, 2048, 2048), (4, 2048, 512), (3, 72, 520), (1, 8192, 256), (2, 64, 8), (1, 32, (1 << 20) + 8)] {
            let mut g = Graph::new();
            let a = g.input("a", TensorType::new(DType::F32, Shape::of(&[m, k])));
            let b = g.input("b", TensorType::new(DType::F32, Shape::of(&[k, n])));
            let (a16, b16) = (g.cast(a, dtype).unwrap(), g.cast(b, dtype).unwrap());
            let y = g.matmul(a16, b16).unwrap();
            let y = g.cast(y, DType::F32).unwrap();
            g.set_outputs(vec![y]).unwrap();
            let inputs = [
                ("a", Tensor::from_vec(uniform(m * k, (k + n) as u64, -1.0, 1.0), &[m, k]).unwrap()),
                ("b", Tensor::from_vec(uniform(k * n, (m + n) as u64, -1.0, 1.0), &[k, n]).unwrap()),
            ];
            agree(&gpu, &g, &inputs, Tol::norm(2e-2), true);
        }
    }
}

/// A decoder layer's products over a symbolic row count, fused at compile (RMSNorm into Q, K
/// and V, Q and K rotated as they are written; the residual into the output product;
/// SiLU(gate)·up into the down product): one launch each for 1 and 3 rows, the pieces one
/// after another for 6.
#[test]
fn fused_decoder_products_agree_with_the_cpu() {
    let Some(gpu) = gpu() else { return };
    use rlx_ir::ops::attention::{Rope, RopeStyle};
    use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
    let (d, ff) = (256, 512);
    for dtype in [DType::BF16, DType::F16] {
        for m in [1, 3, 6] {
            let mut g = Graph::new();
            let cast = |g: &mut Graph, x| g.cast(x, dtype).unwrap();
            let input = |g: &mut Graph, name: &str, dims: &[usize]| {
                let x = g.input(name, TensorType::new(DType::F32, Shape::of(dims)));
                cast(g, x)
            };
            // Rows of a symbolic count, as decoding's: the fused op decides at run time.
            let x = g.input("x", TensorType::new(DType::F32, Shape::new(vec![rlx_ir::Dim::sym("S"), rlx_ir::Dim::Static(d)])));
            let x = cast(&mut g, x);
            let (gamma, beta) = (input(&mut g, "gamma", &[d]), input(&mut g, "beta", &[d]));
            let w: Vec<_> = [("wq", d, d), ("wk", d, 128), ("wv", d, 136), ("wo", d, d), ("wg", d, ff), ("wu", d, ff), ("wd", ff, d)].iter().map(|&(n, k, c)| input(&mut g, n, &[k, c])).collect();
            let table = |g: &mut Graph, name: &str| g.input(name, TensorType::new(DType::F32, Shape::new(vec![rlx_ir::Dim::sym("S"), rlx_ir::Dim::Static(32)])));
            let (cos, sin) = (table(&mut g, "cos"), table(&mut g, "sin"));
            let a = g.rms_norm(x, gamma, beta, -1, 1e-5).unwrap();
            let (q, k, v) = (g.matmul(a, w[0]).unwrap(), g.matmul(a, w[1]).unwrap(), g.matmul(a, w[2]).unwrap());
            let style = if dtype == DType::BF16 { RopeStyle::NeoX } else { RopeStyle::GptJ };
            let rope = Rope { head_dim: 64, n_rot: 64, style };
            let (q, k) = (g.rope(rope.clone(), q, cos, sin).unwrap(), g.rope(rope, k, cos, sin).unwrap());
            let o = g.matmul(q, w[3]).unwrap();
            let x = g.binary(BinaryOp::Add, x, o).unwrap();
            let f = g.rms_norm(x, gamma, beta, -1, 1e-5).unwrap();
            let (gate, up) = (g.matmul(f, w[4]).unwrap(), g.matmul(f, w[5]).unwrap());
            let gate = g.activation(ActivationKind::Silu, gate).unwrap();
            let h = g.binary(BinaryOp::Mul, gate, up).unwrap();
            let down = g.matmul(h, w[6]).unwrap();
            let y = g.binary(BinaryOp::Add, down, x).unwrap();
            let outs = [y, k, v].map(|t| g.cast(t, DType::F32).unwrap());
            g.set_outputs(outs.to_vec()).unwrap();
            let shapes = [("x", vec![m, d]), ("cos", vec![m, 32]), ("sin", vec![m, 32]), ("gamma", vec![d]), ("beta", vec![d]), ("wq", vec![d, d]), ("wk", vec![d, 128]), ("wv", vec![d, 136]), ("wo", vec![d, d]), ("wg", vec![d, ff]), ("wu", vec![d, ff]), ("wd", vec![ff, d])];
            let inputs: Vec<(&str, Tensor)> = shapes
                .iter()
                .enumerate()
                .map(|(i, (n, dims))| {
                    let scale = if dims.len() == 2 && *n != "x" { 1.0 / (dims[0] as f32).sqrt() } else { 1.0 };
                    let values = uniform(dims.iter().product(), 40 + i as u64, -scale, scale);
                    (*n, Tensor::from_vec(values, dims).unwrap())
                })
                .collect();
            agree(&gpu, &g, &inputs, Tol::norm(2e-2), true);
        }
    }
}

#[test]
fn one_query_row_attends_over_a_whole_cache_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    use rlx_ir::ops::attention::{Attention, MaskKind};
    for (dtype, heads, kv, d, s_k, softcap) in [(DType::F32, 4, 2, 64, 700, None), (DType::BF16, 32, 8, 64, 512, None), (DType::F32, 2, 2, 128, 33, Some(20.0)), (DType::F16, 6, 3, 32, 1, None)] {
        let mut g = Graph::new();
        let input = |g: &mut Graph, name: &str, dims: &[usize]| {
            let x = g.input(name, TensorType::new(DType::F32, Shape::of(dims)));
            g.cast(x, dtype).unwrap()
        };
        let q = input(&mut g, "q", &[1, heads * d]);
        let k = input(&mut g, "k", &[s_k, kv * d]);
        let v = input(&mut g, "v", &[s_k, kv * d]);
        let bias = g.input("bias", TensorType::new(DType::F32, Shape::of(&[1, s_k])));
        let attrs = Attention { attn_logit_softcap: softcap, ..Attention::new(heads, d, MaskKind::Bias) };
        let y = g.attention(attrs, q, k, v, Some(bias)).unwrap();
        let y = g.cast(y, DType::F32).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let hidden: Vec<f32> = uniform(s_k, 9, 0.0, 1.0).into_iter().enumerate().map(|(i, u)| if i > 0 && u < 0.3 { -1e9 } else { u - 0.5 }).collect();
        let inputs = [
            ("q", Tensor::from_vec(uniform(heads * d, 1, -1.0, 1.0), &[1, heads * d]).unwrap()),
            ("k", Tensor::from_vec(uniform(s_k * kv * d, 2, -1.0, 1.0), &[s_k, kv * d]).unwrap()),
            ("v", Tensor::from_vec(uniform(s_k * kv * d, 3, -1.0, 1.0), &[s_k, kv * d]).unwrap()),
            ("bias", Tensor::from_vec(hidden, &[1, s_k]).unwrap()),
        ];
        agree(&gpu, &g, &inputs, Tol::norm(if dtype == DType::F32 { 1e-5 } else { 2e-2 }), true);
    }
}

/// The largest difference between `got` and `want` over `want`'s largest magnitude.
fn normwise(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

/// Decodes `config`'s random model (GGUF `blocks`, or dense in `dtype`) on both backends from
/// one prompt, feeding both the CPU's greedy tokens, and returns the largest normwise
/// difference of the steps' logits with its step; the GPU must run every step without a
/// host segment.
fn difference_from_the_cpu(gpu: &Session, config: &LlamaConfig, blocks: Option<GgufType>, dtype: DType) -> (f32, usize) {
    let w = Weights::random(config, 5, blocks);
    let build = || Llama::build_as(config, &w, 24, dtype).unwrap();
    let (mut want, mut got) = (Generator::new(build(), &cpu()).unwrap(), Generator::new(build(), gpu).unwrap());
    let (mut c, mut g) = (want.feed(&[3, 17, 40, 2, 9]).unwrap(), got.feed(&[3, 17, 40, 2, 9]).unwrap());
    assert!(got.compiled().partition().is_none(), "{blocks:?} {dtype}: part of the step ran on the host:\n{}", got.compiled().partition().unwrap());
    assert!(c.iter().any(|v| v.abs() > 1e-2), "{blocks:?} {dtype}: the logits are not all near zero");
    let mut worst = (0f32, 0);
    for step in 0..6 {
        let diff = normwise(&g, &c);
        if diff > worst.0 {
            worst = (diff, step);
        }
        let next = argmax(&c);
        c = want.feed(&[next]).unwrap();
        g = got.feed(&[next]).unwrap();
    }
    worst
}

/// Every case is measured before any is judged, so that a failure reports them all.
#[test]
fn random_llamas_decode_on_the_gpu_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let config = LlamaConfig { vocab: 96, d_model: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, d_ff: 128, rope_dim: 16, ..LlamaConfig::smollm2_135m() };
    let neox = LlamaConfig { rope_style: rlx_ir::ops::attention::RopeStyle::NeoX, ..config.clone() };
    // The GGUF cases round each activation row to 8-bit codes (llama.cpp's arithmetic, exact
    // against the CPU above): a last-place difference upstream that lands on a rounding edge
    // moves a code by one step (1/127 of its block's largest value), which a wrong kernel
    // exceeds many times over.
    let cases = [
        (&config, Some(GgufType::Q4_0), DType::F32, 3e-2),
        (&config, Some(GgufType::Q4_1), DType::F32, 3e-2),
        (&config, Some(GgufType::Q8_0), DType::F32, 3e-2),
        (&config, None, DType::F32, 1e-4),
        (&neox, None, DType::BF16, 3e-2),
    ];
    let measured: Vec<String> = cases
        .iter()
        .map(|&(c, blocks, dtype, tol)| {
            let (diff, step) = difference_from_the_cpu(&gpu, c, blocks, dtype);
            format!("{blocks:?} {dtype}: {diff} at step {step} (tolerance {tol}){}", if diff < tol { "" } else { " FAILS" })
        })
        .collect();
    assert!(!measured.iter().any(|m| m.ends_with("FAILS")), "logits differ from the CPU's:\n{}", measured.join("\n"));
}

#[test]
fn device_memory_is_counted_while_held() {
    let backend = match CudaBackend::new(0) {
        Ok(b) => Arc::new(b),
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let session = Session::new(backend.clone());
    let before = backend.usage().in_use();
    backend.usage().reset_peak();
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::of(&[1 << 20])));
    let y = g.activation(rlx_ir::ops::elementwise::ActivationKind::Relu, x).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut compiled = session.compile(&g).unwrap();
    let held = compiled.upload(&Tensor::from_vec(vec![1f32; 1 << 20], &[1 << 20]).unwrap()).unwrap();
    compiled.run(&[("x", &Tensor::from_vec(vec![-1f32; 1 << 20], &[1 << 20]).unwrap())]).unwrap();
    let during = backend.usage().in_use();
    assert!(during >= before + (4 << 20) + (8 << 20), "the value and the arena (input and output) are counted: {before} → {during}");
    drop(held);
    assert_eq!(backend.usage().in_use(), during - (4 << 20), "a dropped value is no longer counted");
    assert!(backend.usage().peak() >= during, "the peak covers what was held");
    drop(compiled);
    assert_eq!(backend.usage().in_use(), before, "a dropped graph gives its arena back");
}
