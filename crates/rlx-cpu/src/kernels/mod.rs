//! CPU kernels by op family. A kernel is a function over [`In`](crate::view::In) operands
//! and [`Out`](crate::view::Out) results with its contract in the doc comment.

pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod matmul;
pub mod index;
pub mod shape;
pub mod norm;
pub mod real;
// reduce
pub mod reduce;
// softmax
pub mod softmax;
// random
pub mod random;

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
