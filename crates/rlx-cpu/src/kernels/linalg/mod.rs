//! Dense linear algebra (OPS.md §15). Every routine computes in f64 whatever the tensor
//! dtype, as the LAPACK reference does, and results are cast back.

pub mod eigen;
