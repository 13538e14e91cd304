//! ONNX-style integer quantization (OPS.md §14): affine `Quantize`/`Dequantize` with
//! constant per-tensor or per-channel parameters, and true INT8 `QMatMul`/`QConv2d` with I32
//! accumulation and F32 requantization (ONNX `QLinearMatMul`/`QLinearConv`). All rounding is
//! half to even, saturating to `[−128, 127]`.

use super::{need_dtype, need_shape};
use crate::ops::matmul::{dims_agree, need_rank};
use crate::ops::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `q = clamp(round(x/s[c]) + zp[c], −128, 127)` → I8, `c = idx[axis]` (or 0 per tensor);
/// `scales`/`zero_points` have length 1 or `dim(axis)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantize {
    pub axis: Option<usize>,
    pub scales: Vec<f32>,
    pub zero_points: Vec<i32>,
}

/// `x = (q − zp[c])·s[c]`: I8 → F32, parameters as `Quantize`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dequantize {
    pub axis: Option<usize>,
    pub scales: Vec<f32>,
    pub zero_points: Vec<i32>,
}

/// INT8 GEMM: `acc = bias[n] + Σ_k (x−x_zp)(w−w_zp)` in I32, then
/// `out = clamp(round(acc·mult) + out_zp, −128, 127)`; `x [M, K]`, `w [K, N]` I8,
/// `bias [N]` I32 (zeros = none) → `[M, N]` I8. `mult = s_x·s_w/s_out`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QMatMul {
    pub x_zp: i32,
    pub w_zp: i32,
    pub out_zp: i32,
    pub mult: f32,
}

/// INT8 NCHW convolution with `QMatMul`'s requantization: `x [N, C_in, H, W]`,
/// `w [C_out, C_in/groups, kH, kW]` I8, `bias [C_out]` I32 → `[N, C_out, H_o, W_o]` I8.
/// Geometry as `Conv` (OPS.md §10): missing stride/dilation entries are 1, padding 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QConv2d {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
    pub x_zp: i32,
    pub w_zp: i32,
    pub out_zp: i32,
    pub mult: f32,
}

/// Checks an I8 zero point.
fn check_zp(what: &str, zp: i32) -> Result<(), String> {
    if (-128..=127).contains(&zp) {
        Ok(())
    } else {
        Err(format!("{what} {zp} is outside the i8 range"))
    }
}

/// Checks the affine parameters of `Quantize`/`Dequantize` against the operand `x`.
fn check_affine(axis: Option<usize>, scales: &[f32], zero_points: &[i32], x: &TensorType) -> Result<(), String> {
    if scales.is_empty() || scales.len() != zero_points.len() {
        return Err(format!(
            "scales and zero_points need one equal, non-zero length, got {} and {}",
            scales.len(),
            zero_points.len()
        ));
    }
    if let Some(s) = scales.iter().find(|s| !s.is_finite() || **s < 0.0) {
        return Err(format!("scales must be finite and non-negative, got {s}"));
    }
    for &zp in zero_points {
        check_zp("zero point", zp)?;
    }
    let len = scales.len();
    match axis {
        None if len == 1 => Ok(()),
        None => Err(format!("{len} scales need an axis (per-tensor takes 1)")),
        Some(a) if a >= x.rank() => Err(format!("axis {a} is out of range for {x}")),
        Some(a) if len == 1 || dims_agree(x.shape.dim(a), &Dim::Static(len)) => Ok(()),
        Some(a) => Err(format!("{len} scales do not match axis {a} of {x}")),
    }
}

/// Checks the requantization attributes shared by `QMatMul` and `QConv2d`.
fn check_requant(x_zp: i32, w_zp: i32, out_zp: i32, mult: f32) -> Result<(), String> {
    check_zp("x_zp", x_zp)?;
    check_zp("w_zp", w_zp)?;
    check_zp("out_zp", out_zp)?;
    if mult.is_finite() && mult > 0.0 {
        Ok(())
    } else {
        Err(format!("mult must be finite and positive, got {mult}"))
    }
}

impl OpDef for Quantize {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        need_dtype("x", x, &[DType::F32, DType::F16, DType::BF16])?;
        check_affine(self.axis, &self.scales, &self.zero_points, x)?;
        Ok(vec![x.with_dtype(DType::I8)])
    }
}

