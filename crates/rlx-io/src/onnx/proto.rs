//! The ONNX messages rlx reads (`onnx.proto`, IR versions 3–11), decoded from the wire format.
//!
//! Only the fields import needs are kept; unknown fields are skipped as protobuf requires.
//! Tensor payloads borrow the model file's bytes. Nesting (sub-graphs in attributes, nested
//! types) is limited to [`MAX_DEPTH`] so a crafted file cannot exhaust the stack.

use super::wire::{Wire, WireError, WireResult};

/// Deepest nesting of graphs and types accepted.
pub const MAX_DEPTH: usize = 64;

/// `ModelProto`.
#[derive(Clone, Debug, Default)]
pub struct ModelProto<'a> {
    pub ir_version: i64,
    pub opset_import: Vec<OpsetId>,
    pub graph: GraphProto<'a>,
}

/// `OperatorSetIdProto`: a domain (`""` is the default ONNX domain) and its version.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpsetId {
    pub domain: String,
    pub version: i64,
}

/// `GraphProto`.
#[derive(Clone, Debug, Default)]
pub struct GraphProto<'a> {
    pub name: String,
    pub node: Vec<NodeProto<'a>>,
    pub initializer: Vec<TensorProto<'a>>,
    /// How many sparse initializers the graph has (rlx does not import them).
    pub sparse_initializers: usize,
    pub input: Vec<ValueInfoProto>,
    pub output: Vec<ValueInfoProto>,
}

/// `NodeProto`.
#[derive(Clone, Debug, Default)]
pub struct NodeProto<'a> {
    pub input: Vec<String>,
    pub output: Vec<String>,
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub attribute: Vec<AttributeProto<'a>>,
}

/// `AttributeProto`; `ty` is the `AttributeType` code (0 when a writer left it unset).
#[derive(Clone, Debug, Default)]
pub struct AttributeProto<'a> {
    pub name: String,
    pub ref_attr_name: String,
    pub ty: i32,
    pub f: f32,
    pub i: i64,
    pub s: Vec<u8>,
    pub t: Option<TensorProto<'a>>,
    pub g: Option<GraphProto<'a>>,
    pub tp: Option<TypeProto>,
    pub floats: Vec<f32>,
    pub ints: Vec<i64>,
    pub strings: Vec<Vec<u8>>,
    pub tensors: Vec<TensorProto<'a>>,
    pub graphs: Vec<GraphProto<'a>>,
}

/// `ValueInfoProto`.
#[derive(Clone, Debug, Default)]
pub struct ValueInfoProto {
    pub name: String,
    pub ty: Option<TypeProto>,
}

/// `TypeProto`, by its `value` case.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeProto {
    /// Element type code and dims (`None`: rank unknown).
    Tensor { elem_type: i32, shape: Option<Vec<DimProto>> },
    Sequence(Option<Box<TypeProto>>),
    Optional(Option<Box<TypeProto>>),
    Map { key_type: i32, value_type: Option<Box<TypeProto>> },
    SparseTensor { elem_type: i32 },
    /// A type case rlx does not read (opaque types), or none set.
    Other,
}

/// `TensorShapeProto.Dimension`.
#[derive(Clone, Debug, PartialEq)]
pub enum DimProto {
    Value(i64),
    Param(String),
    Unknown,
}

/// `TensorProto`; numbers stay in the field they were written to, converted on use.
#[derive(Clone, Debug, Default)]
pub struct TensorProto<'a> {
    pub dims: Vec<i64>,
    pub data_type: i32,
    pub name: String,
    pub raw_data: Option<&'a [u8]>,
    pub float_data: Vec<f32>,
    pub int32_data: Vec<i64>,
    pub int64_data: Vec<i64>,
    pub double_data: Vec<f64>,
    pub uint64_data: Vec<i64>,
    pub string_data: Vec<Vec<u8>>,
    /// `external_data` key/value pairs (`location`, `offset`, `length`).
    pub external_data: Vec<(String, String)>,
    /// `data_location`: 1 = external.
    pub data_location: i32,
    pub has_segment: bool,
}

/// Decodes a `ModelProto`.
pub(crate) fn model(bytes: &[u8]) -> WireResult<ModelProto<'_>> {
    model_fields(bytes).map_err(|e| e.within("ModelProto"))
}

