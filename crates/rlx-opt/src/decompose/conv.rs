//! Decompositions of the conv family (OPS.md §10, §22).
//!
//! Every window op becomes a constant gather table over the flattened spatial cells: for each
//! output cell and tap, the input cell it reads (cells outside the input take a fill value
//! through `Where`). Convs multiply those columns by per-group weight matrices with one
//! batched `MatMul` (groups as a batch axis instead of one `Concat` per group); a transposed
//! conv is the same product over the table `i = (y + p − k·d)/s` (the "dilate by the stride,
//! pad by `d(k−1)−p`, flip the kernel" rewrite of OPS.md folded into the table, which also
//! covers `p > d(k−1)`). Spatial extents must be static; the batch may be symbolic (the 2-D
//! ops then gather directly instead of going through `Im2Col`, whose row count would be a
//! derived symbol no reshape can split again).

use rlx_ir::ops::conv::{Conv, Conv3d, Im2Col, Pool};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

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
];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::Conv(a) => conv(g, op, x, Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation), a.groups),
        Op::Conv3d(a) => win3(g, x[1], &a.stride, &a.padding, &a.dilation).and_then(|w| conv(g, op, x, w, a.groups)),
        Op::ConvTranspose2d(a) => conv_transpose(g, op, x, Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation), a.groups),
        Op::ConvTranspose3d(a) => {
            win3(g, x[1], &a.stride, &a.padding, &a.dilation).and_then(|w| conv_transpose(g, op, x, w, a.groups))
        }
        Op::Conv2dBackwardInput(a) => conv_transpose(g, op, x, Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation), a.groups),
        Op::Conv3dBackwardInput(a) => conv_transpose(g, op, x, Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation), a.groups),
        Op::Conv2dBackwardWeight(a) => backward_weight(g, op, x, Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation), a.groups),
        Op::Conv3dBackwardWeight(a) => backward_weight(g, op, x, Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation), a.groups),
        Op::Im2Col(a) => im2col(g, a, x[0]),
        Op::Pool(a) => pool(g, op, a, x[0]),
        Op::ResizeNearest2x(_) => resize_nearest2x(g, x[0]),
        Op::Interpolate3d(a) => interpolate3d(g, x[0], &a.size),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

fn invalid(msg: String) -> IrError {
    IrError::Invalid(msg)
}

/// A conv window with its defaults filled in (stride and dilation 1, padding 0).
#[derive(Clone, Debug)]
struct Win {
    k: Vec<usize>,
    s: Vec<usize>,
    p: Vec<usize>,
    d: Vec<usize>,
}

impl Win {
    fn new(k: &[usize], s: &[usize], p: &[usize], d: &[usize]) -> Win {
        let fill = |v: &[usize], def: usize| (0..k.len()).map(|i| v.get(i).copied().unwrap_or(def)).collect();
        Win { k: k.to_vec(), s: fill(s, 1), p: fill(p, 0), d: fill(d, 1) }
    }

    /// Forward source cell on axis `a`: `o·s − p + k·d` if inside `n`.
    fn fwd(&self, a: usize, o: usize, t: usize, n: usize) -> Option<usize> {
        (o * self.s[a] + t * self.d[a]).checked_sub(self.p[a]).filter(|&i| i < n)
    }

    /// Transposed source cell on axis `a`: the `i < n` with `i·s − p + k·d = y`, if any.
    fn bwd(&self, a: usize, y: usize, t: usize, n: usize) -> Option<usize> {
        let v = (y + self.p[a]).checked_sub(t * self.d[a])?;
        (v % self.s[a] == 0 && v / self.s[a] < n).then_some(v / self.s[a])
    }

    fn taps(&self) -> usize {
        self.k.iter().product()
    }
}

