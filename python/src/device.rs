//! Devices by name, as every `device=` argument takes them: `cpu`, `cuda[:N]`, `wgpu[:N]`.

use crate::error;
use pyo3::prelude::*;
use rlx::{Device, Session};

pub fn parse(device: &str) -> PyResult<Device> {
    device.parse::<Device>().map_err(error::RlxError::new_err)
}

/// A session compiling for the named device (on a GPU, with the CPU as host fallback).
pub fn session(device: &str) -> PyResult<Session> {
    Session::new(parse(device)?).map_err(error::runtime)
}
