//! `ModelProto` → rlx [`Graph`]: opset resolution, initializers, graph inputs (declared dims,
//! `dim_param` as symbols, or caller overrides; sequences and optionals as the caller lays
//! them out), nodes in dependency order, graph outputs.
//!
//! Sub-graphs (the bodies of `If`, `Loop`, `Scan`, `SequenceMap`) import through the same
//! [`run_nodes`], in a [`Scope`] that sees the enclosing graph's names.

use super::build::{Cx, Value};
use super::ops::{converter, value_converter, OnnxNode, OpError, OpResult, ValueNode};
use super::proto::{DimProto, GraphProto, ModelProto, OpsetId, TypeProto};
use super::tensor::{checked_dims, decode, dtype, type_name};
use super::{ImportOptions, Layout, OnnxGraph};
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
    let env = Env { opset, opsets: &model.opset_import, base: path.parent() };
    let mut cx = Cx::new(options.evaluator);
    let mut scope = Scope::root();
    let mut params = Vec::new();
    for init in &graph.initializer {
        let data = decode(init, env.base).map_err(|e| bad(format!("initializer `{}`: {e}", init.name)))?;
        let v = if data.bytes.len() <= options.max_constant_bytes {
            cx.bytes(data.dtype, &data.dims, data.bytes).map_err(|e| node_error(path, "", "initializer", opset, e))?
        } else {
            let ty = TensorType::of(data.dtype, &data.dims);
            let v = cx.g.param(&init.name, ty);
            params.push((init.name.clone(), Tensor::from_bytes(data.dtype, &data.dims, &data.bytes)?));
            v
        };
        scope.insert(&init.name, Value::Tensor(v));
    }
    let mut inputs = Vec::new();
    for vi in &graph.input {
        if scope.get(&vi.name).is_some() {
            continue;
        }
        let v = graph_input(&mut cx, &vi.name, vi.ty.as_ref(), options, &mut inputs).map_err(bad)?;
        scope.insert(&vi.name, v);
    }
    run_nodes(&mut cx, graph, &mut scope, env).map_err(|e| match e {
        GraphError::Node { node, op, opset, error } => node_error(path, &node, &op, opset, error),
        GraphError::Graph(reason) => bad(reason),
    })?;
    let mut outputs = Vec::new();
    let mut out_values = Vec::new();
    for vi in &graph.output {
        let v = scope.get(&vi.name).ok_or_else(|| bad(format!("graph output `{}` is never produced", vi.name)))?;
        outputs.push((vi.name.clone(), Layout::of(v)));
        out_values.extend(v.tensors());
    }
    cx.g.set_outputs(out_values).map_err(|e| bad(e.to_string()))?;
    Ok(OnnxGraph { graph: cx.g, params, inputs, outputs })
}

/// The opset version imported for `domain` (`""` and `ai.onnx` both name the default domain).
fn opset_of(opsets: &[OpsetId], domain: &str) -> Option<i64> {
    let same = |a: &str, b: &str| a == b || (a.is_empty() || a == "ai.onnx") && (b.is_empty() || b == "ai.onnx");
    opsets.iter().find(|o| same(&o.domain, domain)).map(|o| o.version)
}

/// Where names resolve while importing a graph: its own values, then the enclosing graphs'
/// (a body imported into the same rlx graph as its parent sees the parent's values).
pub struct Scope<'p> {
    values: HashMap<String, Value>,
    parent: Option<&'p Scope<'p>>,
}

impl<'p> Scope<'p> {
    pub fn root() -> Scope<'static> {
        Scope { values: HashMap::new(), parent: None }
    }

    /// An empty scope inside this one.
    pub fn child(&'p self) -> Scope<'p> {
        Scope { values: HashMap::new(), parent: Some(self) }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name).or_else(|| self.parent.and_then(|p| p.get(name)))
    }

    pub fn insert(&mut self, name: &str, v: Value) {
        self.values.insert(name.to_string(), v);
    }
}

/// What converting a node needs besides the graph: the default domain's opset, every opset
/// the model imports (a node converts under its own domain's), and the model's folder.
#[derive(Clone, Copy)]
pub struct Env<'n> {
    pub opset: i64,
    pub opsets: &'n [OpsetId],
    pub base: Option<&'n Path>,
}

/// Why a graph's nodes did not import: a node failed, or the graph is ill-formed (a name
/// nothing provides, a cycle).
pub enum GraphError {
    Node { node: String, op: String, opset: i64, error: OpError },
    Graph(String),
}

