//! Model builders: each returns an rlx [`rlx_ir::Graph`] with named parameters and says how
//! to initialise them, so the same model serves inference, training and benchmarks.

pub mod bert;
pub mod bpe;
pub mod chat;
pub mod cnn;
mod error;
pub mod gpt;
pub mod llama;
mod tokenizer_json;
pub mod wordpiece;

pub use error::{ModelError, Result};

use rlx_train::Init;

/// One parameter of a built model: its graph name, static shape and initialiser
/// (`init.tensor(&shape, &mut rng)` draws a value).
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}
