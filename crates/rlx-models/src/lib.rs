//! Model builders: each returns an rlx [`rlx_ir::Graph`] with named parameters and says how
//! to initialise them, so the same model serves inference, training and benchmarks.
