//! Reductions, scans, arg-extrema, top-k and sorting (OPS.md §8; `CumsumBackward` §22).
//!
//! Dtype rules where OPS.md is silent follow PyTorch: complex numbers have no order (no
//! Max/Min/ArgMax/TopK/Sort on C64), Bool has no arithmetic (no Sum/Mean/Prod/Cumsum),
//! and `Mean` needs a float or complex input (`torch.mean` rejects integers).

use super::{Arity, OpDef};
use crate::{norm_axis, DType, Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// The combining function of `Reduce` and `Pool`.
/// Empty extents give the identity: 0, NaN (mean), −inf, +inf, 1. Max/Min propagate NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

/// Reduces `axes` with `op`; they are removed, or kept with extent 1 if `keep_dim`.
/// Empty `axes` is the identity. Accumulates in F32 (F64 for F64); output keeps the dtype.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reduce {
    pub op: ReduceOp,
    pub axes: Vec<usize>,
    pub keep_dim: bool,
}

/// Running sum along `axis` (`jnp.cumsum`); `exclusive` shifts by one, starting at 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cumsum {
    pub axis: i32,
    pub exclusive: bool,
}

/// Running product along `axis` (`jnp.cumprod`); `exclusive` shifts by one, starting at 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CumProd {
    pub axis: i32,
    pub exclusive: bool,
}

/// Running maximum along `axis` (`lax.cummax`), propagating NaN; `exclusive` starts at −inf
/// (the dtype's minimum for integers, false for Bool).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CumMax {
    pub axis: i32,
    pub exclusive: bool,
}

/// Gradient of `Cumsum`: the reverse running sum of `ȳ` (inclusive `Σ_{j≥i}`, exclusive
/// `Σ_{j>i}`); input `ȳ`, output of its shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CumsumBackward {
    pub axis: i32,
    pub exclusive: bool,
}

/// Index of the maximum along `axis` as I64; ties and NaNs → the first (`np.argmax`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgMax {
    pub axis: usize,
    pub keep_dim: bool,
}

/// Index of the minimum along `axis` as I64; ties and NaNs → the first (`np.argmin`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgMin {
    pub axis: usize,
    pub keep_dim: bool,
}

/// The `k` largest entries along the last axis, descending (ties → smaller index, NaN
/// largest): outputs `values [.., k]` and I64 `indices [.., k]` (ONNX `TopK`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopK {
    pub k: usize,
}

/// Stable sort along `axis`; NaN is the largest key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sort {
    pub axis: usize,
    pub descending: bool,
}

/// The I64 permutation that stably sorts along `axis` (what `Sort` applies).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgSort {
    pub axis: usize,
    pub descending: bool,
}

/// Checks that `axis` (already normalized) names an axis of `x`.
fn check_axis(axis: usize, x: &TensorType) -> Result<(), String> {
    if axis < x.rank() {
        Ok(())
    } else {
        Err(format!("axis {axis} is out of range for {x} (rank {})", x.rank()))
    }
}

/// Rejects C64, which has no order.
fn ordered(what: &str, x: &TensorType) -> Result<(), String> {
    if x.dtype == DType::C64 {
        Err(format!("{what} needs ordered values; complex numbers have no order ({x})"))
    } else {
        Ok(())
    }
}

/// Rejects Bool, which has no arithmetic.
fn arithmetic(what: &str, x: &TensorType) -> Result<(), String> {
    if x.dtype == DType::Bool {
        Err(format!("{what} does not apply to bool ({x}); Cast first"))
    } else {
        Ok(())
    }
}

