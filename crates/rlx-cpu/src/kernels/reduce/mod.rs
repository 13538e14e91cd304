//! Reductions, scans, arg-extrema, top-k and sorting (OPS.md §8; `CumsumBackward` §22).
//!
//! Every dtype the IR accepts runs here: halves accumulate in f32, integers wrap in their
//! own type, Bool reduces as any/all, C64 sums and multiplies. Max/Min propagate NaN.

pub mod elem;
mod scan;
mod sort;

pub use scan::{arg_max, arg_min, cum_max, cum_prod, cumsum, cumsum_backward};
pub use sort::{arg_sort, sort, top_k};

use super::PAR_MIN;
use crate::view::{strides, In, Out};
use elem::{by_dtype, Acc, Elem, OrdAcc};
use rayon::prelude::*;
use rlx_ir::ops::reduce::ReduceOp;

/// How a reduction walks memory, after dropping unit axes and merging neighbouring axes
/// that are both reduced or both kept.
#[derive(Debug, PartialEq)]
enum Walk {
    /// At most one reduced run: `x` is `[outer, r, inner]` and the output `[outer, inner]`.
    /// `inner == 1` is the common last-axis case, whose reduced elements are contiguous.
    Block { outer: usize, r: usize, inner: usize },
    /// Several reduced runs: the kept axes (extents, input strides) that the output walks in
    /// order, and the offsets of the reduced elements of one output from its first one.
    General { kept: Vec<(usize, usize)>, offsets: Vec<usize> },
}

fn walk(dims: &[usize], axes: &[usize]) -> Walk {
    let st = strides(dims);
    // (extent, stride of the last axis merged, reduced)
    let mut runs: Vec<(usize, usize, bool)> = Vec::new();
    for (i, (&d, &s)) in dims.iter().zip(&st).enumerate() {
        if d == 1 {
            continue;
        }
        let red = axes.contains(&i);
        match runs.last_mut() {
            Some(last) if last.2 == red => {
                last.0 *= d;
                last.1 = s;
            }
            _ => runs.push((d, s, red)),
        }
    }
    let reduced: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].2).collect();
    if reduced.len() <= 1 {
        let split = reduced.first().copied().unwrap_or(runs.len());
        let outer = runs[..split].iter().map(|r| r.0).product();
        let r = reduced.first().map_or(1, |&i| runs[i].0);
        let inner = runs[(split + 1).min(runs.len())..].iter().map(|r| r.0).product();
        return Walk::Block { outer, r, inner };
    }
    let kept = runs.iter().filter(|r| !r.2).map(|r| (r.0, r.1)).collect();
    let mut offsets = vec![0usize];
    for &(d, s, red) in &runs {
        if red {
            offsets = offsets.iter().flat_map(|&o| (0..d).map(move |k| o + k * s)).collect();
        }
    }
    Walk::General { kept, offsets }
}

/// Folds a contiguous run with `f` from `id`: eight interleaved accumulators (so the loop
/// vectorizes) and pairwise halving above 2048 elements (so f32 sums stay accurate).
fn fold<E: Elem>(xs: &[E], id: E::Acc, f: &(impl Fn(E::Acc, E::Acc) -> E::Acc + Sync)) -> E::Acc {
    if xs.len() > 2048 {
        let mid = (xs.len() / 2) & !7;
        return f(fold(&xs[..mid], id, f), fold(&xs[mid..], id, f));
    }
    let mut lanes = [id; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for i in 0..8 {
            lanes[i] = f(lanes[i], c[i].load());
        }
    }
    let mut acc = f(f(f(lanes[0], lanes[1]), f(lanes[2], lanes[3])), f(f(lanes[4], lanes[5]), f(lanes[6], lanes[7])));
    for &v in chunks.remainder() {
        acc = f(acc, v.load());
    }
    acc
}

/// Rows per partial accumulator in the strided walks (bounds f32 rounding growth).
const BLOCK: usize = 256;

/// The accumulators of columns `col0..col0 + n` of block `o` of a `[outer, r, inner]`
/// reduction, over the reduced rows `rows`.
fn block_acc<E: Elem>(
    x: &[E],
    (o, r, inner): (usize, usize, usize),
    rows: std::ops::Range<usize>,
    (col0, n): (usize, usize),
    id: E::Acc,
    f: &(impl Fn(E::Acc, E::Acc) -> E::Acc + Sync),
) -> Vec<E::Acc> {
    let mut total = vec![id; n];
    let mut part = vec![id; n];
    for b in rows.clone().step_by(BLOCK) {
        part.iter_mut().for_each(|p| *p = id);
        for j in b..(b + BLOCK).min(rows.end) {
            let row = &x[(o * r + j) * inner + col0..][..n];
            for (p, &v) in part.iter_mut().zip(row) {
                *p = f(*p, v.load());
            }
        }
        for (t, &p) in total.iter_mut().zip(&part) {
            *t = f(*t, p);
        }
    }
    total
}

