//! Convolution, pooling and resize (OPS.md §10); their backward ops (§22) live in the
//! `backward` submodule.
//!
//! Layouts are NCHW / NCDHW; conv weights are `[C_out, C_in/groups, k…]`, transposed-conv
//! weights `[C_in, C_out/groups, k…]`. Spatial extents follow
//! `out = ⌊(in + 2p − d·(k−1) − 1)/s⌋ + 1` (transposed: `(in−1)·s − 2p + d·(k−1) + op + 1`).
//! A symbolic spatial extent passes through only where the map is the identity (stride 1 and
//! "same" padding); otherwise the extent must be static.

use super::reduce::ReduceOp;
use super::{Arity, OpDef};
use crate::{Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};
use std::fmt::Display;

mod backward;
pub use backward::*;

/// 2-D cross-correlation (`torch.nn.functional.conv2d`); inputs `(x [N,C_in,H,W],
/// w [C_out, C_in/groups, kH, kW])`, bias is a separate `Add`.
///
/// Missing `stride`/`dilation` entries default to 1 and `padding` entries to 0; 1-D conv uses
/// `H = 1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
}

/// 3-D cross-correlation over NCDHW; the kernel size is read from the weight
/// `[C_out, C_in/groups, kD, kH, kW]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv3d {
    pub stride: [usize; 3],
    pub padding: [usize; 3],
    pub dilation: [usize; 3],
    pub groups: usize,
}

/// Adjoint of `Conv` w.r.t. its input (`torch.nn.ConvTranspose2d`, no bias); weight
/// `[C_in, C_out/groups, kH, kW]`, `output_padding < max(stride, dilation)` per axis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvTranspose2d {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub output_padding: Vec<usize>,
    pub groups: usize,
}

/// 3-D transposed conv (`torch.nn.ConvTranspose3d`, no bias); kernel size from the weight
/// `[C_in, C_out/groups, kD, kH, kW]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvTranspose3d {
    pub stride: [usize; 3],
    pub padding: [usize; 3],
    pub dilation: [usize; 3],
    pub output_padding: [usize; 3],
    pub groups: usize,
}

/// Unfolds `x [N,C,H,W]` into rows `[N·H_o·W_o, C·kH·kW]` (transpose of
/// `torch.nn.functional.unfold`), zero outside the input. A symbolic batch `B` gives the
/// derived symbolic row count `B_x{H_o·W_o}` (rlx-ir has no symbolic arithmetic).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Im2Col {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
}

/// Window pooling in floor mode over NCHW, or NCDHW when `kernel_size` has 3 entries.
///
/// `Max`/`Min`/`Prod` reduce the in-bounds cells, `Sum` adds them, `Mean` divides that sum by
/// the full window area (PyTorch `count_include_pad=True`). Missing `stride` entries default
/// to 1 (ONNX), not to the kernel size (PyTorch); importers fill them in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    pub kind: ReduceOp,
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
}

/// Nearest-neighbour 2× upsampling: `[N,C,H,W] → [N,C,2H,2W]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResizeNearest2x {}

/// Nearest-neighbour resize of `[N,C,D,H,W]` to `size = [D_o, H_o, W_o]` with
/// `src = min(⌊dst·in/out⌋, in−1)` in exact integer arithmetic (PyTorch `mode='nearest'`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interpolate3d {
    pub size: Vec<usize>,
}

// ---- shared geometry -------------------------------------------------------------------

/// `d · k` as a dim: exact when `d` is static or `k = 1`, else the derived symbol `{d}_x{k}`.
///
/// The derived name is deterministic, so equal products of equal symbols stay equal; the
/// core has no symbolic arithmetic, so this is the only product rlx-ir can express.
pub(crate) fn scaled_dim(d: &Dim, k: usize) -> Result<Dim, String> {
    Ok(match d {
        Dim::Static(n) => Dim::Static(n.checked_mul(k).ok_or_else(|| format!("{n}·{k} overflows"))?),
        Dim::Sym(_) if k == 1 => d.clone(),
        Dim::Sym(s) => Dim::Sym(format!("{s}_x{k}")),
    })
}

