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
