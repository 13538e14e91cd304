//! CPU kernels by op family. A kernel is a function over [`In`](crate::view::In) operands
//! and [`Out`](crate::view::Out) results with its contract in the doc comment.

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod fused;
pub mod index;
pub mod linalg;
pub mod matmul;
pub mod norm;
pub mod quant;
pub mod random;
pub mod real;
pub mod reduce;
pub mod rnn;
pub mod shape;
pub mod signal;
pub mod softmax;
pub mod spd;
pub mod splat;
pub mod ssm;

use rayon::prelude::*;
use rlx_ir::DType;

/// Elements below which a map runs on one thread (threading costs more than it saves).
pub const PAR_MIN: usize = 1 << 15;

/// `out[i] = f(x[i])`, split across threads when large.
pub fn par_map<A: Sync + Copy, O: Send>(x: &[A], out: &mut [O], f: impl Fn(A) -> O + Sync) {
    if x.len() < PAR_MIN {
        out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v));
    } else {
        out.par_chunks_mut(PAR_MIN / 4)
            .zip(x.par_chunks(PAR_MIN / 4))
            .for_each(|(o, x)| o.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)));
    }
}

/// `f(x_chunk, out_chunk)` over matching chunks of `x` and `out`, split across threads
/// when large: for kernels that work on whole slices (vectorised maps).
pub fn par_chunks<A: Sync, O: Send>(x: &[A], out: &mut [O], f: impl Fn(&[A], &mut [O]) + Sync) {
    if x.len() < PAR_MIN {
        f(x, out);
    } else {
        out.par_chunks_mut(PAR_MIN / 4).zip(x.par_chunks(PAR_MIN / 4)).for_each(|(o, x)| f(x, o));
    }
}

/// `f(a, b, out)` over matching chunks of two inputs and the output, split across threads
/// when large.
pub fn par_chunks2<A: Sync, B: Sync, O: Send>(a: &[A], b: &[B], out: &mut [O], f: impl Fn(&[A], &[B], &mut [O]) + Sync) {
    if a.len() < PAR_MIN {
        f(a, b, out);
    } else {
        out.par_chunks_mut(PAR_MIN / 4).zip(a.par_chunks(PAR_MIN / 4).zip(b.par_chunks(PAR_MIN / 4))).for_each(|(o, (a, b))| f(a, b, o));
    }
}

/// `out[i] = f(a[i], b[i])`, split across threads when large.
pub fn par_map2<A: Sync + Copy, B: Sync + Copy, O: Send>(a: &[A], b: &[B], out: &mut [O], f: impl Fn(A, B) -> O + Sync) {
    if a.len() < PAR_MIN {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    } else {
        out.par_chunks_mut(PAR_MIN / 4)
            .zip(a.par_chunks(PAR_MIN / 4).zip(b.par_chunks(PAR_MIN / 4)))
            .for_each(|(o, (a, b))| {
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    *o = f(x, y);
                }
            });
    }
}

/// The bytes of a zero of `dtype`.
pub fn zero_of(dtype: DType) -> Vec<u8> {
    vec![0; dtype.size()]
}

/// Runs `$body` with `$T` bound to the Rust type of an F32 or F64 dtype; other dtypes are
/// an error (kernels that take half floats handle them before reaching this).
macro_rules! by_float {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            rlx_ir::DType::F32 => {
                type $T = f32;
                $body;
                Ok(())
            }
            rlx_ir::DType::F64 => {
                type $T = f64;
                $body;
                Ok(())
            }
            d => Err(format!("this kernel runs on f32 and f64, not {d}")),
        }
    };
}
pub(crate) use by_float;

// rnn, ssm: float plumbing shared by the sequence kernels.

/// A kernel written once over a [`real::Real`] type, for [`on_floats`].
pub trait FloatKernel {
    /// `ins`/`outs` are the operands' elements, `dims` the inputs' dims.
    fn run<T: real::Real>(&self, ins: &[&[T]], dims: &[&[usize]], outs: &mut [&mut [T]]) -> Result<(), String>;
}

