//! ONNX ops onto rlx ops, one module per op family. Each module lists its converters in a
//! `CONVERTERS` table of `(op_type, function)` per ONNX domain; [`converter`] looks an op type
//! up in the tables of its domain. A converter reads the node's attributes per the opset the
//! model imports for that domain and appends rlx ops through [`Cx`]; composite ONNX ops lower
//! to several rlx ops.

mod attention;
mod control;
mod conv;
mod data_shaped;
mod einsum;
mod elementwise;
mod index;
mod linalg;
mod matmul;
mod ml;
mod norm;
mod qlinear;
mod quant;
mod reduce;
mod resize;
mod rnn;
mod rope;
mod sequence;
mod shape;
mod signal;
mod softmax;
mod ssm;
#[cfg(test)]
mod testing;
mod text;
mod training;
mod vision;

use super::build::{Cx, Value};
use super::import::{Env, Scope};
use super::proto::{AttributeProto, GraphProto, NodeProto, OpsetId};
use super::tensor::{decode, TensorData};
use rlx_ir::{norm_axis, IrError, ValueId};
use std::path::Path;

/// Why a node could not be converted.
#[derive(Debug)]
pub enum OpError {
    /// A construct rlx does not import (yet): an op, a mode, an input not known at import.
    Unsupported(String),
    /// The node contradicts the ONNX spec or rlx's inference rejected it.
    Invalid(String),
}

impl From<IrError> for OpError {
    fn from(e: IrError) -> OpError {
        OpError::Invalid(e.to_string())
    }
}

pub type OpResult<T> = Result<T, OpError>;

/// A converter: the node's output values (as many as the node lists outputs, or fewer when
/// trailing optional outputs are not produced).
pub type Convert = fn(&mut Cx<'_>, &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>>;

/// The converter for `op_type` of `domain` (`""` or `ai.onnx` for the default domain).
pub fn converter(domain: &str, op_type: &str) -> Option<Convert> {
    let tables: &[&[(&str, Convert)]] = match domain {
        "" | "ai.onnx" => DEFAULT_DOMAIN,
        "ai.onnx.preview" => &[attention::PREVIEW],
        "ai.onnx.preview.training" => &[training::CONVERTERS],
        "ai.onnx.ml" => &[ml::CONVERTERS],
        _ => return None,
    };
    tables.iter().flat_map(|t| t.iter()).find(|(name, _)| *name == op_type).map(|(_, f)| *f)
}

/// The converter tables of the default ONNX domain.
const DEFAULT_DOMAIN: &[&[(&str, Convert)]] = &[
    elementwise::CONVERTERS,
    matmul::CONVERTERS,
    shape::CONVERTERS,
    reduce::CONVERTERS,
    index::CONVERTERS,
    softmax::CONVERTERS,
    norm::CONVERTERS,
    conv::CONVERTERS,
    attention::CONVERTERS,
    resize::CONVERTERS,
    rnn::CONVERTERS,
    einsum::CONVERTERS,
    quant::CONVERTERS,
    signal::CONVERTERS,
    ssm::CONVERTERS,
    rope::CONVERTERS,
    vision::CONVERTERS,
    linalg::CONVERTERS,
    qlinear::CONVERTERS,
    data_shaped::CONVERTERS,
    text::CONVERTERS,
];

/// A converter over whole ONNX values (sequences, optionals) or with sub-graphs: one value per
/// output the node lists (or fewer, as for [`Convert`]).
pub type ConvertValues = fn(&mut Cx<'_>, &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>>;

/// The converter of an op over whole values, if it is one.
pub fn value_converter(op_type: &str) -> Option<ConvertValues> {
    [control::CONVERTERS, sequence::CONVERTERS].iter().flat_map(|t| t.iter()).find(|(name, _)| *name == op_type).map(|(_, f)| *f)
}

/// A node whose inputs may be sequences or optionals, with the scope its sub-graphs see.
pub struct ValueNode<'n, 'a, 's> {
    /// The node with its tensor inputs (other values read as omitted), for attributes.
    pub onnx: OnnxNode<'n, 'a>,
    /// One entry per listed input; `None` for an omitted input.
    pub values: Vec<Option<Value>>,
    pub scope: &'s Scope<'s>,
    pub env: Env<'n>,
}

impl ValueNode<'_, '_, '_> {
    /// Input `i`, which must be given.
    pub fn value(&self, i: usize) -> OpResult<&Value> {
        self.values.get(i).and_then(Option::as_ref).ok_or_else(|| OpError::Invalid(format!("input {i} is required")))
    }

    /// Input `i` as a sequence's elements.
    pub fn sequence(&self, i: usize) -> OpResult<&[ValueId]> {
        match self.value(i)? {
            Value::Sequence(vs) => Ok(vs),
            other => invalid(format!("input {i} must be a sequence, got {}", other.kind())),
        }
    }

    /// A sub-graph attribute, which must be present.
    pub fn graph(&self, name: &str) -> OpResult<&GraphProto<'_>> {
        self.onnx.attr(name).and_then(|a| a.g.as_ref()).ok_or_else(|| OpError::Invalid(format!("graph attribute `{name}` is required")))
    }
}

/// A node with its inputs resolved to rlx values and the opset of its domain in force.
pub struct OnnxNode<'n, 'a> {
    pub proto: &'n NodeProto<'a>,
    /// One entry per listed input; `None` for an omitted optional input (`""`).
    pub inputs: Vec<Option<ValueId>>,
    pub opset: i64,
    /// Every opset the model imports, for graph attributes converted in place.
    pub opsets: &'n [OpsetId],
    /// The model's folder, for tensor attributes with external data.
    pub base: Option<&'n Path>,
}

impl OnnxNode<'_, '_> {
    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> OpResult<ValueId> {
        self.opt_input(i).ok_or_else(|| OpError::Invalid(format!("input {i} is required")))
    }

    /// Input `i` if given.
    pub fn opt_input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// The present inputs, in order.
    pub fn present_inputs(&self) -> Vec<ValueId> {
        self.inputs.iter().flatten().copied().collect()
    }

    pub fn attr(&self, name: &str) -> Option<&AttributeProto<'_>> {
        self.proto.attribute.iter().find(|a| a.name == name)
    }

    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).map_or(default, |a| a.i)
    }

    pub fn float(&self, name: &str, default: f32) -> f32 {
        self.attr(name).map_or(default, |a| a.f)
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }

    pub fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.attr(name).map(|a| a.floats.clone())
    }

    pub fn string(&self, name: &str, default: &str) -> String {
        self.attr(name).map_or_else(|| default.to_string(), |a| String::from_utf8_lossy(&a.s).into_owned())
    }

    /// A tensor attribute, decoded.
    pub fn tensor(&self, name: &str) -> OpResult<Option<TensorData>> {
        self.attr(name)
            .and_then(|a| a.t.as_ref())
            .map(|t| decode(t, self.base).map_err(|e| OpError::Invalid(format!("attribute `{name}`: {e}"))))
            .transpose()
    }

    /// `axis` normalized against `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> OpResult<usize> {
        norm_axis(axis, rank).map_err(OpError::Invalid)
    }
}

/// Rejects an attribute value rlx cannot import.
pub fn unsupported<T>(what: impl Into<String>) -> OpResult<T> {
    Err(OpError::Unsupported(what.into()))
}

/// Rejects a node that breaks the spec.
pub fn invalid<T>(what: impl Into<String>) -> OpResult<T> {
    Err(OpError::Invalid(what.into()))
}
