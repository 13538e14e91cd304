//! rlx's errors as Python exceptions: one `RlxError` base, with subclasses for bad shapes,
//! bad dtypes, unreadable model files and what rlx does not support. The Rust message is kept.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::PyErr;
use rlx::ir::IrError;
use rlx::models::bert::BertError;
use rlx::models::ModelError;
use rlx::RuntimeError;
use rlx_io::IoError;

pyo3::create_exception!(rlx, RlxError, PyException, "Any failure inside rlx; the message is rlx's own.");
pyo3::create_exception!(rlx, ShapeError, RlxError, "Shapes that do not fit: an op's inputs, or an input's dims.");
pyo3::create_exception!(rlx, DTypeError, RlxError, "An element type the graph or the op does not take.");
pyo3::create_exception!(rlx, FileError, RlxError, "A model file that cannot be opened or is malformed.");
pyo3::create_exception!(rlx, UnsupportedError, RlxError, "An op, attribute or model feature rlx does not support (yet).");

/// The exceptions, as the package exports them.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("RlxError", py.get_type::<RlxError>())?;
    m.add("ShapeError", py.get_type::<ShapeError>())?;
    m.add("DTypeError", py.get_type::<DTypeError>())?;
    m.add("FileError", py.get_type::<FileError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    Ok(())
}

pub fn ir(e: IrError) -> PyErr {
    let msg = e.to_string();
    match e {
        IrError::Infer { ref reason, .. } if reason.contains("dtype") => DTypeError::new_err(msg),
        IrError::Infer { .. } | IrError::Arity { .. } | IrError::TypeMismatch { .. } => ShapeError::new_err(msg),
        _ => RlxError::new_err(msg),
    }
}

pub fn runtime(e: RuntimeError) -> PyErr {
    let msg = e.to_string();
    match e {
        RuntimeError::Ir(e) => ir(e),
        RuntimeError::Legalize(_) => UnsupportedError::new_err(msg),
        RuntimeError::TypeMismatch { ref expected, ref got, .. } if !got.starts_with(&expected.dtype.to_string()) => DTypeError::new_err(msg),
        RuntimeError::TypeMismatch { .. } | RuntimeError::SymbolConflict { .. } | RuntimeError::DataLength { .. } => ShapeError::new_err(msg),
        RuntimeError::DTypeMismatch { .. } => DTypeError::new_err(msg),
        _ => RlxError::new_err(msg),
    }
}

pub fn io(e: IoError) -> PyErr {
    let msg = e.to_string();
    match e {
        IoError::Runtime(e) => runtime(e),
        IoError::OnnxUnsupported { .. } => UnsupportedError::new_err(msg),
        IoError::OnnxModel { ref reason, .. } if reason.contains("not supported") || reason.contains("unsupported") => UnsupportedError::new_err(msg),
        _ => FileError::new_err(msg),
    }
}

pub fn model(e: ModelError) -> PyErr {
    let msg = e.to_string();
    match e {
        ModelError::Io(e) => io(e),
        ModelError::Ir(e) => ir(e),
        ModelError::Runtime(e) => runtime(e),
        ModelError::Unsupported(_) => UnsupportedError::new_err(msg),
        ModelError::Metadata { .. } | ModelError::Tensor { .. } => FileError::new_err(msg),
        ModelError::Generate(_) => RlxError::new_err(msg),
    }
}

pub fn bert(e: BertError) -> PyErr {
    let msg = e.to_string();
    match e {
        BertError::Io(e) => io(e),
        BertError::Graph(e) => ir(e),
        BertError::Runtime(e) => runtime(e),
        _ => FileError::new_err(msg),
    }
}

pub fn autodiff(e: rlx::autodiff::AdError) -> PyErr {
    use rlx::autodiff::AdError;
    let msg = e.to_string();
    match e {
        AdError::NoRule(_) | AdError::NoBatchingRule(_) => UnsupportedError::new_err(msg),
        AdError::NotFloat { .. } => DTypeError::new_err(msg),
        AdError::BatchAxis { .. } => ShapeError::new_err(msg),
        AdError::Ir(e) => ir(e),
        _ => RlxError::new_err(msg),
    }
}
