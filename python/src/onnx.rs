//! The native half of `rlx.InferenceSession`: an ONNX model imported and compiled for a
//! device; `run` takes named arrays and gives every graph output, in order.
//!
//! The inputs and outputs are described as the model declares them. A model whose ops need
//! static dims where it declares symbolic ones, or an input's value while importing (a shape
//! fed as an input), is imported and compiled per distinct set of input shapes (and such
//! values), as `rlx onnx-run` does; each set is compiled once and kept.

use crate::array::{to_numpy, to_tensor};
use crate::device::session;
use crate::lock::lock;
use crate::error::{self, RlxError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rlx::{CompiledGraph, DType, Session, Tensor};
use rlx_io::onnx::proto::{DimProto, TypeProto};
use rlx_io::onnx::{self, tensor, ImportOptions, Layout, OnnxGraph, TensorData};
use rlx_io::IoError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// A graph input or output as the model declares it.
struct Declared {
    name: String,
    dtype: Option<DType>,
    /// onnxruntime's type string: `tensor(float)`, `seq(tensor(int64))`, ...
    ort_type: String,
    dims: Option<Vec<DimProto>>,
}

impl Declared {
    /// Whether `t` is of the declared dtype and fits the declared dims.
    fn check(&self, t: &Tensor) -> PyResult<()> {
        if let Some(d) = self.dtype {
            if d != t.dtype() {
                return Err(error::DTypeError::new_err(format!("input `{}`: expected {d}, got {}", self.name, t.dtype())));
            }
        }
        let Some(dims) = &self.dims else { return Ok(()) };
        let fits = dims.len() == t.shape().len() && dims.iter().zip(t.shape()).all(|(d, &n)| !matches!(d, DimProto::Value(v) if *v as usize != n));
        if !fits {
            let want: Vec<String> = dims.iter().map(|d| match d { DimProto::Value(v) => v.to_string(), DimProto::Param(p) => p.clone(), DimProto::Unknown => "?".into() }).collect();
            return Err(error::ShapeError::new_err(format!("input `{}`: expected dims [{}], got {:?}", self.name, want.join(", "), t.shape())));
        }
        Ok(())
    }
}

/// onnxruntime's name of an ONNX element type.
fn ort_elem(code: i32) -> String {
    let name = match code {
        1 => "float",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "double",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        other => return tensor::type_name(other).to_lowercase(),
    };
    name.to_string()
}

fn declared(name: &str, ty: Option<&TypeProto>) -> Declared {
    fn describe(ty: Option<&TypeProto>) -> (String, Option<DType>, Option<Vec<DimProto>>) {
        match ty {
            Some(TypeProto::Tensor { elem_type, shape }) => (format!("tensor({})", ort_elem(*elem_type)), tensor::dtype(*elem_type), shape.clone()),
            Some(TypeProto::Sequence(inner)) => (format!("seq({})", describe(inner.as_deref()).0), None, None),
            Some(TypeProto::Optional(inner)) => (format!("optional({})", describe(inner.as_deref()).0), None, None),
            Some(TypeProto::SparseTensor { elem_type }) => (format!("sparse_tensor({})", ort_elem(*elem_type)), None, None),
            Some(TypeProto::Map { key_type, .. }) => (format!("map({},...)", ort_elem(*key_type)), None, None),
            _ => ("unknown".into(), None, None),
        }
    }
    let (ort_type, dtype, dims) = describe(ty);
    Declared { name: name.to_string(), dtype, ort_type, dims }
}

/// A compiled model and how its outputs map onto the ONNX outputs.
struct Entry {
    compiled: CompiledGraph,
    layouts: Vec<Layout>,
}

enum Mode {
    Static(Entry),
    /// Per input shapes (and, with `values`, the values of integer and small inputs).
    PerInputs { values: bool, cache: HashMap<Vec<u8>, Entry> },
}

#[pyclass(frozen, module = "rlx._rlx", name = "OnnxSession")]
pub struct OnnxSession {
    bytes: Vec<u8>,
    path: PathBuf,
    session: Session,
    inputs: Vec<Declared>,
    outputs: Vec<Declared>,
    mode: Mutex<Mode>,
}

fn options<'e>() -> ImportOptions<'e> {
    ImportOptions { evaluator: Some(&rlx::cpu::CpuConstEval), ..ImportOptions::default() }
}

fn compile(session: &Session, imported: &OnnxGraph) -> PyResult<Entry> {
    let mut compiled = session.compile(&imported.graph).map_err(error::runtime)?;
    for (name, value) in &imported.params {
        compiled.set_param(name, value.clone()).map_err(error::runtime)?;
    }
    Ok(Entry { compiled, layouts: imported.outputs.iter().map(|(_, l)| l.clone()).collect() })
}

/// Whether importing for concrete input shapes (and values) may succeed where the declared
/// dims failed.
fn per_inputs(e: &IoError) -> Option<bool> {
    match e {
        IoError::OnnxUnsupported { reason, .. } if reason.contains("known at import") => Some(true),
        IoError::OnnxUnsupported { reason, .. } if reason.contains("static") => Some(false),
        _ => None,
    }
}

fn dims_py<'py>(py: Python<'py>, dims: &Option<Vec<DimProto>>) -> PyResult<Bound<'py, PyAny>> {
    let Some(dims) = dims else { return Ok(py.None().into_bound(py)) };
    let list = PyList::empty(py);
    for d in dims {
        match d {
            DimProto::Value(n) => list.append(n)?,
            DimProto::Param(s) => list.append(s)?,
            DimProto::Unknown => list.append(py.None())?,
        }
    }
    Ok(list.into_any())
}