/// Reduces `x` of `dims` over `axes` into `out` with identity `id`, combiner `f` and final
/// map `fin` (which also gives the value of an empty reduction, `fin(id)`).
fn run<E: Elem>(
    x: &[E],
    dims: &[usize],
    axes: &[usize],
    out: &mut [E],
    id: E::Acc,
    f: impl Fn(E::Acc, E::Acc) -> E::Acc + Sync,
    fin: impl Fn(E::Acc) -> E + Sync,
) {
    if out.is_empty() {
        return;
    }
    if x.is_empty() {
        out.iter_mut().for_each(|y| *y = fin(id));
        return;
    }
    let big = x.len() >= PAR_MIN;
    match walk(dims, axes) {
        Walk::Block { outer, r, inner: 1 } => {
            let row = |(o, y): (usize, &mut E)| *y = fin(fold(&x[o * r..(o + 1) * r], id, &f));
            if !big {
                out.iter_mut().enumerate().for_each(row);
            } else if outer >= 16 {
                out.par_iter_mut().enumerate().for_each(row);
            } else {
                // A few long rows: split each row across threads.
                for (o, y) in out.iter_mut().enumerate() {
                    let parts: Vec<E::Acc> = x[o * r..(o + 1) * r].par_chunks(PAR_MIN / 4).map(|c| fold(c, id, &f)).collect();
                    *y = fin(parts.into_iter().fold(id, &f));
                }
            }
        }
        Walk::Block { outer, r, inner } => {
            let whole = |o: usize, y: &mut [E]| {
                let acc = block_acc(x, (o, r, inner), 0..r, (0, inner), id, &f);
                y.iter_mut().zip(acc).for_each(|(y, a)| *y = fin(a));
            };
            let threads = rayon::current_num_threads().max(1);
            if !big {
                out.chunks_mut(inner).enumerate().for_each(|(o, y)| whole(o, y));
            } else if outer >= 16 {
                out.par_chunks_mut(inner).enumerate().for_each(|(o, y)| whole(o, y));
            } else if inner >= 1024 {
                // Few wide blocks: split the columns.
                let cols = (inner / threads).max(256);
                for (o, y) in out.chunks_mut(inner).enumerate() {
                    y.par_chunks_mut(cols).enumerate().for_each(|(c, y)| {
                        let acc = block_acc(x, (o, r, inner), 0..r, (c * cols, y.len()), id, &f);
                        y.iter_mut().zip(acc).for_each(|(y, a)| *y = fin(a));
                    });
                }
            } else {
                // Few narrow blocks of many rows: split the reduced rows, combine the partials.
                let rows = r.div_ceil(4 * threads).next_multiple_of(BLOCK);
                for (o, y) in out.chunks_mut(inner).enumerate() {
                    let parts: Vec<Vec<E::Acc>> = (0..r.div_ceil(rows))
                        .into_par_iter()
                        .map(|k| block_acc(x, (o, r, inner), k * rows..((k + 1) * rows).min(r), (0, inner), id, &f))
                        .collect();
                    let mut acc = vec![id; inner];
                    for p in parts {
                        acc.iter_mut().zip(p).for_each(|(a, p)| *a = f(*a, p));
                    }
                    y.iter_mut().zip(acc).for_each(|(y, a)| *y = fin(a));
                }
            }
        }
        Walk::General { kept, offsets } => {
            let one = |i: usize, y: &mut E| {
                let (mut base, mut rest) = (0, i);
                for &(d, s) in kept.iter().rev() {
                    base += (rest % d) * s;
                    rest /= d;
                }
                let mut total = id;
                for blk in offsets.chunks(BLOCK) {
                    total = f(total, blk.iter().fold(id, |a, &k| f(a, x[base + k].load())));
                }
                *y = fin(total);
            };
            if big {
                out.par_iter_mut().enumerate().for_each(|(i, y)| one(i, y));
            } else {
                out.iter_mut().enumerate().for_each(|(i, y)| one(i, y));
            }
        }
    }
}

/// Sum, Mean and Prod, for any element type.
fn arith<E: Elem>(op: ReduceOp, axes: &[usize], x: In, out: &mut Out) -> Result<(), String> {
    let count: usize = axes.iter().map(|&a| x.dims[a]).product();
    let (xs, dims, ys) = (x.get::<E>(), x.dims, out.get::<E>());
    match op {
        ReduceOp::Sum => run(xs, dims, axes, ys, E::Acc::ZERO, E::Acc::add, E::store),
        ReduceOp::Mean => run(xs, dims, axes, ys, E::Acc::ZERO, E::Acc::add, move |a: E::Acc| E::store(a.div_count(count))),
        ReduceOp::Prod => run(xs, dims, axes, ys, E::Acc::ONE, E::Acc::mul, E::store),
        ReduceOp::Max | ReduceOp::Min => return Err(format!("{op:?} needs ordered values, not {}", x.dtype)),
    }
    Ok(())
}

