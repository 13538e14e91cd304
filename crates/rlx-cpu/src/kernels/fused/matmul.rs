//! `FusedMatMulBiasAct`: `act(x·w + bias)`.

use super::{per_act, Scratch};
use crate::kernels::elementwise::{act, activation, binary, gelu_in_place};
use crate::kernels::{matmul, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::DType;

/// Output rows one epilogue task takes.
const ROWS_PER_TASK: usize = 16;

/// `x [.., M, K]`, `w [K, N]`, `bias [N]`, all one float dtype → `out [.., M, N]`. The
/// product is the `MatMul` kernel's; in f32 the bias and activation then go over the output in
/// one pass of row blocks, across threads when large.
pub fn matmul_bias_act(activation_kind: Option<ActivationKind>, x: In, w: In, bias: In, out: &mut Out) -> Result<(), String> {
    matmul::matmul(x, w, out)?;
    let n = *out.dims.last().ok_or("the output needs a feature axis")?;
    if out.dtype != DType::F32 || n == 0 {
        return unfused_epilogue(activation_kind, bias, out);
    }
    let b = bias.get::<f32>();
    let y = out.get::<f32>();
    let epilogue = |rows: &mut [f32]| match activation_kind {
        None => rows.chunks_exact_mut(n).for_each(|r| r.iter_mut().zip(b).for_each(|(y, &b)| *y += b)),
        Some(ActivationKind::Gelu) => {
            rows.chunks_exact_mut(n).for_each(|r| r.iter_mut().zip(b).for_each(|(y, &b)| *y += b));
            gelu_in_place(rows)
        }
        Some(kind) => per_act!(kind, K => rows
            .chunks_exact_mut(n)
            .for_each(|r| r.iter_mut().zip(b).for_each(|(y, &b)| *y = act(K, *y + b)))),
    };
    if y.len() < PAR_MIN {
        epilogue(y);
    } else {
        y.par_chunks_mut(ROWS_PER_TASK * n).for_each(epilogue);
    }
    Ok(())
}

/// The bias `Add` and `Activation` kernels over the product in `out`.
fn unfused_epilogue(activation_kind: Option<ActivationKind>, bias: In, out: &mut Out) -> Result<(), String> {
    let mut product = Scratch::new(out.dtype, out.dims);
    product.bytes.copy_from_slice(out.bytes);
    match activation_kind {
        None => binary(BinaryOp::Add, product.as_in(), bias, out),
        Some(kind) => {
            let mut sum = Scratch::new(out.dtype, out.dims);
            binary(BinaryOp::Add, product.as_in(), bias, &mut sum.as_out())?;
            activation(kind, sum.as_in(), out)
        }
    }
}