impl OnnxSession {
    /// The entry compiled for these inputs, importing and compiling it on first use.
    fn entry_for<'a>(&self, py: Python<'_>, values: &mut bool, cache: &'a mut HashMap<Vec<u8>, Entry>, feed: &[(String, Tensor)]) -> PyResult<&'a mut Entry> {
        let is_value = |t: &Tensor| t.dtype().is_int() || t.dtype() == DType::Bool || t.numel() <= 64;
        let key = |values: bool| {
            let mut key = Vec::new();
            for (name, t) in feed {
                key.extend(name.as_bytes());
                key.extend(t.shape().iter().flat_map(|d| (*d as u64).to_le_bytes()));
                if values && is_value(t) {
                    key.extend(t.bytes());
                }
                key.push(0);
            }
            key
        };
        let mut k = key(*values);
        if !cache.contains_key(&k) {
            let data = |t: &Tensor| TensorData { dtype: t.dtype(), dims: t.shape().to_vec(), bytes: t.bytes().to_vec() };
            let import = |values: bool| {
                let o = ImportOptions {
                    input_shapes: feed.iter().map(|(n, t)| (n.clone(), t.shape().to_vec())).collect(),
                    input_values: if values { feed.iter().filter(|(_, t)| is_value(t)).map(|(n, t)| (n.clone(), data(t))).collect() } else { HashMap::new() },
                    ..options()
                };
                py.detach(|| onnx::import_bytes(&self.bytes, &self.path, &o))
            };
            let imported = match import(*values) {
                Err(e) if !*values && per_inputs(&e) == Some(true) => {
                    *values = true;
                    import(true)
                }
                other => other,
            }
            .map_err(error::io)?;
            let entry = py.detach(|| compile(&self.session, &imported))?;
            // Importing may have switched to keying by values too: file it under the new key.
            k = key(*values);
            cache.insert(k.clone(), entry);
        }
        cache.get_mut(&k).ok_or_else(|| RlxError::new_err("compiled model missing from the cache"))
    }
}