/// Converts the nodes of `graph` in dependency order, adding their outputs to `scope`.
pub fn run_nodes(cx: &mut Cx<'_>, graph: &GraphProto<'_>, scope: &mut Scope<'_>, env: Env<'_>) -> std::result::Result<(), GraphError> {
    for i in order(graph, scope).map_err(GraphError::Graph)? {
        let node = &graph.node[i];
        let opset = opset_of(env.opsets, &node.domain);
        let fail = |error| GraphError::Node { node: node.name.clone(), op: node.op_type.clone(), opset: opset.unwrap_or(0), error };
        let Some(opset) = opset else {
            return Err(fail(OpError::Invalid(format!("the model imports no opset of domain `{}`", node.domain))));
        };
        let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
        let values: Vec<Option<Value>> =
            node.input.iter().map(|name| if name.is_empty() { None } else { scope.get(name).cloned() }).collect();
        let (opsets, base) = (env.opsets, env.base);
        let outs = if let Some(convert) = value_converter(&node.op_type).filter(|_| default_domain) {
            let onnx = OnnxNode { proto: node, inputs: tensor_inputs(&values, false).map_err(fail)?, opset, opsets, base };
            convert(cx, &ValueNode { onnx, values, scope, env }).map_err(fail)?
        } else {
            let convert = converter(&node.domain, &node.op_type)
                .ok_or_else(|| fail(OpError::Unsupported(format!("no converter for this op in domain `{}`", node.domain))))?;
            let onnx = OnnxNode { proto: node, inputs: tensor_inputs(&values, true).map_err(fail)?, opset, opsets, base };
            convert(cx, &onnx).map_err(fail)?.into_iter().map(Value::Tensor).collect()
        };
        for (name, v) in node.output.iter().zip(outs) {
            if !name.is_empty() {
                scope.insert(name, v);
            }
        }
    }
    Ok(())
}

/// Converts a graph attribute in place: its inputs bound to `inputs`, its initializers as
/// constants, its nodes appended to `cx`; returns its outputs. A name the graph does not
/// define itself (an outer-scope value) is an error.
pub fn inline_graph(cx: &mut Cx<'_>, graph: &GraphProto<'_>, opsets: &[OpsetId], base: Option<&Path>, inputs: &[ValueId]) -> OpResult<Vec<ValueId>> {
    let env = Env { opset: opset_of(opsets, "").unwrap_or(0), opsets, base };
    let outs = run_body(cx, graph, &Scope::root(), env, inputs.iter().map(|&v| Value::Tensor(v)).collect())?;
    outs.into_iter()
        .map(|v| match v {
            Value::Tensor(t) => Ok(t),
            other => Err(OpError::Invalid(format!("subgraph `{}` returns a {}, not a tensor", graph.name, other.kind()))),
        })
        .collect()
}

/// The tensor inputs of a node (an empty optional counts as omitted); with `strict`, a
/// sequence input is an error, else it reads as omitted too.
fn tensor_inputs(values: &[Option<Value>], strict: bool) -> std::result::Result<Vec<Option<ValueId>>, OpError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Some(Value::Tensor(t)) => Ok(Some(*t)),
            Some(Value::Sequence(_)) if strict => Err(OpError::Invalid(format!("input {i} is a sequence; the op takes tensors"))),
            _ => Ok(None),
        })
        .collect()
}

/// Imports sub-graph `body` into `cx` with its declared inputs bound to `bindings` in order,
/// its initializers as constants and other names looked up in `scope`; returns its outputs.
pub fn run_body(cx: &mut Cx<'_>, body: &GraphProto<'_>, scope: &Scope<'_>, env: Env<'_>, bindings: Vec<Value>) -> OpResult<Vec<Value>> {
    let within = |reason: String| format!("in sub-graph `{}`: {reason}", body.name);
    if body.input.len() != bindings.len() {
        return Err(OpError::Invalid(within(format!("{} inputs declared, {} bound", body.input.len(), bindings.len()))));
    }
    let mut local = scope.child();
    for init in &body.initializer {
        let data = decode(init, env.base).map_err(|e| OpError::Invalid(within(format!("initializer `{}`: {e}", init.name))))?;
        let v = cx.bytes(data.dtype, &data.dims, data.bytes)?;
        local.insert(&init.name, Value::Tensor(v));
    }
    for (vi, v) in body.input.iter().zip(bindings) {
        local.insert(&vi.name, v);
    }
    run_nodes(cx, body, &mut local, env).map_err(|e| match e {
        GraphError::Node { node, op, error, .. } => {
            let at = |reason| within(format!("node `{node}` ({op}): {reason}"));
            match error {
                OpError::Unsupported(r) => OpError::Unsupported(at(r)),
                OpError::Invalid(r) => OpError::Invalid(at(r)),
            }
        }
        GraphError::Graph(reason) => OpError::Invalid(within(reason)),
    })?;
    body.output
        .iter()
        .map(|vi| local.get(&vi.name).cloned().ok_or_else(|| OpError::Invalid(within(format!("output `{}` is never produced", vi.name)))))
        .collect()
}

