//! reduce ops (OPS.md §8).

use serde::{Deserialize, Serialize};

/// The combining function of `Reduce` and `Pool`.
/// Empty extents give the identity: 0, NaN (mean), −inf, +inf, 1. Max/Min propagate NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

super::unspecified_ops!(
    Reduce,
    Cumsum,
    CumProd,
    CumMax,
    CumsumBackward,
    ArgMax,
    ArgMin,
    TopK,
    Sort,
    ArgSort,
);
