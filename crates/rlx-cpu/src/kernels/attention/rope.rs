//! Rotary position embeddings (OPS.md §7): `Rope`, its inverse `RopeBackward`, and SAM2's
//! `AxialRope2d`.
//!
//! `x` is sequence-major: `[B, S, H·D]`, `[B, S, H, D]` or `[S, H·D]`; each `(b, s)` row holds
//! every head's `D` channels. F16/BF16 go through F32; the tables may have any float dtype.

use super::{through_f32, values_f64};
use crate::kernels::real::{Real, Scalar};
use crate::kernels::{by_float, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;
use rlx_ir::ops::attention::{AxialRope2d, Rope, RopeBackward, RopeStyle};

/// Calls `f(r, x_row, y_row)` for every `width`-element row `r` of `x`/`y`, across threads
/// when large.
fn for_rows<T: Real>(x: &[T], y: &mut [T], width: usize, f: impl Fn(usize, &[T], &mut [T]) + Sync) {
    if width == 0 {
        return;
    }
    let per = (PAR_MIN / width).max(1);
    let chunk = |(ci, (ys, xs)): (usize, (&mut [T], &[T]))| {
        for (r, (yr, xr)) in ys.chunks_mut(width).zip(xs.chunks(width)).enumerate() {
            f(ci * per + r, xr, yr);
        }
    };
    if x.len() < PAR_MIN {
        y.chunks_mut(per * width).zip(x.chunks(per * width)).enumerate().for_each(chunk);
    } else {
        y.par_chunks_mut(per * width).zip(x.par_chunks(per * width)).enumerate().for_each(chunk);
    }
}

/// Rotates the pair `(a, b)` by the angle with cosine `c`, sine `s`.
fn rotate<T: Real>(a: T, b: T, c: T, s: T) -> (T, T) {
    (a * c - b * s, a * s + b * c)
}

/// Applies the rotation of one head's channels `x → y` (`y` has the head's width) for
/// `cos`/`sin` row entries `c[i]`, `s[i]`, `i < n_rot/2`; channels past `n_rot` are copied.
fn rotate_head<T: Real>(x: &[T], y: &mut [T], c: &[T], s: &[T], n_rot: usize, style: RopeStyle) {
    let h = n_rot / 2;
    for i in 0..h {
        let (a, b) = match style {
            RopeStyle::NeoX => (i, i + h),
            RopeStyle::GptJ => (2 * i, 2 * i + 1),
        };
        (y[a], y[b]) = rotate(x[a], x[b], c[i], s[i]);
    }
    y[n_rot..].copy_from_slice(&x[n_rot..]);
}

/// The rotation of `Rope` (`sign = 1`) or its inverse (`sign = −1`, sine negated).
fn rope_kernel<T: Real>(head_dim: usize, n_rot: usize, style: RopeStyle, sign: f64, ins: &[In], out: &mut Out) -> Result<(), String> {
    let dims = ins[0].dims;
    let (seq, width) = match *dims {
        [_, s, h, d] => (s, h * d),
        [_, s, w] => (s, w),
        [s, w] => (s, w),
        _ => unreachable!("inference admits ranks 2 to 4 only"),
    };
    let half = n_rot / 2;
    let table_row = |t: &In| if t.dims.len() == 1 { half } else { t.dims[t.dims.len() - 1] };
    let stride = table_row(&ins[1]);
    let cos: Vec<T> = values_f64(ins[1]).into_iter().map(T::of).collect();
    let sin: Vec<T> = values_f64(ins[2]).into_iter().map(|v| T::of(sign * v)).collect();
    if seq > 0 && (seq - 1) * stride + half > cos.len() {
        return Err(format!("the cos/sin tables {:?} have no row for position {} (x is {dims:?})", ins[1].dims, seq - 1));
    }
    if seq == 0 {
        return Ok(());
    }
    for_rows(ins[0].get::<T>(), out.get::<T>(), width, |r, xr, yr| {
        let s = r % seq;
        let (c, sn) = (&cos[s * stride..s * stride + half], &sin[s * stride..s * stride + half]);
        for (yh, xh) in yr.chunks_mut(head_dim).zip(xr.chunks(head_dim)) {
            rotate_head(xh, yh, c, sn, n_rot, style);
        }
    });
    Ok(())
}

/// `Rope(x, cos, sin)`: NeoX (rotate-half) or GptJ (interleaved) rotation of the first `n_rot`
/// channels of every head by row `s` of the tables (row stride: the last dim, or `n_rot/2` for
/// a rank-1 table); the remaining channels pass through. A table too short for the sequence
/// is an error naming the missing position.
pub fn rope(a: &Rope, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    through_f32(&ins[..1], outs, |x, outs| {
        let ins = [x[0], ins[1], ins[2]];
        by_float!(ins[0].dtype, T => rope_kernel::<T>(a.head_dim, a.n_rot, a.style, 1.0, &ins, &mut outs[0])?)
    })
}

/// `RopeBackward(ȳ, cos, sin)`: the inverse rotation (sine negated) of `ȳ`.
pub fn rope_backward(a: &RopeBackward, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    through_f32(&ins[..1], outs, |x, outs| {
        let ins = [x[0], ins[1], ins[2]];
        by_float!(ins[0].dtype, T => rope_kernel::<T>(a.head_dim, a.n_rot, a.style, -1.0, &ins, &mut outs[0])?)
    })
}

/// `AxialRope2d(x [B, S, H·D])`: token `t` at grid cell `p = t mod (end_x·end_y)`; channel
/// pairs `(2c, 2c+1)` of `[0, D/2)` rotate by `(p mod end_x)·f_c`, those of `[D/2, D)` by
/// `⌊p/end_x⌋·f_c`, `f_c = theta^(−4c/D)`. Angles are computed in f64.
pub fn axial_rope_2d(a: &AxialRope2d, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    through_f32(ins, outs, |ins, outs| {
        by_float!(ins[0].dtype, T => {
            let (d, q) = (a.head_dim, a.head_dim / 4);
            let seq = ins[0].dims[1];
            let grid = a.end_x * a.end_y;
            // Per token: cos/sin of the x angles then the y angles, `2·q` each.
            let table: Vec<(T, T)> = (0..seq)
                .flat_map(|t| {
                    let p = t % grid;
                    let (tx, ty) = ((p % a.end_x) as f64, (p / a.end_x) as f64);
                    (0..2 * q).map(move |i| {
                        let (pos, c) = if i < q { (tx, i) } else { (ty, i - q) };
                        let angle = pos * (a.theta as f64).powf(-4.0 * c as f64 / d as f64);
                        (T::of(angle.cos()), T::of(angle.sin()))
                    })
                })
                .collect();
            for_rows(ins[0].get::<T>(), outs[0].get::<T>(), a.num_heads * d, |r, xr, yr| {
                let angles = &table[(r % seq) * 2 * q..(r % seq + 1) * 2 * q];
                for (yh, xh) in yr.chunks_mut(d).zip(xr.chunks(d)) {
                    for (pair, &(c, s)) in angles.iter().enumerate() {
                        (yh[2 * pair], yh[2 * pair + 1]) = rotate(xh[2 * pair], xh[2 * pair + 1], c, s);
                    }
                }
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    #[test]
    fn a_table_shorter_than_the_sequence_is_an_error() {
        // A symbolic sequence bound to 3 positions, but the tables hold only 2 rows.
        let x = [0f32; 3 * 4];
        let t = [1f32; 2 * 2];
        let (xd, td) = ([3usize, 4], [2usize, 2]);
        let ins = [
            In { dtype: DType::F32, dims: &xd, bytes: bytemuck::cast_slice(&x) },
            In { dtype: DType::F32, dims: &td, bytes: bytemuck::cast_slice(&t) },
            In { dtype: DType::F32, dims: &td, bytes: bytemuck::cast_slice(&t) },
        ];
        let mut y = [0f32; 12];
        let mut outs = [Out { dtype: DType::F32, dims: &xd, bytes: bytemuck::cast_slice_mut(&mut y) }];
        let e = rope(&Rope { head_dim: 4, n_rot: 4, style: RopeStyle::NeoX }, &ins, &mut outs).unwrap_err();
        assert!(e.contains("no row for position 2"), "{e}");
    }
}
