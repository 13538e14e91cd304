//! Low-precision formats (OPS.md §5 `ScaledMatMul`, §14 `ScaledDequantize`): every format has
//! at most 256 codes, so decoding is a `Gather` from a 256-entry F32 table of the format's
//! values (`rlx_ir::ops::quant::minifloat`) — bit-exact, NaN and infinities included.

use super::{f32_of, repeat_blocks};
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::quant::{minifloat, ScaleLayout, ScaledFormat, ScaledMatMul};
use rlx_ir::{DType, Graph, IrError, Shape, ValueId};

/// The 256 decoded values of a format's codes.
pub(super) fn table(f: &ScaledFormat) -> Vec<f32> {
    (0..=255u8).map(|c| minifloat::decode(f, c)).collect()
}

/// E8M0 scale bytes: `2^(e − 127)`, with `0xFF` NaN.
fn e8m0_table() -> Vec<f32> {
    (0..=255u8).map(minifloat::e8m0).collect()
}

/// `table[codes]` as F32 of the codes' shape (`Cast` to I32, `Gather`).
pub(super) fn decode(g: &mut Graph, codes: ValueId, table: &[f32]) -> Result<ValueId, IrError> {
    let lut = g.constant_f32(&[table.len()], table)?;
    let idx = g.cast(codes, DType::I32)?;
    g.gather(lut, idx, 0)
}

/// `decode(code)·s(block)`: the codes through their format's table; a per-tensor scale
/// multiplies directly, block scales (E8M0 bytes, or OCP E4M3 bytes for `Nvfp4`) are decoded
/// the same way and repeated over their blocks of the last axis.
pub fn dequantize(
    g: &mut Graph,
    format: &ScaledFormat,
    layout: &ScaleLayout,
    codes: ValueId,
    scale: ValueId,
) -> Result<ValueId, IrError> {
    let v = decode(g, codes, &table(format))?;
    let rank = g.ty(codes).rank();
    let s = match *layout {
        ScaleLayout::PerTensor if rank == 0 => g.reshape_to(scale, &Shape::scalar())?,
        ScaleLayout::PerTensor => scale,
        ScaleLayout::BlockMxE8M0 { block } | ScaleLayout::Nvfp4 { group: block } => {
            let bytes = if matches!(layout, ScaleLayout::BlockMxE8M0 { .. }) {
                e8m0_table()
            } else {
                table(&ScaledFormat::F8E4M3)
            };
            let s = decode(g, scale, &bytes)?;
            let k = g.ty(codes).static_dim(rank - 1).map_err(|e| IrError::Invalid(format!("block scales: {e}")))?;
            repeat_blocks(g, s, rank - 1, block, k)?
        }
    };
    g.binary(BinaryOp::Mul, v, s)
}

