//! `Cast` between every pair of dtypes, with Rust `as` semantics (OPS.md §3): float→int
//! truncates and saturates (NaN → 0), int→int wraps, float→float rounds to nearest even,
//! any→Bool is `x ≠ 0`, real→C64 has `im = 0`, C64→real takes the real part.
//!
//! The narrow dtypes follow the same rules at their width: `I4`/`U4`/`I2`/`U2` saturate from
//! floats and wrap from integers; the minifloats decode exactly and encode by
//! `minifloat::DTypeEncoder` (ties to even, overflow to ±inf or NaN as the format has them).

use crate::view::{In, Out};
use half::{bf16, f16};
use num_complex::Complex32;
use rlx_ir::ops::quant::minifloat::{self, DTypeEncoder};
use rlx_ir::DType;

/// A source element converted to each target type.
trait CastSrc: Copy {
    fn f64(self) -> f64;
    /// An integer source's value; floats truncate (only called for integer sources).
    fn int(self) -> i128;
    fn truthy(self) -> bool;
    fn c64(self) -> Complex32 {
        Complex32::new(self.f64() as f32, 0.0)
    }
}

macro_rules! prim_src {
    ($($t:ty),*) => {$(impl CastSrc for $t {
        fn f64(self) -> f64 { self as f64 }
        fn int(self) -> i128 { self as i128 }
        #[allow(clippy::float_cmp)]
        fn truthy(self) -> bool { self != (0 as $t) }
    })*};
}
prim_src!(f32, f64, i8, u8, i16, i32, i64, u32, u16, u64);

macro_rules! half_src {
    ($($t:ty),*) => {$(impl CastSrc for $t {
        fn f64(self) -> f64 { self.to_f64() }
        fn int(self) -> i128 { self.to_f32() as i128 }
        fn truthy(self) -> bool { self.to_f32() != 0.0 }
    })*};
}
half_src!(f16, bf16);

impl CastSrc for Complex32 {
    fn f64(self) -> f64 {
        self.re as f64
    }
    fn int(self) -> i128 {
        self.re as i128
    }
    fn truthy(self) -> bool {
        self.re != 0.0 || self.im != 0.0
    }
    fn c64(self) -> Complex32 {
        self
    }
}

/// Writes `src` converted to `out`'s dtype. Integer targets go through the widest type of
/// the same kind so that `as` keeps its wrap/saturate meaning.
fn cast_from<S: CastSrc + bytemuck::Pod>(src: &[S], src_is_float: bool, out: &mut Out) -> Result<(), String> {
    macro_rules! to_int {
        ($t:ty) => {{
            let o = out.get::<$t>();
            if src_is_float {
                for (o, s) in o.iter_mut().zip(src) {
                    *o = s.f64() as $t;
                }
            } else {
                for (o, s) in o.iter_mut().zip(src) {
                    *o = s.int() as $t;
                }
            }
        }};
    }
    // Sub-byte integers of `$bits` bits held in `$t`: saturated from floats, wrapped (and
    // sign-extended for the signed ones) from integers.
    macro_rules! to_narrow {
        ($t:ty, $bits:expr, $lo:expr, $hi:expr) => {{
            let shift = 8 - $bits;
            for (o, s) in out.get::<$t>().iter_mut().zip(src) {
                *o = if src_is_float { (s.f64() as $t).clamp($lo, $hi) } else { ((s.int() as $t) << shift) >> shift };
            }
        }};
    }
    macro_rules! to {
        ($t:ty, $f:expr) => {{
            for (o, s) in out.get::<$t>().iter_mut().zip(src) {
                *o = $f(*s);
            }
        }};
    }
    let real = |s: S| if src_is_float { s.f64() } else { s.int() as f64 };
    match out.dtype {
        DType::F32 => to!(f32, |s: S| if src_is_float { s.f64() as f32 } else { s.int() as f32 }),
        DType::F64 => to!(f64, real),
        DType::F16 => to!(f16, |s: S| f16::from_f64(real(s))),
        DType::BF16 => to!(bf16, |s: S| bf16::from_f64(real(s))),
        DType::I8 => to_int!(i8),
        DType::U8 => to_int!(u8),
        DType::I16 => to_int!(i16),
        DType::I32 => to_int!(i32),
        DType::I64 => to_int!(i64),
        DType::U32 => to_int!(u32),
        DType::U16 => to_int!(u16),
        DType::U64 => to_int!(u64),
        DType::I4 => to_narrow!(i8, 4, -8, 7),
        DType::U4 => to_narrow!(u8, 4, 0, 15),
        DType::I2 => to_narrow!(i8, 2, -2, 1),
        DType::U2 => to_narrow!(u8, 2, 0, 3),
        DType::Bool => to!(u8, |s: S| s.truthy() as u8),
        DType::C64 => to!(Complex32, |s: S| s.c64()),
        d @ (DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1) => {
            let enc = DTypeEncoder::new(d).ok_or_else(|| format!("Cast: no encoder for {d}"))?;
            to!(u8, |s: S| enc.encode(real(s)))
        }
    }
    Ok(())
}

