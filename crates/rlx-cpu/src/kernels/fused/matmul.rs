//! `FusedMatMulBiasAct`: `act(x·w + bias)`.

use super::Scratch;
use crate::kernels::elementwise::{act, activation, binary, gelu_in_place, per_act};
use crate::kernels::matmul::{self, sgemm_prepacked, sgemm_then, Mat, MatMut, PackedB};
use crate::kernels::PAR_MIN;
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::DType;

/// Output rows one epilogue task takes.
const ROWS_PER_TASK: usize = 16;

/// `x [.., M, K]`, `w [K, N]`, `bias [N]`, all one float dtype → `out [.., M, N]`. In f32
/// with a 2-D weight the bias and activation run inside the GEMM on each finished piece of
/// the output while it is in cache; otherwise the product is the `MatMul` kernel's and the
/// epilogue one more pass of row blocks (f32) or the unfused kernels. `packed` is `w`
/// pre-packed ([`matmul::prepack`]) when it is a weight, used by the f32 2-D path.
pub fn matmul_bias_act(activation_kind: Option<ActivationKind>, x: In, w: In, packed: Option<&PackedB>, bias: In, out: &mut Out) -> Result<(), String> {
    let n = *out.dims.last().ok_or("the output needs a feature axis")?;
    let all_f32 = [x.dtype, w.dtype, bias.dtype, out.dtype].iter().all(|&d| d == DType::F32);
    if all_f32 && w.dims.len() == 2 && n > 0 {
        let (k, b) = (w.dims[0], bias.get::<f32>());
        let m = out.numel() / n;
        let epilogue = |_row: usize, col0: usize, y: &mut [f32]| add_bias_act(activation_kind, &b[col0..col0 + y.len()], y);
        let (x, w, y) = (Mat::row_major(x.get::<f32>(), m, k), Mat::row_major(w.get::<f32>(), k, n), MatMut::row_major(out.get::<f32>(), m, n));
        return match packed {
            Some(p) => sgemm_prepacked(x, w, p, y, false, true, Some(&epilogue)),
            None => sgemm_then(x, w, y, false, true, &epilogue),
        };
    }
    matmul::matmul(x, w, out)?;
    if out.dtype != DType::F32 || n == 0 {
        return unfused_epilogue(activation_kind, bias, out);
    }
    let b = bias.get::<f32>();
    let y = out.get::<f32>();
    let epilogue = |rows: &mut [f32]| rows.chunks_exact_mut(n).for_each(|r| add_bias_act(activation_kind, b, r));
    if y.len() < PAR_MIN {
        epilogue(y);
    } else {
        y.par_chunks_mut(ROWS_PER_TASK * n).for_each(epilogue);
    }
    Ok(())
}

/// [`matmul_bias_act`] with `w` rounded to a narrow type ([`matmul::Rounded`]): the bias and
/// activation run on each finished block of the output.
pub fn matmul_bias_act_rounded(activation_kind: Option<ActivationKind>, x: In, w: &matmul::Rounded, bias: In, out: &mut Out) -> Result<(), String> {
    if bias.dtype != DType::F32 {
        return Err(format!("a product of a rounded weight takes an f32 bias; got {:?}", bias.dtype));
    }
    let b = bias.get::<f32>();
    let epilogue = |_row: usize, col0: usize, y: &mut [f32]| add_bias_act(activation_kind, &b[col0..col0 + y.len()], y);
    matmul::matmul_rounded(x, w, out, Some(&epilogue))
}

/// `y[j] ← act(y[j] + b[j])` over one piece of an output row.
fn add_bias_act(activation_kind: Option<ActivationKind>, b: &[f32], y: &mut [f32]) {
    match activation_kind {
        None => y.iter_mut().zip(b).for_each(|(y, &b)| *y += b),
        Some(ActivationKind::Gelu) => {
            y.iter_mut().zip(b).for_each(|(y, &b)| *y += b);
            gelu_in_place(y)
        }
        Some(kind) => per_act!(kind, K => y.iter_mut().zip(b).for_each(|(y, &b)| *y = act(K, *y + b))),
    }
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
