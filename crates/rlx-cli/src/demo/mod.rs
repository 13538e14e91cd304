//! `rlx demo`: small end-to-end jobs that build, compile, run and train models on the CPU.

pub mod block;
pub mod charlm;
pub mod digits;
pub mod plot;