pub fn cast(x: In, out: &mut Out) -> Result<(), String> {
    let float = x.dtype.is_float() || x.dtype == DType::C64;
    match x.dtype {
        DType::F32 => cast_from(x.get::<f32>(), float, out),
        DType::F64 => cast_from(x.get::<f64>(), float, out),
        DType::F16 => cast_from(x.get::<f16>(), float, out),
        DType::BF16 => cast_from(x.get::<bf16>(), float, out),
        DType::I8 | DType::I4 | DType::I2 => cast_from(x.get::<i8>(), float, out),
        DType::U8 | DType::U4 | DType::U2 => cast_from(x.get::<u8>(), float, out),
        DType::Bool => {
            let b: Vec<u8> = x.bytes.iter().map(|&v| (v != 0) as u8).collect();
            cast_from(&b, false, out)
        }
        DType::I16 => cast_from(x.get::<i16>(), float, out),
        DType::I32 => cast_from(x.get::<i32>(), float, out),
        DType::I64 => cast_from(x.get::<i64>(), float, out),
        DType::U32 => cast_from(x.get::<u32>(), float, out),
        DType::U16 => cast_from(x.get::<u16>(), float, out),
        DType::U64 => cast_from(x.get::<u64>(), float, out),
        DType::C64 => cast_from(x.get::<Complex32>(), float, out),
        d @ (DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1) => {
            let table = minifloat::dtype_table(d).ok_or_else(|| format!("Cast: no decoder for {d}"))?;
            let values: Vec<f32> = x.bytes.iter().map(|&c| table[usize::from(c)]).collect();
            cast_from(&values, true, out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn run(from: DType, bytes: &[u8], to: DType) -> Vec<u8> {
        let n = bytes.len() / from.size();
        let dims = [n];
        let mut out = vec![0u8; n * to.size()];
        cast(In { dtype: from, dims: &dims, bytes }, &mut Out { dtype: to, dims: &dims, bytes: &mut out }).unwrap();
        out
    }

    fn fixture() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/ir/minifloat_codes.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// int64 → the sub-byte integers wraps as ml_dtypes' `astype` does.
    #[test]
    fn integers_wrap_into_sub_byte_types_as_ml_dtypes() {
        let f = fixture();
        for d in [DType::I4, DType::U4, DType::I2, DType::U2] {
            let wide: Vec<i64> = f[d.name()]["wide"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            let want: Vec<i64> = f[d.name()]["wrapped"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            let got = run(DType::I64, bytemuck::cast_slice(&wide), d);
            let back = run(d, &got, DType::I64);
            assert_eq!(bytemuck::cast_slice::<u8, i64>(&back), want.as_slice(), "{d}");
        }
    }

    /// Every finite code of each minifloat survives a trip through f32, f16 and f64, and each
    /// float's value is the codec table's. (E8M0's code 0, 2^-127, is an f32 subnormal, which
    /// ONNX's round-up takes to 2^-126.)
    #[test]
    fn minifloat_codes_round_trip_through_wider_floats() {
        for d in DType::ALL.into_iter().filter(|d| d.is_minifloat()) {
            let table = minifloat::dtype_table(d).unwrap();
            let codes: Vec<u8> = (0..=255u8)
                .filter(|&c| table[usize::from(c)].is_finite() && (d != DType::F4E2M1 || c < 16) && (d != DType::F8E8M0 || c > 0))
                .collect();
            for wide in [DType::F32, DType::F64, DType::F16] {
                let w = run(d, &codes, wide);
                let values: Vec<f64> = match wide {
                    DType::F32 => bytemuck::cast_slice::<u8, f32>(&w).iter().map(|&v| f64::from(v)).collect(),
                    DType::F64 => bytemuck::cast_slice::<u8, f64>(&w).to_vec(),
                    _ => bytemuck::cast_slice::<u8, f16>(&w).iter().map(|v| v.to_f64()).collect(),
                };
                let exact = d != DType::F8E8M0 || wide != DType::F16;
                for (&c, v) in codes.iter().zip(&values) {
                    if exact {
                        assert_eq!(*v, f64::from(table[usize::from(c)]), "{d} code {c:#04x} as {wide}");
                    }
                }
                if exact {
                    assert_eq!(run(wide, &w, d), codes, "{d} through {wide}");
                }
            }
        }
    }

    /// u64 beyond i64's range converts to floats by value, and floats saturate into u64.
    #[test]
    fn u64_converts_by_value() {
        let big = [u64::MAX, 1 << 63, 12_345];
        let f = run(DType::U64, bytemuck::cast_slice(&big), DType::F64);
        assert_eq!(bytemuck::cast_slice::<u8, f64>(&f), &[u64::MAX as f64, 2f64.powi(63), 12_345.0]);
        let back = run(DType::F64, bytemuck::cast_slice(&[-1.0f64, 3e19, 7.9]), DType::U64);
        assert_eq!(bytemuck::cast_slice::<u8, u64>(&back), &[0, u64::MAX, 7]);
    }
}
