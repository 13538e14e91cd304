//! The window generators `HannWindow`, `HammingWindow` and `BlackmanWindow`: cosine sums over
//! the positions `0..size`, built from a running sum of ones and rlx's `Cos`.

use super::elementwise::{act, bin, bin_scalar};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::tensor::dtype;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::reduce::Cumsum;
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[
    ("HannWindow", |cx, n| window(cx, n, &[0.5, -0.5])),
    ("HammingWindow", |cx, n| window(cx, n, &[25.0 / 46.0, -21.0 / 46.0])),
    ("BlackmanWindow", |cx, n| window(cx, n, &[0.42, -0.5, 0.08])),
];

/// `Σ_k a_k·cos(2πk·i/N)` for `i < size`, `N = size` when `periodic` (default) else `size − 1`.
fn window(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, coeffs: &[f64]) -> OpResult<Vec<ValueId>> {
    let size = cx.const_ints(n.input(0)?, "size")?.first().copied().unwrap_or(-1);
    let size = usize::try_from(size).map_err(|_| OpError::Invalid(format!("size {size}")))?;
    if size > 1 << 24 {
        return invalid(format!("size {size}"));
    }
    let out = dtype(n.int("output_datatype", 1) as i32).ok_or_else(|| OpError::Unsupported("output_datatype".into()))?;
    let periodic = n.int("periodic", 1) != 0;
    let denom = if periodic { size as f64 } else { size.saturating_sub(1).max(1) as f64 };
    let ones = cx.values(DType::F64, &[size], &vec![1.0; size])?;
    let i = cx.add1(Cumsum { axis: 0, exclusive: true }, &[ones])?;
    let mut acc = cx.values(DType::F64, &[size], &vec![coeffs[0]; size])?;
    for (k, &a) in coeffs.iter().enumerate().skip(1) {
        let phase = bin_scalar(cx, BinaryOp::Mul, i, 2.0 * std::f64::consts::PI * k as f64 / denom)?;
        let c = act(cx, ActivationKind::Cos, phase)?;
        let term = bin_scalar(cx, BinaryOp::Mul, c, a)?;
        acc = bin(cx, BinaryOp::Add, acc, term)?;
    }
    Ok(vec![cx.add1(rlx_ir::ops::elementwise::Cast { to: out }, &[acc])?])
}
