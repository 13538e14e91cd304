//! Decompositions of the reduce family (OPS.md §8): arg-extrema through `Reduce` + `Where`
//! over an iota, the scans through a triangular `MatMul` (sums) or a masked `[.., L, L, ..]`
//! `Reduce` (products and maxima), and top-k / sort through `ArgSort` + `GatherElements`
//! (OPS.md gives `ArgSort` no decomposition; a backend that lowers these claims it).
//! `Reduce` itself is primitive.

use rlx_ir::ops::elementwise::CmpOp;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{norm_axis, DType, Dim, Graph, IrError, Op, OpKind, Shape, TensorType, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::ArgMax,
    OpKind::ArgMin,
    OpKind::Cumsum,
    OpKind::CumProd,
    OpKind::CumMax,
    OpKind::CumsumBackward,
    OpKind::TopK,
    OpKind::Sort,
];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let one = |v: Result<ValueId, IrError>| Some(v.map(|v| vec![v]));
    match op {
        Op::ArgMax(a) => one(arg_extreme(g, x[0], a.axis, a.keep_dim, ReduceOp::Max)),
        Op::ArgMin(a) => one(arg_extreme(g, x[0], a.axis, a.keep_dim, ReduceOp::Min)),
        Op::Cumsum(a) => one(triangular_sum(g, x[0], a.axis, a.exclusive, false)),
        Op::CumsumBackward(a) => one(triangular_sum(g, x[0], a.axis, a.exclusive, true)),
        Op::CumProd(a) => one(masked_scan(g, x[0], a.axis, a.exclusive, ReduceOp::Prod)),
        Op::CumMax(a) => one(masked_scan(g, x[0], a.axis, a.exclusive, ReduceOp::Max)),
        Op::Sort(a) => one(sort(g, x[0], a.axis, a.descending)),
        Op::TopK(a) => Some(top_k(g, x[0], a.k)),
        _ => None,
    }
}

fn invalid(msg: String) -> IrError {
    IrError::Invalid(msg)
}

/// A constant of `dtype` and `dims` holding `values` (row-major). Values convert with Rust
/// `as` (so ±inf saturate to an integer type's bounds), Bool is `v > 0`, C64 has `im = 0`;
/// halves and the narrow types are written as f32 and cast.
pub(super) fn constant(g: &mut Graph, dtype: DType, dims: &[usize], values: &[f64]) -> Result<ValueId, IrError> {
    let bytes: Vec<u8> = match dtype {
        DType::F16
        | DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => {
            let c = constant(g, DType::F32, dims, values)?;
            return g.cast(c, dtype);
        }
        DType::F32 => values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
        DType::F64 => values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        DType::I8 => values.iter().flat_map(|&v| (v as i8).to_le_bytes()).collect(),
        DType::U8 => values.iter().flat_map(|&v| (v as u8).to_le_bytes()).collect(),
        DType::I16 => values.iter().flat_map(|&v| (v as i16).to_le_bytes()).collect(),
        DType::I32 => values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        DType::I64 => values.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect(),
        DType::U32 => values.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
        DType::U16 => values.iter().flat_map(|&v| (v as u16).to_le_bytes()).collect(),
        DType::U64 => values.iter().flat_map(|&v| (v as u64).to_le_bytes()).collect(),
        DType::Bool => values.iter().map(|&v| (v > 0.0) as u8).collect(),
        DType::C64 => values.iter().flat_map(|&v| [(v as f32).to_le_bytes(), 0f32.to_le_bytes()].concat()).collect(),
    };
    g.constant(TensorType::of(dtype, dims), bytes)
}

/// A rank-0 constant.
pub(super) fn scalar(g: &mut Graph, dtype: DType, v: f64) -> Result<ValueId, IrError> {
    constant(g, dtype, &[], &[v])
}

/// The static extent of `axis` of `v`, which the rule needs.
pub(super) fn static_dim(g: &Graph, v: ValueId, axis: usize, what: &str) -> Result<usize, IrError> {
    g.ty(v).static_dim(axis).map_err(|e| invalid(format!("{what}: {e}")))
}