/// Names `graph` (or a sub-graph nested in it) reads but does not define, in order of first
/// use: the values it captures from the enclosing scopes.
pub fn free_names(graph: &GraphProto<'_>) -> Vec<String> {
    let defined: HashSet<&str> = graph
        .input
        .iter()
        .map(|vi| vi.name.as_str())
        .chain(graph.initializer.iter().map(|t| t.name.as_str()))
        .chain(graph.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
        .collect();
    let mut out: Vec<String> = Vec::new();
    for n in &graph.node {
        let nested = n.attribute.iter().flat_map(|a| a.g.iter().chain(&a.graphs)).flat_map(free_names);
        for name in n.input.iter().filter(|i| !i.is_empty()).cloned().chain(nested) {
            if !defined.contains(name.as_str()) && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// A graph input as a value: a tensor input of its declared (or the caller's) type, a
/// sequence of as many inputs `<name>[k]` as the caller gives element dims for, or an empty
/// optional; the runtime inputs are appended to `inputs`.
fn graph_input(
    cx: &mut Cx<'_>,
    name: &str,
    ty: Option<&TypeProto>,
    options: &ImportOptions<'_>,
    inputs: &mut Vec<(String, TensorType)>,
) -> std::result::Result<Value, String> {
    match ty {
        Some(TypeProto::Optional(_)) if options.absent_inputs.contains(name) => Ok(Value::Absent),
        Some(TypeProto::Optional(Some(inner))) => graph_input(cx, name, Some(inner), options, inputs),
        Some(TypeProto::Sequence(Some(elem))) => {
            let Some(elements) = options.sequence_inputs.get(name) else {
                return Err(format!("sequence input `{name}` needs its element dims in the import options"));
            };
            let TypeProto::Tensor { elem_type, .. } = elem.as_ref() else {
                return Err(format!("input `{name}` is a sequence of non-tensors, which is not supported"));
            };
            let dt = dtype(*elem_type).ok_or_else(|| format!("input `{name}` has unsupported element type {}", type_name(*elem_type)))?;
            let mut vs = Vec::with_capacity(elements.len());
            for (k, dims) in elements.iter().enumerate() {
                let (elem_name, ty) = (format!("{name}[{k}]"), TensorType::of(dt, dims));
                vs.push(cx.g.input(&elem_name, ty.clone()));
                inputs.push((elem_name, ty));
            }
            Ok(Value::Sequence(vs))
        }
        _ => {
            let ty = input_type(name, ty, options)?;
            Ok(Value::Tensor(match options.input_values.get(name) {
                Some(t) => cx.bytes(t.dtype, &t.dims, t.bytes.clone()).map_err(|e| match e {
                    OpError::Invalid(r) | OpError::Unsupported(r) => format!("input `{name}`: {r}"),
                })?,
                None => {
                    inputs.push((name.to_string(), ty.clone()));
                    cx.g.input(name, ty)
                }
            }))
        }
    }
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

/// Node indices in an order where every input, and every outer name a node's sub-graphs
/// read, is produced before use; names that no node, initializer or input provides, and
/// cycles, are errors naming the node.
fn order(graph: &GraphProto<'_>, known: &Scope<'_>) -> std::result::Result<Vec<usize>, String> {
    let produced: HashSet<&str> = graph.node.iter().flat_map(|n| n.output.iter().map(String::as_str)).collect();
    let mut deps: Vec<Vec<String>> = Vec::with_capacity(graph.node.len());
    for n in &graph.node {
        if let Some(missing) = n.input.iter().find(|i| !i.is_empty() && known.get(i).is_none() && !produced.contains(i.as_str())) {
            return Err(format!("node `{}` ({}) reads `{missing}`, which no node, initializer or input provides", n.name, n.op_type));
        }
        let nested = n.attribute.iter().flat_map(|a| a.g.iter().chain(&a.graphs)).flat_map(free_names);
        let reads = n.input.iter().filter(|i| !i.is_empty()).cloned().chain(nested);
        deps.push(reads.filter(|i| produced.contains(i.as_str())).collect());
    }
    let mut have: HashSet<&str> = HashSet::new();
    let mut done = vec![false; graph.node.len()];
    let mut out = Vec::with_capacity(graph.node.len());
    loop {
        let before = out.len();
        for (i, n) in graph.node.iter().enumerate() {
            if !done[i] && deps[i].iter().all(|x| have.contains(x.as_str())) {
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