/// The window of a 3-D op whose kernel size is read from its weight.
fn win3(g: &Graph, w: ValueId, s: &[usize; 3], p: &[usize; 3], d: &[usize; 3]) -> Result<Win, IrError> {
    let wt = g.ty(w);
    let k = (2..5).map(|a| wt.static_dim(a)).collect::<Result<Vec<_>, _>>().map_err(invalid)?;
    Ok(Win::new(&k, s, p, d))
}

/// The static spatial extents (axes 2..) of `v`.
fn spatial(g: &Graph, v: ValueId, what: &str) -> Result<Vec<usize>, IrError> {
    let t = g.ty(v);
    (2..t.rank())
        .map(|a| t.static_dim(a))
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("{what} decomposition needs static spatial extents: {e}")))
}

/// A static dim of `v`.
fn static_dim(g: &Graph, v: ValueId, axis: usize, what: &str) -> Result<usize, IrError> {
    g.ty(v).static_dim(axis).map_err(|e| invalid(format!("{what} decomposition: {e}")))
}

/// The output type `op` infers from `inputs` (what the replacement must reproduce).
fn out_type(g: &Graph, op: &Op, inputs: &[ValueId]) -> Result<TensorType, IrError> {
    Ok(g.infer(op, inputs)?.remove(0))
}

/// `dims` as a reshape/expand target: a symbolic dim is written `-1` (inferred back to its
/// symbol here, and to the concrete size once the graph is specialized; a target naming the
/// symbol would keep it after specialization). At most one symbol is allowed.
fn target(dims: &[Dim]) -> Result<Vec<i64>, IrError> {
    if dims.iter().filter(|d| d.as_static().is_none()).count() > 1 {
        return Err(invalid(format!("conv decomposition: the target {} holds more than one symbol", Shape(dims.to_vec()))));
    }
    Ok(dims.iter().map(|d| d.as_static().map_or(-1, |n| n as i64)).collect())
}

/// `v` reshaped to `dims` unless it already has them.
fn reshape(g: &mut Graph, v: ValueId, dims: Vec<Dim>) -> Result<ValueId, IrError> {
    if g.ty(v).shape.dims() == &dims[..] {
        Ok(v)
    } else {
        g.reshape(v, &target(&dims)?)
    }
}

/// `v` with its axes permuted, unless `perm` is the identity.
fn transpose(g: &mut Graph, v: ValueId, perm: &[usize]) -> Result<ValueId, IrError> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        Ok(v)
    } else {
        g.transpose(v, perm)
    }
}

fn st(n: usize) -> Dim {
    Dim::Static(n)
}

/// A value that fills window cells outside the input.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fill {
    Zero,
    One,
    /// The lowest value of the dtype (−∞ for floats): the identity of `Max`.
    Lowest,
    /// The highest value (+∞ for floats): the identity of `Min`.
    Highest,
}

/// The little-endian bytes of `fill` in `dtype`.
fn fill_bytes(dtype: DType, fill: Fill) -> Result<Vec<u8>, IrError> {
    use Fill::*;
    macro_rules! pick {
        ($t:ty, $lo:expr, $hi:expr, $one:expr) => {
            match fill {
                Zero => Vec::from((0 as $t).to_le_bytes()),
                One => Vec::from(($one as $t).to_le_bytes()),
                Lowest => Vec::from(($lo as $t).to_le_bytes()),
                Highest => Vec::from(($hi as $t).to_le_bytes()),
            }
        };
    }
    Ok(match dtype {
        DType::F32 => pick!(f32, f32::NEG_INFINITY, f32::INFINITY, 1.0),
        DType::F64 => pick!(f64, f64::NEG_INFINITY, f64::INFINITY, 1.0),
        // IEEE half and bfloat16 bit patterns of −∞, +∞ and 1.
        DType::F16 => pick!(u16, 0xFC00u16, 0x7C00u16, 0x3C00u16),
        DType::BF16 => pick!(u16, 0xFF80u16, 0x7F80u16, 0x3F80u16),
        DType::I8 => pick!(i8, i8::MIN, i8::MAX, 1),
        DType::U8 => pick!(u8, u8::MIN, u8::MAX, 1),
        DType::I16 => pick!(i16, i16::MIN, i16::MAX, 1),
        DType::I32 => pick!(i32, i32::MIN, i32::MAX, 1),
        DType::I64 => pick!(i64, i64::MIN, i64::MAX, 1),
        DType::U32 => pick!(u32, u32::MIN, u32::MAX, 1),
        DType::U16 => pick!(u16, u16::MIN, u16::MAX, 1),
        DType::U64 => pick!(u64, u64::MIN, u64::MAX, 1),
        d => return Err(invalid(format!("no window fill value for {d}"))),
    })
}

