//! Helpers for the converters' unit tests: models assembled from proto structs and imported
//! without a file.

use crate::error::Result;
use crate::onnx::import::import;
use crate::onnx::proto::{AttributeProto, DimProto, GraphProto, ModelProto, NodeProto, OpsetId, TypeProto, ValueInfoProto};
use crate::onnx::{ImportOptions, OnnxGraph};
use std::path::Path;

/// A float tensor value named `name` with static `dims`.
pub fn float(name: &str, dims: &[i64]) -> ValueInfoProto {
    let shape = Some(dims.iter().map(|&d| DimProto::Value(d)).collect());
    ValueInfoProto { name: name.into(), ty: Some(TypeProto::Tensor { elem_type: 1, shape }) }
}

pub fn node<'a>(op: &str, domain: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto<'a>>) -> NodeProto<'a> {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: format!("{op}_node"),
        op_type: op.into(),
        domain: domain.into(),
        attribute,
    }
}

pub fn string_attr<'a>(name: &str, value: &str) -> AttributeProto<'a> {
    AttributeProto { name: name.into(), ty: 3, s: value.as_bytes().to_vec(), ..Default::default() }
}

pub fn int_attr<'a>(name: &str, value: i64) -> AttributeProto<'a> {
    AttributeProto { name: name.into(), ty: 2, i: value, ..Default::default() }
}

pub fn float_attr<'a>(name: &str, value: f32) -> AttributeProto<'a> {
    AttributeProto { name: name.into(), ty: 1, f: value, ..Default::default() }
}

pub fn graph_attr<'a>(name: &str, g: GraphProto<'a>) -> AttributeProto<'a> {
    AttributeProto { name: name.into(), ty: 5, g: Some(g), ..Default::default() }
}

pub fn graph<'a>(nodes: Vec<NodeProto<'a>>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>) -> GraphProto<'a> {
    GraphProto { name: "g".into(), node: nodes, input: inputs, output: outputs, ..Default::default() }
}

/// Imports `graph` under the `(domain, version)` opsets, as file `test.onnx`.
pub fn import_graph(opsets: &[(&str, i64)], graph: GraphProto<'_>) -> Result<OnnxGraph> {
    let opset_import = opsets.iter().map(|&(domain, version)| OpsetId { domain: domain.into(), version }).collect();
    let model = ModelProto { ir_version: 10, opset_import, graph };
    import(Path::new("test.onnx"), &model, &ImportOptions::default())
}
