//! `FusedSwiGLU`: `silu(gate)·up` over the two halves of the last axis.

use super::Scratch;
use crate::kernels::elementwise::{activation, binary, cast, silu};
use crate::kernels::PAR_MIN;
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::DType;

/// Output rows one task takes.
const ROWS_PER_TASK: usize = 32;

/// `x [.., 2N]` → `out [.., N]`: `up` is the first half of each row and `gate` the second
/// (swapped when `gate_first`); `out` has its declared dtype (`cast_to`, else x's). An f32 row
/// is read once and written once.
pub fn swiglu(gate_first: bool, x: In, out: &mut Out) -> Result<(), String> {
    let n = *out.dims.last().ok_or("the output needs a feature axis")?;
    if n == 0 {
        return Ok(());
    }
    if x.dtype != DType::F32 || out.dtype != DType::F32 {
        return unfused(gate_first, n, x, out);
    }
    let xs = x.get::<f32>();
    let y = out.get::<f32>();
    let rows = |(xr, yr): (&[f32], &mut [f32])| {
        for (xr, yr) in xr.chunks_exact(2 * n).zip(yr.chunks_exact_mut(n)) {
            let (first, second) = xr.split_at(n);
            let (gate, up) = if gate_first { (first, second) } else { (second, first) };
            silu(gate, yr);
            yr.iter_mut().zip(up).for_each(|(y, &u)| *y *= u);
        }
    };
    if y.len() < PAR_MIN {
        rows((xs, y));
    } else {
        xs.par_chunks(ROWS_PER_TASK * 2 * n).zip(y.par_chunks_mut(ROWS_PER_TASK * n)).for_each(rows);
    }
    Ok(())
}

/// The halves copied out, then the `Activation`, `Mul` and `Cast` kernels.
fn unfused(gate_first: bool, n: usize, x: In, out: &mut Out) -> Result<(), String> {
    let size = x.dtype.size();
    let mut half_dims = x.dims.to_vec();
    *half_dims.last_mut().ok_or("x needs a feature axis")? = n;
    let (mut gate, mut up) = (Scratch::new(x.dtype, &half_dims), Scratch::new(x.dtype, &half_dims));
    let row = n * size;
    for ((xr, g), u) in x.bytes.chunks_exact(2 * row).zip(gate.bytes.chunks_exact_mut(row)).zip(up.bytes.chunks_exact_mut(row)) {
        let (first, second) = xr.split_at(row);
        let (gs, us) = if gate_first { (first, second) } else { (second, first) };
        g.copy_from_slice(gs);
        u.copy_from_slice(us);
    }
    let mut silu = Scratch::new(x.dtype, &half_dims);
    activation(ActivationKind::Silu, gate.as_in(), &mut silu.as_out())?;
    if out.dtype == x.dtype {
        return binary(BinaryOp::Mul, silu.as_in(), up.as_in(), out);
    }
    let mut product = Scratch::new(x.dtype, &half_dims);
    binary(BinaryOp::Mul, silu.as_in(), up.as_in(), &mut product.as_out())?;
    cast(product.as_in(), out)
}
