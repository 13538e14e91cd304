//! rlx's graph optimizer.
//!
//! Passes are functions from a graph to a new graph ([`pass::Pass`]); [`pipeline`] runs the
//! standard simplifications. [`decompose`] holds the common IR: how every non-primitive op
//! lowers into primitives. A backend states what it runs as [`claims::Claims`] (per op and
//! input dtypes); [`legalize`] rewrites a graph for those claims (keeping, casting around or
//! decomposing each node) and reports what happened to each node; [`fuse`] then folds op
//! chains into the fused kinds the backend claims; [`schedule`] plans a specialized graph for
//! any backend (hoisting, graph state, prepared weights) over one arena that [`memory`]
//! places by liveness.

pub mod claims;
pub mod cse;
pub mod dce;
pub mod decompose;
pub mod fold;
pub mod fuse;
pub mod legalize;
pub mod memory;
pub mod partition;
pub mod pass;
pub mod rewrite;
pub mod schedule;
pub mod simplify;

pub use claims::{Claim, Claims};
pub use fuse::fuse;
pub use legalize::{legalize, DispatchReport, Outcome};
pub use pass::{optimize, Pass};
