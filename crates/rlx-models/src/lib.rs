//! Model builders: each returns an rlx [`rlx_ir::Graph`] with named parameters and says how
//! to initialise them, so the same model serves inference, training and benchmarks.

pub mod gpt;

use rlx_train::Init;

/// A parameter a model declares: its graph name, shape and initialiser.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}
