//! Operand prep of low-precision GEMM (OPS.md §14): `ScaledQuantScale` computes the scales
//! that make a tensor fit a `ScaledFormat`, `ScaledQuantize` encodes it. Blocks run along the
//! last axis (`⌈K/block⌉` per row, the last one possibly short).
//!
//! Scale rule, with `amax` the largest `|x|` of the block (or tensor) ignoring NaN — NaN
//! elements encode to code 0 anyway — and `max` the format's largest finite value:
//! - `PerTensor`: f32 `amax/max`;
//! - `BlockMxE8M0`: the E8M0 byte of `2^⌈log2(amax/max)⌉` (biased exponent, clamped to
//!   `[0, 254]`), so no element of the block saturates;
//! - `Nvfp4`: `amax/max` rounded to an FP8-E4M3 byte (ties to even, saturating at 448);
//!   [def] a nonzero `amax` whose scale would round to 0 takes the smallest subnormal (`0x01`).
//!
//! [def] An all-zero block (or tensor) gets the scale 1 in every layout, as OPS.md states for
//! `PerTensor`, so `ScaledQuantize` never divides by a zero scale this op made.
//!
//! Encoding divides in the input's precision (f32 for f32/f16/bf16 inputs, f64 for f64), then
//! rounds to the nearest code, ties to even, saturating to ±max (±inf included); NaN → 0.

use crate::kernels::matmul::widen;
use crate::kernels::real::Real;
use crate::kernels::PAR_MIN;
use crate::view::{In, Out};
use bytemuck::Pod;
use half::{bf16, f16};
use rayon::prelude::*;
use rlx_ir::ops::quant::minifloat::{self, Encoder};
use rlx_ir::ops::quant::{ScaleLayout, ScaledFormat, ScaledQuantScale, ScaledQuantize};
use rlx_ir::DType;

/// Elements per row of the blocked layout (the last axis), or the whole tensor per tensor.
fn row_len(x: &In, layout: &ScaleLayout) -> usize {
    match layout {
        ScaleLayout::PerTensor => x.numel(),
        _ => x.dims.last().copied().unwrap_or(1),
    }
}

/// Largest `|v|` of each `block` of each row of `k` values, NaN ignored.
fn amaxes<T: Pod + Into<f64> + Sync>(v: &[T], k: usize, block: usize) -> Vec<f64> {
    let per_row = |row: &[T]| -> Vec<f64> {
        row.chunks(block.max(1)).map(|b| b.iter().map(|&v| v.into().abs()).fold(0.0, |m, a| if a > m { a } else { m })).collect()
    };
    if v.len() < PAR_MIN {
        v.chunks(k.max(1)).flat_map(per_row).collect()
    } else {
        v.par_chunks(k.max(1)).flat_map_iter(per_row).collect()
    }
}

/// `[⌈K/block⌉]` per row for the block layouts, one for `PerTensor`.
pub fn scaled_quant_scale(a: &ScaledQuantScale, x: In, out: &mut Out) -> Result<(), String> {
    let k = row_len(&x, &a.scale_layout);
    let block = a.scale_layout.block().unwrap_or(k);
    let am = match x.dtype {
        DType::F32 => amaxes(x.get::<f32>(), k, block),
        DType::F64 => amaxes(x.get::<f64>(), k, block),
        DType::F16 => amaxes(x.get::<f16>(), k, block),
        DType::BF16 => amaxes(x.get::<bf16>(), k, block),
        d => return Err(format!("x must be float, got {d}")),
    };
    let max = Encoder::new(&a.format).max_finite();
    if a.scale_layout == ScaleLayout::PerTensor {
        let amax = am.first().copied().unwrap_or(0.0);
        out.get::<f32>()[0] = if amax == 0.0 { 1.0 } else { (amax / max) as f32 };
        return Ok(());
    }
    let e4m3 = Encoder::new(&ScaledFormat::F8E4M3);
    let o = out.get::<u8>();
    if o.len() != am.len() {
        return Err(format!("the scale output holds {} bytes, but x has {} blocks", o.len(), am.len()));
    }
    for (o, &amax) in o.iter_mut().zip(&am) {
        *o = match a.scale_layout {
            ScaleLayout::Nvfp4 { .. } if amax == 0.0 => e4m3.encode(1.0),
            ScaleLayout::Nvfp4 { .. } => e4m3.encode(amax / max).max(1),
            _ if amax == 0.0 => 127,
            _ => e8m0_ceil(amax / max),
        };
    }
    Ok(())
}