/// `a·b + c` without overflow.
fn mul_add(a: usize, b: usize, c: usize) -> Result<usize, String> {
    a.checked_mul(b)
        .and_then(|v| v.checked_add(c))
        .ok_or_else(|| format!("window arithmetic {a}·{b} + {c} overflows"))
}

/// `d / k`, which must divide exactly; a symbolic `d` passes only with `k = 1`.
fn divided_dim(d: &Dim, k: usize, what: &str) -> Result<Dim, String> {
    match d {
        Dim::Sym(_) if k == 1 => Ok(d.clone()),
        Dim::Sym(s) => Err(format!("{what} is symbolic ({s}); dividing it by groups = {k} needs a static size")),
        Dim::Static(n) if n % k == 0 => Ok(Dim::Static(n / k)),
        Dim::Static(n) => Err(format!("{what} {n} is not divisible by groups = {k}")),
    }
}

/// Checks that `a` is a float tensor and `b` shares its dtype.
fn float_operands(a_name: &str, a: &TensorType, b_name: &str, b: &TensorType) -> Result<(), String> {
    if !a.dtype.is_float() {
        return Err(format!("{a_name} {a} must be a float tensor"));
    }
    if b.dtype != a.dtype {
        return Err(format!("{b_name} {b} must have the dtype of {a_name} {a}"));
    }
    Ok(())
}

/// Checks that `t` is `[N, C, spatial…]` with `spatial` axes.
fn check_rank(name: &str, t: &TensorType, spatial: usize) -> Result<(), String> {
    if t.rank() == spatial + 2 {
        return Ok(());
    }
    let layout = if spatial == 3 { "[N, C, D, H, W]" } else { "[N, C, H, W]" };
    Err(format!("{name} {t} must be {layout} (rank {})", spatial + 2))
}

fn positive(name: &str, v: usize) -> Result<(), String> {
    if v == 0 {
        Err(format!("{name} must be at least 1"))
    } else {
        Ok(())
    }
}

/// The static spatial extents `t.dims()[2..]` of a weight (its kernel size).
fn kernel_of(w: &TensorType) -> Result<Vec<usize>, String> {
    (2..w.rank()).map(|a| w.static_dim(a)).collect()
}

/// Checks a declared `kernel_size` against the weight's spatial extents.
fn check_kernel(kernel: &[usize], w: &TensorType) -> Result<(), String> {
    let want: Vec<Dim> = kernel.iter().map(|&k| Dim::Static(k)).collect();
    if w.shape.dims().get(2..) != Some(&want[..]) {
        return Err(format!("kernel_size {kernel:?} does not match the weight {w}"));
    }
    Ok(())
}

/// The window of a conv or pool along its spatial axes, with defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Window {
    pub kernel: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
}

fn fill(name: &str, v: &[usize], n: usize, default: usize) -> Result<Vec<usize>, String> {
    if v.len() > n {
        return Err(format!("{name} {v:?} has more than {n} entries"));
    }
    let mut out = v.to_vec();
    out.resize(n, default);
    Ok(out)
}

impl Window {
    /// Validates the attributes: kernel, stride and dilation entries at least 1; missing
    /// stride/dilation entries become 1, missing padding entries 0.
    pub fn new(kernel: &[usize], stride: &[usize], padding: &[usize], dilation: &[usize]) -> Result<Window, String> {
        let n = kernel.len();
        if n == 0 || kernel.contains(&0) {
            return Err(format!("kernel_size {kernel:?} needs positive entries"));
        }
        let w = Window {
            kernel: kernel.to_vec(),
            stride: fill("stride", stride, n, 1)?,
            padding: fill("padding", padding, n, 0)?,
            dilation: fill("dilation", dilation, n, 1)?,
        };
        if w.stride.contains(&0) {
            return Err(format!("stride {stride:?} needs positive entries"));
        }
        if w.dilation.contains(&0) {
            return Err(format!("dilation {dilation:?} needs positive entries"));
        }
        Ok(w)
    }