/// Every op, for ordered element types.
fn ordered<E: Elem>(op: ReduceOp, axes: &[usize], x: In, out: &mut Out) -> Result<(), String>
where
    E::Acc: OrdAcc,
{
    let (xs, dims, ys) = (x.get::<E>(), x.dims, out.get::<E>());
    match op {
        ReduceOp::Max => run(xs, dims, axes, ys, E::Acc::LOWEST, OrdAcc::max, E::store),
        ReduceOp::Min => run(xs, dims, axes, ys, E::Acc::HIGHEST, OrdAcc::min, E::store),
        _ => return arith::<E>(op, axes, x, out),
    }
    Ok(())
}

/// `Reduce{op, axes}`: `x` of any dtype (C64 only for Sum/Mean/Prod), row-major; `out` has
/// `x`'s dtype and the kept axes in order (`keep_dim` changes no byte). Empty reductions give
/// 0, NaN (Mean), −inf / the integer minimum / false (Max), +inf / maximum / true (Min), 1.
/// Sums accumulate pairwise in f32 for f32 and halves, f64 for f64; Max/Min propagate NaN.
pub fn reduce(op: ReduceOp, axes: &[usize], x: In, out: &mut Out) -> Result<(), String> {
    by_dtype!(x.dtype, E => ordered::<E>(op, axes, x, out), C64 => arith::<num_complex::Complex32>(op, axes, x, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::DType;

    fn reduce_f32(op: ReduceOp, x: &[f32], dims: &[usize], axes: &[usize]) -> Vec<f32> {
        let n: usize = dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d).product();
        let out_dims: Vec<usize> = dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
        let mut y = vec![0f32; n];
        let xb = bytemuck::cast_slice(x);
        let mut o = Out { dtype: DType::F32, dims: &out_dims, bytes: bytemuck::cast_slice_mut(&mut y) };
        reduce(op, axes, In { dtype: DType::F32, dims, bytes: xb }, &mut o).unwrap();
        y
    }

    /// The plain definition: for every output index, fold its elements in order.
    fn naive(op: ReduceOp, x: &[f32], dims: &[usize], axes: &[usize]) -> Vec<f32> {
        let st = strides(dims);
        let kept: Vec<usize> = (0..dims.len()).filter(|i| !axes.contains(i)).collect();
        let n: usize = kept.iter().map(|&i| dims[i]).product();
        let mut out = vec![Vec::new(); n];
        for (flat, &v) in x.iter().enumerate() {
            let mut o = 0;
            for &k in &kept {
                o = o * dims[k] + (flat / st[k]) % dims[k];
            }
            out[o].push(v as f64);
        }
        out.iter()
            .map(|vs| {
                (match op {
                    ReduceOp::Sum => vs.iter().sum::<f64>(),
                    ReduceOp::Mean => vs.iter().sum::<f64>() / vs.len() as f64,
                    ReduceOp::Prod => vs.iter().product(),
                    ReduceOp::Max => vs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOp::Min => vs.iter().copied().fold(f64::INFINITY, f64::min),
                }) as f32
            })
            .collect()
    }

    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect()
    }

    #[test]
    fn walks_merge_and_classify_axes() {
        assert_eq!(walk(&[2, 3, 4], &[2]), Walk::Block { outer: 6, r: 4, inner: 1 });
        assert_eq!(walk(&[2, 3, 4], &[1, 2]), Walk::Block { outer: 2, r: 12, inner: 1 });
        assert_eq!(walk(&[2, 3, 4], &[1]), Walk::Block { outer: 2, r: 3, inner: 4 });
        assert_eq!(walk(&[2, 1, 4], &[0, 1]), Walk::Block { outer: 1, r: 2, inner: 4 });
        assert_eq!(walk(&[2, 3], &[]), Walk::Block { outer: 6, r: 1, inner: 1 });
        assert_eq!(walk(&[2, 3, 4], &[0, 2]), Walk::General { kept: vec![(3, 4)], offsets: vec![0, 1, 2, 3, 12, 13, 14, 15] });
    }

    #[test]
    fn every_axis_set_matches_the_definition() {
        let dims = [3, 5, 2, 7];
        let x = data(210);
        for mask in 0..16u32 {
            let axes: Vec<usize> = (0..4).filter(|i| mask & (1 << i) != 0).collect();
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
                let got = reduce_f32(op, &x, &dims, &axes);
                let want = naive(op, &x, &dims, &axes);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{op:?} {axes:?}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn large_reductions_split_across_threads_and_stay_accurate() {
        let n = 1 << 20;
        let x: Vec<f32> = (0..n).map(|i| 0.1 + (i % 7) as f32 * 1e-3).collect();
        let want: f64 = x.iter().map(|&v| v as f64).sum();
        let got = reduce_f32(ReduceOp::Sum, &x, &[n], &[0])[0] as f64;
        assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
        let cols = reduce_f32(ReduceOp::Sum, &x, &[1024, 1024], &[0]);
        let rows = reduce_f32(ReduceOp::Max, &x, &[1024, 1024], &[1]);
        assert_eq!(cols.len(), 1024);
        assert!((cols[3] as f64 - (0..1024).map(|i| x[i * 1024 + 3] as f64).sum::<f64>()).abs() < 1e-3);
        assert_eq!(rows[5], x[5 * 1024..6 * 1024].iter().copied().fold(f32::MIN, f32::max));
        // Every threaded strided path against the definition: many blocks, few wide blocks,
        // few narrow blocks of many rows.
        for (dims, axes) in [([64, 128, 128], [1]), ([2, 64, 8192], [1]), ([3, 40000, 3], [1]), ([1, 99999, 7], [1])] {
            let n: usize = dims.iter().product();
            let xs: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1013) as f32 / 1013.0 - 0.5).collect();
            for op in [ReduceOp::Sum, ReduceOp::Max] {
                let got = reduce_f32(op, &xs, &dims, &axes);
                let want = naive(op, &xs, &dims, &axes);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{op:?} {dims:?}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn nan_propagates_and_empty_gives_identities() {
        let x = [1.0, f32::NAN, 3.0, 0.5, 2.0, -1.0];
        assert!(reduce_f32(ReduceOp::Max, &x, &[2, 3], &[1])[0].is_nan());
        assert_eq!(reduce_f32(ReduceOp::Min, &x, &[2, 3], &[1])[1], -1.0);
        assert!(reduce_f32(ReduceOp::Min, &x, &[6], &[0])[0].is_nan());
        let e = reduce_f32(ReduceOp::Max, &[], &[0, 2], &[0]);
        assert_eq!(e, [f32::NEG_INFINITY; 2]);
        assert_eq!(reduce_f32(ReduceOp::Min, &[], &[2, 0], &[1]), [f32::INFINITY; 2]);
        assert_eq!(reduce_f32(ReduceOp::Prod, &[], &[0], &[0]), [1.0]);
        assert_eq!(reduce_f32(ReduceOp::Sum, &[], &[0], &[0]), [0.0]);
        assert!(reduce_f32(ReduceOp::Mean, &[], &[0], &[0])[0].is_nan());
    }

    #[test]
    fn integers_wrap_bools_are_any_all_and_halves_accumulate_in_f32() {
        let x: [i8; 4] = [100, 100, -1, 7];
        let mut y = [0i8; 2];
        let mut o = Out { dtype: DType::I8, dims: &[2], bytes: bytemuck::cast_slice_mut(&mut y) };
        reduce(ReduceOp::Sum, &[1], In { dtype: DType::I8, dims: &[2, 2], bytes: bytemuck::cast_slice(&x) }, &mut o).unwrap();
        assert_eq!(y, [-56, 6]);
        let mut y = [0i8; 1];
        let mut o = Out { dtype: DType::I8, dims: &[], bytes: bytemuck::cast_slice_mut(&mut y) };
        reduce(ReduceOp::Max, &[0], In { dtype: DType::I8, dims: &[0], bytes: &[] }, &mut o).unwrap();
        assert_eq!(y, [i8::MIN]);

        let b = [0u8, 2, 0, 0];
        let mut y = [9u8; 2];
        let mut o = Out { dtype: DType::Bool, dims: &[2], bytes: &mut y };
        reduce(ReduceOp::Max, &[1], In { dtype: DType::Bool, dims: &[2, 2], bytes: &b }, &mut o).unwrap();
        assert_eq!(y, [1, 0]);

        // 4096 halves of 1.0: an f16 accumulator would stall at 2048.
        let h = vec![half::f16::from_f32(1.0); 4096];
        let mut y = [half::f16::ZERO];
        let mut o = Out { dtype: DType::F16, dims: &[], bytes: bytemuck::cast_slice_mut(&mut y) };
        reduce(ReduceOp::Sum, &[0], In { dtype: DType::F16, dims: &[4096], bytes: bytemuck::cast_slice(&h) }, &mut o).unwrap();
        assert_eq!(y[0].to_f32(), 4096.0);
    }
}
