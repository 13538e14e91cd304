//! VJPs of convolution, pooling and resize (OPS.md §10), and of the conv and max-pool backward
//! ops (§22) so that a gradient graph can be differentiated again.
//!
//! Conv-like ops are bilinear: the adjoint of each operand is another conv-like op of the same
//! window (a conv, its input gradient or its weight gradient).

use super::Vjp;
use crate::{AdError, Result};
use rlx_ir::ops::conv::{
    Conv, Conv2dBackwardInput, Conv2dBackwardWeight, Conv3d, Conv3dBackwardInput, Conv3dBackwardWeight, Im2Col,
    MaxPool2dBackward, MaxPool3dBackward, Pool,
};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::ops::shape::PadMode;
use rlx_ir::{DType, Dim, Graph, Op, OpKind, Shape, TensorType, ValueId};
use rlx_opt::decompose::build::{scalar, vector};

pub const KINDS: &[OpKind] = &[
    OpKind::Conv,
    OpKind::Conv3d,
    OpKind::ConvTranspose2d,
    OpKind::ConvTranspose3d,
    OpKind::Im2Col,
    OpKind::Pool,
    OpKind::ResizeNearest2x,
    OpKind::Interpolate3d,
    OpKind::Conv2dBackwardInput,
    OpKind::Conv2dBackwardWeight,
    OpKind::Conv3dBackwardInput,
    OpKind::Conv3dBackwardWeight,
    OpKind::MaxPool2dBackward,
    OpKind::MaxPool3dBackward,
];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::Conv(a) => conv(Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::Conv3d(a) => conv(Geo::new(&kernel_of(v.g, v.inputs[1]), &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::ConvTranspose2d(a) => transposed(Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::ConvTranspose3d(a) => {
            transposed(Geo::new(&kernel_of(v.g, v.inputs[1]), &a.stride, &a.padding, &a.dilation, a.groups), v)
        }
        Op::Conv2dBackwardInput(a) => input_grad(Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::Conv3dBackwardInput(a) => input_grad(Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::Conv2dBackwardWeight(a) => weight_grad(Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::Conv3dBackwardWeight(a) => weight_grad(Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, a.groups), v),
        Op::Im2Col(a) => im2col(a, v),
        Op::Pool(a) => pool(a, v),
        Op::ResizeNearest2x(_) => resize_nearest2x(v),
        Op::Interpolate3d(_) => interpolate3d(v),
        Op::MaxPool2dBackward(a) => max_pool_backward(Geo::new(&a.kernel_size, &a.stride, &a.padding, &[], 1), v),
        Op::MaxPool3dBackward(a) => max_pool_backward(Geo::new(&a.kernel_size, &a.stride, &a.padding, &[], 1), v),
        _ => return None,
    })
}

/// A conv window of 2 or 3 spatial axes with its defaults filled in (stride and dilation 1,
/// padding 0), and the group count.
#[derive(Clone, Debug)]
struct Geo {
    k: Vec<usize>,
    s: Vec<usize>,
    p: Vec<usize>,
    d: Vec<usize>,
    groups: usize,
}

impl Geo {
    fn new(k: &[usize], s: &[usize], p: &[usize], d: &[usize], groups: usize) -> Geo {
        let fill = |v: &[usize], def: usize| (0..k.len()).map(|i| v.get(i).copied().unwrap_or(def)).collect();
        Geo { k: k.to_vec(), s: fill(s, 1), p: fill(p, 0), d: fill(d, 1), groups }
    }

    /// `(kernel_size, stride, padding, dilation, groups)` as the backward ops take them.
    fn attrs(&self) -> (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, usize) {
        (self.k.clone(), self.s.clone(), self.p.clone(), self.d.clone(), self.groups)
    }

    fn three(v: &[usize]) -> [usize; 3] {
        [v[0], v[1], v[2]]
    }

    /// The forward conv `x ⋆ w` (`Conv` or `Conv3d` by rank).
    fn conv(&self, g: &mut Graph, x: ValueId, w: ValueId) -> Result<ValueId> {
        let groups = self.groups;
        Ok(if self.k.len() == 3 {
            let (stride, padding, dilation) = (Geo::three(&self.s), Geo::three(&self.p), Geo::three(&self.d));
            g.conv3d(x, w, Conv3d { stride, padding, dilation, groups })?
        } else {
            let (kernel_size, stride, padding, dilation, _) = self.attrs();
            g.conv(x, w, Conv { kernel_size, stride, padding, dilation, groups })?
        })
    }

    /// The conv's input gradient from `(ȳ, w)` into spatial extents `input_size`.
    fn input_grad(&self, g: &mut Graph, dy: ValueId, w: ValueId, input_size: Vec<Dim>) -> Result<ValueId> {
        let (kernel_size, stride, padding, dilation, groups) = self.attrs();
        Ok(if self.k.len() == 3 {
            g.conv3d_backward_input(dy, w, Conv3dBackwardInput { kernel_size, stride, padding, dilation, groups, input_size })?
        } else {
            g.conv2d_backward_input(dy, w, Conv2dBackwardInput { kernel_size, stride, padding, dilation, groups, input_size })?
        })
    }

    /// The conv's weight gradient from `(x, ȳ)`.
    fn weight_grad(&self, g: &mut Graph, x: ValueId, dy: ValueId) -> Result<ValueId> {
        let (kernel_size, stride, padding, dilation, groups) = self.attrs();
        Ok(if self.k.len() == 3 {
            g.conv3d_backward_weight(x, dy, Conv3dBackwardWeight { kernel_size, stride, padding, dilation, groups })?
        } else {
            g.conv2d_backward_weight(x, dy, Conv2dBackwardWeight { kernel_size, stride, padding, dilation, groups })?
        })
    }
}

/// The kernel extents of a 3-D weight (static, as the IR requires).
fn kernel_of(g: &Graph, w: ValueId) -> Vec<usize> {
    g.ty(w).shape.dims()[2..].iter().map(|d| d.as_static().unwrap_or(0)).collect()
}

/// The spatial extents (axes 2..) of `v`.
fn spatial(g: &Graph, v: ValueId) -> Vec<Dim> {
    g.ty(v).shape.dims()[2..].to_vec()
}

/// The static extent of `axis` of `v`, or an error naming `op`.
fn static_dim(g: &Graph, v: ValueId, axis: usize, op: &'static str) -> Result<usize> {
    let ty = g.ty(v);
    let msg = || format!("the gradient needs a static axis {axis} of {ty}");
    ty.shape.dim(axis).as_static().ok_or_else(|| AdError::Rule { op, msg: msg() })
}

/// `y = x ⋆ w`: `x̄ = ConvBackwardInput(ȳ, w)`, `w̄ = ConvBackwardWeight(x, ȳ)`.
fn conv(geo: Geo, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, w, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let dx = if v.wants(0) { Some(geo.input_grad(v.g, dy, w, spatial(v.g, x))?) } else { None };
    let dw = if v.wants(1) { Some(geo.weight_grad(v.g, x, dy)?) } else { None };
    Ok(vec![dx, dw])
}

/// `dx = ConvBackwardInput(ȳ, w)` is the adjoint of `Conv(·, w)`: `ȳ̄ = Conv(c, w)`,
/// `w̄ = ConvBackwardWeight(c, ȳ)`.
fn input_grad(geo: Geo, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (dy, w, c) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let ddy = if v.wants(0) { Some(geo.conv(v.g, c, w)?) } else { None };
    let dw = if v.wants(1) { Some(geo.weight_grad(v.g, c, dy)?) } else { None };
    Ok(vec![ddy, dw])
}

/// `dw = ConvBackwardWeight(x, ȳ)` pairs with `Conv(x, ·)`: `x̄ = ConvBackwardInput(ȳ, c)`,
/// `ȳ̄ = Conv(x, c)`.
fn weight_grad(geo: Geo, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy, c) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let dx = if v.wants(0) { Some(geo.input_grad(v.g, dy, c, spatial(v.g, x))?) } else { None };
    let ddy = if v.wants(1) { Some(geo.conv(v.g, x, c)?) } else { None };
    Ok(vec![dx, ddy])
}

/// The transposed conv is `ConvBackwardInput(x, w)` read with `x` as the cotangent:
/// `x̄ = Conv(ȳ, w)` and `w̄ = ConvBackwardWeight(ȳ, x)` (OPS.md §10). Where `output_padding ≥
/// stride` (possible when dilation > stride) the forward window over `ȳ` has positions past
/// `x`'s end: they are cut from `x̄` and read as zeros of `x` for `w̄`.
fn transposed(geo: Geo, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, w, dy) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let (small, big) = (spatial(v.g, x), spatial(v.g, dy));
    let excess: Vec<usize> = (0..geo.k.len())
        .map(|a| match (small[a].as_static(), big[a].as_static()) {
            (Some(n), Some(m)) => (m + 2 * geo.p[a] - geo.d[a] * (geo.k[a] - 1) - 1) / geo.s[a] + 1 - n,
            _ => 0,
        })
        .collect();
    let dx = if v.wants(0) {
        let mut dx = geo.conv(v.g, dy, w)?;
        for (a, n) in small.iter().enumerate() {
            if excess[a] > 0 {
                dx = v.g.narrow(dx, a + 2, 0, n.as_static().unwrap_or(0))?;
            }
        }
        Some(dx)
    } else {
        None
    };
    let dw = if v.wants(1) {
        let x = if excess.iter().any(|&e| e > 0) {
            let pads: Vec<[usize; 2]> = [[0, 0]; 2].into_iter().chain(excess.iter().map(|&e| [0, e])).collect();
            v.g.pad(x, &pads, PadMode::Constant(0.0))?
        } else {
            x
        };
        Some(geo.weight_grad(v.g, dy, x)?)
    } else {
        None
    };
    Ok(vec![dx, dw])
}

/// A float constant of `dtype` and `shape` from f64 values.
fn float_constant(g: &mut Graph, dtype: DType, dims: &[usize], values: &[f64]) -> Result<ValueId> {
    let flat = vector(g, dtype, values)?;
    Ok(g.reshape_to(flat, &Shape(dims.iter().map(|&n| Dim::Static(n)).collect()))?)
}

/// col2im: `Im2Col` is the depthwise conv of `x` with the one-hot kernel `E [C·K, 1, kH, kW]`
/// (`E[c·K + t, 0, i, j] = 1` iff `t = i·kW + j`) with its output moved to rows, so `x̄` is
/// that conv's input gradient of the cotangent moved back to NCHW.
fn im2col(a: &Im2Col, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, ct) = (v.inputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let ty = g.ty(x).clone();
    let c = static_dim(g, x, 1, "Im2Col")?;
    let geo = Geo::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation, c);
    let mut out = Vec::with_capacity(2);
    for i in 0..2 {
        let n = static_dim(g, x, i + 2, "Im2Col")?;
        out.push((n + 2 * geo.p[i] - geo.d[i] * (geo.k[i] - 1) - 1) / geo.s[i] + 1);
    }
    let taps = geo.k[0] * geo.k[1];
    let eye: Vec<f64> = (0..taps * taps).map(|i| f64::from(u8::from(i / taps == i % taps))).collect();
    let eye = float_constant(g, ty.dtype, &[1, taps, 1, geo.k[0], geo.k[1]], &eye)?;
    let kernel = [c, taps, 1, geo.k[0], geo.k[1]].map(Dim::Static);
    let e = g.expand_to(eye, &Shape(kernel.to_vec()))?;
    let e = g.reshape_to(e, &Shape([c * taps, 1, geo.k[0], geo.k[1]].map(Dim::Static).to_vec()))?;
    let n = ty.shape.dim(0).clone();
    let rows = g.reshape_to(ct, &Shape(vec![n, Dim::Static(out[0]), Dim::Static(out[1]), Dim::Static(c * taps)]))?;
    let planes = g.transpose(rows, &[0, 3, 1, 2])?;
    Ok(vec![Some(geo.input_grad(g, planes, e, spatial(g, x))?)])
}

