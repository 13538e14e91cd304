//! Image-geometry ops: `AffineGrid` (a `MatMul` of an import-time base grid by `theta`),
//! `Col2Im` and `MaxUnpool` (scatter-adds at import-time positions).

use super::shape::reshape_static;
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use crate::onnx::tensor::MAX_ELEMENTS;
use rlx_ir::ops::index::{ScatterElements, ScatterNd, ScatterReduction};
use rlx_ir::ops::matmul::MatMul;
use rlx_ir::ops::shape::{Narrow, Pad, PadMode, Transpose};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, Convert)] = &[("AffineGrid", affine_grid), ("Col2Im", col2im), ("MaxUnpool", max_unpool)];

/// Non-negative integers of an import-time input, checked against a size limit.
fn sizes(cx: &Cx<'_>, v: ValueId, what: &str) -> OpResult<Vec<usize>> {
    let values = cx.const_ints(v, what)?;
    values.iter().map(|&x| usize::try_from(x).ok().filter(|&x| x as u64 <= MAX_ELEMENTS).ok_or_else(|| OpError::Invalid(format!("{what} {values:?}")))).collect()
}

/// `AffineGrid(theta [N, k, k+1], size)`: the normalized coordinates of every output cell
/// (x fastest, then y, z), with a trailing 1, times `thetaᵀ`; out `[N, spatial…, k]`.
fn affine_grid(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let theta = n.input(0)?;
    let size = sizes(cx, n.input(1)?, "size")?;
    let td = cx.dims(theta)?;
    let k = size.len().checked_sub(2).filter(|k| (2..=3).contains(k)).ok_or_else(|| OpError::Invalid(format!("size {size:?} needs 4 or 5 entries")))?;
    if td != [size[0], k, k + 1] {
        return invalid(format!("theta {td:?} must be [{}, {k}, {}]", size[0], k + 1));
    }
    let align = n.int("align_corners", 0) != 0;
    let spatial = &size[2..];
    let coord = |i: usize, extent: usize| -> f64 {
        if align {
            if extent > 1 { -1.0 + 2.0 * i as f64 / (extent - 1) as f64 } else { 0.0 }
        } else {
            (2.0 * i as f64 + 1.0) / extent as f64 - 1.0
        }
    };
    let cells: usize = spatial.iter().product();
    let mut base = Vec::with_capacity(cells * (k + 1));
    for flat in 0..cells {
        let mut rest = flat;
        let mut idx = vec![0; k];
        for a in (0..k).rev() {
            idx[a] = rest % spatial[a];
            rest /= spatial[a];
        }
        base.extend((0..k).rev().map(|a| coord(idx[a], spatial[a])));
        base.push(1.0);
    }
    let batch = size[0];
    let base: Vec<f64> = (0..batch).flat_map(|_| base.iter().copied()).collect();
    let base = cx.values(cx.dtype(theta), &[batch, cells, k + 1], &base)?;
    let tt = cx.add1(Transpose { perm: vec![0, 2, 1] }, &[theta])?;
    let grid = cx.add1(MatMul {}, &[base, tt])?;
    let mut dims = vec![batch];
    dims.extend_from_slice(spatial);
    dims.push(k);
    Ok(vec![reshape_static(cx, grid, &dims)?])
}

/// Scatter-adds `updates [N, C, K·L]` into a zero `[N, C, cells]` at the constant flat
/// positions `targets [K·L]` (shared by every `N` and `C`).
fn scatter_cells(cx: &mut Cx<'_>, updates: ValueId, targets: &[usize], cells: usize) -> OpResult<ValueId> {
    let ud = cx.dims(updates)?;
    let (nb, c) = (ud[0], ud[1]);
    let idx: Vec<f64> = (0..nb * c).flat_map(|_| targets.iter().map(|&t| t as f64)).collect();
    let idx = cx.values(DType::I64, &[nb, c, targets.len()], &idx)?;
    let zeros = cx.values(cx.dtype(updates), &[nb, c, cells], &vec![0.0; nb * c * cells])?;
    Ok(cx.add1(ScatterElements { axis: 2, reduction: ScatterReduction::Add }, &[zeros, idx, updates])?)
}

