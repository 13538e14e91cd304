//! Native low-precision GEMM with f32 accumulation and its operand prep (OPS.md §5
//! `ScaledMatMul`, §14 `ScaledQuantScale` / `ScaledQuantize` / `ScaledDequantize`).
//!
//! Codes are one U8 per element in the logical shape; block scales run along the last axis
//! with `⌈K/block⌉` bytes per row; a per-tensor scale is one f32 `[1]`.

use super::{last_dim, need_dtype, need_float, need_shape, ScaleLayout, ScaledFormat};
use crate::ops::matmul::{dims_agree, need_rank};
use crate::ops::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `out[m, n] = Σ_k (decode(lhs[m,k])·s_l)·(decode(rhs[n,k])·s_r) (+ bias[n])` → `[m, n]` F32,
/// with `lhs [m, k]` and `rhs [n, k]` U8 codes (TN layout, both K-last), their scales, and
/// `bias [n]` iff `has_bias`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledMatMul {
    pub lhs_format: ScaledFormat,
    pub rhs_format: ScaledFormat,
    pub scale_layout: ScaleLayout,
    pub has_bias: bool,
}

/// Computes the scales of `x` F32: `amax / max_finite(format)` per tensor (f32 `[1]`, 1 when
/// amax = 0) or per block (U8 `x.shape[:-1] ++ [⌈K/block⌉]`; E8M0 rounds up to a power of
/// two, NVFP4 encodes E4M3). [def] K must be static (OPS.md would declare a dynamic one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledQuantScale {
    pub format: ScaledFormat,
    pub scale_layout: ScaleLayout,
}

/// `code = encode(format, x / s(block))`, rounding to nearest (ties even) and saturating;
/// inputs `(x, scale)`, output U8 codes of `x`'s shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledQuantize {
    pub format: ScaledFormat,
    pub scale_layout: ScaleLayout,
}

/// `decode(code)·s(block)`, bit-exact; inputs `(codes, scale)`, output F32 of the codes' shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaledDequantize {
    pub format: ScaledFormat,
    pub scale_layout: ScaleLayout,
}

/// Checks `scale` is what `ScaledQuantScale` gives for an `operand` of this layout (the block
/// count is checked when K is static).
fn check_scale(layout: &ScaleLayout, what: &str, operand: &TensorType, scale: &TensorType) -> Result<(), String> {
    let Some(block) = layout.block() else {
        need_dtype(what, scale, &[DType::F32])?;
        return need_shape(what, scale, &[Some(Dim::Static(1))]);
    };
    need_dtype(what, scale, &[DType::U8])?;
    let k = last_dim("the scaled operand", operand, 1)?;
    let mut want: Vec<Option<Dim>> = operand.shape.dims()[..operand.rank() - 1].iter().cloned().map(Some).collect();
    want.push(k.as_static().map(|k| Dim::Static(k.div_ceil(block))));
    need_shape(&format!("{what} [.., ⌈K/{block}⌉]"), scale, &want)
}

fn validate(format: &ScaledFormat, layout: &ScaleLayout) -> Result<(), String> {
    format.validate()?;
    layout.validate()
}

impl OpDef for ScaledMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(4 + usize::from(self.has_bias))
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        validate(&self.lhs_format, &self.scale_layout)?;
        self.rhs_format.validate()?;
        let (lhs, rhs) = (&inputs[0], &inputs[1]);
        need_dtype("lhs codes", lhs, &[DType::U8])?;
        need_dtype("rhs codes", rhs, &[DType::U8])?;
        need_rank("lhs [m, k]", lhs, 2)?;
        need_rank("rhs [n, k] (TN layout)", rhs, 2)?;
        if !dims_agree(lhs.shape.dim(1), rhs.shape.dim(1)) {
            return Err(format!("K differs: lhs {} vs rhs {} (both K-last)", lhs.shape, rhs.shape));
        }
        check_scale(&self.scale_layout, "lhs_scale", lhs, &inputs[2])?;
        check_scale(&self.scale_layout, "rhs_scale", rhs, &inputs[3])?;
        let n = rhs.shape.dim(0).clone();
        if let Some(bias) = inputs.get(4) {
            need_float("bias", bias)?;
            need_shape("bias [n]", bias, &[Some(n.clone())])?;
        }
        Ok(vec![TensorType::new(DType::F32, Shape(vec![lhs.shape.dim(0).clone(), n]))])
    }
}

impl OpDef for ScaledQuantScale {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        validate(&self.format, &self.scale_layout)?;
        let x = &inputs[0];
        need_float("x", x)?;
        let Some(block) = self.scale_layout.block() else {
            return Ok(vec![TensorType::of(DType::F32, &[1])]);
        };
        last_dim("x", x, 1)?;
        let k = x.static_dim(x.rank() - 1)?;
        let mut dims = x.shape.0.clone();
        dims.pop();
        dims.push(Dim::Static(k.div_ceil(block)));
        Ok(vec![TensorType::new(DType::U8, Shape(dims))])
    }
}