/// The shape left after reducing `axes` of `x`.
fn reduced(x: &TensorType, axes: &[usize], keep_dim: bool) -> Result<Shape, String> {
    for (i, &a) in axes.iter().enumerate() {
        check_axis(a, x)?;
        if axes[..i].contains(&a) {
            return Err(format!("axes {axes:?} list axis {a} twice"));
        }
    }
    let dims = x.shape.dims().iter().enumerate().filter_map(|(i, d)| match (axes.contains(&i), keep_dim) {
        (false, _) => Some(d.clone()),
        (true, true) => Some(Dim::Static(1)),
        (true, false) => None,
    });
    Ok(Shape(dims.collect()))
}

impl OpDef for Reduce {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let what = format!("{:?}", self.op);
        match self.op {
            ReduceOp::Max | ReduceOp::Min => ordered(&what, x)?,
            ReduceOp::Sum | ReduceOp::Prod => arithmetic(&what, x)?,
            ReduceOp::Mean => {
                if !x.dtype.is_float() && x.dtype != DType::C64 {
                    return Err(format!("Mean needs a float or complex input, got {x}; Cast first"));
                }
            }
        }
        Ok(vec![TensorType::new(x.dtype, reduced(x, &self.axes, self.keep_dim)?)])
    }
}

/// Shape rule shared by the scans: same type, `axis` (Python-style) within the rank.
fn scan(axis: i32, x: &TensorType) -> Result<Vec<TensorType>, String> {
    norm_axis(axis as i64, x.rank()).map_err(|e| format!("{e} of {x}"))?;
    Ok(vec![x.clone()])
}

impl OpDef for Cumsum {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        arithmetic("Cumsum", &inputs[0])?;
        scan(self.axis, &inputs[0])
    }
}

impl OpDef for CumProd {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        arithmetic("CumProd", &inputs[0])?;
        scan(self.axis, &inputs[0])
    }
}

impl OpDef for CumMax {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        ordered("CumMax", &inputs[0])?;
        scan(self.axis, &inputs[0])
    }
}

impl OpDef for CumsumBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let dy = &inputs[0];
        if !dy.dtype.is_float() && dy.dtype != DType::C64 {
            return Err(format!("the upstream gradient must be float or complex, got {dy}"));
        }
        scan(self.axis, dy)
    }
}

/// Shape rule shared by `ArgMax`/`ArgMin`: reduce one non-empty axis to I64 indices.
fn arg_extreme(what: &str, axis: usize, keep_dim: bool, x: &TensorType) -> Result<Vec<TensorType>, String> {
    ordered(what, x)?;
    let shape = reduced(x, &[axis], keep_dim)?;
    if x.shape.dim(axis) == &Dim::Static(0) {
        return Err(format!("{what} of the empty axis {axis} of {x} has no answer"));
    }
    Ok(vec![TensorType::new(DType::I64, shape)])
}

impl OpDef for ArgMax {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        arg_extreme("ArgMax", self.axis, self.keep_dim, &inputs[0])
    }
}

impl OpDef for ArgMin {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        arg_extreme("ArgMin", self.axis, self.keep_dim, &inputs[0])
    }
}

impl OpDef for TopK {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        ordered("TopK", x)?;
        let Some(last) = x.rank().checked_sub(1) else {
            return Err(format!("TopK needs an axis to select from, got the scalar {x}"));
        };
        // A symbolic last axis is checked against k at run time.
        if let Dim::Static(n) = x.shape.dim(last) {
            if self.k > *n {
                return Err(format!("k = {} exceeds the last dim {n} of {x}", self.k));
            }
        }
        let mut dims = x.shape.0.clone();
        dims[last] = Dim::Static(self.k);
        let shape = Shape(dims);
        Ok(vec![TensorType::new(x.dtype, shape.clone()), TensorType::new(DType::I64, shape)])
    }
}

impl OpDef for Sort {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        ordered("Sort", &inputs[0])?;
        check_axis(self.axis, &inputs[0])?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for ArgSort {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        ordered("ArgSort", &inputs[0])?;
        check_axis(self.axis, &inputs[0])?;
        Ok(vec![inputs[0].with_dtype(DType::I64)])
    }
}