impl OpDef for Dequantize {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let q = &inputs[0];
        need_dtype("q", q, &[DType::I8])?;
        check_affine(self.axis, &self.scales, &self.zero_points, q)?;
        Ok(vec![q.with_dtype(DType::F32)])
    }
}

impl OpDef for QMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_requant(self.x_zp, self.w_zp, self.out_zp, self.mult)?;
        let (x, w, bias) = (&inputs[0], &inputs[1], &inputs[2]);
        need_dtype("x", x, &[DType::I8])?;
        need_dtype("w", w, &[DType::I8])?;
        need_rank("x [M, K]", x, 2)?;
        need_rank("w [K, N]", w, 2)?;
        if !dims_agree(x.shape.dim(1), w.shape.dim(0)) {
            return Err(format!("inner dims differ: {} x {}", x.shape, w.shape));
        }
        let n = w.shape.dim(1).clone();
        need_dtype("bias", bias, &[DType::I32])?;
        need_shape("bias [N]", bias, &[Some(n.clone())])?;
        Ok(vec![TensorType::new(DType::I8, Shape(vec![x.shape.dim(0).clone(), n]))])
    }
}

impl QConv2d {
    /// `(stride, padding, dilation)` of spatial axis `i`, defaults filled in.
    fn geometry(&self, i: usize) -> (usize, usize, usize) {
        let at = |v: &[usize], d| v.get(i).copied().unwrap_or(d);
        (at(&self.stride, 1), at(&self.padding, 0), at(&self.dilation, 1))
    }

    /// Checks the attribute vectors' lengths and ranges.
    fn check_attrs(&self) -> Result<(), String> {
        if self.kernel_size.len() != 2 || self.kernel_size.contains(&0) {
            return Err(format!("kernel_size must be two positive sizes, got {:?}", self.kernel_size));
        }
        for (name, v) in [("stride", &self.stride), ("padding", &self.padding), ("dilation", &self.dilation)] {
            if v.len() > 2 {
                return Err(format!("{name} takes at most 2 entries, got {v:?}"));
            }
        }
        if self.stride.contains(&0) || self.dilation.contains(&0) || self.groups == 0 {
            return Err(format!(
                "stride {:?}, dilation {:?} and groups {} must be positive",
                self.stride, self.dilation, self.groups
            ));
        }
        check_requant(self.x_zp, self.w_zp, self.out_zp, self.mult)
    }
}

impl OpDef for QConv2d {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        self.check_attrs()?;
        let (x, w, bias) = (&inputs[0], &inputs[1], &inputs[2]);
        need_dtype("x", x, &[DType::I8])?;
        need_dtype("w", w, &[DType::I8])?;
        need_rank("x [N, C_in, H, W]", x, 4)?;
        let (k_h, k_w) = (self.kernel_size[0], self.kernel_size[1]);
        need_shape("w [C_out, C_in/groups, kH, kW]", w, &[None, None, Some(k_h.into()), Some(k_w.into())])?;
        let (c_in, c_out, per_group) = (x.shape.dim(1), w.shape.dim(0), w.shape.dim(1));
        if let Some(c) = c_in.as_static() {
            let want = per_group.as_static().map(|p| p * self.groups);
            if c % self.groups != 0 || want.is_some_and(|want| want != c) {
                return Err(format!("C_in of x {} must be groups ({}) × w.dim(1) of {}", x.shape, self.groups, w.shape));
            }
        }
        if c_out.as_static().is_some_and(|c| c % self.groups != 0) {
            return Err(format!("C_out of w {} is not divisible by groups {}", w.shape, self.groups));
        }
        need_dtype("bias", bias, &[DType::I32])?;
        need_shape("bias [C_out]", bias, &[Some(c_out.clone())])?;
        let mut dims = vec![x.shape.dim(0).clone(), c_out.clone()];
        for (i, k) in [k_h, k_w].into_iter().enumerate() {
            let size = x.static_dim(2 + i)?;
            let (s, p, d) = self.geometry(i);
            let span = d * (k - 1) + 1;
            if size + 2 * p < span {
                return Err(format!("the dilated kernel ({span}) exceeds the padded input ({}) on axis {}", size + 2 * p, 2 + i));
            }
            dims.push(Dim::Static((size + 2 * p - span) / s + 1));
        }
        Ok(vec![TensorType::new(DType::I8, Shape(dims))])
    }
}