/// The E8M0 byte of the smallest power of two `≥ r` (`r > 0`), clamped to `[0, 254]`.
fn e8m0_ceil(r: f64) -> u8 {
    if r.is_infinite() {
        return 254;
    }
    let mut e = r.log2().ceil() as i32;
    if 2f64.powi(e - 1) >= r {
        e -= 1;
    }
    if 2f64.powi(e) < r {
        e += 1;
    }
    (e + 127).clamp(0, 254) as u8
}

/// `encode(format, x / s(block))` for every element; codes of `x`'s shape.
pub fn scaled_quantize(a: &ScaledQuantize, x: In, scale: In, out: &mut Out) -> Result<(), String> {
    let k = row_len(&x, &a.scale_layout);
    let block = a.scale_layout.block().unwrap_or(k.max(1));
    let per_row = k.div_ceil(block.max(1));
    let scales: Vec<f32> = match a.scale_layout {
        ScaleLayout::PerTensor => scale.get::<f32>().to_vec(),
        ScaleLayout::BlockMxE8M0 { .. } => scale.bytes.iter().map(|&e| minifloat::e8m0(e)).collect(),
        ScaleLayout::Nvfp4 { .. } => scale.bytes.iter().map(|&c| minifloat::decode(&ScaledFormat::F8E4M3, c)).collect(),
    };
    let rows = x.numel().checked_div(k).unwrap_or(0);
    let want = if a.scale_layout == ScaleLayout::PerTensor { 1 } else { rows * per_row };
    if x.numel() > 0 && scales.len() != want {
        return Err(format!("scale holds {} values, but x has {want} blocks", scales.len()));
    }
    let enc = Encoder::new(&a.format);
    let o = out.get::<u8>();
    match x.dtype {
        DType::F32 => encode_rows(x.get::<f32>(), k, block, &scales, &enc, o),
        DType::F64 => encode_rows(x.get::<f64>(), k, block, &scales, &enc, o),
        DType::F16 | DType::BF16 => encode_rows(&widen(x), k, block, &scales, &enc, o),
        d => return Err(format!("x must be float, got {d}")),
    }
    Ok(())
}

/// Codes of rows of `k` values, block `b` of row `r` divided by `scales[r·⌈k/block⌉ + b]`
/// (per tensor: one row, one block, one scale).
fn encode_rows<T: Real + From<f32>>(x: &[T], k: usize, block: usize, scales: &[f32], enc: &Encoder, out: &mut [u8]) {
    let per_row = k.div_ceil(block);
    let row = |(r, (x, o)): (usize, (&[T], &mut [u8]))| {
        for (b, (x, o)) in x.chunks(block).zip(o.chunks_mut(block)).enumerate() {
            let s = T::from(scales[r * per_row + b]);
            for (&v, o) in x.iter().zip(o) {
                *o = enc.encode((v / s).f64());
            }
        }
    };
    if k == 0 {
        return;
    }
    if x.len() < PAR_MIN {
        x.chunks(k).zip(out.chunks_mut(k)).enumerate().for_each(row);
    } else {
        x.par_chunks(k).zip(out.par_chunks_mut(k)).enumerate().for_each(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_scale_is_the_next_power_of_two() {
        assert_eq!(e8m0_ceil(1.0), 127);
        assert_eq!(e8m0_ceil(1.0 + 1e-12), 128);
        assert_eq!(e8m0_ceil(0.75), 127);
        assert_eq!(e8m0_ceil(0.5), 126);
        assert_eq!(e8m0_ceil(1e-300), 0);
        assert_eq!(e8m0_ceil(1e300), 254);
        assert_eq!(e8m0_ceil(f64::INFINITY), 254);
    }
}
