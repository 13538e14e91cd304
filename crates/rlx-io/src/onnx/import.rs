//! `ModelProto` → rlx [`Graph`]: opset resolution, initializers, graph inputs (declared dims,
//! `dim_param` as symbols, or caller overrides), nodes in dependency order, graph outputs.

use super::build::Cx;
use super::ops::{converter, OnnxNode, OpError, OpResult};
use super::proto::{DimProto, GraphProto, ModelProto, NodeProto, OpsetId, TypeProto};
use super::tensor::{checked_dims, decode, dtype, type_name};
use super::{ImportOptions, OnnxGraph};
use crate::error::{IoError, Result};
use rlx_ir::{Dim, Shape, TensorType, ValueId};
use rlx_runtime::Tensor;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Opsets of the default domain rlx imports (conversions follow each op's changes from
/// opset 7 on; older models import where the op did not change since).
pub const OPSETS: std::ops::RangeInclusive<i64> = 1..=28;

/// Imports `model` read from `path`.
pub fn import(path: &Path, model: &ModelProto<'_>, options: &ImportOptions<'_>) -> Result<OnnxGraph> {
    let bad = |reason: String| IoError::OnnxModel { path: path.to_path_buf(), reason };
    let opset = opset_of(&model.opset_import, "");
    if let Some(opset) = opset.filter(|v| !OPSETS.contains(v)) {
        return Err(bad(format!("opset {opset} is outside the supported {}..={}", OPSETS.start(), OPSETS.end())));
    }
    let opset = opset.unwrap_or(0);
    let graph = &model.graph;
    if graph.sparse_initializers > 0 {
        return Err(bad("sparse initializers are not supported".into()));
    }
    let base = path.parent();
    let mut cx = Cx::new(options.evaluator);
    let mut values: HashMap<&str, ValueId> = HashMap::new();
    let mut params = Vec::new();
    for init in &graph.initializer {
        let data = decode(init, base).map_err(|e| bad(format!("initializer `{}`: {e}", init.name)))?;
        let v = if data.bytes.len() <= options.max_constant_bytes {
            cx.bytes(data.dtype, &data.dims, data.bytes).map_err(|e| node_error(path, "", "initializer", opset, e))?
        } else {
            let ty = TensorType::of(data.dtype, &data.dims);
            let v = cx.g.param(&init.name, ty);
            params.push((init.name.clone(), Tensor::from_bytes(data.dtype, &data.dims, &data.bytes)?));
            v
        };
        values.insert(&init.name, v);
    }
    let mut inputs = Vec::new();
    for vi in &graph.input {
        if values.contains_key(vi.name.as_str()) {
            continue;
        }
        let ty = input_type(&vi.name, vi.ty.as_ref(), options).map_err(bad)?;
        let v = match options.input_values.get(&vi.name) {
            Some(t) => cx.bytes(t.dtype, &t.dims, t.bytes.clone()).map_err(|e| node_error(path, "", "input", opset, e))?,
            None => {
                inputs.push((vi.name.clone(), ty.clone()));
                cx.g.input(&vi.name, ty)
            }
        };
        values.insert(&vi.name, v);
    }
    for i in order(graph, &values).map_err(bad)? {
        let node = &graph.node[i];
        convert_node(&mut cx, node, &model.opset_import, base, &mut values)
            .map_err(|(opset, e)| node_error(path, &node.name, &node.op_type, opset, e))?;
    }
    let mut outputs = Vec::new();
    let mut out_values = Vec::new();
    for vi in &graph.output {
        let v = values.get(vi.name.as_str()).ok_or_else(|| bad(format!("graph output `{}` is never produced", vi.name)))?;
        outputs.push(vi.name.clone());
        out_values.push(*v);
    }
    cx.g.set_outputs(out_values).map_err(|e| bad(e.to_string()))?;
    Ok(OnnxGraph { graph: cx.g, params, inputs, outputs })
}

/// The opset version imported for `domain` (`""` and `ai.onnx` both name the default domain).
fn opset_of(opsets: &[OpsetId], domain: &str) -> Option<i64> {
    let same = |a: &str, b: &str| a == b || (a.is_empty() || a == "ai.onnx") && (b.is_empty() || b == "ai.onnx");
    opsets.iter().find(|o| same(&o.domain, domain)).map(|o| o.version)
}

/// Converts `node`, its inputs looked up in `values`, and adds its outputs there; a failure
/// comes with the opset of the node's domain.
fn convert_node<'g>(
    cx: &mut Cx<'_>,
    node: &'g NodeProto<'_>,
    opsets: &'g [OpsetId],
    base: Option<&'g Path>,
    values: &mut HashMap<&'g str, ValueId>,
) -> std::result::Result<(), (i64, OpError)> {
    let Some(opset) = opset_of(opsets, &node.domain) else {
        return Err((0, OpError::Invalid(format!("the model imports no opset of domain `{}`", node.domain))));
    };
    let fail = |e| (opset, e);
    let convert = converter(&node.domain, &node.op_type)
        .ok_or_else(|| fail(OpError::Unsupported(format!("no converter for this op in domain `{}`", node.domain))))?;
    let inputs = node.input.iter().map(|name| if name.is_empty() { None } else { values.get(name.as_str()).copied() }).collect();
    let onnx = OnnxNode { proto: node, inputs, opset, opsets, base };
    let outs = convert(cx, &onnx).map_err(fail)?;
    for (name, v) in node.output.iter().zip(outs) {
        if !name.is_empty() {
            values.insert(name, v);
        }
    }
    Ok(())
}

