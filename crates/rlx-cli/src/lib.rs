//! The `rlx` command's library side: the demo jobs, callable from tests in reduced form, and
//! `onnx-run`.

pub mod demo;
pub mod embed;
pub mod onnx_run;
pub mod generate;