/// Float constant of `dtype` from f64 values (halves through an F32 constant and a `Cast`).
fn float_constant(g: &mut Graph, dtype: DType, dims: &[usize], v: &[f64]) -> Result<ValueId, IrError> {
    match dtype {
        DType::F64 => g.constant(TensorType::of(dtype, dims), v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        DType::F32 => g.constant(TensorType::of(dtype, dims), v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect()),
        _ => {
            let c = float_constant(g, DType::F32, dims, v)?;
            g.cast(c, dtype)
        }
    }
}

/// For each output cell (row-major over `out`) and tap (row-major over `k`): the flat input
/// cell that `src(axis, out_index, tap_index)` names on every axis, or `None`.
struct Table {
    idx: Vec<i64>,
    inside: Vec<bool>,
    rows: usize,
    taps: usize,
}

fn table(out: &[usize], k: &[usize], input: &[usize], src: impl Fn(usize, usize, usize) -> Option<usize>) -> Table {
    let (rows, taps) = (out.iter().product::<usize>(), k.iter().product::<usize>());
    let r = out.len();
    let (mut idx, mut inside) = (Vec::with_capacity(rows * taps), Vec::with_capacity(rows * taps));
    let unravel = |mut i: usize, dims: &[usize]| -> Vec<usize> {
        let mut v = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            v[a] = i % dims[a];
            i /= dims[a];
        }
        v
    };
    for row in 0..rows {
        let o = unravel(row, out);
        for tap in 0..taps {
            let t = unravel(tap, k);
            let cell = (0..r).try_fold(0usize, |acc, a| src(a, o[a], t[a]).map(|i| acc * input[a] + i));
            idx.push(cell.unwrap_or(0) as i64);
            inside.push(cell.is_some());
        }
    }
    Table { idx, inside, rows, taps }
}

/// `x [N, C, spatial…]` → `[N, C, O, K]`: the cells `t` names, `fill` where it names none.
fn gather_windows(g: &mut Graph, x: ValueId, t: &Table, fill: Fill) -> Result<ValueId, IrError> {
    let ty = g.ty(x).clone();
    let cells = spatial(g, x, "window")?.iter().product::<usize>();
    let dims = ty.shape.dims();
    let flat = reshape(g, x, vec![dims[0].clone(), dims[1].clone(), st(cells)])?;
    let idx = g.constant(TensorType::of(DType::I64, &[t.rows, t.taps]), t.idx.iter().flat_map(|i| i.to_le_bytes()).collect())?;
    let cols = g.gather(flat, idx, 2)?;
    if t.inside.iter().all(|&b| b) {
        return Ok(cols);
    }
    let mask = g.constant(TensorType::of(DType::Bool, &[t.rows, t.taps]), t.inside.iter().map(|&b| u8::from(b)).collect())?;
    let fill = g.constant(TensorType::of(ty.dtype, &[]), fill_bytes(ty.dtype, fill)?)?;
    g.select(mask, cols, fill)
}