/// Builders for the reduce family.
impl crate::Graph {
    /// Reduces `axes` of `x` with `op`.
    pub fn reduce(&mut self, op: ReduceOp, x: crate::ValueId, axes: &[usize], keep_dim: bool) -> crate::Result<crate::ValueId> {
        self.add1(Reduce { op, axes: axes.to_vec(), keep_dim }, &[x])
    }

    /// Running sum of `x` along `axis`.
    pub fn cumsum(&mut self, x: crate::ValueId, axis: i32, exclusive: bool) -> crate::Result<crate::ValueId> {
        self.add1(Cumsum { axis, exclusive }, &[x])
    }

    /// Running product of `x` along `axis`.
    pub fn cum_prod(&mut self, x: crate::ValueId, axis: i32, exclusive: bool) -> crate::Result<crate::ValueId> {
        self.add1(CumProd { axis, exclusive }, &[x])
    }

    /// Running maximum of `x` along `axis`.
    pub fn cum_max(&mut self, x: crate::ValueId, axis: i32, exclusive: bool) -> crate::Result<crate::ValueId> {
        self.add1(CumMax { axis, exclusive }, &[x])
    }

    /// Gradient of `Cumsum{axis, exclusive}` from its upstream gradient `dy`.
    pub fn cumsum_backward(&mut self, dy: crate::ValueId, axis: i32, exclusive: bool) -> crate::Result<crate::ValueId> {
        self.add1(CumsumBackward { axis, exclusive }, &[dy])
    }

    /// I64 index of the maximum of `x` along `axis`.
    pub fn arg_max(&mut self, x: crate::ValueId, axis: usize, keep_dim: bool) -> crate::Result<crate::ValueId> {
        self.add1(ArgMax { axis, keep_dim }, &[x])
    }

    /// I64 index of the minimum of `x` along `axis`.
    pub fn arg_min(&mut self, x: crate::ValueId, axis: usize, keep_dim: bool) -> crate::Result<crate::ValueId> {
        self.add1(ArgMin { axis, keep_dim }, &[x])
    }

    /// The `k` largest entries of `x` along its last axis: `[values, indices]`.
    pub fn top_k(&mut self, x: crate::ValueId, k: usize) -> crate::Result<Vec<crate::ValueId>> {
        let node = self.add(TopK { k }, &[x])?;
        Ok(vec![crate::ValueId::new(node, 0), crate::ValueId::new(node, 1)])
    }

    /// `x` stably sorted along `axis`.
    pub fn sort(&mut self, x: crate::ValueId, axis: usize, descending: bool) -> crate::Result<crate::ValueId> {
        self.add1(Sort { axis, descending }, &[x])
    }

