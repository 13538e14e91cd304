//! The `rlx` command's library side: the demo jobs, callable from tests in reduced form.

pub mod demo;
pub mod generate;
