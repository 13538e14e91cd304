//! Quantized kernels (OPS.md §5, §14): matmuls over weights stored quantized (`DequantMatMul`
//! under every decodable scheme, the MoE variants, `DequantMoEWeights`) and the operand prep
//! of low-precision GEMM (`ScaledQuantScale`, `ScaledQuantize`).
//!
//! Activations are f32 or f64 (f16/bf16 are widened to f32); products accumulate in the
//! activation's type and the F32 outputs are rounded once — except under
//! `Activations::Q8Blocks`, where rows are rounded to 8-bit blocks and meet `Q4_0`/`Q4_1`/`Q8_0`
//! weights, and `Q5_0`/`Q5_1` ([`q8`], [`q8_simd`]), or `Q4_K`/`Q5_K`/`Q6_K` weights ([`q8k`], [`q8k_simd`]) in
//! integer dot products as llama.cpp's do. Weights are decoded block by block
//! inside the product ([`rows`]) and never materialized whole, except by `DequantMoEWeights`,
//! whose result is the dequantized stack. The decoders themselves — ggml blocks, minifloats —
//! are the schemes' semantics and live in rlx-ir (`rlx_ir::ops::quant::{gguf, minifloat}`).
//!
//! Errors name the value: K not a multiple of the scheme's block, packed byte counts that
//! disagree with the declared shape, expert ids outside the stack, and GGUF types rlx cannot
//! decode (IQ*, TQ*: "unsupported scheme").

mod moe;
mod panels;
mod q8;
mod q8_simd;
mod q8_zmm;
mod q8k;
mod q8k_simd;
mod rows;
mod scaled;
mod simd;
mod weights;

pub use moe::{dequant_grouped_matmul, dequant_grouped_matmul_mlx, dequant_moe_weights};
pub use panels::Panels;
pub use scaled::{scaled_quant_scale, scaled_quantize};

use crate::kernels::matmul::widen;
use crate::view::{In, Out};
use rlx_ir::ops::quant::{Activations, DequantMatMul, QuantScheme};
use rlx_ir::DType;
use rlx_runtime::Tensor;
use rows::Rows;

/// The instruction set of the 8-bit-activation block products this CPU runs (`rlx info`).
pub fn q8_kernels() -> &'static str {
    q8_simd::available().first().map_or("portable", |k| k.0)
}

/// `x [.., m, k] · dequant(W) → [.., m, n]` F32 for every scheme whose weight decodes
/// ([`weights::dequant_rows`]); `W` is `[n, k]` for GGUF and MLX schemes, `[k, n]` otherwise.
///
/// F32 activations times `Q4_0`, `Q4_1` or `Q8_0` weights take the AVX2 kernels of [`simd`]
/// where the CPU has them; `Activations::Q8Blocks` rounds `x` to 8-bit blocks first and
/// takes the integer kernels of [`q8_simd`] and [`q8k_simd`] on the weight laid out in [`Panels`].
pub fn dequant_matmul(a: &DequantMatMul, ins: &[In], out: &mut Out) -> Result<(), String> {
    let x = ins[0];
    let (&k, &n) = (x.dims.last().unwrap_or(&0), out.dims.last().unwrap_or(&0));
    let w = weights::dequant_rows(&a.scheme, &ins[1..], n, k)?;
    if a.activations == Activations::Q8Blocks {
        let t = q8_weight(&a.scheme)?;
        return q8_blocks(x, &Panels::new(t, ins[1].bytes, n, k)?, out);
    }
    if let QuantScheme::Gguf(t) = a.scheme {
        if x.dtype == DType::F32 && out.dtype == DType::F32 && simd::supports(t) && simd::available() {
            need_len("x", x.numel(), out.numel() / n.max(1) * k)?;
            simd::matmul(t, x.get::<f32>(), ins[1].bytes, n, k, out.get::<f32>());
            return Ok(());
        }
    }
    times_rows(x, &*w, out)
}

/// [`dequant_matmul`] under `Activations::Q8Blocks` with the weight laid out beforehand
/// ([`prepack`]); its GGUF bytes (`ins[1]`) are not read.
pub fn dequant_matmul_prepacked(w: &Panels, ins: &[In], out: &mut Out) -> Result<(), String> {
    q8_blocks(ins[0], w, out)
}

/// The weight `w` (`ins[1]` of a `DequantMatMul` `a` with `n` outputs) laid out for the
/// product, when `a` takes [`Panels`]; `Err` for a weight its kernel would reject.
pub fn prepack(a: &DequantMatMul, w: In, n: usize) -> Option<Result<Panels, String>> {
    if a.activations != Activations::Q8Blocks {
        return None;
    }
    let t = a.scheme.gguf().filter(|t| panels::supports(*t))?;
    let row = w.bytes.len() / n.max(1);
    Some(Panels::new(t, w.bytes, n, row / t.block_bytes() * t.block_size()))
}