/// The columns of a conv over `x [N, C, big…]` per group: `[N, G, O, C/G·K]`, column
/// `(c, tap)`. A 2-D conv with a static batch goes through `Im2Col` (the op OPS.md names, which
/// a backend may run natively); otherwise the windows are gathered directly.
fn group_columns(g: &mut Graph, x: ValueId, win: &Win, small: &[usize], groups: usize) -> Result<ValueId, IrError> {
    let big = spatial(g, x, "conv")?;
    let c = static_dim(g, x, 1, "conv")?;
    let n = g.ty(x).shape.dim(0).clone();
    let (o, kk, cg) = (small.iter().product::<usize>(), win.taps(), c / groups);
    if let (2, Dim::Static(nb)) = (win.k.len(), &n) {
        let attrs = Im2Col { kernel_size: win.k.clone(), stride: win.s.clone(), padding: win.p.clone(), dilation: win.d.clone() };
        let rows = g.im2col(x, attrs)?;
        let r4 = reshape(g, rows, vec![st(*nb), st(o), st(groups), st(cg * kk)])?;
        return transpose(g, r4, &[0, 2, 1, 3]);
    }
    let t = table(small, &win.k, &big, |a, o, k| win.fwd(a, o, k, big[a]));
    let cols = gather_windows(g, x, &t, Fill::Zero)?;
    let c5 = reshape(g, cols, vec![n.clone(), st(groups), st(cg), st(o), st(kk)])?;
    let c5 = transpose(g, c5, &[0, 1, 3, 2, 4])?;
    reshape(g, c5, vec![n, st(groups), st(o), st(cg * kk)])
}

/// `cols [N, G, O, Cg·K] × wm [G, Cg·K, Cog]` → `[N, G·Cog, out…]` of `out`'s type.
fn grouped_product(g: &mut Graph, cols: ValueId, wm: ValueId, out: &TensorType) -> Result<ValueId, IrError> {
    let y = g.matmul(cols, wm)?;
    let y = transpose(g, y, &[0, 1, 3, 2])?;
    reshape(g, y, out.shape.dims().to_vec())
}

/// `Conv` / `Conv3d`: per group, `im2col(x_g) · w_gᵀ` (OPS.md §10).
fn conv(g: &mut Graph, op: &Op, x: &[ValueId], win: Win, groups: usize) -> Result<ValueId, IrError> {
    let out = out_type(g, op, x)?;
    let small = spatial_of(&out, "Conv")?;
    let (c_out, cig) = (static_dim(g, x[1], 0, "Conv")?, static_dim(g, x[1], 1, "Conv")?);
    let cols = group_columns(g, x[0], &win, &small, groups)?;
    // w [C_out, C_in/g, K…] → [G, Cog, Cig·K] → [G, Cig·K, Cog]
    let wm = reshape(g, x[1], vec![st(groups), st(c_out / groups), st(cig * win.taps())])?;
    let wm = transpose(g, wm, &[0, 2, 1])?;
    grouped_product(g, cols, wm, &out)
}

/// Static spatial extents of a type.
fn spatial_of(t: &TensorType, what: &str) -> Result<Vec<usize>, IrError> {
    (2..t.rank()).map(|a| t.static_dim(a)).collect::<Result<_, _>>().map_err(|e| invalid(format!("{what} decomposition: {e}")))
}

