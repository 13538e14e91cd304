//! Backend claims: which op kinds a backend runs, and for which input dtypes.
//!
//! Legalization ([`crate::legalize`]) asks a backend's [`Claims`] about every node and then
//! keeps it, casts around it, or decomposes it; fusion ([`crate::fuse`]) forms a fused node
//! only where the backend claims it natively.

use rlx_ir::{DType, Graph, Node, Op, OpKind};

/// What a backend does with one node, given its input dtypes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Runs it as it is.
    Native,
    /// Runs it natively once input `i` is cast to the `i`-th dtype; an output whose inferred
    /// dtype then differs from the original is cast back to it.
    Cast(Vec<DType>),
    /// Does not run it for these dtypes: rlx-opt decomposes it, or compilation fails.
    No,
}

/// A backend's claims, read by legalization, fusion and the coverage matrix.
pub trait Claims {
    /// Every kind the backend runs natively for some input dtypes.
    fn kinds(&self) -> &[OpKind];

    /// What the backend does with `op` when its inputs have the dtypes `inputs`. By default
    /// every kind of [`Claims::kinds`] is native for every dtype its inference accepts.
    fn claim(&self, op: &Op, _inputs: &[DType]) -> Claim {
        if self.kinds().contains(&op.kind()) {
            Claim::Native
        } else {
            Claim::No
        }
    }

    /// The dtype limits of `kind` in a few words for the coverage table ("f32, f64; f16 and
    /// bf16 via f32"), or `None` when the backend takes every dtype the kind's inference does.
    fn limits(&self, _kind: OpKind) -> Option<&'static str> {
        None
    }
}

/// A list of kinds claims each of them natively for every dtype (autodiff's rule set, tests).
impl Claims for [OpKind] {
    fn kinds(&self) -> &[OpKind] {
        self
    }
}

/// The dtypes of `node`'s inputs in `g`, as [`Claims::claim`] takes them.
pub fn input_dtypes(g: &Graph, node: &Node) -> Vec<DType> {
    node.inputs.iter().map(|&v| g.ty(v).dtype).collect()
}
