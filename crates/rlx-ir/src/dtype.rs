//! Element types of tensors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
///
/// `C64` is a complex number stored as interleaved `[re, im]` f32 pairs (8 bytes).
/// `Bool` is one byte per element, `0` false and anything else true.
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
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 12] = [
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
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
        }
    }

    /// Real floating-point types (not `C64`).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// Integer types (not `Bool`).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::U8 | DType::I16 | DType::I32 | DType::I64 | DType::U32
        )
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
    }
}