/// `Col2Im(input [N, C·∏block, L], image_shape, block_shape)`: every column entry added to
/// its image cell; out `[N, C, image…]`.
fn col2im(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let image = sizes(cx, n.input(1)?, "image_shape")?;
    let block = sizes(cx, n.input(2)?, "block_shape")?;
    let s = image.len();
    if block.len() != s || block.contains(&0) {
        return invalid(format!("block_shape {block:?} must have the {s} entries of image_shape"));
    }
    let per = |name: &str, default: usize, len: usize| -> OpResult<Vec<usize>> {
        match n.ints(name) {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len && v.iter().all(|&x| x >= 0) => Ok(v.iter().map(|&x| x as usize).collect()),
            Some(v) => invalid(format!("{name} {v:?}")),
        }
    };
    let dil = per("dilations", 1, s)?;
    let stride = per("strides", 1, s)?;
    let pads = per("pads", 0, 2 * s)?;
    let padded: Vec<usize> = (0..s).map(|i| image[i] + pads[i] + pads[i + s]).collect();
    let mut out = Vec::with_capacity(s);
    for i in 0..s {
        let span = dil[i] * (block[i] - 1) + 1;
        if padded[i] < span || stride[i] == 0 {
            return invalid(format!("block {block:?} does not fit the padded image {padded:?}"));
        }
        out.push((padded[i] - span) / stride[i] + 1);
    }
    let xd = cx.dims(x)?;
    let (kcount, lcount): (usize, usize) = (block.iter().product(), out.iter().product());
    if xd.len() != 3 || xd[1] % kcount != 0 || xd[2] != lcount {
        return invalid(format!("input {xd:?} must be [N, C·{kcount}, {lcount}]"));
    }
    let c = xd[1] / kcount;
    let unravel = |mut flat: usize, dims: &[usize]| -> Vec<usize> {
        let mut idx = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            idx[a] = flat % dims[a];
            flat /= dims[a];
        }
        idx
    };
    let mut targets = Vec::with_capacity(kcount * lcount);
    for kf in 0..kcount {
        let kk = unravel(kf, &block);
        for lf in 0..lcount {
            let ll = unravel(lf, &out);
            targets.push((0..s).fold(0, |acc, i| acc * padded[i] + ll[i] * stride[i] + kk[i] * dil[i]));
        }
    }
    let updates = reshape_static(cx, x, &[xd[0], c, kcount * lcount])?;
    let cells: usize = padded.iter().product();
    let y = scatter_cells(cx, updates, &targets, cells)?;
    let mut dims = vec![xd[0], c];
    dims.extend_from_slice(&padded);
    let mut y = reshape_static(cx, y, &dims)?;
    for i in 0..s {
        if pads[i] + pads[i + s] > 0 {
            y = cx.add1(Narrow { axis: 2 + i, start: pads[i], len: image[i] }, &[y])?;
        }
    }
    Ok(vec![y])
}

/// `MaxUnpool(x, indices[, output_shape])`: `x` written at the flat positions of `indices`
/// into zeros of the pooling's input shape, padded with zeros at the end to `output_shape`.
fn max_unpool(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (x, idx) = (n.input(0)?, n.input(1)?);
    let xd = cx.dims(x)?;
    let s = xd.len().checked_sub(2).filter(|&s| s >= 1).ok_or_else(|| OpError::Invalid(format!("input {xd:?} needs spatial axes")))?;
    let kernel = n.ints("kernel_shape").filter(|k| k.len() == s).ok_or_else(|| OpError::Invalid("kernel_shape is required".into()))?;
    let stride = n.ints("strides").unwrap_or_else(|| vec![1; s]);
    let pads = n.ints("pads").unwrap_or_else(|| vec![0; 2 * s]);
    let mut inferred = xd[..2].to_vec();
    for i in 0..s {
        let d = (xd[2 + i] as i64 - 1) * stride.get(i).copied().unwrap_or(1) - pads.get(i).copied().unwrap_or(0) - pads.get(i + s).copied().unwrap_or(0) + kernel[i];
        inferred.push(usize::try_from(d).map_err(|_| OpError::Invalid(format!("output extent {d}")))?);
    }
    let total: usize = inferred.iter().product();
    let count: usize = xd.iter().product();
    let zeros = cx.values(cx.dtype(x), &[total], &vec![0.0; total])?;
    let flat_idx = reshape_static(cx, idx, &[count, 1])?;
    let flat_x = reshape_static(cx, x, &[count])?;
    let y = cx.add1(ScatterNd { reduction: ScatterReduction::None }, &[zeros, flat_idx, flat_x])?;
    let y = reshape_static(cx, y, &inferred)?;
    let Some(shape) = n.opt_input(2) else { return Ok(vec![y]) };
    let dims = sizes(cx, shape, "output_shape")?;
    if dims.len() != inferred.len() || dims.iter().zip(&inferred).any(|(d, i)| d < i) {
        return invalid(format!("output_shape {dims:?} is smaller than the unpooled {inferred:?}"));
    }
    let pads = dims.iter().zip(&inferred).map(|(d, i)| [0, d - i]).collect();
    Ok(vec![cx.add1(Pad { pads, mode: PadMode::Constant(0.0) }, &[y])?])
}
