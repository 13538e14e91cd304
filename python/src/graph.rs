//! The graph builder, compilation and the graph transforms (grad, jvp, vmap) for Python.
//! Values cross as `(node, output)` pairs; the Python `rlx.Value` wraps them with operators.

use crate::array::{numpy_name, parse_dtype, to_numpy, to_tensor};
use crate::error::{self, RlxError};
use crate::device::session;
use crate::lock::lock;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rlx::ir::text;
use rlx::{CompileOptions, CompiledGraph, DType, Dim, Graph, Shape, Tensor, TensorType, ValueId};
use std::sync::Mutex;

/// A value of a graph: its node and which of the node's outputs.
pub type Handle = (u32, u32);

fn value(g: &Graph, h: Handle) -> PyResult<ValueId> {
    let v = ValueId::new(rlx::ir::NodeId(h.0), h.1);
    if g.try_ty(v).is_none() {
        return Err(RlxError::new_err(format!("%{}.{} is not a value of this graph", h.0, h.1)));
    }
    Ok(v)
}

fn handle(v: ValueId) -> Handle {
    (v.node.0, v.output)
}

/// A shape from Python: ints for static dims, names for symbolic ones.
fn shape_of(dims: &Bound<'_, PyAny>) -> PyResult<Shape> {
    let mut out = Vec::new();
    for d in dims.try_iter()? {
        let d = d?;
        out.push(match d.extract::<usize>() {
            Ok(n) => Dim::Static(n),
            Err(_) => Dim::sym(&d.extract::<String>().map_err(|_| error::ShapeError::new_err(format!("dim `{d}` is neither a size nor a name")))?),
        });
    }
    Ok(Shape::new(out))
}

/// The dims as Python sees them: ints, and names for symbolic dims.
pub fn dims_py<'py>(py: Python<'py>, shape: &Shape) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for d in shape.dims() {
        match d.as_static() {
            Some(n) => list.append(n)?,
            None => list.append(d.to_string())?,
        }
    }
    Ok(list)
}

/// A tensor graph under construction (rlx's `Graph`).
#[pyclass(module = "rlx._rlx", name = "Graph")]
pub struct PyGraph {
    pub graph: Graph,
}

#[pymethods]
impl PyGraph {
    #[new]
    fn new() -> PyGraph {
        PyGraph { graph: Graph::new() }
    }

    /// Parses rlx's text format (what `str(graph)` prints).
    #[staticmethod]
    fn parse(text: &str) -> PyResult<PyGraph> {
        Ok(PyGraph { graph: text::parse(text).map_err(error::ir)? })
    }

    fn __str__(&self) -> String {
        self.graph.to_string()
    }

    fn __len__(&self) -> usize {
        self.graph.len()
    }