/// `ConvTranspose2d/3d(x, w)` and `Conv{2,3}dBackwardInput(ȳ, w)` (the same transposed conv
/// with the output extents declared): `out[n, oc, y] = Σ x[n, ic, i]·w[ic, oc, k]` over
/// `i·s − p + k·d = y`, as gathered columns of `x` times `w` regrouped to `[G, Cig·K, Cog]`.
fn conv_transpose(g: &mut Graph, op: &Op, x: &[ValueId], win: Win, groups: usize) -> Result<ValueId, IrError> {
    let out = out_type(g, op, x)?;
    let what = op.kind().name();
    let big = spatial_of(&out, what)?;
    let small = spatial(g, x[0], what)?;
    let c_in = static_dim(g, x[0], 1, what)?;
    let cog = static_dim(g, x[1], 1, what)?;
    let (cig, kk) = (c_in / groups, win.taps());
    let n = g.ty(x[0]).shape.dim(0).clone();
    let t = table(&big, &win.k, &small, |a, y, k| win.bwd(a, y, k, small[a]));
    let cols = gather_windows(g, x[0], &t, Fill::Zero)?;
    let c5 = reshape(g, cols, vec![n.clone(), st(groups), st(cig), st(t.rows), st(kk)])?;
    let c5 = transpose(g, c5, &[0, 1, 3, 2, 4])?;
    let cols = reshape(g, c5, vec![n, st(groups), st(t.rows), st(cig * kk)])?;
    // w [C_in, Cog, K…] → [G, Cig, Cog, K] → [G, Cig, K, Cog] → [G, Cig·K, Cog]
    let wm = reshape(g, x[1], vec![st(groups), st(cig), st(cog), st(kk)])?;
    let wm = transpose(g, wm, &[0, 1, 3, 2])?;
    let wm = reshape(g, wm, vec![st(groups), st(cig * kk), st(cog)])?;
    grouped_product(g, cols, wm, &out)
}

/// `Conv{2,3}dBackwardWeight(x, ȳ)`: `dw_g = ȳ_g [Cog, N·O] × im2col(x_g) [N·O, Cig·K]`
/// (OPS.md §22). With a symbolic batch `N·O` has no one-dim spelling, so the product stays
/// batched over `N` and a `Reduce Sum` over it follows.
fn backward_weight(g: &mut Graph, op: &Op, x: &[ValueId], win: Win, groups: usize) -> Result<ValueId, IrError> {
    let out = out_type(g, op, x)?;
    let what = op.kind().name();
    let small = spatial(g, x[1], what)?;
    let o = small.iter().product::<usize>();
    let (c_in, c_out) = (static_dim(g, x[0], 1, what)?, static_dim(g, x[1], 1, what)?);
    let (cig, cog, kk) = (c_in / groups, c_out / groups, win.taps());
    let n = g.ty(x[0]).shape.dim(0).clone();
    let cols = group_columns(g, x[0], &win, &small, groups)?;
    let dy = reshape(g, x[1], vec![n.clone(), st(groups), st(cog), st(o)])?;
    let dw = if let Dim::Static(nb) = n {
        let cols = transpose(g, cols, &[1, 0, 2, 3])?;
        let cols = reshape(g, cols, vec![st(groups), st(nb * o), st(cig * kk)])?;
        let dy = transpose(g, dy, &[1, 2, 0, 3])?;
        let dy = reshape(g, dy, vec![st(groups), st(cog), st(nb * o)])?;
        g.matmul(dy, cols)?
    } else {
        let per_image = g.matmul(dy, cols)?;
        g.reduce(ReduceOp::Sum, per_image, &[0], false)?
    };
    reshape(g, dw, out.shape.dims().to_vec())
}

/// `Im2Col`: gathered windows `[N, C, O, K]` → `[N, O, C, K]` → `[N·O, C·K]` (static batch).
fn im2col(g: &mut Graph, a: &Im2Col, x: ValueId) -> Result<ValueId, IrError> {
    let out = out_type(g, &a.clone().into(), &[x])?;
    let win = Win::new(&a.kernel_size, &a.stride, &a.padding, &a.dilation);
    let big = spatial(g, x, "Im2Col")?;
    let n = static_dim(g, x, 0, "Im2Col (a symbolic batch gives a row count no reshape can produce)")?;
    let c = static_dim(g, x, 1, "Im2Col")?;
    let small: Vec<usize> = (0..2).map(|ax| (big[ax] + 2 * win.p[ax] - win.d[ax] * (win.k[ax] - 1) - 1) / win.s[ax] + 1).collect();
    let t = table(&small, &win.k, &big, |ax, o, k| win.fwd(ax, o, k, big[ax]));
    let cols = gather_windows(g, x, &t, Fill::Zero)?;
    let cols = transpose(g, cols, &[0, 2, 1, 3])?;
    let rows = reshape(g, cols, vec![st(n * t.rows), st(c * t.taps)])?;
    debug_assert_eq!(g.ty(rows), &out);
    Ok(rows)
}

