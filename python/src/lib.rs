//! `rlx._rlx`, the native module of the `rlx` Python package: ONNX sessions, the graph
//! builder and its transforms, compilation for a device, and the model layer. The Python
//! package (`rlx/`) wraps it in onnxruntime's and the Rust crate's shapes.

mod array;
mod device;
mod error;
mod graph;
mod lock;
mod models;
mod onnx;
mod train;

use pyo3::prelude::*;

#[pymodule]
fn _rlx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    error::register(m)?;
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::Compiled>()?;
    m.add_class::<array::TensorHolder>()?;
    m.add_class::<onnx::OnnxSession>()?;
    m.add_function(wrap_pyfunction!(graph::compile, m)?)?;
    m.add_function(wrap_pyfunction!(graph::grad, m)?)?;
    m.add_function(wrap_pyfunction!(graph::jvp, m)?)?;
    m.add_function(wrap_pyfunction!(graph::vmap, m)?)?;
    models::register(m)?;
    m.add_class::<train::PyTrainer>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