impl OpDef for ScaledQuantize {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        validate(&self.format, &self.scale_layout)?;
        let x = &inputs[0];
        need_float("x", x)?;
        check_scale(&self.scale_layout, "scale", x, &inputs[1])?;
        Ok(vec![x.with_dtype(DType::U8)])
    }
}

impl OpDef for ScaledDequantize {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        validate(&self.format, &self.scale_layout)?;
        let codes = &inputs[0];
        need_dtype("codes", codes, &[DType::U8])?;
        check_scale(&self.scale_layout, "scale", codes, &inputs[1])?;
        Ok(vec![codes.with_dtype(DType::F32)])
    }
}

/// Builders for the scaled low-precision ops.
impl crate::Graph {
    /// Low-precision GEMM `lhs · rhsᵀ`; `has_bias` is set from `bias`.
    pub fn scaled_matmul(
        &mut self,
        mut attrs: ScaledMatMul,
        lhs: ValueId,
        rhs: ValueId,
        lhs_scale: ValueId,
        rhs_scale: ValueId,
        bias: Option<ValueId>,
    ) -> crate::Result<ValueId> {
        attrs.has_bias = bias.is_some();
        let mut inputs = vec![lhs, rhs, lhs_scale, rhs_scale];
        inputs.extend(bias);
        self.add1(attrs, &inputs)
    }

    /// The scales that quantize `x` to `format`.
    pub fn scaled_quant_scale(&mut self, format: ScaledFormat, scale_layout: ScaleLayout, x: ValueId) -> crate::Result<ValueId> {
        self.add1(ScaledQuantScale { format, scale_layout }, &[x])
    }

    /// `x` encoded as `format` codes under `scale`.
    pub fn scaled_quantize(
        &mut self,
        format: ScaledFormat,
        scale_layout: ScaleLayout,
        x: ValueId,
        scale: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(ScaledQuantize { format, scale_layout }, &[x, scale])
    }

    /// `format` codes decoded to F32 under `scale`.
    pub fn scaled_dequantize(
        &mut self,
        format: ScaledFormat,
        scale_layout: ScaleLayout,
        codes: ValueId,
        scale: ValueId,
    ) -> crate::Result<ValueId> {
        self.add1(ScaledDequantize { format, scale_layout }, &[codes, scale])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    const MX: ScaleLayout = ScaleLayout::BlockMxE8M0 { block: 32 };

    #[test]
    fn prep_then_gemm() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec!["M".into(), 100.into()])));
        let s = g.scaled_quant_scale(ScaledFormat::F8E4M3, MX, x).unwrap();
        assert_eq!(g.ty(s), &TensorType::new(DType::U8, Shape(vec!["M".into(), 4.into()])));
        let q = g.scaled_quantize(ScaledFormat::F8E4M3, MX, x, s).unwrap();
        let w = g.param("w", TensorType::of(DType::U8, &[64, 100]));
        let ws = g.param("ws", TensorType::of(DType::U8, &[64, 4]));
        let attrs = ScaledMatMul {
            lhs_format: ScaledFormat::F8E4M3,
            rhs_format: ScaledFormat::F4E2M1,
            scale_layout: MX,
            has_bias: false,
        };
        let y = g.scaled_matmul(attrs.clone(), q, w, s, ws, None).unwrap();
        assert_eq!(g.ty(y), &TensorType::new(DType::F32, Shape(vec!["M".into(), 64.into()])));
        let short = g.param("short", TensorType::of(DType::U8, &[32, 4]));
        let e = g.scaled_matmul(attrs, q, w, s, short, None).unwrap_err().to_string();
        assert!(e.contains("rhs_scale [.., ⌈K/32⌉] must be [64, 4]"), "{e}");
        let d = g.scaled_dequantize(ScaledFormat::F8E4M3, MX, q, s).unwrap();
        assert_eq!(g.ty(d), g.ty(x));
    }

    #[test]
    fn per_tensor_and_symbolic_k() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec![4.into(), "K".into()])));
        let s = g.scaled_quant_scale(ScaledFormat::F8E5M2, ScaleLayout::PerTensor, x).unwrap();
        assert_eq!(g.ty(s), &TensorType::of(DType::F32, &[1]));
        let e = g.scaled_quant_scale(ScaledFormat::F8E5M2, MX, x).unwrap_err().to_string();
        assert!(e.contains("symbolic (K)"), "{e}");
        let bad = ScaledFormat::Custom { exp_bits: 5, mant_bits: 3, bias: None };
        assert!(g.scaled_quant_scale(bad, ScaleLayout::PerTensor, x).is_err());
    }
}