/// `Pool`: `Mean`/`Sum` over floats → a depthwise conv with a constant kernel of `1/K` or 1
/// (OPS.md §10); `Max`/`Min`/`Prod` and integer `Sum` → gathered windows (padding filled with
/// the reduction's identity, so it never wins) + `Reduce` over the taps.
fn pool(g: &mut Graph, op: &Op, a: &Pool, x: ValueId) -> Result<ValueId, IrError> {
    let out = out_type(g, op, &[x])?;
    let ty = g.ty(x).clone();
    let win = Win::new(&a.kernel_size, &a.stride, &a.padding, &[]);
    let c = static_dim(g, x, 1, "Pool")?;
    let kk = win.taps();
    if ty.dtype.is_float() && matches!(a.kind, ReduceOp::Mean | ReduceOp::Sum) {
        let v = if a.kind == ReduceOp::Mean { 1.0 / kk as f64 } else { 1.0 };
        let mut dims = vec![c, 1];
        dims.extend(&win.k);
        let w = float_constant(g, ty.dtype, &dims, &vec![v; c * kk])?;
        let y = if win.k.len() == 3 {
            let arr = |v: &[usize]| [v[0], v[1], v[2]];
            g.conv3d(x, w, Conv3d { stride: arr(&win.s), padding: arr(&win.p), dilation: [1; 3], groups: c })?
        } else {
            g.conv(x, w, Conv { kernel_size: win.k.clone(), stride: win.s.clone(), padding: win.p.clone(), dilation: vec![], groups: c })?
        };
        return Ok(y);
    }
    let fill = match a.kind {
        ReduceOp::Max => Fill::Lowest,
        ReduceOp::Min => Fill::Highest,
        ReduceOp::Prod => Fill::One,
        ReduceOp::Sum | ReduceOp::Mean => Fill::Zero,
    };
    let big = spatial(g, x, "Pool")?;
    let small = spatial_of(&out, "Pool")?;
    let t = table(&small, &win.k, &big, |ax, o, k| win.fwd(ax, o, k, big[ax]));
    let cols = gather_windows(g, x, &t, fill)?;
    let r = g.reduce(a.kind, cols, &[3], false)?;
    reshape(g, r, out.shape.dims().to_vec())
}

/// `ResizeNearest2x`: `Reshape [N,C,H,1,W,1]` → `Expand [N,C,H,2,W,2]` → `Reshape [N,C,2H,2W]`.
fn resize_nearest2x(g: &mut Graph, x: ValueId) -> Result<ValueId, IrError> {
    let ty = g.ty(x).clone();
    let [h, w] = spatial(g, x, "ResizeNearest2x")?[..] else { unreachable!("inference checked the rank") };
    let (n, c) = (ty.shape.dim(0).clone(), ty.shape.dim(1).clone());
    let r = reshape(g, x, vec![n.clone(), c.clone(), st(h), st(1), st(w), st(1)])?;
    let e = g.expand(r, &target(&[n.clone(), c.clone(), st(h), st(2), st(w), st(2)])?)?;
    reshape(g, e, vec![n, c, st(2 * h), st(2 * w)])
}