/// Builders for integer quantization.
impl crate::Graph {
    /// Affine quantization to I8 with constant scales and zero points.
    pub fn quantize(&mut self, x: ValueId, axis: Option<usize>, scales: Vec<f32>, zero_points: Vec<i32>) -> crate::Result<ValueId> {
        self.add1(Quantize { axis, scales, zero_points }, &[x])
    }

    /// Affine dequantization of I8 codes to F32.
    pub fn dequantize(&mut self, q: ValueId, axis: Option<usize>, scales: Vec<f32>, zero_points: Vec<i32>) -> crate::Result<ValueId> {
        self.add1(Dequantize { axis, scales, zero_points }, &[q])
    }

    /// INT8 GEMM with requantization.
    pub fn qmatmul(&mut self, attrs: QMatMul, x: ValueId, w: ValueId, bias: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, w, bias])
    }

    /// INT8 convolution with requantization.
    pub fn qconv2d(&mut self, attrs: QConv2d, x: ValueId, w: ValueId, bias: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, w, bias])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    #[test]
    fn affine_parameters() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec!["B".into(), 3.into()])));
        let q = g.quantize(x, Some(1), vec![0.1, 0.2, 0.3], vec![0, 1, -1]).unwrap();
        assert_eq!(g.ty(q).dtype, DType::I8);
        let d = g.dequantize(q, None, vec![0.1], vec![0]).unwrap();
        assert_eq!(g.ty(d), g.ty(x));
        let e = g.quantize(x, Some(1), vec![0.1, 0.2], vec![0, 0]).unwrap_err().to_string();
        assert!(e.contains("2 scales do not match axis 1"), "{e}");
        assert!(g.quantize(x, None, vec![0.1], vec![200]).unwrap_err().to_string().contains("i8 range"));
        assert!(g.dequantize(x, None, vec![0.1], vec![0]).unwrap_err().to_string().contains("q must be i8"));
    }

    fn conv(groups: usize) -> QConv2d {
        QConv2d {
            kernel_size: vec![3, 3],
            stride: vec![2],
            padding: vec![1, 1],
            dilation: vec![],
            groups,
            x_zp: -3,
            w_zp: 0,
            out_zp: 5,
            mult: 0.01,
        }
    }

    #[test]
    fn qconv_geometry() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::I8, Shape(vec!["N".into(), 8.into(), 15.into(), 16.into()])));
        let w = g.param("w", TensorType::of(DType::I8, &[16, 4, 3, 3]));
        let b = g.param("b", TensorType::of(DType::I32, &[16]));
        let y = g.qconv2d(conv(2), x, w, b).unwrap();
        // H: (15 + 2 − 3)/2 + 1 = 8; W takes the default stride 1: 16 + 2 − 3 + 1 = 16.
        assert_eq!(g.ty(y), &TensorType::new(DType::I8, Shape(vec!["N".into(), 16.into(), 8.into(), 16.into()])));
        let e = g.qconv2d(conv(1), x, w, b).unwrap_err().to_string();
        assert!(e.contains("must be groups (1) × w.dim(1)"), "{e}");
    }

    #[test]
    fn qmatmul_shapes() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::of(DType::I8, &[4, 64]));
        let w = g.param("w", TensorType::of(DType::I8, &[64, 32]));
        let b = g.param("b", TensorType::of(DType::I32, &[32]));
        let attrs = QMatMul { x_zp: 0, w_zp: 0, out_zp: 0, mult: 0.5 };
        let y = g.qmatmul(attrs.clone(), x, w, b).unwrap();
        assert_eq!(g.ty(y), &TensorType::of(DType::I8, &[4, 32]));
        let e = g.qmatmul(QMatMul { mult: 0.0, ..attrs }, x, w, b).unwrap_err().to_string();
        assert!(e.contains("mult must be finite and positive"), "{e}");
    }
}
