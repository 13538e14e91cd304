//! Converters of the `ai.onnx.ml` domain: `Binarizer` and `ArrayFeatureExtractor`.

use super::elementwise::{cast_to, select};
use super::shape::reshape_static;
use super::{Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::elementwise::{CmpOp, Compare};
use rlx_ir::ops::index::Gather;
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[("Binarizer", binarizer), ("ArrayFeatureExtractor", array_feature_extractor)];

/// `Binarizer`: `x > threshold ? 1 : 0` in `x`'s type.
fn binarizer(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let dt = cx.dtype(x);
    let threshold = cx.scalar(dt, n.float("threshold", 0.0) as f64)?;
    let above = cx.add1(Compare { op: CmpOp::Gt }, &[x, threshold])?;
    let (one, zero) = (cx.scalar(dt, 1.0)?, cx.scalar(dt, 0.0)?);
    Ok(vec![select(cx, above, one, zero)?])
}

/// `ArrayFeatureExtractor`: the entries of `x`'s last axis at the (flattened) indices; a 1-D
/// `x` gives one row, as onnxruntime does.
fn array_feature_extractor(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    let mut dims = cx.dims(x)?;
    let count: usize = cx.dims(idx)?.iter().product();
    let idx = reshape_static(cx, idx, &[count])?;
    let idx = cast_to(cx, idx, DType::I64)?;
    if dims.len() == 1 {
        dims.insert(0, 1);
    }
    let x = reshape_static(cx, x, &dims)?;
    let axis = dims.len() - 1;
    Ok(vec![cx.add1(Gather { axis }, &[x, idx])?])
}