    /// A window that must have `n` spatial axes.
    pub fn with_rank(n: usize, kernel: &[usize], stride: &[usize], padding: &[usize], dilation: &[usize]) -> Result<Window, String> {
        if kernel.len() != n {
            return Err(format!("kernel_size {kernel:?} must have {n} entries"));
        }
        Window::new(kernel, stride, padding, dilation)
    }

    /// Output extents of the forward window over `spatial` (the axes of `ctx` after N, C).
    pub fn out(&self, spatial: &[Dim], ctx: &dyn Display) -> Result<Vec<Dim>, String> {
        let mut out = Vec::with_capacity(spatial.len());
        for (i, d) in spatial.iter().enumerate() {
            let (k, s, p, dl) = (self.kernel[i], self.stride[i], self.padding[i], self.dilation[i]);
            let span = mul_add(dl, k - 1, 1)?;
            let two_p = mul_add(p, 2, 0)?;
            let n = match d {
                Dim::Sym(_) if s == 1 && two_p.checked_add(1) == Some(span) => {
                    out.push(d.clone());
                    continue;
                }
                Dim::Sym(sym) => {
                    return Err(format!(
                        "spatial axis {i} of {ctx} is symbolic ({sym}); this window needs a static size"
                    ))
                }
                Dim::Static(n) => *n,
            };
            let padded = mul_add(p, 2, n)?;
            if padded < span {
                return Err(format!(
                    "window span {span} exceeds the padded extent {padded} of spatial axis {i} of {ctx}"
                ));
            }
            out.push(Dim::Static((padded - span) / s + 1));
        }
        Ok(out)
    }

    /// Output extents of the transposed window over `spatial`, with `output_padding` per axis.
    pub fn out_transposed(&self, spatial: &[Dim], output_padding: &[usize], ctx: &dyn Display) -> Result<Vec<Dim>, String> {
        let mut out = Vec::with_capacity(spatial.len());
        for (i, d) in spatial.iter().enumerate() {
            let (k, s, p, dl) = (self.kernel[i], self.stride[i], self.padding[i], self.dilation[i]);
            let op = output_padding.get(i).copied().unwrap_or(0);
            if op >= s.max(dl) {
                return Err(format!(
                    "output_padding {op} on spatial axis {i} must be below max(stride {s}, dilation {dl})"
                ));
            }
            let grow = mul_add(dl, k - 1, op)?.checked_add(1).ok_or("window arithmetic overflows")?;
            let two_p = mul_add(p, 2, 0)?;
            let n = match d {
                Dim::Sym(_) if s == 1 && two_p.checked_add(1) == Some(grow) => {
                    out.push(d.clone());
                    continue;
                }
                Dim::Sym(sym) => {
                    return Err(format!(
                        "spatial axis {i} of {ctx} is symbolic ({sym}); this window needs a static size"
                    ))
                }
                Dim::Static(0) => return Err(format!("spatial axis {i} of {ctx} is empty")),
                Dim::Static(n) => *n,
            };
            let full = mul_add(n - 1, s, grow)?;
            if full <= two_p {
                return Err(format!(
                    "padding {p} leaves no output on spatial axis {i} of {ctx} (full extent {full})"
                ));
            }
            out.push(Dim::Static(full - two_p));
        }
        Ok(out)
    }
}

