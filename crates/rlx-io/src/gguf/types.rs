//! ggml tensor types by their GGUF code: plain element types and the block quant types of
//! [`GgufType`].

use rlx_ir::ops::quant::GgufType;
use rlx_ir::DType;
use std::fmt;

/// The storage type of a GGUF tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// One element per `DType::size()` bytes (F32, F16, BF16, F64, I8, I16, I32, I64).
    Plain(DType),
    /// Blocks of `block_size()` weights in `block_bytes()` bytes.
    Block(GgufType),
}

/// `(code, type)` for every ggml type code in use (codes 4, 5, 31–33 and 36–38 belonged to
/// types ggml has since removed).
const CODES: [(u32, GgmlType); 34] = {
    use GgmlType::{Block as B, Plain as P};
    use GgufType::*;
    [
        (0, P(DType::F32)),
        (1, P(DType::F16)),
        (2, B(Q4_0)),
        (3, B(Q4_1)),
        (6, B(Q5_0)),
        (7, B(Q5_1)),
        (8, B(Q8_0)),
        (9, B(Q8_1)),
        (10, B(Q2_K)),
        (11, B(Q3_K)),
        (12, B(Q4_K)),
        (13, B(Q5_K)),
        (14, B(Q6_K)),
        (15, B(Q8_K)),
        (16, B(IQ2_XXS)),
        (17, B(IQ2_XS)),
        (18, B(IQ3_XXS)),
        (19, B(IQ1_S)),
        (20, B(IQ4_NL)),
        (21, B(IQ3_S)),
        (22, B(IQ2_S)),
        (23, B(IQ4_XS)),
        (24, P(DType::I8)),
        (25, P(DType::I16)),
        (26, P(DType::I32)),
        (27, P(DType::I64)),
        (28, P(DType::F64)),
        (29, B(IQ1_M)),
        (30, P(DType::BF16)),
        (34, B(TQ1_0)),
        (35, B(TQ2_0)),
        (39, B(MXFP4)),
        (40, B(NVFP4)),
        (41, B(Q1_0)),
    ]
};

impl GgmlType {
    /// The type of GGUF code `code`, if ggml defines it.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        CODES.iter().find(|(c, _)| *c == code).map(|&(_, t)| t)
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::Plain(_) => 1,
            GgmlType::Block(t) => t.block_size(),
        }
    }

    /// Bytes per block (the element size for plain types).
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::Plain(d) => d.size(),
            GgmlType::Block(t) => t.block_bytes(),
        }
    }
}

/// ggml's name: `F32`, `BF16`, `Q4_K`, ….
impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgmlType::Plain(d) => f.write_str(&d.name().to_uppercase()),
            GgmlType::Block(t) => write!(f, "{t:?}"),
        }
    }
}