/// Max → `MaxPool{2,3}dBackward` (the first in-bounds maximum of each window takes its `ȳ`);
/// Min → the same on `−x` (its first minimum); Mean / Sum → `ConvBackwardInput` of `ȳ` with a
/// constant depthwise kernel `1/(window area)` / `1` (OPS.md §23.1); Prod → that spread of
/// `ȳ·y`, divided by `x` (undefined where `x = 0`, as `Reduce Prod`).
fn pool(a: &Pool, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, y, dy) = (v.inputs[0], v.outputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let taps: usize = a.kernel_size.iter().product();
    let dx = match a.kind {
        ReduceOp::Max => argmax_scatter(g, a, x, dy)?,
        ReduceOp::Min => {
            let neg = g.activation(ActivationKind::Neg, x)?;
            argmax_scatter(g, a, neg, dy)?
        }
        ReduceOp::Mean => spread(g, a, x, dy, 1.0 / taps as f64)?,
        ReduceOp::Sum => spread(g, a, x, dy, 1.0)?,
        ReduceOp::Prod => {
            let t = g.binary(BinaryOp::Mul, dy, y)?;
            let s = spread(g, a, x, t, 1.0)?;
            g.binary(BinaryOp::Div, s, x)?
        }
    };
    Ok(vec![Some(dx)])
}