/// Converts a graph attribute in place: its inputs bound to `inputs`, its initializers as
/// constants, its nodes appended to `cx`; returns its outputs. A name the graph does not
/// define itself (an outer-scope value) is an error.
pub fn inline_graph(
    cx: &mut Cx<'_>,
    graph: &GraphProto<'_>,
    opsets: &[OpsetId],
    base: Option<&Path>,
    inputs: &[ValueId],
) -> OpResult<Vec<ValueId>> {
    let name = |g: &GraphProto<'_>| if g.name.is_empty() { String::new() } else { format!(" `{}`", g.name) };
    if graph.input.len() != inputs.len() {
        return Err(OpError::Invalid(format!("subgraph{} takes {} inputs, not {}", name(graph), graph.input.len(), inputs.len())));
    }
    let mut values: HashMap<&str, ValueId> = graph.input.iter().map(|vi| vi.name.as_str()).zip(inputs.iter().copied()).collect();
    for init in &graph.initializer {
        let data = decode(init, base).map_err(|e| OpError::Invalid(format!("subgraph initializer `{}`: {e}", init.name)))?;
        values.insert(&init.name, cx.bytes(data.dtype, &data.dims, data.bytes)?);
    }
    for i in order(graph, &values).map_err(OpError::Invalid)? {
        let node = &graph.node[i];
        convert_node(cx, node, opsets, base, &mut values).map_err(|(opset, e)| {
            let at = format!("subgraph node `{}` ({}, opset {opset})", node.name, node.op_type);
            match e {
                OpError::Unsupported(r) => OpError::Unsupported(format!("{at}: {r}")),
                OpError::Invalid(r) => OpError::Invalid(format!("{at}: {r}")),
            }
        })?;
    }
    graph
        .output
        .iter()
        .map(|o| values.get(o.name.as_str()).copied().ok_or_else(|| OpError::Invalid(format!("subgraph output `{}` is never produced", o.name))))
        .collect()
}

fn node_error(path: &Path, node: &str, op: &str, opset: i64, e: OpError) -> IoError {
    let (path, node, op) = (path.to_path_buf(), node.to_string(), op.to_string());
    match e {
        OpError::Unsupported(reason) => IoError::OnnxUnsupported { path, node, op, opset, reason },
        OpError::Invalid(reason) => IoError::OnnxNode { path, node, op, opset, reason },
    }
}

/// The rlx type of a graph input: its declared element type, with the caller's dims if given,
/// else the declared ones (`dim_param` → a symbol; an unnamed dim → `<input>_<axis>`).
fn input_type(name: &str, ty: Option<&TypeProto>, options: &ImportOptions<'_>) -> std::result::Result<TensorType, String> {
    let Some(TypeProto::Tensor { elem_type, shape }) = ty else {
        return Err(format!("graph input `{name}` is not a tensor (sequences, maps and optionals are not supported)"));
    };
    let dt = dtype(*elem_type).ok_or_else(|| format!("graph input `{name}` has unsupported element type {}", type_name(*elem_type)))?;
    if let Some(dims) = options.input_shapes.get(name) {
        return Ok(TensorType::of(dt, dims));
    }
    let Some(shape) = shape else {
        return Err(format!("graph input `{name}` has no declared shape; give one in the import options"));
    };
    let mut dims = Vec::with_capacity(shape.len());
    let mut known = Vec::new();
    for (axis, d) in shape.iter().enumerate() {
        dims.push(match d {
            DimProto::Value(n) => {
                known.push(*n);
                Dim::Static(usize::try_from(*n).map_err(|_| format!("graph input `{name}` has negative dim {n}"))?)
            }
            DimProto::Param(p) => Dim::Sym(symbol(p)),
            DimProto::Unknown => Dim::Sym(symbol(&format!("{name}_{axis}"))),
        });
    }
    checked_dims(&known).map_err(|e| format!("graph input `{name}`: {e}"))?;
    Ok(TensorType::new(dt, Shape(dims)))
}

/// A `dim_param` as an rlx symbol: letters, digits and `_`, not starting with a digit.
fn symbol(p: &str) -> String {
    let mut s: String = p.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if !s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        s.insert(0, '_');
    }
    s
}

/// Node indices in an order where every input is produced before use; names that no node,
/// initializer or input provides, and cycles, are errors naming the node.
fn order(graph: &GraphProto<'_>, known: &HashMap<&str, ValueId>) -> std::result::Result<Vec<usize>, String> {
    let mut have: HashSet<&str> = known.keys().copied().collect();
    let produced: HashSet<&str> = graph.node.iter().flat_map(|n| n.output.iter().map(String::as_str)).collect();
    for n in &graph.node {
        if let Some(missing) = n.input.iter().find(|i| !i.is_empty() && !have.contains(i.as_str()) && !produced.contains(i.as_str())) {
            return Err(format!("node `{}` ({}) reads `{missing}`, which no node, initializer or input provides", n.name, n.op_type));
        }
    }
    let mut done = vec![false; graph.node.len()];
    let mut out = Vec::with_capacity(graph.node.len());
    loop {
        let before = out.len();
        for (i, n) in graph.node.iter().enumerate() {
            if !done[i] && n.input.iter().all(|x| x.is_empty() || have.contains(x.as_str())) {
                done[i] = true;
                out.push(i);
                have.extend(n.output.iter().map(String::as_str));
            }
        }
        if out.len() == graph.node.len() {
            return Ok(out);
        }
        if out.len() == before {
            let stuck = done.iter().position(|d| !d).map(|i| &graph.node[i]);
            let name = stuck.map_or(String::new(), |n| format!("`{}` ({})", n.name, n.op_type));
            return Err(format!("the nodes form a cycle: node {name} waits on its own outputs"));
        }
    }
}