#[pymethods]
impl OnnxSession {
    /// Reads the model (a path or the serialized bytes) and compiles it for `device`.
    #[new]
    #[pyo3(signature = (model, device = "cpu"))]
    fn new(py: Python<'_>, model: &Bound<'_, PyAny>, device: &str) -> PyResult<OnnxSession> {
        let (bytes, path) = if let Ok(b) = model.cast::<PyBytes>() {
            (b.as_bytes().to_vec(), PathBuf::from("<bytes>"))
        } else {
            let path: PathBuf = model.extract()?;
            let bytes = std::fs::read(&path).map_err(|e| error::FileError::new_err(format!("{}: {e}", path.display())))?;
            (bytes, path)
        };
        let parsed = onnx::parse(&bytes, &path).map_err(error::io)?;
        let initialized: std::collections::HashSet<&str> = parsed.graph.initializer.iter().map(|t| t.name.as_str()).collect();
        let inputs = parsed.graph.input.iter().filter(|vi| !initialized.contains(vi.name.as_str())).map(|vi| declared(&vi.name, vi.ty.as_ref())).collect();
        let outputs = parsed.graph.output.iter().map(|vi| declared(&vi.name, vi.ty.as_ref())).collect();
        drop(parsed);
        let session = session(device)?;
        let imported = py.detach(|| onnx::import_bytes(&bytes, &path, &options()));
        let mode = match imported {
            Ok(imported) => Mode::Static(py.detach(|| compile(&session, &imported))?),
            Err(e) => match per_inputs(&e) {
                Some(values) => Mode::PerInputs { values, cache: HashMap::new() },
                None => return Err(error::io(e)),
            },
        };
        Ok(OnnxSession { bytes, path, session, inputs, outputs, mode: Mutex::new(mode) })
    }

    /// The runtime inputs as (name, onnxruntime type, dims): ints, names, `None` when unknown.
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, String, Bound<'py, PyAny>)>> {
        self.inputs.iter().map(|d| Ok((d.name.clone(), d.ort_type.clone(), dims_py(py, &d.dims)?))).collect()
    }

    /// The outputs, as `inputs`.
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, String, Bound<'py, PyAny>)>> {
        self.outputs.iter().map(|d| Ok((d.name.clone(), d.ort_type.clone(), dims_py(py, &d.dims)?))).collect()
    }

    /// Runs on a dict of arrays; returns every output in order: an array, a list of arrays
    /// for a sequence, `None` for an empty optional.
    fn run<'py>(&self, py: Python<'py>, feed: &Bound<'py, PyDict>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut named = Vec::with_capacity(feed.len());
        for (k, v) in feed.iter() {
            let name: String = k.extract()?;
            let dtype = self.inputs.iter().find(|d| d.name == name).and_then(|d| d.dtype);
            named.push((name, to_tensor(&v, dtype)?));
        }
        if let Some((name, _)) = named.iter().find(|(n, _)| !self.inputs.iter().any(|d| &d.name == n)) {
            let known: Vec<&str> = self.inputs.iter().map(|d| d.name.as_str()).collect();
            return Err(RlxError::new_err(format!("no input named `{name}`; the model's inputs are: {}", known.join(", "))));
        }
        if let Some(d) = self.inputs.iter().find(|d| !named.iter().any(|(n, _)| *n == d.name)) {
            return Err(RlxError::new_err(format!("input `{}` was not given", d.name)));
        }
        for (name, t) in &named {
            if let Some(d) = self.inputs.iter().find(|d| &d.name == name) {
                d.check(t)?;
            }
        }
        let mut guard = lock(py, &self.mode)?;
        let entry = match &mut *guard {
            Mode::Static(entry) => entry,
            Mode::PerInputs { values, cache } => self.entry_for(py, values, cache, &named)?,
        };
        let compiled = &mut entry.compiled;
        let inputs: Vec<(&str, &Tensor)> = named.iter().filter(|(n, _)| compiled.inputs().any(|(w, _)| w == n)).map(|(n, t)| (n.as_str(), t)).collect();
        let mut out = py.detach(|| compiled.run(&inputs)).map_err(error::runtime)?.into_iter();
        let mut result = Vec::with_capacity(entry.layouts.len());
        for layout in &entry.layouts {
            result.push(match layout {
                Layout::Tensor => to_numpy(py, out.next().ok_or_else(|| RlxError::new_err("the graph returned fewer outputs than the model declares"))?)?,
                Layout::Sequence(n) => {
                    let list = PyList::empty(py);
                    for t in out.by_ref().take(*n) {
                        list.append(to_numpy(py, t)?)?;
                    }
                    list.into_any()
                }
                Layout::Absent => py.None().into_bound(py),
            });
        }
        Ok(result)
    }
}
