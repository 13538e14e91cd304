//! Kernel operands: dtype, concrete dims and the bytes of one tensor.
//!
//! Data is always aligned for its dtype (the arena aligns every buffer to 64 bytes), so
//! typed access is a checked cast. Inputs and outputs of one kernel never overlap.

use bytemuck::Pod;
use rlx_ir::DType;

/// A read-only kernel operand.
#[derive(Clone, Copy)]
pub struct In<'a> {
    pub dtype: DType,
    pub dims: &'a [usize],
    pub bytes: &'a [u8],
}

/// A kernel result to fill.
pub struct Out<'a> {
    pub dtype: DType,
    pub dims: &'a [usize],
    pub bytes: &'a mut [u8],
}

impl<'a> In<'a> {
    /// The elements as `T` (the caller matched the dtype).
    pub fn get<T: Pod>(&self) -> &'a [T] {
        bytemuck::cast_slice(self.bytes)
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

impl Out<'_> {
    pub fn get<T: Pod>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.bytes)
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// This output read as an input (for kernels composed of steps).
    pub fn as_in(&self) -> In<'_> {
        In { dtype: self.dtype, dims: self.dims, bytes: self.bytes }
    }
}

/// Row-major strides of `dims`, in elements.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Strides that read an operand of `dims` broadcast to `out` (right-aligned, 0 where
/// the operand has extent 1 or lacks the axis).
pub fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(dims);
    let lead = out.len() - dims.len();
    (0..out.len())
        .map(|i| if i < lead || dims[i - lead] == 1 { 0 } else { own[i - lead] })
        .collect()
}

/// For every output element in row-major order, calls `f(out_index, [offsets of each operand])`
/// with operands read through `operand_strides` (from [`broadcast_strides`]).
pub fn for_each_broadcast<const N: usize>(out: &[usize], operand_strides: [&[usize]; N], mut f: impl FnMut(usize, [usize; N])) {
    let total: usize = out.iter().product();
    if total == 0 {
        return;
    }
    let rank = out.len();
    let mut idx = vec![0usize; rank];
    let mut off = [0usize; N];
    for o in 0..total {
        f(o, off);
        for ax in (0..rank).rev() {
            idx[ax] += 1;
            for k in 0..N {
                off[k] += operand_strides[k][ax];
            }
            if idx[ax] < out[ax] {
                break;
            }
            for k in 0..N {
                off[k] -= operand_strides[k][ax] * out[ax];
            }
            idx[ax] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_walk_matches_numpy_indexing() {
        let out = [2, 3, 4];
        let a = broadcast_strides(&[3, 1], &out);
        let b = broadcast_strides(&[2, 1, 4], &out);
        let mut seen = Vec::new();
        for_each_broadcast(&out, [&a, &b], |o, [ia, ib]| seen.push((o, ia, ib)));
        assert_eq!(seen.len(), 24);
        for (o, ia, ib) in seen {
            let (i, j, k) = (o / 12, (o / 4) % 3, o % 4);
            assert_eq!(ia, j);
            assert_eq!(ib, i * 4 + k);
        }
    }
}
