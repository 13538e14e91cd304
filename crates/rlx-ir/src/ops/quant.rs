//! Quantization (OPS.md §5, §14, backward ops §22), split along its real seams:
//! - [`scheme`]: the attribute enums (`QuantScheme`, `GgufType`, `ScaledFormat`, `ScaleLayout`);
//! - [`gguf`]: the bit-exact decoders of ggml's weight blocks (the meaning of `Gguf` schemes);
//! - [`minifloat`]: the codecs of the `ScaledFormat` element formats and E8M0 scale bytes;
//! - `dequant`: matmuls over stored-quantized weights (`DequantMatMul` and the MoE variants);
//! - `scaled`: native low-precision GEMM and its operand prep (`ScaledMatMul`, `Scaled*`);
//! - `fake`: quantization-aware training (`FakeQuantize*` and their backward ops);
//! - `int8`: ONNX-style integer quantization (`Quantize`, `Dequantize`, `QMatMul`, `QConv2d`).

mod dequant;
mod fake;
pub mod gguf;
mod int8;
pub mod minifloat;
pub mod scheme;
mod scaled;

pub use dequant::{Activations, DequantGroupedMatMul, DequantGroupedMatMulMlx, DequantMatMul, DequantMoEWeights};
pub use fake::{
    FakeQuantize, FakeQuantizeBackward, FakeQuantizeLSQ, FakeQuantizeLSQBackwardScale, FakeQuantizeLSQBackwardX,
    ScaleMode, SteKind,
};
pub use int8::{Dequantize, QConv2d, QMatMul, Quantize};
pub use scaled::{ScaledDequantize, ScaledMatMul, ScaledQuantScale, ScaledQuantize};
pub use scheme::{GgufType, QuantScheme, ScaleLayout, ScaledFormat};

use super::matmul::dims_agree;
use crate::{DType, Dim, TensorType};

/// Checks `t`'s dtype is one of `allowed`; `what` names the operand and its role.
fn need_dtype(what: &str, t: &TensorType, allowed: &[DType]) -> Result<(), String> {
    if allowed.contains(&t.dtype) {
        return Ok(());
    }
    let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
    Err(format!("{what} must be {}, got {t}", names.join(" or ")))
}

/// Checks `t` is a real float tensor.
fn need_float(what: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(format!("{what} must be float, got {t}"))
    }
}

/// Checks `t` has `want.len()` axes agreeing with `want` (`None` = any size).
fn need_shape(what: &str, t: &TensorType, want: &[Option<Dim>]) -> Result<(), String> {
    let ok = t.rank() == want.len()
        && t.shape.dims().iter().zip(want).all(|(d, w)| w.as_ref().is_none_or(|w| dims_agree(d, w)));
    if ok {
        return Ok(());
    }
    let dims: Vec<String> = want
        .iter()
        .map(|w| w.as_ref().map_or_else(|| "?".to_string(), ToString::to_string))
        .collect();
    Err(format!("{what} must be [{}], got {t}", dims.join(", ")))
}

/// `d / by` when `d` is static (an error unless it divides exactly); `None` when symbolic.
fn div_exact(what: &str, d: &Dim, by: usize) -> Result<Option<Dim>, String> {
    match d {
        Dim::Static(n) if by > 0 && n % by == 0 => Ok(Some(Dim::Static(n / by))),
        Dim::Static(n) => Err(format!("{what} = {n} is not a multiple of {by}")),
        Dim::Sym(_) => Ok(None),
    }
}

/// `d · num / den` when `d` is static (an error unless exact); `None` when symbolic.
fn scale_exact(what: &str, d: &Dim, num: usize, den: usize) -> Result<Option<Dim>, String> {
    match d {
        Dim::Static(n) if (n * num) % den == 0 => Ok(Some(Dim::Static(n * num / den))),
        Dim::Static(n) => Err(format!("{what} = {n} times {num}/{den} is not a whole number")),
        Dim::Sym(_) => Ok(None),
    }
}

/// The last axis of `t`, which must have rank ≥ `min_rank`.
fn last_dim(what: &str, t: &TensorType, min_rank: usize) -> Result<Dim, String> {
    match t.shape.dims().last() {
        Some(d) if t.rank() >= min_rank => Ok(d.clone()),
        _ => Err(format!("{what} needs rank >= {min_rank}, got {t}")),
    }
}

/// Byte size of `t`, when its shape is static.
fn static_bytes(t: &TensorType) -> Option<usize> {
    Some(t.shape.numel()? * t.dtype.size())
}