/// `Interpolate3d`: one `Gather` per resized axis with the constant source indices
/// `min(⌊dst·in/out⌋, in−1)`.
fn interpolate3d(g: &mut Graph, x: ValueId, size: &[usize]) -> Result<ValueId, IrError> {
    let src = spatial(g, x, "Interpolate3d")?;
    let mut v = x;
    for a in 0..3 {
        let (inp, out) = (src[a], size[a]);
        if inp == out {
            continue;
        }
        let idx: Vec<u8> = (0..out)
            .flat_map(|o| ((o as u128 * inp as u128 / out as u128).min(inp as u128 - 1) as i64).to_le_bytes())
            .collect();
        let idx = g.constant(TensorType::of(DType::I64, &[out]), idx)?;
        v = g.gather(v, idx, a + 2)?;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use crate::decompose::PRIMITIVES;
    use rlx_ir::{Graph, OpKind};

    /// Legalizes the text graph `src` for a backend that claims only the primitives (plus
    /// `extra`), and checks that no kind of this family survives and the result verifies.
    fn lowers(src: &str, extra: &[OpKind]) -> Graph {
        let g = rlx_ir::text::parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let claims: Vec<OpKind> = PRIMITIVES.iter().chain(extra).copied().collect();
        let (lowered, _) = crate::legalize(&g, "test", &claims[..]).unwrap_or_else(|e| panic!("legalize: {e}\n{g}"));
        for n in lowered.nodes() {
            assert!(claims.contains(&n.op.kind()), "{} survived:\n{lowered}", n.op.kind());
        }
        rlx_ir::verify(&lowered).unwrap_or_else(|e| panic!("verify: {e}\n{lowered}"));
        assert_eq!(
            lowered.outputs().iter().map(|&v| lowered.ty(v).clone()).collect::<Vec<_>>(),
            g.outputs().iter().map(|&v| g.ty(v).clone()).collect::<Vec<_>>()
        );
        lowered
    }

    fn kinds(g: &Graph) -> Vec<OpKind> {
        g.nodes().iter().map(|n| n.op.kind()).collect()
    }

    #[test]
    fn conv_lowers_through_im2col_and_one_batched_matmul() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,4,9,8]))()
%1 = Param(name:\"w\",ty:(dtype:F32,shape:[6,2,3,2]))()
%2 = Conv(kernel_size:[3,2],stride:[2,1],padding:[1,0],dilation:[1,2],groups:2)(%0, %1)
return %2
";
        // With Im2Col claimed, the conv is Im2Col + one MatMul.
        let g = lowers(src, &[OpKind::Im2Col]);
        let k = kinds(&g);
        assert!(k.contains(&OpKind::Im2Col) && k.iter().filter(|&&k| k == OpKind::MatMul).count() == 1, "{g}");
        // Without, Im2Col itself lowers to a Gather with a padding mask.
        let g = lowers(src, &[]);
        let k = kinds(&g);
        assert!(k.contains(&OpKind::Gather) && k.contains(&OpKind::Where), "{g}");
    }

    #[test]
    fn symbolic_batch_convs_gather_directly() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",3,7,7]))()
