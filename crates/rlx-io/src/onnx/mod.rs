//! ONNX import: a model file (`ModelProto`, opsets 7–28 of the default domain) becomes an rlx
//! [`Graph`] of rlx ops, with large initializers as parameters.
//!
//! The protobuf wire format is read by hand ([`wire`], [`proto`]), every read bounds-checked;
//! each ONNX op family has a module under `ops/` mapping it onto rlx ops. Values ONNX passes
//! as tensors but rlx needs as attributes (shapes, axes, pads) must be constants at import:
//! initializers, `Constant` nodes, or results of nodes folded with the evaluator the caller
//! lends ([`ImportOptions::evaluator`]).
//!
//! Sequences and optionals have no rlx type: the importer tracks a sequence as a list of rlx
//! tensors whose length is known at import, and an optional as its value or nothing
//! ([`Layout`] says how a graph input or output is laid out).

mod build;
mod import;
mod ops;
pub mod proto;
pub mod tensor;
mod wire;

pub use tensor::TensorData;

use crate::error::{IoError, Result};
use crate::mapped::Mapped;
use rlx_ir::{Graph, TensorType};
use rlx_opt::fold::ConstEval;
use rlx_runtime::Tensor;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// How to import a model.
pub struct ImportOptions<'e> {
    /// Dims for graph inputs (by name), replacing the declared ones.
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// Values for graph inputs (by name): these inputs become constants of the graph (for
    /// models that feed shapes or axes as inputs).
    pub input_values: HashMap<String, TensorData>,
    /// Element dims of sequence inputs (by name): element `k` of input `s` becomes the rlx
    /// input `s[k]`.
    pub sequence_inputs: HashMap<String, Vec<Vec<usize>>>,
    /// Optional inputs that are empty.
    pub absent_inputs: HashSet<String>,
    /// Evaluates nodes whose inputs are all constants while importing.
    pub evaluator: Option<&'e dyn ConstEval>,
    /// Initializers up to this many bytes become constants, larger ones parameters.
    pub max_constant_bytes: usize,
}

impl Default for ImportOptions<'_> {
    fn default() -> Self {
        ImportOptions {
            input_shapes: HashMap::new(),
            input_values: HashMap::new(),
            sequence_inputs: HashMap::new(),
            absent_inputs: HashSet::new(),
            evaluator: None,
            max_constant_bytes: 1 << 16,
        }
    }
}

/// An imported model.
pub struct OnnxGraph {
    /// The rlx graph; its outputs are the ONNX graph's, in order.
    pub graph: Graph,
    /// Values of the graph's parameters (the large initializers), to pass to `set_param`.
    pub params: Vec<(String, Tensor)>,
    /// The runtime inputs (graph inputs that are neither initializers nor given values).
    pub inputs: Vec<(String, TensorType)>,
    /// Names of the graph outputs, in order, with the rlx outputs each is made of.
    pub outputs: Vec<(String, Layout)>,
}

/// How an ONNX graph output maps onto the rlx graph's outputs.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// One tensor.
    Tensor,
    /// A sequence of this many tensors, one rlx output each.
    Sequence(usize),
    /// An empty optional: no rlx output.
    Absent,
}

impl Layout {
    pub(crate) fn of(v: &build::Value) -> Layout {
        match v {
            build::Value::Tensor(_) => Layout::Tensor,
            build::Value::Sequence(vs) => Layout::Sequence(vs.len()),
            build::Value::Absent => Layout::Absent,
        }
    }
}

/// Reads and imports the ONNX model at `path`.
pub fn import(path: impl AsRef<Path>, options: &ImportOptions<'_>) -> Result<OnnxGraph> {
    let file = Mapped::open(path.as_ref())?;
    import_bytes(file.bytes(), &file.path, options)
}

/// Imports a serialized model held in memory; `path` names it in errors, and external data
/// is read relative to its folder.
pub fn import_bytes(bytes: &[u8], path: &Path, options: &ImportOptions<'_>) -> Result<OnnxGraph> {
    import::import(path, &parse(bytes, path)?, options)
}

/// The serialized model's protobuf, read without importing it (its declared inputs and
/// outputs, say); `path` names it in errors.
pub fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<proto::ModelProto<'a>> {
    proto::model(bytes).map_err(|e| IoError::Proto {
        path: path.to_path_buf(),
        field: e.field_path(),
        reason: e.reason.clone(),
    })
}

/// Reads a file holding one serialized `TensorProto` (the ONNX test data format).
pub fn read_tensor(path: impl AsRef<Path>) -> Result<TensorData> {
    let file = Mapped::open(path.as_ref())?;
    let t = proto::tensor(file.bytes()).map_err(|e| IoError::Proto {
        path: file.path.clone(),
        field: e.field_path(),
        reason: e.reason.clone(),
    })?;
    tensor::decode(&t, file.path.parent()).map_err(|reason| IoError::OnnxModel { path: file.path.clone(), reason })
}
