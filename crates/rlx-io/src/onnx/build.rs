//! The graph under construction during import: rlx nodes appended through the Graph builder,
//! folded to constants on the spot when every input is constant (with the evaluator the
//! caller lends, so folding runs the backend's kernels), and static values read back where
//! an ONNX input must be known at import (shapes, axes, pads).
//!
//! ONNX sequences and optionals have no rlx counterpart: the importer keeps them as [`Value`]s,
//! a list of rlx tensors whose length is fixed at import, or an empty optional.

use super::ops::{OpError, OpResult};
use super::tensor::{from_f64s, to_f64s, to_i64s};
use rlx_ir::graph::Node;
use rlx_ir::ops::source::Constant;
use rlx_ir::{DType, Graph, Op, Shape, TensorType, ValueId};
use rlx_opt::fold::ConstEval;

/// Largest result folded at import, in bytes.
pub const MAX_FOLD_BYTES: usize = 1 << 24;

/// An ONNX value while importing. A present optional is its contained value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Tensor(ValueId),
    /// A sequence of tensors, in order; its length is known at import.
    Sequence(Vec<ValueId>),
    /// An empty optional.
    Absent,
}

impl Value {
    /// The rlx values this value is made of, in order.
    pub fn tensors(&self) -> Vec<ValueId> {
        match self {
            Value::Tensor(v) => vec![*v],
            Value::Sequence(vs) => vs.clone(),
            Value::Absent => Vec::new(),
        }
    }

    /// What the value holds, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "a tensor",
            Value::Sequence(_) => "a sequence",
            Value::Absent => "an empty optional",
        }
    }
}

/// The rlx graph being built, with the constant evaluator.
pub struct Cx<'e> {
    pub g: Graph,
    eval: Option<&'e dyn ConstEval>,
}

impl<'e> Cx<'e> {
    pub fn new(eval: Option<&'e dyn ConstEval>) -> Cx<'e> {
        Cx { g: Graph::new(), eval }
    }

    /// An empty graph with the same evaluator, for a sub-graph.
    pub fn sub(&self) -> Cx<'e> {
        Cx::new(self.eval)
    }

    /// Appends `op` on `inputs`, or its folded constant results.
    pub fn add(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> OpResult<Vec<ValueId>> {
        let op = op.into();
        let outputs = self.g.infer(&op, inputs)?;
        if let Some(values) = self.fold(&op, inputs, &outputs)? {
            return Ok(values);
        }
        let n = outputs.len();
        let id = self.g.push(Node { op, inputs: inputs.to_vec(), outputs });
        Ok((0..n as u32).map(|o| ValueId::new(id, o)).collect())
    }

    /// Appends a single-output op.
    pub fn add1(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> OpResult<ValueId> {
        let op = op.into();
        let kind = op.kind();
        let mut out = self.add(op, inputs)?;
        match out.len() {
            1 => Ok(out.remove(0)),
            n => Err(OpError::Invalid(format!("{kind} has {n} outputs"))),
        }
    }

    fn fold(&mut self, op: &Op, inputs: &[ValueId], outputs: &[TensorType]) -> OpResult<Option<Vec<ValueId>>> {
        let Some(eval) = self.eval else { return Ok(None) };
        if inputs.is_empty() || !op.def().mutated_inputs().is_empty() || !op.def().subgraphs().is_empty() {
            return Ok(None);
        }
        let small = outputs.iter().all(|t| t.shape.numel().is_some_and(|n| n * t.dtype.size() <= MAX_FOLD_BYTES));
        let consts: Option<Vec<&Constant>> = inputs.iter().map(|&v| self.constant(v)).collect();
        let (Some(consts), true) = (consts, small) else { return Ok(None) };
        let Some(datas) = eval.eval(op, &consts, outputs) else { return Ok(None) };
        let mut values = Vec::with_capacity(datas.len());
        for (ty, data) in outputs.iter().zip(datas) {
            values.push(self.g.constant(ty.clone(), data)?);
        }
        Ok(Some(values))
    }

    /// The value's type.
    pub fn ty(&self, v: ValueId) -> TensorType {
        self.g.ty(v).clone()
    }

    pub fn dtype(&self, v: ValueId) -> DType {
        self.g.ty(v).dtype
    }

    pub fn rank(&self, v: ValueId) -> usize {
        self.g.ty(v).rank()
    }

    /// The value's dims, which must all be static.
    pub fn dims(&self, v: ValueId) -> OpResult<Vec<usize>> {
        let t = self.g.ty(v);
        t.shape.as_static().ok_or_else(|| OpError::Unsupported(format!("needs static dims, got {t}")))
    }

    /// The constant behind `v`, if it is one.
    pub fn constant(&self, v: ValueId) -> Option<&Constant> {
        match &self.g.node(v.node).op {
            Op::Constant(c) => Some(c),
            _ => None,
        }
    }

    /// The integer elements of `v`, which must be a constant (`what` names the operand).
    pub fn const_ints(&self, v: ValueId, what: &str) -> OpResult<Vec<i64>> {
        let c = self.constant(v).ok_or_else(|| OpError::Unsupported(format!("{what} must be known at import (a constant)")))?;
        to_i64s(c.ty.dtype, &c.data).ok_or_else(|| OpError::Invalid(format!("{what} must be integers, got {}", c.ty)))
    }

    /// The elements of constant `v` as f64, if it is a constant.
    pub fn const_f64s(&self, v: ValueId) -> Option<Vec<f64>> {
        self.constant(v).map(|c| to_f64s(c.ty.dtype, &c.data))
    }

    /// A constant of `dtype` and `dims` from f64 values.
    pub fn values(&mut self, dtype: DType, dims: &[usize], values: &[f64]) -> OpResult<ValueId> {
        Ok(self.g.constant(TensorType::of(dtype, dims), from_f64s(dtype, values))?)
    }

    /// A rank-0 constant of `dtype`.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> OpResult<ValueId> {
        self.values(dtype, &[], &[v])
    }

    /// A 1-D I64 constant.
    pub fn ints(&mut self, values: &[i64]) -> OpResult<ValueId> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(self.g.constant(TensorType::of(DType::I64, &[values.len()]), data)?)
    }

    /// A constant with these raw bytes.
    pub fn bytes(&mut self, dtype: DType, dims: &[usize], data: Vec<u8>) -> OpResult<ValueId> {
        Ok(self.g.constant(TensorType::new(dtype, Shape::of(dims)), data)?)
    }
}
