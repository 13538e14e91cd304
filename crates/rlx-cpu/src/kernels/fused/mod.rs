//! Fused kernels (OPS.md §19): `FusedMatMulBiasAct`, `FusedSwiGLU`, the residual norms and
//! `ElementwiseRegion`.
//!
//! Each has an f32 path that makes one pass where the unfused ops make several, with the same
//! arithmetic as the standalone kernels (`elementwise::act`, the f32 GELU, f32 sums), so
//! results match the decomposition to rounding. Other dtypes run the standalone kernels in sequence,
//! which is exactly the decomposition.

mod matmul;
mod norm;
mod region;
mod swiglu;

pub use matmul::{matmul_bias_act, matmul_bias_act_rounded};
pub use norm::{residual_layer_norm, residual_rms_norm};
pub use region::elementwise_region;
pub use swiglu::swiglu;

use crate::view::{In, Out};
use rlx_ir::DType;

/// A scratch tensor of `dtype` and `dims`, for the fallbacks that run the unfused kernels.
struct Scratch {
    dtype: DType,
    dims: Vec<usize>,
    bytes: Vec<u8>,
}

impl Scratch {
    fn new(dtype: DType, dims: &[usize]) -> Scratch {
        Scratch { dtype, dims: dims.to_vec(), bytes: vec![0; dims.iter().product::<usize>() * dtype.size()] }
    }

    fn as_in(&self) -> In<'_> {
        In { dtype: self.dtype, dims: &self.dims, bytes: &self.bytes }
    }

    fn as_out(&mut self) -> Out<'_> {
        Out { dtype: self.dtype, dims: &self.dims, bytes: &mut self.bytes }
    }
}