/// [`prepack`] in the memory of the weight `w` where whole panels fill it, else laid out
/// anew; `Err(w)` when `a` takes no panels or its kernel would reject `w`.
pub fn prepack_owned(a: &DequantMatMul, w: Tensor, n: usize) -> Result<Panels, Tensor> {
    let Some(t) = a.scheme.gguf().filter(|t| a.activations == Activations::Q8Blocks && panels::supports(*t)) else { return Err(w) };
    let k = w.bytes().len() / n.max(1) / t.block_bytes() * t.block_size();
    Panels::in_place(t, w, n, k).or_else(|w| Panels::new(t, w.bytes(), n, k).map_err(|_| w))
}

/// The GGUF type of a `Q8Blocks` product's weight.
fn q8_weight(scheme: &QuantScheme) -> Result<rlx_ir::ops::quant::GgufType, String> {
    scheme
        .gguf()
        .filter(|t| panels::supports(*t))
        .ok_or_else(|| format!("activations Q8Blocks needs a Gguf Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K scheme, got {scheme:?}"))
}

/// `out = x · wᵀ` under `Activations::Q8Blocks`.
fn q8_blocks(x: In, w: &Panels, out: &mut Out) -> Result<(), String> {
    if out.dtype != DType::F32 {
        return Err(format!("the output must be f32, got {}", out.dtype));
    }
    let (&k, &n) = (x.dims.last().unwrap_or(&0), out.dims.last().unwrap_or(&0));
    if k != w.k() || n != w.n() {
        return Err(format!("x [.., {k}] and the output [.., {n}] do not fit the laid-out weight [{}, {}]", w.n(), w.k()));
    }
    need_len("x", x.numel(), out.numel() / n.max(1) * k)?;
    let o = out.get::<f32>();
    match x.dtype {
        DType::F32 => w.matmul(x.get::<f32>(), o, q8_simd::best()),
        DType::F64 | DType::F16 | DType::BF16 => w.matmul(&widen(x), o, q8_simd::best()),
        d => return Err(format!("x must be float, got {d}")),
    }
    Ok(())
}

/// `out = x · wᵀ` for float `x` (rows of `w.k()`) into an F32 `out`.
fn times_rows(x: In, w: &dyn Rows, out: &mut Out) -> Result<(), String> {
    if out.dtype != DType::F32 {
        return Err(format!("the output must be f32, got {}", out.dtype));
    }
    need_len("x", x.numel(), out.numel() / w.n().max(1) * w.k())?;
    let o = out.get::<f32>();
    match x.dtype {
        DType::F32 => rows::matmul_rows(x.get::<f32>(), w, o),
        DType::F64 => rows::matmul_rows(x.get::<f64>(), w, o),
        DType::F16 | DType::BF16 => rows::matmul_rows(&widen(x), w, o),
        d => return Err(format!("x must be float, got {d}")),
    }
    Ok(())
}

/// An error unless `what` has `want` elements (or bytes).
fn need_len(what: &str, have: usize, want: usize) -> Result<(), String> {
    if have == want {
        Ok(())
    } else {
        Err(format!("{what} holds {have} elements (bytes for packed data), but the shapes need {want}"))
    }
}

/// A float operand's values as f32.
fn widen_f32(x: In) -> Result<Vec<f32>, String> {
    match x.dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(widen(x)),
        d => Err(format!("scales must be float, got {d}")),
    }
}

/// Expert ids (`I8`–`I64`, `U8`, `U32`, or whole-valued F32 truncated toward zero), each
/// checked to lie in `[0, experts)`.
fn expert_ids(idx: In, experts: usize) -> Result<Vec<usize>, String> {
    let raw: Vec<f64> = match idx.dtype {
        DType::I8 => idx.get::<i8>().iter().map(|&v| f64::from(v)).collect(),
        DType::U8 => idx.get::<u8>().iter().map(|&v| f64::from(v)).collect(),
        DType::I16 => idx.get::<i16>().iter().map(|&v| f64::from(v)).collect(),
        DType::I32 => idx.get::<i32>().iter().map(|&v| f64::from(v)).collect(),
        DType::U32 => idx.get::<u32>().iter().map(|&v| f64::from(v)).collect(),
        DType::U16 => idx.get::<u16>().iter().map(|&v| f64::from(v)).collect(),
        DType::U64 => idx.get::<u64>().iter().map(|&v| v as f64).collect(),
        DType::I64 => idx.get::<i64>().iter().map(|&v| v as f64).collect(),
        DType::F32 => idx.get::<f32>().iter().map(|&v| f64::from(v).trunc()).collect(),
        d => return Err(format!("expert_idx must be integers, got {d}")),
    };
    raw.iter()
        .enumerate()
        .map(|(i, &v)| {
            if v >= 0.0 && v < experts as f64 {
                Ok(v as usize)
            } else {
                Err(format!("expert_idx[{i}] = {v} is outside the {experts} experts of the weight stack"))
            }
        })
        .collect()
}