/// Runs `k` in the dtype of `ins[0]` (every operand has it): f32 and f64 directly, f16 and
/// bf16 widened to f32 and the results rounded back.
pub fn on_floats(k: &impl FloatKernel, ins: &[crate::view::In], outs: &mut [crate::view::Out]) -> Result<(), String> {
    use half::{bf16, f16};
    fn typed<T: real::Real>(k: &impl FloatKernel, ins: &[crate::view::In], outs: &mut [crate::view::Out]) -> Result<(), String> {
        let dims: Vec<&[usize]> = ins.iter().map(|i| i.dims).collect();
        let xs: Vec<&[T]> = ins.iter().map(|i| i.get::<T>()).collect();
        let mut ys: Vec<&mut [T]> = outs.iter_mut().map(|o| o.get::<T>()).collect();
        k.run(&xs, &dims, &mut ys)
    }
    match ins[0].dtype {
        DType::F32 => typed::<f32>(k, ins, outs),
        DType::F64 => typed::<f64>(k, ins, outs),
        d @ (DType::F16 | DType::BF16) => {
            let dims: Vec<&[usize]> = ins.iter().map(|i| i.dims).collect();
            let wide: Vec<Vec<f32>> = ins
                .iter()
                .map(|i| match d {
                    DType::F16 => i.get::<f16>().iter().map(|v| v.to_f32()).collect(),
                    _ => i.get::<bf16>().iter().map(|v| v.to_f32()).collect(),
                })
                .collect();
            let mut res: Vec<Vec<f32>> = outs.iter().map(|o| vec![0.0; o.numel()]).collect();
            let xs: Vec<&[f32]> = wide.iter().map(Vec::as_slice).collect();
            let mut ys: Vec<&mut [f32]> = res.iter_mut().map(Vec::as_mut_slice).collect();
            k.run(&xs, &dims, &mut ys)?;
            for (o, r) in outs.iter_mut().zip(&res) {
                match d {
                    DType::F16 => o.get::<f16>().iter_mut().zip(r).for_each(|(o, &v)| *o = f16::from_f32(v)),
                    _ => o.get::<bf16>().iter_mut().zip(r).for_each(|(o, &v)| *o = bf16::from_f32(v)),
                }
            }
            Ok(())
        }
        d => Err(format!("this kernel runs on f32, f64, f16 and bf16, not {d}")),
    }
}

/// Test helper of the sequence kernels: runs `kernel` on f32 operands with dims `in_dims`,
/// returning outputs of dims `out_dims`.
#[cfg(test)]
pub(crate) fn run_f32(
    kernel: impl FnOnce(&[crate::view::In], &mut [crate::view::Out]) -> Result<(), String>,
    in_dims: &[&[usize]],
    data: &[&[f32]],
    out_dims: &[&[usize]],
) -> Vec<Vec<f32>> {
    use crate::view::{In, Out};
    let ins: Vec<In> = in_dims.iter().zip(data).map(|(d, x)| In { dtype: DType::F32, dims: d, bytes: bytemuck::cast_slice(x) }).collect();
    let mut res: Vec<Vec<f32>> = out_dims.iter().map(|d| vec![f32::NAN; d.iter().product()]).collect();
    let mut outs: Vec<Out> = res
        .iter_mut()
        .zip(out_dims)
        .map(|(r, d)| Out { dtype: DType::F32, dims: d, bytes: bytemuck::cast_slice_mut(r) })
        .collect();
    kernel(&ins, &mut outs).unwrap();
    drop(outs);
    res
}

/// Runs `$body` with `$T` an unsigned integer type as wide as one element of `$size` bytes.
macro_rules! by_size {
    ($size:expr, $T:ident => $body:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            n => unreachable!("no dtype has {n}-byte elements"),
        }
    };
}
pub(crate) use by_size;
