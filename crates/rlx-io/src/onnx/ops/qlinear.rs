//! Integer matmuls and convolutions: `MatMulInteger` and `ConvInteger` (int32 results) and
//! `QLinearMatMul` and `QLinearConv` (requantized to the output's 8-bit type). Operands minus
//! their zero points are exact integers in F32 (8-bit products summed over the inner extents
//! rlx meets stay below 2^24), so the arithmetic runs as F32 `MatMul` / `Conv`.

use super::conv::{add_channel_bias, conv_values};
use super::elementwise::{act, bin, cast_to};
use super::matmul::matmul_nd;
use super::shape::reshape_static;
use super::{unsupported, Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("MatMulInteger", |cx, n| {
        let (a, b) = matmul_operands(cx, n, 0, n.opt_input(2), 1, n.opt_input(3))?;
        let y = matmul_nd(cx, a, b)?;
        Ok(vec![cast_to(cx, y, DType::I32)?])
    }),
    ("ConvInteger", |cx, n| {
        let x = shifted(cx, n.input(0)?, n.opt_input(2), None)?;
        let w = shifted(cx, n.input(1)?, n.opt_input(3), Some(0))?;
        let y = conv_values(cx, n, x, w)?;
        Ok(vec![cast_to(cx, y, DType::I32)?])
    }),
    ("QLinearMatMul", qlinear_matmul),
    ("QLinearConv", qlinear_conv),
];

/// `v − zero_point` in F32; a 1-D zero point of several entries lies along `axis` of `v`.
fn shifted(cx: &mut Cx<'_>, v: ValueId, zp: Option<ValueId>, axis: Option<usize>) -> OpResult<ValueId> {
    let vf = cast_to(cx, v, DType::F32)?;
    let Some(z) = zp else { return Ok(vf) };
    let z = along(cx, z, axis, cx.rank(v))?;
    let z = cast_to(cx, z, DType::F32)?;
    bin(cx, BinaryOp::Sub, vf, z)
}

/// A scale or zero point reshaped to broadcast against a rank-`rank` value: a scalar (or one
/// entry) as a scalar, a vector along `axis` (the last axis when `None`).
fn along(cx: &mut Cx<'_>, z: ValueId, axis: Option<usize>, rank: usize) -> OpResult<ValueId> {
    let zd = cx.dims(z)?;
    if zd.iter().product::<usize>() == 1 {
        return reshape_static(cx, z, &[]);
    }
    let Some(axis) = axis else { return Ok(z) };
    let mut dims = vec![1; rank];
    dims[axis] = zd.iter().product();
    reshape_static(cx, z, &dims)
}

/// The two shifted matmul operands; `a`'s per-row zero point lies along its rows.
fn matmul_operands(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, ai: usize, azp: Option<ValueId>, bi: usize, bzp: Option<ValueId>) -> OpResult<(ValueId, ValueId)> {
    let (a, b) = (n.input(ai)?, n.input(bi)?);
    let ra = cx.rank(a);
    let a = shifted(cx, a, azp, Some(ra.saturating_sub(2)))?;
    let b = shifted(cx, b, bzp, None)?;
    Ok((a, b))
}

/// `saturate(round(acc · scale) + zero_point)` in the zero point's type.
fn requantize(cx: &mut Cx<'_>, acc: ValueId, scale: ValueId, zp: ValueId) -> OpResult<ValueId> {
    let out = cx.dtype(zp);
    let (lo, hi) = match out {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        d => return unsupported(format!("requantizing to {d}")),
    };
    let y = bin(cx, BinaryOp::Mul, acc, scale)?;
    let y = act(cx, ActivationKind::Round, y)?;
    let z = cast_to(cx, zp, DType::F32)?;
    let y = bin(cx, BinaryOp::Add, y, z)?;
    let lo = cx.scalar(DType::F32, lo)?;
    let hi = cx.scalar(DType::F32, hi)?;
    let y = bin(cx, BinaryOp::Max, y, lo)?;
    let y = bin(cx, BinaryOp::Min, y, hi)?;
    cast_to(cx, y, out)
}

/// `a_scale · b_scale / y_scale` in F32, each factor broadcast by `along`.
fn multiplier(cx: &mut Cx<'_>, a: (ValueId, Option<usize>), b: (ValueId, Option<usize>), y: ValueId, rank: usize) -> OpResult<ValueId> {
    let sa = along(cx, a.0, a.1, rank)?;
    let sa = cast_to(cx, sa, DType::F32)?;
    let sb = along(cx, b.0, b.1, rank)?;
    let sb = cast_to(cx, sb, DType::F32)?;
    let sy = cast_to(cx, y, DType::F32)?;
    let ab = bin(cx, BinaryOp::Mul, sa, sb)?;
    bin(cx, BinaryOp::Div, ab, sy)
}

/// `QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)`.
fn qlinear_matmul(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (a, b) = matmul_operands(cx, n, 0, n.opt_input(2), 3, n.opt_input(5))?;
    let acc = matmul_nd(cx, a, b)?;
    let rank = cx.rank(acc);
    let rank_a = cx.rank(n.input(0)?);
    let m = multiplier(cx, (n.input(1)?, Some(rank_a.saturating_sub(2))), (n.input(4)?, None), n.input(6)?, rank)?;
    Ok(vec![requantize(cx, acc, m, n.input(7)?)?])
}

/// `QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B)`; the int32 bias is
/// added to the accumulator before requantizing.
fn qlinear_conv(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = shifted(cx, n.input(0)?, n.opt_input(2), None)?;
    let w = shifted(cx, n.input(3)?, n.opt_input(5), Some(0))?;
    let mut acc = conv_values(cx, n, x, w)?;
    if let Some(b) = n.opt_input(8) {
        let b = cast_to(cx, b, DType::F32)?;
        acc = add_channel_bias(cx, acc, b)?;
    }
    let rank = cx.rank(acc);
    let m = multiplier(cx, (n.input(1)?, None), (n.input(4)?, Some(1)), n.input(6)?, rank)?;
    Ok(vec![requantize(cx, acc, m, n.input(7)?)?])
}