%1 = Param(name:\"w\",ty:(dtype:F32,shape:[3,1,3,3]))()
%2 = Conv(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:3)(%0, %1)
%3 = Conv2dBackwardWeight(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:3)(%0, %2)
return %2, %3
";
        let g = lowers(src, &[OpKind::Im2Col]);
        assert!(!kinds(&g).contains(&OpKind::Im2Col), "{g}");
        assert!(kinds(&g).contains(&OpKind::Reduce), "{g}");
    }

    #[test]
    fn conv3d_and_transposed_convs_lower() {
        lowers(
            "%0 = Input(name:\"x\",ty:(dtype:F64,shape:[1,4,3,4,5]))()
%1 = Param(name:\"w\",ty:(dtype:F64,shape:[6,2,2,3,2]))()
%2 = Conv3d(stride:(1,2,1),padding:(1,0,1),dilation:(1,1,2),groups:2)(%0, %1)
%3 = Param(name:\"wt\",ty:(dtype:F64,shape:[6,1,2,2,3]))()
%4 = ConvTranspose3d(stride:(2,1,2),padding:(0,0,1),dilation:(1,1,1),output_padding:(1,0,1),groups:2)(%2, %3)
%5 = Conv3dBackwardInput(kernel_size:[2,3,2],stride:[1,2,1],padding:[1,0,1],dilation:[1,1,2],groups:2,input_size:[3,4,5])(%2, %1)
%6 = Conv3dBackwardWeight(kernel_size:[2,3,2],stride:[1,2,1],padding:[1,0,1],dilation:[1,1,2],groups:2)(%0, %2)
return %4, %5, %6
",
            &[],
        );
        lowers(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"N\",4,5,6]))()
%1 = Param(name:\"w\",ty:(dtype:F32,shape:[4,3,3,3]))()
%2 = ConvTranspose2d(kernel_size:[3,3],stride:[2,3],padding:[1,0],dilation:[1,2],output_padding:[1,2],groups:2)(%0, %1)
%3 = Param(name:\"w2\",ty:(dtype:F32,shape:[4,2,3,3]))()
%4 = Conv2dBackwardInput(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:2,input_size:[10,11])(%0, %3)
return %2, %4
",
            &[],
        );
    }

    #[test]
    fn pools_lower_to_depthwise_conv_or_window_reduce() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",3,7,6]))()
%1 = Pool(kind:Mean,kernel_size:[3,2],stride:[2,1],padding:[1,1])(%0)
%2 = Pool(kind:Max,kernel_size:[3,3],stride:[2,2],padding:[1,1])(%0)
%3 = Input(name:\"i\",ty:(dtype:I32,shape:[1,2,4,5,6]))()
%4 = Pool(kind:Sum,kernel_size:[2,2,3],stride:[1,2,2],padding:[1,0,1])(%3)
%5 = Pool(kind:Prod,kernel_size:[2,2],stride:[],padding:[])(%0)
return %1, %2, %4, %5
";
        // Mean/Sum floats become a depthwise Conv (kept here, as a backend claiming Conv would).
        let g = lowers(src, &[OpKind::Conv]);
        assert_eq!(kinds(&g).iter().filter(|&&k| k == OpKind::Conv).count(), 1, "{g}");
        assert_eq!(kinds(&g).iter().filter(|&&k| k == OpKind::Reduce).count(), 3, "{g}");
        lowers(src, &[]);
        lowers(
            "%0 = Input(name:\"x\",ty:(dtype:BF16,shape:[1,2,4,5,6]))()
%1 = Pool(kind:Mean,kernel_size:[2,2,3],stride:[1,2,2],padding:[1,0,1])(%0)
%2 = Pool(kind:Min,kernel_size:[2,2,3],stride:[1,2,2],padding:[1,0,1])(%0)
return %1, %2
",
            &[],
        );
    }

    #[test]
    fn resizes_and_im2col_lower() {
        let g = lowers(
            "%0 = Input(name:\"x\",ty:(dtype:I64,shape:[\"B\",3,4,5]))()
%1 = ResizeNearest2x()(%0)
%2 = Input(name:\"v\",ty:(dtype:F32,shape:[1,2,3,4,5]))()
%3 = Interpolate3d(size:[5,4,2])(%2)
%4 = Input(name:\"c\",ty:(dtype:I32,shape:[2,3,6,7]))()
%5 = Im2Col(kernel_size:[3,2],stride:[2,1],padding:[1,1],dilation:[1,2])(%4)
return %1, %3, %5
",
            &[],
        );
        // Interpolate3d leaves the unchanged H axis alone: two gathers, and one for Im2Col.
        assert_eq!(kinds(&g).iter().filter(|&&k| k == OpKind::Gather).count(), 3, "{g}");
        assert!(kinds(&g).contains(&OpKind::Expand), "{g}");
    }

    #[test]
    fn symbolic_batch_im2col_is_an_error_not_a_wrong_graph() {
        let g = rlx_ir::text::parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",3,4,5]))()
%1 = Im2Col(kernel_size:[3,3],stride:[1,1],padding:[1,1],dilation:[1,1])(%0)
return %1
",
        )
        .unwrap();
        let e = crate::legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("Im2Col"), "{e}");
    }
}