fn model_fields(bytes: &[u8]) -> WireResult<ModelProto<'_>> {
    let mut m = ModelProto::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => m.ir_version = v.int64("ir_version")?,
            7 => m.graph = graph(v.bytes("graph")?, 0).map_err(|e| e.within("graph"))?,
            8 => m.opset_import.push(opset(v.bytes("opset_import")?).map_err(|e| e.within("opset_import"))?),
            _ => {}
        }
    }
    Ok(m)
}

/// Decodes a `TensorProto` on its own (the conformance data files hold one each).
pub(crate) fn tensor(bytes: &[u8]) -> WireResult<TensorProto<'_>> {
    tensor_at(bytes).map_err(|e| e.within("TensorProto"))
}

fn opset(bytes: &[u8]) -> WireResult<OpsetId> {
    let mut o = OpsetId::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => o.domain = v.string("domain")?,
            2 => o.version = v.int64("version")?,
            _ => {}
        }
    }
    Ok(o)
}

fn deeper(depth: usize) -> WireResult<usize> {
    if depth >= MAX_DEPTH {
        Err(WireError::new(format!("nested deeper than {MAX_DEPTH} levels")))
    } else {
        Ok(depth + 1)
    }
}

pub(crate) fn graph(bytes: &[u8], depth: usize) -> WireResult<GraphProto<'_>> {
    let depth = deeper(depth)?;
    let mut g = GraphProto::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => g.node.push(node(v.bytes("node")?, depth).map_err(|e| e.within(&format!("node[{}]", g.node.len())))?),
            2 => g.name = v.string("name")?,
            5 => g.initializer.push(tensor_at(v.bytes("initializer")?).map_err(|e| e.within("initializer"))?),
            11 => g.input.push(value_info(v.bytes("input")?, depth).map_err(|e| e.within("input"))?),
            12 => g.output.push(value_info(v.bytes("output")?, depth).map_err(|e| e.within("output"))?),
            15 => {
                v.bytes("sparse_initializer")?;
                g.sparse_initializers += 1;
            }
            _ => {}
        }
    }
    Ok(g)
}

fn node(bytes: &[u8], depth: usize) -> WireResult<NodeProto<'_>> {
    let mut nd = NodeProto::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => nd.input.push(v.string("input")?),
            2 => nd.output.push(v.string("output")?),
            3 => nd.name = v.string("name")?,
            4 => nd.op_type = v.string("op_type")?,
            5 => nd.attribute.push(attribute(v.bytes("attribute")?, depth).map_err(|e| e.within("attribute"))?),
            7 => nd.domain = v.string("domain")?,
            _ => {}
        }
    }
    Ok(nd)
}

fn attribute(bytes: &[u8], depth: usize) -> WireResult<AttributeProto<'_>> {
    let mut a = AttributeProto::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => a.name = v.string("name")?,
            2 => a.f = v.float("f")?,
            3 => a.i = v.int64("i")?,
            4 => a.s = v.bytes("s")?.to_vec(),
            5 => a.t = Some(tensor_at(v.bytes("t")?).map_err(|e| e.within("t"))?),
            6 => a.g = Some(graph(v.bytes("g")?, depth).map_err(|e| e.within("g"))?),
            7 => v.push_floats("floats", &mut a.floats)?,
            8 => v.push_varints("ints", &mut a.ints)?,
            9 => a.strings.push(v.bytes("strings")?.to_vec()),
            10 => a.tensors.push(tensor_at(v.bytes("tensors")?).map_err(|e| e.within("tensors"))?),
            11 => a.graphs.push(graph(v.bytes("graphs")?, depth).map_err(|e| e.within("graphs"))?),
            14 => a.tp = Some(type_proto(v.bytes("tp")?, depth).map_err(|e| e.within("tp"))?),
            20 => a.ty = v.int32("type")?,
            21 => a.ref_attr_name = v.string("ref_attr_name")?,
            _ => {}
        }
    }
    Ok(a)
}

fn value_info(bytes: &[u8], depth: usize) -> WireResult<ValueInfoProto> {
    let mut vi = ValueInfoProto::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => vi.name = v.string("name")?,
            2 => vi.ty = Some(type_proto(v.bytes("type")?, depth).map_err(|e| e.within("type"))?),
            _ => {}
        }
    }
    Ok(vi)
}