/// Checks `x [N, C_in, sp…]` against a conv weight `w [C_out, C_in/groups, k…]`; returns C_out.
fn conv_channels(x: &TensorType, w: &TensorType, groups: usize) -> Result<Dim, String> {
    positive("groups", groups)?;
    let (c_in, c_out) = (x.shape.dim(1), w.shape.dim(0));
    let want = scaled_dim(w.shape.dim(1), groups)?;
    if *c_in != want {
        return Err(format!(
            "C_in {c_in} of x {x} must equal groups·w.dim(1) = {groups}·{} for w {w}",
            w.shape.dim(1)
        ));
    }
    divided_dim(c_out, groups, "C_out")?;
    Ok(c_out.clone())
}

/// Checks `x [N, C_in, sp…]` against a transposed-conv weight `w [C_in, C_out/groups, k…]`;
/// returns C_out.
fn transposed_channels(x: &TensorType, w: &TensorType, groups: usize) -> Result<Dim, String> {
    positive("groups", groups)?;
    let c_in = x.shape.dim(1);
    if c_in != w.shape.dim(0) {
        return Err(format!("C_in {c_in} of x {x} must equal w.dim(0) of w {w}"));
    }
    divided_dim(c_in, groups, "C_in")?;
    scaled_dim(w.shape.dim(1), groups)
}

/// `[N, C, spatial…]` with `x`'s dtype.
fn nc_out(x: &TensorType, c: Dim, spatial: Vec<Dim>) -> TensorType {
    let mut dims = vec![x.shape.dim(0).clone(), c];
    dims.extend(spatial);
    TensorType::new(x.dtype, Shape(dims))
}

fn conv_nd(x: &TensorType, w: &TensorType, win: &Window, groups: usize) -> Result<Vec<TensorType>, String> {
    let n = win.kernel.len();
    check_rank("x", x, n)?;
    check_rank("w", w, n)?;
    float_operands("x", x, "w", w)?;
    check_kernel(&win.kernel, w)?;
    let c_out = conv_channels(x, w, groups)?;
    let spatial = win.out(&x.shape.dims()[2..], x)?;
    Ok(vec![nc_out(x, c_out, spatial)])
}

fn conv_transpose_nd(
    x: &TensorType,
    w: &TensorType,
    win: &Window,
    output_padding: &[usize],
    groups: usize,
) -> Result<Vec<TensorType>, String> {
    let n = win.kernel.len();
    check_rank("x", x, n)?;
    check_rank("w", w, n)?;
    float_operands("x", x, "w", w)?;
    check_kernel(&win.kernel, w)?;
    let c_out = transposed_channels(x, w, groups)?;
    let output_padding = fill("output_padding", output_padding, n, 0)?;
    let spatial = win.out_transposed(&x.shape.dims()[2..], &output_padding, x)?;
    Ok(vec![nc_out(x, c_out, spatial)])
}

/// A 3-D weight's window, its kernel size read from the weight.
fn window3(w: &TensorType, stride: &[usize; 3], padding: &[usize; 3], dilation: &[usize; 3]) -> Result<Window, String> {
    check_rank("w", w, 3)?;
    Window::new(&kernel_of(w)?, stride, padding, dilation)
}

impl OpDef for Conv {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(2, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        conv_nd(&inputs[0], &inputs[1], &win, self.groups)
    }
}

impl OpDef for Conv3d {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = window3(&inputs[1], &self.stride, &self.padding, &self.dilation)?;
        conv_nd(&inputs[0], &inputs[1], &win, self.groups)
    }
}

impl OpDef for ConvTranspose2d {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(2, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        conv_transpose_nd(&inputs[0], &inputs[1], &win, &self.output_padding, self.groups)
    }
}

impl OpDef for ConvTranspose3d {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = window3(&inputs[1], &self.stride, &self.padding, &self.dilation)?;
        conv_transpose_nd(&inputs[0], &inputs[1], &win, &self.output_padding, self.groups)
    }
}

