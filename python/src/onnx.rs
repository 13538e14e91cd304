//! The native half of `rlx.InferenceSession`: an ONNX model imported and compiled once for a
//! device; `run` takes named arrays and gives every graph output, in order.
//!
//! A model that needs an input's value while importing (a shape fed as an input) is imported
//! and compiled per distinct set of input shapes and small integer values, as `rlx onnx-run`
//! does; the declared inputs are then known only from the first run.

use crate::array::{numpy_name, to_numpy, to_tensor};
use crate::device::session;
use crate::error::{self, RlxError};
use crate::graph::dims_py;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rlx::{CompiledGraph, DType, Session, Tensor, TensorType};
use rlx_io::onnx::{self, ImportOptions, Layout, OnnxGraph, TensorData};
use rlx_io::IoError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// A model imported for the graph's inputs as declared, or per run for shape-valued inputs.
enum Compiled {
    Static(CompiledGraph),
    PerInputs(HashMap<Vec<u8>, CompiledGraph>),
}

#[pyclass(frozen, module = "rlx._rlx", name = "OnnxSession")]
pub struct OnnxSession {
    bytes: Vec<u8>,
    path: PathBuf,
    session: Session,
    inputs: Mutex<Vec<(String, TensorType)>>,
    outputs: Mutex<Vec<(String, Layout, Vec<TensorType>)>>,
    compiled: Mutex<Compiled>,
}

fn import_options<'e>() -> ImportOptions<'e> {
    ImportOptions { evaluator: Some(&rlx::cpu::CpuConstEval), ..ImportOptions::default() }
}

/// The ONNX outputs with the rlx output types each is made of.
fn outputs_of(imported: &OnnxGraph) -> Vec<(String, Layout, Vec<TensorType>)> {
    let mut types = imported.graph.outputs().iter().map(|&v| imported.graph.ty(v).clone());
    imported
        .outputs
        .iter()
        .map(|(name, layout)| {
            let n = match layout {
                Layout::Tensor => 1,
                Layout::Sequence(n) => *n,
                Layout::Absent => 0,
            };
            (name.clone(), layout.clone(), types.by_ref().take(n).collect())
        })
        .collect()
}

fn compile(session: &Session, imported: &OnnxGraph) -> Result<CompiledGraph, PyErr> {
    let mut compiled = session.compile(&imported.graph).map_err(error::runtime)?;
    for (name, value) in &imported.params {
        compiled.set_param(name, value.clone()).map_err(error::runtime)?;
    }
    Ok(compiled)
}

fn needs_values(e: &IoError) -> bool {
    matches!(e, IoError::OnnxUnsupported { reason, .. } if reason.contains("known at import"))
}

impl OnnxSession {
    fn lock<T>(m: &Mutex<T>) -> PyResult<std::sync::MutexGuard<'_, T>> {
        m.lock().map_err(|_| RlxError::new_err("an earlier run of this session panicked"))
    }

    /// Imports and compiles for these inputs (shape-valued models), caching by their shapes
    /// and the values that become constants.
    fn compiled_for<'a>(&self, cache: &'a mut HashMap<Vec<u8>, CompiledGraph>, feed: &[(String, Tensor)]) -> PyResult<&'a mut CompiledGraph> {
        let is_value = |t: &Tensor| t.dtype().is_int() || t.dtype() == DType::Bool || t.numel() <= 64;
        let mut key = Vec::new();
        for (name, t) in feed {
            key.extend(name.as_bytes());
            key.extend(t.shape().iter().flat_map(|d| (*d as u64).to_le_bytes()));
            if is_value(t) {
                key.extend(t.bytes());
            }
            key.push(0);
        }
        if !cache.contains_key(&key) {
            let data = |t: &Tensor| TensorData { dtype: t.dtype(), dims: t.shape().to_vec(), bytes: t.bytes().to_vec() };
            let options = ImportOptions {
                input_shapes: feed.iter().map(|(n, t)| (n.clone(), t.shape().to_vec())).collect(),
                input_values: feed.iter().filter(|(_, t)| is_value(t)).map(|(n, t)| (n.clone(), data(t))).collect(),
                ..import_options()
            };
            let imported = onnx::import_bytes(&self.bytes, &self.path, &options).map_err(error::io)?;
            *Self::lock(&self.inputs)? = imported.inputs.clone();
            *Self::lock(&self.outputs)? = outputs_of(&imported);
            cache.insert(key.clone(), compile(&self.session, &imported)?);
        }
        cache.get_mut(&key).ok_or_else(|| RlxError::new_err("compiled model missing from the cache"))
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
        let session = session(device)?;
        let (bytes, path, session, imported) = py.detach(move || {
            let imported = onnx::import_bytes(&bytes, &path, &import_options());
            (bytes, path, session, imported)
        });
        let (inputs, outputs, compiled) = match imported {
            Ok(imported) => {
                let compiled = py.detach(|| compile(&session, &imported))?;
                (imported.inputs.clone(), outputs_of(&imported), Compiled::Static(compiled))
            }
            Err(e) if needs_values(&e) => (Vec::new(), Vec::new(), Compiled::PerInputs(HashMap::new())),
            Err(e) => return Err(error::io(e)),
        };
        Ok(OnnxSession { bytes, path, session, inputs: Mutex::new(inputs), outputs: Mutex::new(outputs), compiled: Mutex::new(compiled) })
    }

    /// The runtime inputs as (name, dtype, dims); dims are ints or symbol names.
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, &'static str, Bound<'py, PyList>)>> {
        Self::lock(&self.inputs)?.iter().map(|(n, t)| Ok((n.clone(), numpy_name(t.dtype), dims_py(py, &t.shape)?))).collect()
    }

    /// The outputs as (name, dtype, dims); a sequence's element type, `None` for an empty optional.
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, Option<&'static str>, Option<Bound<'py, PyList>>)>> {
        Self::lock(&self.outputs)?
            .iter()
            .map(|(n, _, types)| match types.first() {
                Some(t) => Ok((n.clone(), Some(numpy_name(t.dtype)), Some(dims_py(py, &t.shape)?))),
                None => Ok((n.clone(), None, None)),
            })
            .collect()
    }

    /// Runs on a dict of arrays; returns every output in order: an array, a list of arrays
    /// for a sequence, `None` for an empty optional.
    fn run<'py>(&self, py: Python<'py>, feed: &Bound<'py, PyDict>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut named = Vec::with_capacity(feed.len());
        {
            let declared = Self::lock(&self.inputs)?;
            for (k, v) in feed.iter() {
                let name: String = k.extract()?;
                let dtype = declared.iter().find(|(n, _)| *n == name).map(|(_, t)| t.dtype);
                named.push((name, to_tensor(&v, dtype)?));
            }
        }
        let mut compiled = Self::lock(&self.compiled)?;
        let out = match &mut *compiled {
            Compiled::Static(c) => {
                let inputs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
                py.detach(|| c.run(&inputs)).map_err(error::runtime)?
            }
            Compiled::PerInputs(cache) => {
                let c = self.compiled_for(cache, &named)?;
                let wanted: Vec<String> = c.inputs().map(|(n, _)| n.to_string()).collect();
                let inputs: Vec<(&str, &Tensor)> = named.iter().filter(|(n, _)| wanted.contains(n)).map(|(n, t)| (n.as_str(), t)).collect();
                py.detach(|| c.run(&inputs)).map_err(error::runtime)?
            }
        };
        drop(compiled);
        let mut out = out.into_iter();
        let mut result = Vec::new();
        for (_, layout, _) in Self::lock(&self.outputs)?.iter() {
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