    /// A named runtime input of `dtype` and `shape` (ints or symbol names).
    fn input(&mut self, name: &str, shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<Handle> {
        let ty = TensorType::new(parse_dtype(dtype)?, shape_of(shape)?);
        Ok(handle(self.graph.input(name, ty)))
    }

    /// A named parameter (a weight set once on the compiled graph).
    fn param(&mut self, name: &str, shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<Handle> {
        let ty = TensorType::new(parse_dtype(dtype)?, shape_of(shape)?);
        Ok(handle(self.graph.param(name, ty)))
    }

    /// A constant holding the array's values.
    fn constant(&mut self, array: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Handle> {
        let dtype = dtype.map(parse_dtype).transpose()?;
        let t = to_tensor(array, Some(dtype.unwrap_or(DType::F32)))?;
        if let Some(d) = dtype.filter(|&d| d != t.dtype()) {
            return Err(error::DTypeError::new_err(format!("the array is {}, not {d}", t.dtype())));
        }
        let ty = TensorType::new(t.dtype(), Shape::new(t.shape().iter().map(|&d| Dim::Static(d)).collect()));
        Ok(handle(self.graph.constant(ty, t.bytes().to_vec()).map_err(error::ir)?))
    }

    /// Appends the op written in the text format's RON form, e.g. `Activation(kind:Relu)`,
    /// on `inputs`; returns its outputs.
    fn op(&mut self, op: &str, inputs: Vec<Handle>) -> PyResult<Vec<Handle>> {
        let op = text::parse_op(op).map_err(RlxError::new_err)?;
        let inputs = inputs.into_iter().map(|h| value(&self.graph, h)).collect::<PyResult<Vec<_>>>()?;
        let node = self.graph.add(op, &inputs).map_err(error::ir)?;
        let n = self.graph.node(node).outputs.len() as u32;
        Ok((0..n).map(|i| (node.0, i)).collect())
    }

    fn set_outputs(&mut self, outputs: Vec<Handle>) -> PyResult<()> {
        let outputs = outputs.into_iter().map(|h| value(&self.graph, h)).collect::<PyResult<Vec<_>>>()?;
        self.graph.set_outputs(outputs).map_err(error::ir)
    }

    fn outputs(&self) -> Vec<Handle> {
        self.graph.outputs().iter().copied().map(handle).collect()
    }

    /// The value's dtype name and dims.
    fn value_type<'py>(&self, py: Python<'py>, h: Handle) -> PyResult<(&'static str, Bound<'py, PyList>)> {
        let ty = self.graph.ty(value(&self.graph, h)?);
        Ok((numpy_name(ty.dtype), dims_py(py, &ty.shape)?))
    }

    /// The runtime inputs as (name, value).
    fn inputs(&self) -> Vec<(String, Handle)> {
        self.graph.inputs().into_iter().map(|(n, v)| (n.to_string(), handle(v))).collect()
    }

    /// The parameters as (name, value).
    fn params(&self) -> Vec<(String, Handle)> {
        self.graph.params().into_iter().map(|(n, v)| (n.to_string(), handle(v))).collect()
    }

    fn copy(&self) -> PyGraph {
        PyGraph { graph: self.graph.clone() }
    }
}

/// A graph compiled for one device; runs hold a lock, so threads can share it.
#[pyclass(frozen, module = "rlx._rlx", name = "Compiled")]
pub struct Compiled {
    compiled: Mutex<CompiledGraph>,
    inputs: Vec<(String, TensorType)>,
    params: Vec<(String, TensorType)>,
}

impl Compiled {
    pub fn new(compiled: CompiledGraph) -> Compiled {
        let inputs = compiled.inputs().map(|(n, t)| (n.to_string(), t.clone())).collect();
        let params = compiled.params().map(|(n, t)| (n.to_string(), t.clone())).collect();
        Compiled { compiled: Mutex::new(compiled), inputs, params }
    }


    /// The graph's input tensors from a dict of arrays (`None` values are skipped).
    pub fn tensors(&self, feed: &Bound<'_, PyDict>) -> PyResult<Vec<(String, Tensor)>> {
        let mut named = Vec::with_capacity(feed.len());
        for (k, v) in feed.iter() {
            let name: String = k.extract()?;
            let dtype = self.inputs.iter().find(|(n, _)| *n == name).map(|(_, t)| t.dtype);
            named.push((name, to_tensor(&v, dtype)?));
        }
        Ok(named)
    }
}

#[pymethods]
impl Compiled {
    /// Runs on a dict of arrays (name → array); returns the outputs as NumPy arrays, in order.
    fn run<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyDict>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let named = self.tensors(inputs)?;
        let out = self.run_checked(py, &named)?;
        out.into_iter().map(|t| to_numpy(py, t)).collect()
    }

    /// Sets a parameter's value.
    fn set_param(&self, py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let dtype = self.params.iter().find(|(n, _)| n == name).map(|(_, t)| t.dtype);
        let t = to_tensor(value, dtype)?;
        let mut guard = lock(py, &self.compiled)?;
        let compiled = &mut *guard;
        py.detach(|| compiled.set_param(name, t)).map_err(error::runtime)
    }

    /// A parameter's current value.
    fn param<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let t = lock(py, &self.compiled)?.param(name).map_err(error::runtime)?;
        to_numpy(py, t)
    }

