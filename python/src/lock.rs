//! Locks shared by threads: a compiled graph, session, trainer or model runs one call at a
//! time, and a thread waits for it with the GIL released, so the holder, itself running
//! without the GIL, can take the GIL back and finish.

use crate::error::RlxError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use std::sync::{Mutex, MutexGuard};

pub fn lock<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> PyResult<MutexGuard<'a, T>> {
    m.lock_py_attached(py).map_err(|_| RlxError::new_err("an earlier call on this object panicked"))
}
