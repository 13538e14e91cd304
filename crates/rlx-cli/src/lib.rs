//! The `rlx` command's library side: the demo jobs, callable from tests in reduced form, and
//! `onnx-run`, `generate`, `chat` and `serve`.

pub mod chat;
pub mod demo;
pub mod embed;
pub mod onnx_run;
pub mod generate;
pub mod serve;