    /// The runtime inputs as (name, dtype, dims).
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, &'static str, Bound<'py, PyList>)>> {
        self.inputs.iter().map(|(n, t)| Ok((n.clone(), numpy_name(t.dtype), dims_py(py, &t.shape)?))).collect()
    }

    /// The parameters as (name, dtype, dims).
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Vec<(String, &'static str, Bound<'py, PyList>)>> {
        self.params.iter().map(|(n, t)| Ok((n.clone(), numpy_name(t.dtype), dims_py(py, &t.shape)?))).collect()
    }

    /// The dispatch report: how each op kind was handled for the device.
    fn report(&self, py: Python<'_>) -> PyResult<String> {
        Ok(lock(py, &self.compiled)?.report().to_string())
    }
}

impl Compiled {
    /// Runs, with rlx's errors as their Python exceptions.
    pub fn run_checked(&self, py: Python<'_>, named: &[(String, Tensor)]) -> PyResult<Vec<Tensor>> {
        let inputs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let mut guard = lock(py, &self.compiled)?;
        let compiled = &mut *guard;
        py.detach(|| compiled.run(&inputs)).map_err(error::runtime)
    }
}

/// Compiles `graph` for `device` ("cpu", "cuda:N", "wgpu:N"), without the GIL.
#[pyfunction]
#[pyo3(signature = (graph, device = "cpu", fuse = true, optimize = true))]
pub fn compile(py: Python<'_>, graph: &PyGraph, device: &str, fuse: bool, optimize: bool) -> PyResult<Compiled> {
    let session = session(device)?.with_options(CompileOptions { fuse, optimize, ..CompileOptions::default() });
    let g = &graph.graph;
    let compiled = py.detach(|| session.compile(g)).map_err(error::runtime)?;
    Ok(Compiled::new(compiled))
}

/// The graph's outputs followed by the gradient of `loss` (default: its first output) with
/// respect to each input or parameter named in `wrt`.
#[pyfunction]
#[pyo3(signature = (graph, wrt, loss = None))]
pub fn grad(graph: &PyGraph, wrt: Vec<String>, loss: Option<Handle>) -> PyResult<PyGraph> {
    let g = &graph.graph;
    let loss = match loss {
        Some(h) => value(g, h)?,
        None => *g.outputs().first().ok_or_else(|| RlxError::new_err("the graph has no output to differentiate"))?,
    };
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    Ok(PyGraph { graph: rlx::autodiff::grad(g, loss, &wrt).map_err(error::autodiff)? })
}

/// The graph's outputs followed by their tangents along new inputs `tangent.<name>`.
#[pyfunction]
pub fn jvp(graph: &PyGraph, wrt: Vec<String>) -> PyResult<PyGraph> {
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    Ok(PyGraph { graph: rlx::autodiff::jvp(&graph.graph, &wrt).map_err(error::autodiff)? })
}

/// The graph mapped over a new batch axis of `size` (an int or a symbol name); `batched`
/// maps input or parameter names to the axis where they carry it.
#[pyfunction]
pub fn vmap(graph: &PyGraph, batched: Vec<(String, usize)>, size: &Bound<'_, PyAny>) -> PyResult<PyGraph> {
    let size = match size.extract::<usize>() {
        Ok(n) => Dim::Static(n),
        Err(_) => Dim::sym(&size.extract::<String>()?),
    };
    let batched: Vec<(&str, usize)> = batched.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    Ok(PyGraph { graph: rlx::autodiff::vmap(&graph.graph, &batched, size).map_err(error::autodiff)? })
}