/// `MaxPool2dBackward` / `MaxPool3dBackward` of `(x, ȳ)`.
fn argmax_scatter(g: &mut Graph, a: &Pool, x: ValueId, dy: ValueId) -> Result<ValueId> {
    let (kernel_size, stride, padding) = (a.kernel_size.clone(), a.stride.clone(), a.padding.clone());
    Ok(if kernel_size.len() == 3 {
        g.max_pool3d_backward(x, dy, MaxPool3dBackward { kernel_size, stride, padding })?
    } else {
        g.max_pool2d_backward(x, dy, MaxPool2dBackward { kernel_size, stride, padding })?
    })
}

/// Each cell of `x` gets `weight·Σ ȳ` over the windows that cover it: the input gradient of a
/// depthwise conv whose kernel is `weight` everywhere.
fn spread(g: &mut Graph, a: &Pool, x: ValueId, dy: ValueId, weight: f64) -> Result<ValueId> {
    let c = static_dim(g, x, 1, "Pool")?;
    let geo = Geo::new(&a.kernel_size, &a.stride, &a.padding, &[], c);
    let s = scalar(g, g.ty(x).dtype, weight)?;
    let dims = [c, 1].into_iter().chain(geo.k.iter().copied()).map(Dim::Static).collect();
    let kernel = g.expand_to(s, &Shape(dims))?;
    geo.input_grad(g, dy, kernel, spatial(g, x))
}

