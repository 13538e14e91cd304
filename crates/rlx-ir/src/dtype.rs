//! Element types of tensors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
///
/// `C64` is a complex number stored as interleaved `[re, im]` f32 pairs (8 bytes).
/// `Bool` is one byte per element, `0` false and anything else true.
///
/// The narrow types ONNX defines take one byte per element in rlx tensors, so every kernel
/// indexes them like `U8`: the 8-bit floats (`F8*`) and `F4E2M1` hold their code (FP4 in the
/// low nibble), `I4`/`I2` a sign-extended `i8`, `U4`/`U2` a `u8`. Packing two (4-bit) or four
/// (2-bit) elements to a byte happens only at file boundaries (ONNX tensors). The minifloat
/// codes decode with `ops::quant::minifloat`; they are storage types that `Cast` converts and
/// data-movement ops copy, not arithmetic types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    U8,
    I16,
    I32,
    I64,
    U32,
    Bool,
    C64,
    U16,
    U64,
    /// OCP FP8 E4M3 (`float8_e4m3fn`): no infinities, `S.1111.111` NaN, max 448.
    F8E4M3FN,
    /// AMD FNUZ FP8 E4M3 (bias 8): `0x80` NaN, no infinities or −0, max 240.
    F8E4M3FNUZ,
    /// OCP FP8 E5M2: IEEE-style infinities and NaNs, max 57344.
    F8E5M2,
    /// AMD FNUZ FP8 E5M2 (bias 16): `0x80` NaN, no infinities or −0, max 57344.
    F8E5M2FNUZ,
    /// OCP MX E8M0 (`float8_e8m0fnu`): `2^(code − 127)`, `0xFF` NaN; unsigned, no zero.
    F8E8M0,
    /// OCP MX FP4 E2M1: all 16 codes finite, max 6.
    F4E2M1,
    I4,
    U4,
    I2,
    U2,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 24] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U32,
        DType::Bool,
        DType::C64,
        DType::U16,
        DType::U64,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
    ];

    /// Bytes per element (the narrow types take a byte each).
    pub const fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 => 1,
            DType::F4E2M1 | DType::I4 | DType::U4 | DType::I2 | DType::U2 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
        }
    }

    /// Bits of one element in a packed file tensor: 4 and 2 for the sub-byte types, else
    /// `8 · size`.
    pub const fn packed_bits(self) -> usize {
        match self {
            DType::F4E2M1 | DType::I4 | DType::U4 => 4,
            DType::I2 | DType::U2 => 2,
            d => 8 * d.size(),
        }
    }

    /// Real floating-point types that kernels compute in (not `C64`, not the minifloats).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// The minifloat storage types (8-bit and 4-bit floats), which only `Cast` converts.
    pub const fn is_minifloat(self) -> bool {
        matches!(
            self,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1
        )
    }

    /// Integer types that kernels compute in (not `Bool`, not the sub-byte `I4`/`U4`/`I2`/`U2`).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::U8 | DType::I16 | DType::I32 | DType::I64 | DType::U32 | DType::U16 | DType::U64
        )
    }

    /// The sub-byte integer types, one element per byte.
    pub const fn is_narrow_int(self) -> bool {
        matches!(self, DType::I4 | DType::U4 | DType::I2 | DType::U2)
    }

    /// Types that index tensors: integers, plus `F32` for graphs that encode indices as
    /// whole-valued floats (OPS.md §0 accepts them, truncating toward zero).
    pub const fn is_index(self) -> bool {
        self.is_int() || matches!(self, DType::F32)
    }

    /// Lower-case name used by the text format (`f32`, `bf16`, `bool`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::C64 => "c64",
            DType::U16 => "u16",
            DType::U64 => "u64",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
        }
    }

    /// Parses a name printed by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f128"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(DType::C64.size(), 8);
        assert_eq!(DType::BF16.size(), 2);
        assert_eq!(DType::Bool.size(), 1);
        assert_eq!((DType::U16.size(), DType::U64.size(), DType::F8E5M2.size(), DType::I4.size()), (2, 8, 1, 1));
        assert_eq!((DType::F4E2M1.packed_bits(), DType::U2.packed_bits(), DType::U16.packed_bits()), (4, 2, 16));
    }

    #[test]
    fn narrow_types_round_trip_through_the_text_format() {
        use crate::ops::elementwise::Cast;
        use crate::text::{op_to_string, parse_op};
        for d in DType::ALL {
            let ty = crate::TensorType::parse(&format!("{}[2, B]", d.name())).unwrap();
            assert_eq!(ty.dtype, d);
            let op = crate::Op::Cast(Cast { to: d });
            assert_eq!(parse_op(&op_to_string(&op)).unwrap(), op, "{d}");
        }
    }
}
