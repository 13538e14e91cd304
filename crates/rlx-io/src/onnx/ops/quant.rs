//! `QuantizeLinear` and `DequantizeLinear` (per tensor, per axis, or blocked along one axis)
//! and `DynamicQuantizeLinear` (uint8 with the scale and zero point from the input's range),
//! as casts, scaling, rounding half to even and clamping to the target range for the integer
//! types (sub-byte ones included); the minifloat types take the scaled value through ONNX's
//! `Cast` (`saturate` as there).

use super::elementwise::{act, bin, cast_to, cast_value};
use super::shape::{expand_to, reshape_static};
use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::tensor::{dtype, type_name};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::shape::Narrow;
use rlx_ir::{DType, Shape, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("QuantizeLinear", quantize),
    ("DequantizeLinear", dequantize),
    ("DynamicQuantizeLinear", dynamic_quantize),
];

/// Reshapes a scale or zero point to broadcast against `x`: a scalar as is, a vector along
/// `axis`, a blocked tensor repeated `block_size` times along `axis`.
fn broadcastable(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, v: ValueId, x: ValueId) -> OpResult<ValueId> {
    let vd = cx.dims(v)?;
    let xd = cx.dims(x)?;
    let count: usize = vd.iter().product();
    if vd.is_empty() || (count == 1 && vd.len() <= 1) {
        return reshape_static(cx, v, &[]);
    }
    let axis = n.axis(n.int("axis", 1), xd.len())?;
    let block = n.int("block_size", 0);
    if block <= 0 {
        if vd.len() != 1 || vd[0] != xd[axis] {
            return invalid(format!("per-axis parameter {vd:?} must have the {} entries of axis {axis}", xd[axis]));
        }
        let mut dims = vec![1; xd.len()];
        dims[axis] = xd[axis];
        return reshape_static(cx, v, &dims);
    }
    let block = block as usize;
    if vd.len() != xd.len() {
        return invalid(format!("blocked parameter {vd:?} must have the rank of x {xd:?}"));
    }
    let mut split = vd.clone();
    split.insert(axis + 1, 1);
    let y = reshape_static(cx, v, &split)?;
    let mut wide = vd.clone();
    wide.insert(axis + 1, block);
    let y = expand_to(cx, y, &Shape::of(&wide))?;
    let mut flat = vd.clone();
    flat[axis] *= block;
    let y = reshape_static(cx, y, &flat)?;
    if flat[axis] == xd[axis] {
        return Ok(y);
    }
    cx.add1(Narrow { axis, start: 0, len: xd[axis] }, &[y])
}

fn range(dt: DType) -> OpResult<(f64, f64)> {
    Ok(match dt {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I4 => (-8.0, 7.0),
        DType::U4 => (0.0, 15.0),
        DType::I2 => (-2.0, 1.0),
        DType::U2 => (0.0, 3.0),
        d => return unsupported(format!("quantizing to {d}")),
    })
}

fn quantize(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let zp = n.opt_input(2);
    let out = match (n.attr("output_dtype").map(|a| a.i as i32).filter(|&c| c != 0), zp) {
        (Some(code), _) => dtype(code).ok_or_else(|| OpError::Unsupported(format!("output_dtype {}", type_name(code))))?,
        (None, Some(z)) => cx.dtype(z),
        (None, None) => DType::U8,
    };
    let work = DType::F32;
    let xf = cast_to(cx, x, work)?;
    let scale = cast_to(cx, n.input(1)?, work)?;
    let scale = broadcastable(cx, n, scale, x)?;
    let q = bin(cx, BinaryOp::Div, xf, scale)?;
    if out.is_minifloat() {
        let q = match zp {
            Some(z) => {
                let z = cast_to(cx, z, work)?;
                let z = broadcastable(cx, n, z, x)?;
                bin(cx, BinaryOp::Add, q, z)?
            }
            None => q,
        };
        return Ok(vec![cast_value(cx, n, q, out)?]);
    }
    let (lo, hi) = range(out)?;
    let mut q = act(cx, ActivationKind::Round, q)?;
    if let Some(z) = zp {
        let z = cast_to(cx, z, work)?;
        let z = broadcastable(cx, n, z, x)?;
        q = bin(cx, BinaryOp::Add, q, z)?;
    }
    let lo = cx.scalar(work, lo)?;
    let hi = cx.scalar(work, hi)?;
    let q = bin(cx, BinaryOp::Max, q, lo)?;
    let q = bin(cx, BinaryOp::Min, q, hi)?;
    Ok(vec![cast_to(cx, q, out)?])
}

fn dequantize(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let scale = n.input(1)?;
    let out = cx.dtype(scale);
    let work = DType::F32;
    let mut v = cast_to(cx, x, work)?;
    if let Some(z) = n.opt_input(2) {
        let z = cast_to(cx, z, work)?;
        let z = broadcastable(cx, n, z, x)?;
        v = bin(cx, BinaryOp::Sub, v, z)?;
    }
    let s = cast_to(cx, scale, work)?;
    let s = broadcastable(cx, n, s, x)?;
    let y = bin(cx, BinaryOp::Mul, v, s)?;
    Ok(vec![cast_to(cx, y, out)?])
}

/// `DynamicQuantizeLinear`: `scale = (max(x, 0) − min(x, 0))/255`, `zero_point =
/// clamp(round(−min/scale))`, then `QuantizeLinear` to uint8; outputs `y`, scale, zero point.
fn dynamic_quantize(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    use rlx_ir::ops::reduce::{Reduce, ReduceOp};
    let x = cast_to(cx, n.input(0)?, DType::F32)?;
    let axes: Vec<usize> = (0..cx.rank(x)).collect();
    let zero = cx.scalar(DType::F32, 0.0)?;
    let hi = cx.add1(Reduce { op: ReduceOp::Max, axes: axes.clone(), keep_dim: false }, &[x])?;
    let lo = cx.add1(Reduce { op: ReduceOp::Min, axes, keep_dim: false }, &[x])?;
    let hi = bin(cx, BinaryOp::Max, hi, zero)?;
    let lo = bin(cx, BinaryOp::Min, lo, zero)?;
    let span = bin(cx, BinaryOp::Sub, hi, lo)?;
    let c255 = cx.scalar(DType::F32, 255.0)?;
    let scale = bin(cx, BinaryOp::Div, span, c255)?;
    let neg_lo = act(cx, ActivationKind::Neg, lo)?;
    let zp = bin(cx, BinaryOp::Div, neg_lo, scale)?;
    let zp = act(cx, ActivationKind::Round, zp)?;
    let zp = bin(cx, BinaryOp::Max, zp, zero)?;
    let zp = bin(cx, BinaryOp::Min, zp, c255)?;
    let q = bin(cx, BinaryOp::Div, x, scale)?;
    let q = act(cx, ActivationKind::Round, q)?;
    let q = bin(cx, BinaryOp::Add, q, zp)?;
    let q = bin(cx, BinaryOp::Max, q, zero)?;
    let q = bin(cx, BinaryOp::Min, q, c255)?;
    Ok(vec![cast_to(cx, q, DType::U8)?, scale, cast_to(cx, zp, DType::U8)?])
}