/// `x̄` = the 2×2 sums of `ȳ` (`Reshape [N,C,H,2,W,2]`, `Reduce Sum` over axes 3 and 5).
fn resize_nearest2x(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy) = (v.inputs[0], v.ct(0)?);
    let g = &mut *v.g;
    let d = g.ty(x).shape.dims().to_vec();
    let two = Dim::Static(2);
    let split = g.reshape_to(dy, &Shape(vec![d[0].clone(), d[1].clone(), d[2].clone(), two.clone(), d[3].clone(), two]))?;
    Ok(vec![Some(g.reduce(ReduceOp::Sum, split, &[3, 5], false)?)])
}

/// `x̄`: `ȳ` scatter-added onto its source cells, one `GatherBackward` per resized axis with
/// the constant index vector `src = min(⌊dst·in/out⌋, in − 1)`.
fn interpolate3d(v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, mut ct) = (v.inputs[0], v.ct(0)?);
    let g = &mut *v.g;
    for axis in 2..5 {
        let (n_in, n_out) = (static_dim(g, x, axis, "Interpolate3d")?, static_dim(g, ct, axis, "Interpolate3d")?);
        if n_in == n_out {
            continue;
        }
        let src: Vec<u8> = (0..n_out).flat_map(|o| ((o * n_in / n_out).min(n_in - 1) as i64).to_le_bytes()).collect();
        let idx = g.constant(TensorType::of(DType::I64, &[n_out]), src)?;
        let mut shape = g.ty(ct).shape.dims().to_vec();
        shape[axis] = Dim::Static(n_in);
        ct = g.gather_backward(ct, idx, axis as i32, Shape(shape))?;
    }
    Ok(vec![Some(ct)])
}