    /// The I64 permutation that stably sorts `x` along `axis`.
    pub fn arg_sort(&mut self, x: crate::ValueId, axis: usize, descending: bool) -> crate::Result<crate::ValueId> {
        self.add1(ArgSort { axis, descending }, &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn infer(op: impl OpDef, input: &str) -> Result<String, String> {
        let out = op.infer(&[TensorType::parse(input).unwrap()])?;
        Ok(out.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
    }

    fn reduce(op: ReduceOp, axes: &[usize], keep_dim: bool) -> Reduce {
        Reduce { op, axes: axes.to_vec(), keep_dim }
    }

    #[test]
    fn reduce_shapes() {
        assert_eq!(infer(reduce(ReduceOp::Sum, &[0, 2], false), "f32[B, 3, 4]").unwrap(), "f32[3]");
        assert_eq!(infer(reduce(ReduceOp::Max, &[2], true), "f32[B, 3, 4]").unwrap(), "f32[B, 3, 1]");
        assert_eq!(infer(reduce(ReduceOp::Mean, &[], false), "f16[2, 3]").unwrap(), "f16[2, 3]");
        assert_eq!(infer(reduce(ReduceOp::Prod, &[0], false), "i32[5]").unwrap(), "i32[]");
        assert!(infer(reduce(ReduceOp::Sum, &[3], false), "f32[2, 3, 4]").unwrap_err().contains("out of range"));
        assert!(infer(reduce(ReduceOp::Sum, &[1, 1], false), "f32[2, 3]").unwrap_err().contains("twice"));
    }

    #[test]
    fn reduce_dtypes() {
        assert!(infer(reduce(ReduceOp::Mean, &[0], false), "i32[5]").unwrap_err().contains("float or complex"));
        assert!(infer(reduce(ReduceOp::Max, &[0], false), "c64[5]").unwrap_err().contains("no order"));
        assert!(infer(reduce(ReduceOp::Sum, &[0], false), "bool[5]").unwrap_err().contains("bool"));
        assert_eq!(infer(reduce(ReduceOp::Min, &[0], false), "bool[5]").unwrap(), "bool[]");
        assert_eq!(infer(reduce(ReduceOp::Sum, &[0], false), "c64[5]").unwrap(), "c64[]");
    }

    #[test]
    fn scans_take_python_axes() {
        assert_eq!(infer(Cumsum { axis: -1, exclusive: true }, "f32[B, 7]").unwrap(), "f32[B, 7]");
        assert!(infer(Cumsum { axis: 2, exclusive: false }, "f32[B, 7]").unwrap_err().contains("axis 2 is out of range"));
        assert!(infer(CumProd { axis: 0, exclusive: false }, "f32[]").is_err());
        assert!(infer(CumMax { axis: 0, exclusive: false }, "c64[3]").is_err());
        assert!(infer(CumsumBackward { axis: -2, exclusive: false }, "i32[4, 3]").unwrap_err().contains("float"));
        assert_eq!(infer(CumsumBackward { axis: -2, exclusive: false }, "f32[4, 3]").unwrap(), "f32[4, 3]");
    }

    #[test]
    fn arg_extrema_sort_and_top_k() {
        assert_eq!(infer(ArgMax { axis: 1, keep_dim: false }, "f16[B, 10]").unwrap(), "i64[B]");
        assert_eq!(infer(ArgMin { axis: 0, keep_dim: true }, "f32[B, 10]").unwrap(), "i64[1, 10]");
        assert!(infer(ArgMax { axis: 1, keep_dim: false }, "f32[3, 0]").unwrap_err().contains("empty axis"));
        assert_eq!(infer(TopK { k: 5 }, "bf16[B, 32000]").unwrap(), "bf16[B, 5], i64[B, 5]");
        assert_eq!(infer(TopK { k: 5 }, "f32[V]").unwrap(), "f32[5], i64[5]");
        assert!(infer(TopK { k: 5 }, "f32[2, 4]").unwrap_err().contains("k = 5 exceeds the last dim 4"));
        assert!(infer(TopK { k: 1 }, "f32[]").unwrap_err().contains("scalar"));
        assert_eq!(infer(Sort { axis: 0, descending: true }, "i32[N, 2]").unwrap(), "i32[N, 2]");
        assert_eq!(infer(ArgSort { axis: 1, descending: false }, "f32[N, 2]").unwrap(), "i64[N, 2]");
        assert!(infer(ArgSort { axis: 2, descending: false }, "f32[N, 2]").is_err());
    }

    #[test]
    fn top_k_builds_two_outputs() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::parse("f32[B, 100]").unwrap());
        let vi = g.top_k(x, 3).unwrap();
        assert_eq!(g.ty(vi[1]), &TensorType::parse("i64[B, 3]").unwrap());
        g.set_outputs(vi).unwrap();
        let text = g.to_string();
        assert!(text.contains("%1 = TopK(k:3)(%0) : f32[B, 3], i64[B, 3]"), "{text}");
        assert!(text.contains("return %1, %1.1"), "{text}");
        assert_eq!(crate::text::parse(&text).unwrap(), g);
    }
}