/// Two `ScaledDequantize`, `Transpose(rhs)`, `MatMul`, and the bias `Add`.
pub fn matmul(g: &mut Graph, s: &ScaledMatMul, x: &[ValueId]) -> Result<ValueId, IrError> {
    let lhs = g.scaled_dequantize(s.lhs_format.clone(), s.scale_layout.clone(), x[0], x[2])?;
    let rhs = g.scaled_dequantize(s.rhs_format.clone(), s.scale_layout.clone(), x[1], x[3])?;
    let rhs = g.transpose(rhs, &[1, 0])?;
    let y = g.matmul(lhs, rhs)?;
    match x.get(4) {
        Some(&bias) => {
            let bias = f32_of(g, bias)?;
            g.binary(BinaryOp::Add, y, bias)
        }
        None => Ok(y),
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::build::testing::{count, lower_text};
    use super::*;
    use rlx_ir::OpKind;

    fn max_finite(f: &ScaledFormat) -> f32 {
        table(f).into_iter().filter(|v| v.is_finite()).fold(0.0, f32::max)
    }

    #[test]
    fn tables_decode_the_formats_bit_exactly() {
        let e4m3 = table(&ScaledFormat::F8E4M3);
        assert_eq!((e4m3[0x38], e4m3[0x01], e4m3[0x7E], e4m3[0xC0]), (1.0, 2f32.powi(-9), 448.0, -2.0));
        assert!(e4m3[0x7F].is_nan() && e4m3[0xFF].is_nan() && e4m3.iter().filter(|v| v.is_nan()).count() == 2);
        let e5m2 = table(&ScaledFormat::F8E5M2);
        assert_eq!((e5m2[0x3C], e5m2[0x7B], e5m2[0x7C], e5m2[0xFC]), (1.0, 57344.0, f32::INFINITY, f32::NEG_INFINITY));
        assert!(e5m2[0x7D].is_nan());
        let fnuz = table(&ScaledFormat::F8E4M3Fnuz);
        assert_eq!((fnuz[0x40], fnuz[0x7F], fnuz[0x00]), (1.0, 240.0, 0.0));
        assert!(fnuz[0x80].is_nan() && fnuz.iter().filter(|v| v.is_nan()).count() == 1);
        let fp4: Vec<f32> = table(&ScaledFormat::F4E2M1)[..16].to_vec();
        assert_eq!(fp4, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]);
        // High bits beyond a narrow format are ignored.
        assert_eq!(table(&ScaledFormat::F4E2M1)[0x17], 6.0);
        let custom = ScaledFormat::Custom { exp_bits: 3, mant_bits: 4, bias: None };
        for f in [
            ScaledFormat::F8E4M3,
            ScaledFormat::F8E5M2,
            ScaledFormat::F8E4M3Fnuz,
            ScaledFormat::F8E5M2Fnuz,
            ScaledFormat::F6E2M3,
            ScaledFormat::F6E3M2,
            ScaledFormat::F4E2M1,
            custom,
        ] {
            assert_eq!(max_finite(&f), f.max_finite(), "{f:?}");
        }
        let e8m0 = e8m0_table();
        assert_eq!((e8m0[127], e8m0[0], e8m0[254]), (1.0, 2f32.powi(-127), 2f32.powi(127)));
        assert!(e8m0[255].is_nan());
    }

    #[test]
    fn scaled_matmul_dequantizes_both_operands() {
        let out = lower_text(
            r#"%0 = Input(name:"a",ty:(dtype:U8,shape:["M",40]))()
            %1 = Input(name:"sa",ty:(dtype:U8,shape:["M",2]))()
            %2 = Param(name:"b",ty:(dtype:U8,shape:[6,40]))()
            %3 = Param(name:"sb",ty:(dtype:U8,shape:[6,2]))()
            %4 = Param(name:"bias",ty:(dtype:F32,shape:[6]))()
            %5 = ScaledMatMul(lhs_format:F8E4M3,rhs_format:F4E2M1,scale_layout:BlockMxE8M0(block:32),has_bias:true)(%0, %2, %1, %3, %4)
            %6 = Input(name:"c",ty:(dtype:U8,shape:[3,5]))()
            %7 = Input(name:"sc",ty:(dtype:F32,shape:[1]))()
            %8 = ScaledDequantize(format:F8E5M2Fnuz,scale_layout:PerTensor)(%6, %7)
            %9 = Input(name:"sn",ty:(dtype:U8,shape:["M",3]))()
            %10 = ScaledDequantize(format:F8E4M3,scale_layout:Nvfp4(group:16))(%0, %9)
            return %5, %8, %10"#,
            OpKind::ScaledMatMul,
            &[],
        );
        assert_eq!(count(&out, OpKind::ScaledDequantize), 0);
        // Codes and block scales of three block-scaled operands, codes of the per-tensor one.
        assert_eq!(count(&out, OpKind::Gather), 7);
        // The ragged last block of K = 40 (two blocks of 32) is cut, once per block operand.
        assert_eq!(count(&out, OpKind::Narrow), 3);
    }
}