impl OpDef for Im2Col {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let win = Window::with_rank(2, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        check_rank("x", x, 2)?;
        let spatial = win.out(&x.shape.dims()[2..], x)?;
        let cells = spatial.iter().try_fold(1usize, |acc, d| {
            let n = d.as_static().ok_or_else(|| format!("Im2Col needs static spatial extents, got {x}"))?;
            mul_add(acc, n, 0)
        })?;
        let taps = win.kernel.iter().try_fold(1usize, |acc, &k| mul_add(acc, k, 0))?;
        let rows = scaled_dim(x.shape.dim(0), cells)?;
        let cols = scaled_dim(x.shape.dim(1), taps)?;
        Ok(vec![TensorType::new(x.dtype, Shape(vec![rows, cols]))])
    }
}

impl OpDef for Pool {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        if !matches!(self.kernel_size.len(), 2 | 3) {
            return Err(format!("kernel_size {:?} must have 2 (NCHW) or 3 (NCDHW) entries", self.kernel_size));
        }
        let win = Window::new(&self.kernel_size, &self.stride, &self.padding, &[])?;
        check_rank("x", x, win.kernel.len())?;
        let ok = match self.kind {
            ReduceOp::Mean => x.dtype.is_float(),
            _ => x.dtype.is_float() || x.dtype.is_int(),
        };
        if !ok {
            return Err(format!("{:?} pooling does not apply to {}", self.kind, x.dtype));
        }
        let spatial = win.out(&x.shape.dims()[2..], x)?;
        Ok(vec![nc_out(x, x.shape.dim(1).clone(), spatial)])
    }
}

impl OpDef for ResizeNearest2x {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        check_rank("x", x, 2)?;
        let spatial = x.shape.dims()[2..].iter().map(|d| scaled_dim(d, 2)).collect::<Result<_, _>>()?;
        Ok(vec![nc_out(x, x.shape.dim(1).clone(), spatial)])
    }
}

impl OpDef for Interpolate3d {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        check_rank("x", x, 3)?;
        if self.size.len() != 3 || self.size.contains(&0) {
            return Err(format!("size {:?} must be 3 positive extents [D_o, H_o, W_o]", self.size));
        }
        if x.shape.dims()[2..].contains(&Dim::Static(0)) {
            return Err(format!("x {x} has an empty spatial axis to sample from"));
        }
        let spatial = self.size.iter().map(|&n| Dim::Static(n)).collect();
        Ok(vec![nc_out(x, x.shape.dim(1).clone(), spatial)])
    }
}