/// Decodes a `TypeProto`; nested element types recurse with `depth` checked.
pub(crate) fn type_proto(bytes: &[u8], depth: usize) -> WireResult<TypeProto> {
    let depth = deeper(depth)?;
    let mut t = TypeProto::Other;
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        t = match n {
            1 => tensor_type(v.bytes("tensor_type")?).map_err(|e| e.within("tensor_type"))?,
            4 => TypeProto::Sequence(inner_type(v.bytes("sequence_type")?, depth).map_err(|e| e.within("sequence_type"))?),
            9 => TypeProto::Optional(inner_type(v.bytes("optional_type")?, depth).map_err(|e| e.within("optional_type"))?),
            5 => map_type(v.bytes("map_type")?, depth).map_err(|e| e.within("map_type"))?,
            8 => match tensor_type(v.bytes("sparse_tensor_type")?)? {
                TypeProto::Tensor { elem_type, .. } => TypeProto::SparseTensor { elem_type },
                other => other,
            },
            _ => continue,
        };
    }
    Ok(t)
}

/// The `elem_type` (field 1) of a `Sequence` or `Optional` type.
fn inner_type(bytes: &[u8], depth: usize) -> WireResult<Option<Box<TypeProto>>> {
    let mut inner = None;
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        if n == 1 {
            inner = Some(Box::new(type_proto(v.bytes("elem_type")?, depth).map_err(|e| e.within("elem_type"))?));
        }
    }
    Ok(inner)
}

fn map_type(bytes: &[u8], depth: usize) -> WireResult<TypeProto> {
    let (mut key_type, mut value_type) = (0, None);
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => key_type = v.int32("key_type")?,
            2 => value_type = Some(Box::new(type_proto(v.bytes("value_type")?, depth).map_err(|e| e.within("value_type"))?)),
            _ => {}
        }
    }
    Ok(TypeProto::Map { key_type, value_type })
}

fn tensor_type(bytes: &[u8]) -> WireResult<TypeProto> {
    let (mut elem_type, mut shape) = (0, None);
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => elem_type = v.int32("elem_type")?,
            2 => shape = Some(tensor_shape(v.bytes("shape")?).map_err(|e| e.within("shape"))?),
            _ => {}
        }
    }
    Ok(TypeProto::Tensor { elem_type, shape })
}

fn tensor_shape(bytes: &[u8]) -> WireResult<Vec<DimProto>> {
    let mut dims = Vec::new();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        if n == 1 {
            dims.push(dimension(v.bytes("dim")?).map_err(|e| e.within("dim"))?);
        }
    }
    Ok(dims)
}

fn dimension(bytes: &[u8]) -> WireResult<DimProto> {
    let mut d = DimProto::Unknown;
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => d = DimProto::Value(v.int64("dim_value")?),
            2 => d = DimProto::Param(v.string("dim_param")?),
            _ => {}
        }
    }
    Ok(d)
}

fn tensor_at(bytes: &[u8]) -> WireResult<TensorProto<'_>> {
    let mut t = TensorProto::default();
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => v.push_varints("dims", &mut t.dims)?,
            2 => t.data_type = v.int32("data_type")?,
            3 => {
                v.bytes("segment")?;
                t.has_segment = true;
            }
            4 => v.push_floats("float_data", &mut t.float_data)?,
            5 => v.push_varints("int32_data", &mut t.int32_data)?,
            6 => t.string_data.push(v.bytes("string_data")?.to_vec()),
            7 => v.push_varints("int64_data", &mut t.int64_data)?,
            8 => t.name = v.string("name")?,
            9 => t.raw_data = Some(v.bytes("raw_data")?),
            10 => v.push_doubles("double_data", &mut t.double_data)?,
            11 => v.push_varints("uint64_data", &mut t.uint64_data)?,
            13 => t.external_data.push(string_pair(v.bytes("external_data")?).map_err(|e| e.within("external_data"))?),
            14 => t.data_location = v.int32("data_location")?,
            _ => {}
        }
    }
    Ok(t)
}

fn string_pair(bytes: &[u8]) -> WireResult<(String, String)> {
    let (mut k, mut val) = (String::new(), String::new());
    let mut w = Wire::new(bytes);
    while let Some((n, v)) = w.next_field()? {
        match n {
            1 => k = v.string("key")?,
            2 => val = v.string("value")?,
            _ => {}
        }
    }
    Ok((k, val))
}
