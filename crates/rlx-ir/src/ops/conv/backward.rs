//! Backward ops of convolution and max pooling (OPS.md §22), emitted by autodiff for `Conv`,
//! `Conv3d` and `Pool`. Each re-checks the forward geometry it was built from.

use super::{check_kernel, check_rank, divided_dim, float_operands, nc_out, positive, scaled_dim, Window};
use crate::ops::{Arity, OpDef};
use crate::{Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// `dx` of `Conv`: a transposed conv of `ȳ [N,C_out,H_o,W_o]` with the forward weight `w`.
///
/// `input_size` holds the forward input's spatial extents `[H, W]`; it fixes the output shape
/// where stride > 1 leaves it ambiguous (PyTorch `conv2d_input(input_size, …)`), and may be
/// symbolic where the forward window is the identity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv2dBackwardInput {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
    pub input_size: Vec<Dim>,
}

/// `dw` of `Conv`: correlates the forward input `x` with `ȳ`; output `[C_out, C_in/g, kH, kW]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv2dBackwardWeight {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
}

/// `dx` of `Conv3d`; `input_size` is the forward input's `[D, H, W]` (see
/// [`Conv2dBackwardInput`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv3dBackwardInput {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
    pub input_size: Vec<Dim>,
}

/// `dw` of `Conv3d`: output `[C_out, C_in/g, kD, kH, kW]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv3dBackwardWeight {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
}

/// `dx` of 2-D max `Pool`: each window's first in-bounds maximum receives that window's `ȳ`;
/// inputs `(x [N,C,H,W], ȳ [N,C,H_o,W_o])`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxPool2dBackward {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
}

/// `dx` of 3-D max `Pool`; inputs `(x [N,C,D,H,W], ȳ)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxPool3dBackward {
    pub kernel_size: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
}

/// Checks that the forward window over `input` lands on `dy`'s spatial extents.
fn check_forward(win: &Window, input: &[Dim], ctx: &str, dy: &TensorType) -> Result<(), String> {
    let fwd = win.out(input, &ctx)?;
    if dy.shape.dims().get(2..) != Some(&fwd[..]) {
        return Err(format!(
            "the forward window over {ctx} gives spatial extents {}, but dy is {dy}",
            Shape(fwd)
        ));
    }
    Ok(())
}

/// `[N, C_in, input_size…]` from `(ȳ, w)`.
fn backward_input(win: &Window, groups: usize, input_size: &[Dim], inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let (dy, w) = (&inputs[0], &inputs[1]);
    let n = win.kernel.len();
    check_rank("dy", dy, n)?;
    check_rank("w", w, n)?;
    float_operands("dy", dy, "w", w)?;
    check_kernel(&win.kernel, w)?;
    positive("groups", groups)?;
    if dy.shape.dim(1) != w.shape.dim(0) {
        return Err(format!("C_out {} of dy {dy} must equal w.dim(0) of w {w}", dy.shape.dim(1)));
    }
    divided_dim(dy.shape.dim(1), groups, "C_out")?;
    if input_size.len() != n {
        return Err(format!("input_size {} must have {n} entries", Shape(input_size.to_vec())));
    }
    check_forward(win, input_size, &format!("input_size {}", Shape(input_size.to_vec())), dy)?;
    Ok(vec![nc_out(dy, scaled_dim(w.shape.dim(1), groups)?, input_size.to_vec())])
}

/// `[C_out, C_in/groups, k…]` from `(x, ȳ)`.
fn backward_weight(win: &Window, groups: usize, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let (x, dy) = (&inputs[0], &inputs[1]);
    let n = win.kernel.len();
    check_rank("x", x, n)?;
    check_rank("dy", dy, n)?;
    float_operands("x", x, "dy", dy)?;
    positive("groups", groups)?;
    if x.shape.dim(0) != dy.shape.dim(0) {
        return Err(format!("batch of x {x} and dy {dy} differ"));
    }
    check_forward(win, &x.shape.dims()[2..], &format!("x {x}"), dy)?;
    let c_in_g = divided_dim(x.shape.dim(1), groups, "C_in")?;
    let c_out = dy.shape.dim(1);
    divided_dim(c_out, groups, "C_out")?;
    let mut dims = vec![c_out.clone(), c_in_g];
    dims.extend(win.kernel.iter().map(|&k| Dim::Static(k)));
    Ok(vec![TensorType::new(x.dtype, Shape(dims))])
}

/// The type of `x`, after checking that `ȳ` is the pool output of `x`.
fn max_pool_backward(win: &Window, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    let (x, dy) = (&inputs[0], &inputs[1]);
    let n = win.kernel.len();
    check_rank("x", x, n)?;
    float_operands("x", x, "dy", dy)?;
    let want = nc_out(x, x.shape.dim(1).clone(), win.out(&x.shape.dims()[2..], x)?);
    if *dy != want {
        return Err(format!("dy {dy} must be the pool output {want} of x {x}"));
    }
    Ok(vec![x.clone()])
}

impl OpDef for Conv2dBackwardInput {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.input_size.iter_mut().for_each(|d| d.bind(sizes));
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(2, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        backward_input(&win, self.groups, &self.input_size, inputs)
    }
}

impl OpDef for Conv2dBackwardWeight {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(2, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        backward_weight(&win, self.groups, inputs)
    }
}

impl OpDef for Conv3dBackwardInput {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.input_size.iter_mut().for_each(|d| d.bind(sizes));
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(3, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        backward_input(&win, self.groups, &self.input_size, inputs)
    }
}