/// `MaxPool{2,3}dBackward(x, ȳ)` is piecewise constant in `x` (no gradient) and linear in `ȳ`;
/// its adjoint reads the cotangent at each window's first in-bounds maximum: windows of `x`
/// (padding `−∞`) and of the cotangent (padding 0) gathered through one constant table,
/// `ArgMax` over the taps, `GatherElements` at it.
fn max_pool_backward(geo: Geo, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let (x, dy, c) = (v.inputs[0], v.inputs[1], v.ct(0)?);
    let g = &mut *v.g;
    let r = geo.k.len();
    let input = (0..r).map(|a| static_dim(g, x, a + 2, "MaxPoolBackward")).collect::<Result<Vec<_>>>()?;
    let out = (0..r).map(|a| static_dim(g, dy, a + 2, "MaxPoolBackward")).collect::<Result<Vec<_>>>()?;
    let cells = window_cells(&geo, &input, &out);
    let (rows, taps) = (out.iter().product::<usize>(), geo.k.iter().product::<usize>());
    let idx = g.constant(
        TensorType::of(DType::I64, &[rows, taps]),
        cells.iter().flat_map(|c| (c.unwrap_or(0) as i64).to_le_bytes()).collect(),
    )?;
    let inside = g.constant(TensorType::of(DType::Bool, &[rows, taps]), cells.iter().map(|c| u8::from(c.is_some())).collect())?;
    let xw = windows(g, x, idx, inside, f64::NEG_INFINITY)?;
    let at = g.arg_max(xw, 3, true)?;
    let cw = windows(g, c, idx, inside, 0.0)?;
    let picked = g.gather_elements(cw, at, 3)?;
    let shape = g.ty(dy).shape.clone();
    Ok(vec![None, Some(g.reshape_to(picked, &shape)?)])
}

/// For each output cell and tap of a dilation-1 window (both row-major): the flat input cell it
/// covers, `None` in the padding.
fn window_cells(geo: &Geo, input: &[usize], out: &[usize]) -> Vec<Option<usize>> {
    let unravel = |mut i: usize, dims: &[usize]| {
        let mut v = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            v[a] = i % dims[a];
            i /= dims[a];
        }
        v
    };
    let (rows, taps) = (out.iter().product::<usize>(), geo.k.iter().product::<usize>());
    let mut cells = Vec::with_capacity(rows * taps);
    for row in 0..rows {
        let o = unravel(row, out);
        for tap in 0..taps {
            let t = unravel(tap, &geo.k);
            cells.push((0..out.len()).try_fold(0, |acc, a| {
                let i = (o[a] * geo.s[a] + t[a]).checked_sub(geo.p[a]).filter(|&i| i < input[a])?;
                Some(acc * input[a] + i)
            }));
        }
    }
    cells
}

/// `v [N, C, spatial…]` → `[N, C, O, K]`: the cells `idx` names, `fill` where `inside` is false.
fn windows(g: &mut Graph, v: ValueId, idx: ValueId, inside: ValueId, fill: f64) -> Result<ValueId> {
    let ty = g.ty(v).clone();
    let d = ty.shape.dims();
    let cells: usize = d[2..].iter().map(|n| n.as_static().unwrap_or(0)).product();
    let flat = g.reshape_to(v, &Shape(vec![d[0].clone(), d[1].clone(), Dim::Static(cells)]))?;
    let cols = g.gather(flat, idx, 2)?;
    let fill = scalar(g, ty.dtype, fill)?;
    Ok(g.select(inside, cols, fill)?)
}
