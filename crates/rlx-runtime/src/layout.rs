//! Strided layouts as the device backends index them: row-major and broadcast strides, the
//! merge of an iteration space's dims that every operand steps through contiguously, and the
//! data-movement ops as strided copies ([`moves`]). Strides and bases count elements.

use rlx_ir::Op;

/// Row-major element strides of `dims`.
pub fn contiguous(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; dims.len()];
    let mut acc = 1i64;
    for d in (0..dims.len()).rev() {
        s[d] = acc;
        acc *= dims[d] as i64;
    }
    s
}

/// Strides reading a tensor of `dims` broadcast to `to` (NumPy rules, aligned on the right;
/// 0 where it repeats).
pub fn broadcast(dims: &[usize], to: &[usize]) -> Vec<i64> {
    let own = contiguous(dims);
    let shift = to.len() - dims.len().min(to.len());
    (0..to.len())
        .map(|a| match a.checked_sub(shift) {
            Some(k) if dims[k] != 1 => own[k],
            _ => 0,
        })
        .collect()
}

/// The dims of an iteration space over `dims` that a kernel must walk, each with every
/// operand's stride (`strides[o][d]` for operand `o`): dims of extent 1 dropped and
/// neighbours that every operand steps through contiguously merged into one, outermost first.
pub fn merge_dims(dims: &[usize], strides: &[Vec<i64>]) -> Vec<(i64, Vec<i64>)> {
    let mut kept: Vec<(i64, Vec<i64>)> = Vec::new();
    for (d, &extent) in dims.iter().enumerate() {
        if extent == 1 {
            continue;
        }
        let s: Vec<i64> = strides.iter().map(|st| st[d]).collect();
        match kept.last_mut() {
            Some((prev, ps)) if ps.iter().zip(&s).all(|(p, q)| *p == q * extent as i64) => {
                *prev *= extent as i64;
                *ps = s;
            }
            _ => kept.push((extent as i64, s)),
        }
    }
    kept
}

/// One strided copy: the elements of the iteration space `dims`, element `i` read from input
/// `input` at `bases[0] + Σ i_d·strides[0][d]` and written to the output at `bases[1] + Σ
/// i_d·strides[1][d]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub input: usize,
    pub dims: Vec<usize>,
    pub strides: [Vec<i64>; 2],
    pub bases: [i64; 2],
}

/// `Transpose`, `Expand`, `Narrow`, `Slice`, `Reverse` (one copy) and `Concat` (one per input)
/// from inputs of dims `ins` into an output of dims `out`, as strided copies; `None` for
/// other ops.
pub fn moves(op: &Op, ins: &[&[usize]], out: &[usize]) -> Option<Vec<Move>> {
    let whole = |input: usize, read: Vec<i64>, base: i64| vec![Move { input, dims: out.to_vec(), strides: [read, contiguous(out)], bases: [base, 0] }];
    let own = || contiguous(ins[0]);
    Some(match op {
        Op::Transpose(t) => {
            let own = own();
            whole(0, t.perm.iter().map(|&p| own[p]).collect(), 0)
        }
        Op::Expand(_) => whole(0, broadcast(ins[0], out), 0),
        Op::Narrow(n) => {
            let own = own();
            let base = n.start as i64 * own[n.axis];
            whole(0, own, base)
        }
        Op::Slice(s) => {
            let mut own = own();
            let base = s.start as i64 * own[s.axis];
            own[s.axis] *= s.step;
            whole(0, own, base)
        }
        Op::Reverse(r) => {
            let mut own = own();
            let mut base = 0;
            for &a in &r.axes {
                base += (ins[0][a] as i64 - 1) * own[a];
                own[a] = -own[a];
            }
            whole(0, own, base)
        }
        Op::Concat(c) => {
            let all = contiguous(out);
            let mut at = 0;
            ins.iter()
                .enumerate()
                .map(|(i, dims)| {
                    let m = Move { input: i, dims: dims.to_vec(), strides: [contiguous(dims), all.clone()], bases: [0, at as i64 * all[c.axis]] };
                    at += dims[c.axis];
                    m
                })
                .collect()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::shape::{Concat, Reverse, Transpose};

    /// Runs `moves` over `ins` (each the values `100·input + index`) into a vector of `out`'s size.
    fn apply(op: &Op, ins: &[&[usize]], out: &[usize]) -> Vec<i64> {
        let mut y = vec![-1i64; out.iter().product()];
        for m in moves(op, ins, out).unwrap() {
            let n: usize = m.dims.iter().product();
            for e in 0..n {
                let (mut rest, mut r, mut w) = (e, m.bases[0], m.bases[1]);
                for d in (0..m.dims.len()).rev() {
                    let i = (rest % m.dims[d]) as i64;
                    rest /= m.dims[d];
                    r += i * m.strides[0][d];
                    w += i * m.strides[1][d];
                }
                y[w as usize] = 100 * m.input as i64 + r;
            }
        }
        y
    }

    #[test]
    fn moves_read_and_write_where_the_ops_say() {
        let t = Op::Transpose(Transpose { perm: vec![1, 0] });
        assert_eq!(apply(&t, &[&[2, 3]], &[3, 2]), [0, 3, 1, 4, 2, 5]);
        let r = Op::Reverse(Reverse { axes: vec![1] });
        assert_eq!(apply(&r, &[&[2, 3]], &[2, 3]), [2, 1, 0, 5, 4, 3]);
        let c = Op::Concat(Concat { axis: 1 });
        assert_eq!(apply(&c, &[&[2, 1], &[2, 2]], &[2, 3]), [0, 100, 101, 1, 102, 103]);
    }

    #[test]
    fn contiguous_neighbours_merge_and_unit_dims_drop() {
        let dims = [2, 1, 3, 4];
        let kept = merge_dims(&dims, &[contiguous(&dims), broadcast(&[3, 4], &dims)]);
        assert_eq!(kept, vec![(2, vec![12, 0]), (12, vec![1, 1])]);
        assert_eq!(broadcast(&[3, 1], &[2, 3, 4]), [0, 1, 0]);
    }
}