/// Builders for the forward conv family.
impl crate::Graph {
    /// `Conv(x, w)`; `attrs.kernel_size` must match `w`'s spatial extents.
    pub fn conv(&mut self, x: crate::ValueId, w: crate::ValueId, attrs: Conv) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, w])
    }

    /// `Conv3d(x, w)`; the kernel size comes from `w`.
    pub fn conv3d(&mut self, x: crate::ValueId, w: crate::ValueId, attrs: Conv3d) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, w])
    }

    /// `ConvTranspose2d(x, w)` with a `[C_in, C_out/groups, kH, kW]` weight.
    pub fn conv_transpose2d(&mut self, x: crate::ValueId, w: crate::ValueId, attrs: ConvTranspose2d) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, w])
    }

    /// `ConvTranspose3d(x, w)` with a `[C_in, C_out/groups, kD, kH, kW]` weight.
    pub fn conv_transpose3d(&mut self, x: crate::ValueId, w: crate::ValueId, attrs: ConvTranspose3d) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, w])
    }

    /// `Im2Col(x)`: patch rows for a conv-as-matmul.
    pub fn im2col(&mut self, x: crate::ValueId, attrs: Im2Col) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x])
    }

    /// `Pool(x)`: 2-D or 3-D window pooling, by the length of `attrs.kernel_size`.
    pub fn pool(&mut self, x: crate::ValueId, attrs: Pool) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x])
    }

    /// Nearest-neighbour 2× upsampling of NCHW `x`.
    pub fn resize_nearest2x(&mut self, x: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(ResizeNearest2x {}, &[x])
    }

    /// Nearest-neighbour resize of NCDHW `x` to `size = [D_o, H_o, W_o]`.
    pub fn interpolate3d(&mut self, x: crate::ValueId, size: [usize; 3]) -> crate::Result<crate::ValueId> {
        self.add1(Interpolate3d { size: size.to_vec() }, &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph};

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    fn sym(dims: &[Dim]) -> TensorType {
        TensorType::new(DType::F32, Shape(dims.to_vec()))
    }

    fn conv2(k: usize, s: usize, p: usize, d: usize, groups: usize) -> Conv {
        Conv { kernel_size: vec![k, k], stride: vec![s, s], padding: vec![p, p], dilation: vec![d, d], groups }
    }

    #[test]
    fn conv_output_extent_follows_the_formula() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 3, 224, 224]));
        let w = g.param("w", f32s(&[64, 3, 7, 7]));
        let y = g.conv(x, w, conv2(7, 2, 3, 1, 1)).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 64, 112, 112]));
        // dilation 2, k 3: span 5; (10 + 0 − 5)/1 + 1 = 6
        let x = g.input("x2", f32s(&[1, 4, 10, 10]));
        let w = g.param("w2", f32s(&[8, 2, 3, 3]));
        let y = g.conv(x, w, conv2(3, 1, 0, 2, 2)).unwrap();
        assert_eq!(g.ty(y), &f32s(&[1, 8, 6, 6]));
    }

    #[test]
    fn conv_defaults_missing_entries_and_checks_groups() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 4, 8, 8]));
        let w = g.param("w", f32s(&[6, 2, 3, 3]));
        let attrs = Conv { kernel_size: vec![3, 3], stride: vec![], padding: vec![1], dilation: vec![], groups: 2 };
        // padding [1] means [1, 0].
        let v = g.conv(x, w, attrs).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 6, 8, 6]));
        let e = g.conv(x, w, conv2(3, 1, 1, 1, 1)).unwrap_err().to_string();
        assert!(e.contains("C_in 4 of x f32[1, 4, 8, 8] must equal groups·w.dim(1) = 1·2"), "{e}");
        let w5 = g.param("w5", f32s(&[5, 1, 3, 3]));
        let e = g.conv(x, w5, conv2(3, 1, 1, 1, 4)).unwrap_err().to_string();
        assert!(e.contains("C_out 5 is not divisible by groups = 4"), "{e}");
    }

    #[test]
    fn symbolic_extents_pass_only_through_identity_windows() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["B".into(), 16.into(), "H".into(), 32.into()]));
        let w = g.param("w", f32s(&[16, 16, 3, 3]));
        let y = g.conv(x, w, conv2(3, 1, 1, 1, 1)).unwrap();
        assert_eq!(g.ty(y), &sym(&["B".into(), 16.into(), "H".into(), 32.into()]));
        let e = g.conv(x, w, conv2(3, 2, 1, 1, 1)).unwrap_err().to_string();
        assert!(e.contains("symbolic (H)"), "{e}");
    }

    #[test]
    fn transposed_conv_inverts_the_extent() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 8, 7, 7]));
        let w = g.param("w", f32s(&[8, 2, 3, 3]));
        let attrs = ConvTranspose2d {
            kernel_size: vec![3, 3],
            stride: vec![2, 2],
            padding: vec![1, 1],
            dilation: vec![],
            output_padding: vec![1, 1],
            groups: 2,
        };
        let v = g.conv_transpose2d(x, w, attrs.clone()).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 4, 14, 14]));
        let bad = ConvTranspose2d { output_padding: vec![2, 0], ..attrs };
        assert!(g.conv_transpose2d(x, w, bad).unwrap_err().to_string().contains("output_padding 2"));
        let x3 = g.input("x3", f32s(&[1, 4, 2, 3, 3]));
        let w3 = g.param("w3", f32s(&[4, 5, 2, 3, 3]));
        let attrs = ConvTranspose3d { stride: [2, 1, 1], padding: [0, 1, 1], dilation: [1; 3], output_padding: [0; 3], groups: 1 };
        let v = g.conv_transpose3d(x3, w3, attrs).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 5, 4, 3, 3]));
    }

    #[test]
    fn conv3d_reads_its_kernel_from_the_weight() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 2, 8, 16, 16]));
        let w = g.param("w", f32s(&[4, 2, 3, 3, 3]));
        let attrs = Conv3d { stride: [1, 2, 2], padding: [1, 1, 1], dilation: [1; 3], groups: 1 };
        let v = g.conv3d(x, w, attrs).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 4, 8, 8, 8]));
        let small = g.input("s", f32s(&[1, 2, 1, 16, 16]));
        let attrs = Conv3d { stride: [1; 3], padding: [0; 3], dilation: [1; 3], groups: 1 };
        let e = g.conv3d(small, w, attrs).unwrap_err().to_string();
        assert!(e.contains("window span 3 exceeds the padded extent 1"), "{e}");
    }

    #[test]
    fn im2col_rows_follow_a_symbolic_batch() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["B".into(), 3.into(), 8.into(), 8.into()]));
        let attrs = Im2Col { kernel_size: vec![3, 3], stride: vec![1, 1], padding: vec![1, 1], dilation: vec![] };
        let y = g.im2col(x, attrs).unwrap();
        assert_eq!(g.ty(y), &sym(&["B_x64".into(), 27.into()]));
    }

    #[test]
    fn pool_picks_2d_or_3d_and_checks_dtype() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 3, 8, 8]));
        let p = Pool { kind: ReduceOp::Max, kernel_size: vec![2, 2], stride: vec![2, 2], padding: vec![] };
        let v = g.pool(x, p.clone()).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 3, 4, 4]));
        let p3 = Pool { kernel_size: vec![2, 2, 2], stride: vec![2, 2, 2], ..p.clone() };
        assert!(g.pool(x, p3.clone()).unwrap_err().to_string().contains("rank 5"));
        let v = g.input("v", f32s(&[1, 3, 4, 8, 8]));
        let v = g.pool(v, p3).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 3, 2, 4, 4]));
        let i = g.input("i", TensorType::of(DType::I32, &[1, 3, 8, 8]));
        assert!(g.pool(i, p).is_ok());
        let mean = Pool { kind: ReduceOp::Mean, kernel_size: vec![2, 2], stride: vec![2, 2], padding: vec![] };
        assert!(g.pool(i, mean).unwrap_err().to_string().contains("Mean pooling does not apply to i32"));
    }

    #[test]
    fn absurd_attributes_are_errors_not_overflows() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 3, 8, 8]));
        let p = Pool { kind: ReduceOp::Max, kernel_size: vec![2, 2], stride: vec![], padding: vec![usize::MAX, 0] };
        assert!(g.pool(x, p).unwrap_err().to_string().contains("overflows"));
        let w = g.param("w", f32s(&[3, 3, 1, 1]));
        let t = ConvTranspose2d {
            kernel_size: vec![1, 1],
            stride: vec![usize::MAX, 1],
            padding: vec![],
            dilation: vec![],
            output_padding: vec![],
            groups: 1,
        };
        assert!(g.conv_transpose2d(x, w, t).unwrap_err().to_string().contains("overflows"));
    }

    #[test]
    fn resizes() {
        let mut g = Graph::new();
        let x = g.input("x", sym(&["B".into(), 3.into(), "H".into(), 5.into()]));
        let y = g.resize_nearest2x(x).unwrap();
        assert_eq!(g.ty(y), &sym(&["B".into(), 3.into(), "H_x2".into(), 10.into()]));
        let v = g.input("v", f32s(&[1, 2, 3, 4, 5]));
        let v = g.interpolate3d(v, [6, 8, 7]).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 2, 6, 8, 7]));
        assert!(g.interpolate3d(v, [6, 0, 7]).unwrap_err().to_string().contains("positive"));
    }
}