/// `0, 1, …, n−1` as I64 along the first of `1 + trailing` axes (so it broadcasts against a
/// tensor whose axis of extent `n` has `trailing` axes after it).
pub(super) fn iota(g: &mut Graph, n: usize, trailing: usize) -> Result<ValueId, IrError> {
    let mut dims = vec![n];
    dims.extend(std::iter::repeat_n(1, trailing));
    constant(g, DType::I64, &dims, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

/// `x` with a unit axis inserted at `at`.
pub(super) fn unsqueeze(g: &mut Graph, x: ValueId, at: usize) -> Result<ValueId, IrError> {
    let mut dims = g.ty(x).shape.0.clone();
    dims.insert(at, Dim::Static(1));
    g.reshape_to(x, &Shape(dims))
}

/// `a ∧ b` for Bool values.
pub(super) fn and(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId, IrError> {
    g.select(a, b, a)
}

/// `Reduce Max(keep)` → `Compare Eq` → `Where(eq, iota, L)` → `Reduce Min`, with `eq`
/// replaced by `x ≠ x` in lanes holding a NaN (so the first NaN wins, as in the kernel).
fn arg_extreme(g: &mut Graph, x: ValueId, axis: usize, keep_dim: bool, op: ReduceOp) -> Result<ValueId, IrError> {
    let ty = g.ty(x).clone();
    let l = static_dim(g, x, axis, "ArgMax/ArgMin needs a static axis")?;
    let m = g.reduce(op, x, &[axis], true)?;
    let mut hit = g.compare(CmpOp::Eq, x, m)?;
    if ty.dtype.is_float() {
        let nan = g.compare(CmpOp::Ne, x, x)?;
        let any = g.reduce(ReduceOp::Max, nan, &[axis], true)?;
        hit = g.select(any, nan, hit)?;
    }
    let idx = iota(g, l, ty.rank() - axis - 1)?;
    let none = scalar(g, DType::I64, l as f64)?;
    let cand = g.select(hit, idx, none)?;
    g.reduce(ReduceOp::Min, cand, &[axis], keep_dim)
}

/// The permutation that moves `axis` last, and its inverse.
fn axis_last(rank: usize, axis: usize) -> (Vec<usize>, Vec<usize>) {
    let mut perm: Vec<usize> = (0..rank).filter(|&i| i != axis).collect();
    perm.push(axis);
    let mut inv = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    (perm, inv)
}

/// Cumsum (and, `reverse`, its gradient) as `x·T` along the last axis with the constant 0/1
/// matrix `T[j, i] = [j ≤ i]` (`[j < i]` exclusive; `≥`/`>` reversed), moving `axis` last
/// and back with `Transpose`; a vector becomes `[1, L]` for the product. Unlike the kernel,
/// a NaN or infinity poisons its whole lane (`0·NaN = NaN`); finite inputs agree.
fn triangular_sum(g: &mut Graph, x: ValueId, axis: i32, exclusive: bool, reverse: bool) -> Result<ValueId, IrError> {
    let ty = g.ty(x).clone();
    let rank = ty.rank();
    let axis = norm_axis(axis as i64, rank).map_err(invalid)?;
    let l = static_dim(g, x, axis, "Cumsum needs a static axis")?;
    let tri: Vec<f64> = (0..l * l)
        .map(|k| {
            let (j, i) = (k / l, k % l);
            let keep = match (reverse, exclusive) {
                (false, false) => j <= i,
                (false, true) => j < i,
                (true, false) => j >= i,
                (true, true) => j > i,
            };
            keep as u8 as f64
        })
        .collect();
    let t = constant(g, ty.dtype, &[l, l], &tri)?;
    let (perm, inv) = axis_last(rank, axis);
    let moved = axis != rank - 1;
    let mut v = if moved { g.transpose(x, &perm)? } else { x };
    if rank == 1 {
        v = unsqueeze(g, v, 0)?;
    }
    let mut y = g.matmul(v, t)?;
    if rank == 1 {
        y = g.reshape_to(y, &ty.shape)?;
    }
    if moved {
        y = g.transpose(y, &inv)?;
    }
    Ok(y)
}

/// CumProd / CumMax: `x` viewed as `[.., 1, L(j), ..]`, `Where([j ≤ i], x, identity)` broadcast
/// to `[.., L(i), L(j), ..]`, then `Reduce` over `j`.
fn masked_scan(g: &mut Graph, x: ValueId, axis: i32, exclusive: bool, op: ReduceOp) -> Result<ValueId, IrError> {
    let ty = g.ty(x).clone();
    let rank = ty.rank();
    let axis = norm_axis(axis as i64, rank).map_err(invalid)?;
    let l = static_dim(g, x, axis, "CumProd/CumMax needs a static axis")?;
    let mask: Vec<f64> = (0..l * l).map(|k| ((k % l < k / l) || (!exclusive && k % l == k / l)) as u8 as f64).collect();
    let mut dims = vec![l, l];
    dims.extend(std::iter::repeat_n(1, rank - axis - 1));
    let mask = constant(g, DType::Bool, &dims, &mask)?;
    let identity = scalar(g, ty.dtype, if op == ReduceOp::Prod { 1.0 } else { f64::NEG_INFINITY })?;
    let xr = unsqueeze(g, x, axis)?;
    let w = g.select(mask, xr, identity)?;
    g.reduce(op, w, &[axis + 1], false)
}

fn gather_elements(g: &mut Graph, x: ValueId, idx: ValueId, axis: i32) -> Result<ValueId, IrError> {
    g.add1(rlx_ir::ops::index::GatherElements { axis }, &[x, idx])
}

/// `GatherElements(x, ArgSort(x), axis)`.
fn sort(g: &mut Graph, x: ValueId, axis: usize, descending: bool) -> Result<ValueId, IrError> {
    let perm = g.arg_sort(x, axis, descending)?;
    gather_elements(g, x, perm, axis as i32)
}

/// `ArgSort(descending)` → `Narrow(last, 0, k)` → `GatherElements` for the values.
fn top_k(g: &mut Graph, x: ValueId, k: usize) -> Result<Vec<ValueId>, IrError> {
    let last = g.ty(x).rank() - 1;
    let perm = g.arg_sort(x, last, true)?;
    let idx = g.narrow(perm, last, 0, k)?;
    let values = gather_elements(g, x, idx, last as i32)?;
    Ok(vec![values, idx])
}

#[cfg(test)]
pub(super) mod tests {
    use crate::decompose::PRIMITIVES;
    use rlx_ir::text::parse;
    use rlx_ir::OpKind;

    /// Legalizes `src` for a backend that claims the primitives plus `extra`, checks that no
    /// kind named `gone…` is left and that the result verifies; returns its text.
    pub(crate) fn lowered(src: &str, extra: &[OpKind], gone: &str) -> String {
        let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        assert!(g.nodes().iter().any(|n| n.op.kind().name().starts_with(gone)), "{gone} is not in the source");
        let claims: Vec<OpKind> = PRIMITIVES.iter().chain(extra).copied().collect();
        let (out, _) = crate::legalize(&g, "test", &claims[..]).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let left: Vec<_> = out.nodes().iter().map(|n| n.op.kind()).filter(|k| k.name().starts_with(gone)).collect();
        assert!(left.is_empty(), "{left:?} survived:\n{out}");
        out.to_string()
    }

    #[test]
    fn arg_extrema_lower_to_reduce_and_where() {
        let t = lowered(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",7,3]))()
             %1 = ArgMax(axis:1,keep_dim:false)(%0)
             %2 = ArgMin(axis:2,keep_dim:true)(%0)
             return %1, %2",
            &[],
            "ArgM",
        );
        assert!(t.contains("Reduce(op:Max,axes:[1],keep_dim:true)") && t.contains("Reduce(op:Min,axes:[1],keep_dim:false)"), "{t}");
        assert!(t.contains("Compare(op:Ne)"), "the NaN lanes are handled:\n{t}");
        let i = lowered(
            "%0 = Input(name:\"x\",ty:(dtype:I32,shape:[4,5]))()
             %1 = ArgMax(axis:0,keep_dim:false)(%0)
             return %1",
            &[],
            "ArgMax",
        );
        assert!(!i.contains("Compare(op:Ne)"), "integers have no NaN:\n{i}");
    }

    #[test]
    fn scans_lower_to_matmul_or_masked_reduce() {
        let t = lowered(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",6,3]))()
             %1 = Cumsum(axis:1,exclusive:true)(%0)
             %2 = CumsumBackward(axis:-1,exclusive:false)(%0)
             %3 = CumProd(axis:-2,exclusive:false)(%0)
             %4 = CumMax(axis:2,exclusive:true)(%0)
             %5 = Input(name:\"v\",ty:(dtype:I64,shape:[5]))()
             %6 = Cumsum(axis:0,exclusive:false)(%5)
             %7 = Input(name:\"b\",ty:(dtype:F32,shape:[2,4]))()
             %8 = CumMax(axis:0,exclusive:true)(%7)
             return %1, %2, %3, %4, %6, %8",
            &[],
            "Cum",
        );
        assert!(t.contains("MatMul()") && t.contains("Transpose(perm:[0,2,1])"), "{t}");
        assert!(t.contains("Reduce(op:Prod,axes:[2],keep_dim:false)") && t.contains("Reduce(op:Max,axes:[1],keep_dim:false)"), "{t}");
    }

    #[test]
    fn sorts_lower_to_arg_sort_and_gather() {
        let t = lowered(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[3,9]))()
             %1 = TopK(k:4)(%0)
             %2 = Sort(axis:0,descending:false)(%0)
             return %1, %1.1, %2",
            &[OpKind::ArgSort, OpKind::GatherElements],
            "Sort",
        );
        assert!(!t.contains("TopK(") && t.contains("GatherElements(axis:0)") && t.contains("ArgSort(axis:1,descending:true)") && t.contains("Narrow(axis:1,start:0,len:4)"), "{t}");
    }

    #[test]
    fn symbolic_scan_axes_are_refused() {
        let g = parse("%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,\"L\"]))()\n%1 = Cumsum(axis:1,exclusive:false)(%0)\nreturn %1").unwrap();
        let e = crate::legalize(&g, "test", PRIMITIVES).unwrap_err().to_string();
        assert!(e.contains("Cumsum needs a static axis") && e.contains("symbolic (L)"), "{e}");
    }
}
