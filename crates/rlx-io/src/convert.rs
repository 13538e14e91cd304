//! Widening stored floats to f32, shared by the safetensors and GGUF readers.

use half::{bf16, f16};
use rlx_ir::DType;

/// Widens little-endian `dtype` elements in `bytes` into `out` (one per element), or returns
/// `false` when `dtype` is not a float type. F16 and BF16 widen exactly; F64 rounds to nearest.
pub(crate) fn floats_to_f32(dtype: DType, bytes: &[u8], out: &mut [f32]) -> bool {
    match dtype {
        DType::F32 => fill(bytes, out, |b: [u8; 4]| f32::from_le_bytes(b)),
        DType::F16 => fill(bytes, out, |b: [u8; 2]| f16::from_le_bytes(b).to_f32()),
        DType::BF16 => fill(bytes, out, |b: [u8; 2]| bf16::from_le_bytes(b).to_f32()),
        DType::F64 => fill(bytes, out, |b: [u8; 8]| f64::from_le_bytes(b) as f32),
        _ => return false,
    }
    true
}

fn fill<const N: usize>(bytes: &[u8], out: &mut [f32], f: impl Fn([u8; N]) -> f32) {
    for (y, b) in out.iter_mut().zip(bytes.chunks_exact(N)) {
        let mut a = [0; N];
        a.copy_from_slice(b);
        *y = f(a);
    }
}
