//! `Reduce` of float dtypes, accumulating in `float` (`double` for f64).
//!
//! A reduction whose reduced axes form one run of the input's layout is `[outer, m, inner]`
//! (`m` reduced): [`rows`] takes `inner = 1`, a warp per row with its lanes striding along
//! it; [`columns`] takes `inner > 1`, a block per 32 adjacent outputs with its 8 warps
//! taking every eighth reduced row, each lane one column, so every load is coalesced. Both
//! split `m` across blocks where the outputs alone would leave the device idle: each split
//! writes its partial into scratch, and [`combine`] folds the splits in a fixed order (so
//! results do not depend on scheduling). Other layouts take [`walked`], one thread per output.

use super::{ctype, Source, PRELUDE};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::DType;

/// Warps per block of [`rows`] and [`columns`] (rows per block, row groups per block).
pub const WARPS: usize = 8;

/// Every kernel a `Reduce` of `op` over `d` may launch, or `None` where `d` is not a float.
pub fn all(op: ReduceOp, d: DType) -> Option<Vec<Source>> {
    Some(vec![rows(op, d)?, columns(op, d)?, combine(op, d)?, walked(op, d)?])
}

/// The accumulator type, `fold` (one more value into an accumulator, or two accumulators
/// into one) and `finish` (the stored output of an accumulator over `m` values) of `op`
/// over `d`, after the prelude.
fn common(op: ReduceOp, d: DType) -> Option<String> {
    let c = ctype(d).filter(|c| c.float)?;
    let (init, step) = match op {
        ReduceOp::Sum | ReduceOp::Mean => ("0", "acc + v"),
        ReduceOp::Prod => ("1", "acc * v"),
        ReduceOp::Max => ("-(acc_t)__int_as_float(0x7f800000)", "(v > acc || v != v) ? v : acc"),
        ReduceOp::Min => ("(acc_t)__int_as_float(0x7f800000)", "(v < acc || v != v) ? v : acc"),
    };
    let finish = if op == ReduceOp::Mean { "acc / (acc_t)m" } else { "acc" };
    Some(format!(
        "{PRELUDE}typedef {acc} acc_t;
typedef {s} S;
#define INIT ((acc_t){init})
#define LOAD(e) ((acc_t){load})
__device__ __forceinline__ acc_t fold(acc_t acc, acc_t v) {{ return {step}; }}
__device__ __forceinline__ S finish(acc_t acc, i64 m) {{ return {store}; }}
",
        acc = c.compute,
        s = c.store,
        load = c.load("(e)"),
        store = c.store(finish),
    ))
}

/// `[rows, m]` → `[rows]`: grid `(⌈rows / 8⌉, splits)`, 256 threads; warp `w` of block `b`
/// folds elements `[y·chunk, (y + 1)·chunk)` of row `8·b + w`. One split stores the
/// output; more store `partial[y·rows + row]`.
pub fn rows(op: ReduceOp, d: DType) -> Option<Source> {
    let code = format!(
        "{}extern \"C\" __global__ void __launch_bounds__(256) k(S* __restrict__ out, const S* __restrict__ in, acc_t* __restrict__ partial, i64 rows, i64 m, i64 chunk) {{
    CHAIN();
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * {WARPS} + (threadIdx.x >> 5);
    if (row >= rows) return;
    const i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < m ? r0 + chunk : m;
    const S* base = in + row * m;
    acc_t acc = INIT;
#pragma unroll 4
    for (i64 r = r0 + lane; r < r1; r += 32) acc = fold(acc, LOAD(base[r]));
    for (int o = 16; o > 0; o >>= 1) acc = fold(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if (lane != 0) return;
    if (gridDim.y == 1) out[row] = finish(acc, m);
    else partial[(i64)blockIdx.y * rows + row] = acc;
}}
",
        common(op, d)?
    );
    Some(Source { name: "reduce rows", code })
}

/// `[outer, m, inner]` → `[outer, inner]`: grid `(tiles·outer, splits)` with `tiles =
/// ⌈inner / 32⌉`, 256 threads; lane `x` of warp `w` folds column `32·tile + x` over reduced
/// rows `w, w + 8, …` of its split, then warp 0 folds the eight. One split stores the
/// output; more store `partial[y·outer·inner + o·inner + column]`.
pub fn columns(op: ReduceOp, d: DType) -> Option<Source> {
    let code = format!(
        "{}extern \"C\" __global__ void __launch_bounds__(256) k(S* __restrict__ out, const S* __restrict__ in, acc_t* __restrict__ partial, i64 outer, i64 m, i64 inner, i64 chunk, i64 tiles) {{
    CHAIN();
    __shared__ acc_t red[{WARPS}][33];
    const int x = threadIdx.x & 31, w = threadIdx.x >> 5;
    const i64 o = blockIdx.x / tiles, c = (i64)(blockIdx.x % tiles) * 32 + x;
    const i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < m ? r0 + chunk : m;
    acc_t acc = INIT;
    if (c < inner) {{
        const S* base = in + o * m * inner + c;
#pragma unroll 4
        for (i64 r = r0 + w; r < r1; r += {WARPS}) acc = fold(acc, LOAD(base[r * inner]));
    }}
    red[w][x] = acc;
    __syncthreads();
    if (w != 0 || c >= inner) return;
    for (int j = 1; j < {WARPS}; ++j) acc = fold(acc, red[j][x]);
    if (gridDim.y == 1) out[o * inner + c] = finish(acc, m);
    else partial[(i64)blockIdx.y * outer * inner + o * inner + c] = acc;
}}
",
        common(op, d)?
    );
    Some(Source { name: "reduce columns", code })
}

/// The outputs from the partials of [`rows`] or [`columns`]: output `i` folds
/// `partial[s·n + i]` over the splits `s` in order.
pub fn combine(op: ReduceOp, d: DType) -> Option<Source> {
    let code = format!(
        "{}extern \"C\" __global__ void k(S* __restrict__ out, const acc_t* __restrict__ partial, i64 n, i64 splits, i64 m) {{
    CHAIN();
    EACH(i, n) {{
        acc_t acc = partial[i];
        for (i64 s = 1; s < splits; ++s) acc = fold(acc, partial[s * n + i]);
        out[i] = finish(acc, m);
    }}
}}
",
        common(op, d)?
    );
    Some(Source { name: "reduce splits", code })
}

/// Any layout, one output element per thread: walk `kept` over the outputs gives each one's
/// first input element, walk `red` over the reduced axes the rest.
pub fn walked(op: ReduceOp, d: DType) -> Option<Source> {
    let code = format!(
        "{}extern \"C\" __global__ void k(S* __restrict__ out, const S* __restrict__ in, i64 n, Walk kept, Walk red, i64 m) {{
    CHAIN();
    EACH(i, n) {{
        const S* base = in + walk(kept, 0, i);
        acc_t acc = INIT;
        for (i64 r = 0; r < m; ++r) acc = fold(acc, LOAD(base[walk(red, 0, r)]));
        out[i] = finish(acc, m);
    }}
}}
",
        common(op, d)?
    );
    Some(Source { name: "reduce", code })
}