impl OpDef for Conv3dBackwardWeight {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(3, &self.kernel_size, &self.stride, &self.padding, &self.dilation)?;
        backward_weight(&win, self.groups, inputs)
    }
}

impl OpDef for MaxPool2dBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(2, &self.kernel_size, &self.stride, &self.padding, &[])?;
        max_pool_backward(&win, inputs)
    }
}

impl OpDef for MaxPool3dBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let win = Window::with_rank(3, &self.kernel_size, &self.stride, &self.padding, &[])?;
        max_pool_backward(&win, inputs)
    }
}

/// Builders for the conv backward ops.
impl crate::Graph {
    /// `dx` of a 2-D conv from `(ȳ, w)`.
    pub fn conv2d_backward_input(&mut self, dy: crate::ValueId, w: crate::ValueId, attrs: Conv2dBackwardInput) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[dy, w])
    }

    /// `dw` of a 2-D conv from `(x, ȳ)`.
    pub fn conv2d_backward_weight(&mut self, x: crate::ValueId, dy: crate::ValueId, attrs: Conv2dBackwardWeight) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, dy])
    }

    /// `dx` of a 3-D conv from `(ȳ, w)`.
    pub fn conv3d_backward_input(&mut self, dy: crate::ValueId, w: crate::ValueId, attrs: Conv3dBackwardInput) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[dy, w])
    }

    /// `dw` of a 3-D conv from `(x, ȳ)`.
    pub fn conv3d_backward_weight(&mut self, x: crate::ValueId, dy: crate::ValueId, attrs: Conv3dBackwardWeight) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, dy])
    }

    /// `dx` of a 2-D max pool from `(x, ȳ)`.
    pub fn max_pool2d_backward(&mut self, x: crate::ValueId, dy: crate::ValueId, attrs: MaxPool2dBackward) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, dy])
    }

    /// `dx` of a 3-D max pool from `(x, ȳ)`.
    pub fn max_pool3d_backward(&mut self, x: crate::ValueId, dy: crate::ValueId, attrs: MaxPool3dBackward) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[x, dy])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph};

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    #[test]
    fn backward_input_uses_the_declared_size_to_resolve_stride() {
        let mut g = Graph::new();
        let dy = g.input("dy", f32s(&[2, 8, 4, 4]));
        let w = g.param("w", f32s(&[8, 2, 3, 3]));
        let attrs = |h: usize| Conv2dBackwardInput {
            kernel_size: vec![3, 3],
            stride: vec![2, 2],
            padding: vec![1, 1],
            dilation: vec![],
            groups: 2,
            input_size: vec![h.into(), 8.into()],
        };
        // Both 7 and 8 map to 4 under stride 2.
        let v = g.conv2d_backward_input(dy, w, attrs(7)).unwrap();
        assert_eq!(g.ty(v), &f32s(&[2, 4, 7, 8]));
        let v = g.conv2d_backward_input(dy, w, attrs(8)).unwrap();
        assert_eq!(g.ty(v), &f32s(&[2, 4, 8, 8]));
        let e = g.conv2d_backward_input(dy, w, attrs(10)).unwrap_err().to_string();
        assert!(e.contains("gives spatial extents [5, 4], but dy is f32[2, 8, 4, 4]"), "{e}");
    }

    #[test]
    fn backward_weight_has_the_weight_shape() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 4, 8, 8]));
        let dy = g.input("dy", f32s(&[2, 6, 8, 8]));
        let attrs = Conv2dBackwardWeight {
            kernel_size: vec![3, 3],
            stride: vec![1, 1],
            padding: vec![1, 1],
            dilation: vec![1, 1],
            groups: 2,
        };
        let v = g.conv2d_backward_weight(x, dy, attrs.clone()).unwrap();
        assert_eq!(g.ty(v), &f32s(&[6, 2, 3, 3]));
        let dy2 = g.input("dy2", f32s(&[3, 6, 8, 8]));
        assert!(g.conv2d_backward_weight(x, dy2, attrs).unwrap_err().to_string().contains("batch"));
        let x3 = g.input("x3", f32s(&[1, 2, 4, 8, 8]));
        let dy3 = g.input("dy3", f32s(&[1, 4, 2, 4, 4]));
        let attrs = Conv3dBackwardWeight {
            kernel_size: vec![2, 2, 2],
            stride: vec![2, 2, 2],
            padding: vec![],
            dilation: vec![],
            groups: 1,
        };
        let v = g.conv3d_backward_weight(x3, dy3, attrs).unwrap();
        assert_eq!(g.ty(v), &f32s(&[4, 2, 2, 2, 2]));
    }

    #[test]
    fn max_pool_backward_checks_dy_against_the_pool() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[1, 3, 8, 8]));
        let dy = g.input("dy", f32s(&[1, 3, 4, 4]));
        let attrs = MaxPool2dBackward { kernel_size: vec![2, 2], stride: vec![2, 2], padding: vec![] };
        let v = g.max_pool2d_backward(x, dy, attrs.clone()).unwrap();
        assert_eq!(g.ty(v), &f32s(&[1, 3, 8, 8]));
        let bad = MaxPool2dBackward { stride: vec![1, 1], ..attrs };
        let e = g.max_pool2d_backward(x, dy, bad).unwrap_err().to_string();
        assert!(e.contains("must be the pool output f32[1, 3, 7, 7]"), "{e}");
    }
}
