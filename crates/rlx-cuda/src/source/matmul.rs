//! The few-row product of f16 / bf16 activations with a row-major `[K, N]` weight (decode's
//! GEMV), which cuBLAS serves poorly at one row: see [`gemv`]; and the epilogue that adds a
//! bias and applies an activation where cuBLASLt's own do not: see [`bias_act`].

use super::{ctype, Source, PRELUDE};
use rlx_ir::ops::elementwise::ActivationKind;
use rlx_ir::DType;

/// Columns per block: 32 lanes of 8 columns each (one 16-byte load per lane and weight row).
pub const TILE: usize = 256;
/// Warps per block, each summing every eighth weight row of the block's rows.
pub const WARPS: usize = 8;

/// `out [M, N] = x [M, K] · w [K, N]` in f16 or bf16 with f32 sums, for `N` a multiple of 8
/// and `w` 16-byte aligned. Grid `(⌈N/256⌉, splits, M)`, 256 threads: block `(t, s, m)`
/// sums weight rows `s·rows .. (s + 1)·rows` of columns `256·t ..` for row `m` of `x`, warp
/// `j` taking rows `j, j + 8, …` with four loads in flight. With one split the block writes
/// the output; with more each block adds its f32 sums into `partial [M, N]` and counts
/// itself in `count [M, ⌈N/256⌉]`, and the tile's last block converts the total, then
/// leaves both zeroed for the next launch.
pub fn gemv(d: DType) -> Option<Source> {
    if !matches!(d, DType::F16 | DType::BF16) {
        return None;
    }
    let c = ctype(d)?;
    let (load, store) = c.convert?;
    let unpack = match d {
        DType::BF16 => "__uint_as_float(h << 16)",
        _ => "f16_load((u16)h)",
    };
    let code = format!(
        r#"{PRELUDE}__device__ __forceinline__ float lo(u32 v) {{ u32 h = v & 0xffffu; return {unpack}; }}
__device__ __forceinline__ float hi(u32 v) {{ u32 h = v >> 16; return {unpack}; }}
__device__ __forceinline__ void fma8(float* acc, uint4 w, float x) {{
    acc[0] += x * lo(w.x); acc[1] += x * hi(w.x); acc[2] += x * lo(w.y); acc[3] += x * hi(w.y);
    acc[4] += x * lo(w.z); acc[5] += x * hi(w.z); acc[6] += x * lo(w.w); acc[7] += x * hi(w.w);
}}
extern "C" __global__ void __launch_bounds__(256) k(u16* __restrict__ out, const u16* __restrict__ x, const u16* __restrict__ w, i64 K, i64 N, i64 rows, float* partial, unsigned* count) {{
    CHAIN();
    __shared__ float red[{WARPS}][{TILE}];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 m = blockIdx.z, col = ((i64)blockIdx.x * 32 + lane) * 8;
    const i64 k0 = (i64)blockIdx.y * rows, k1 = min(K, k0 + rows);
    const u16* xr = x + m * K;
    float acc[8] = {{0, 0, 0, 0, 0, 0, 0, 0}};
    if (col < N) {{
        i64 r = k0 + warp;
        for (; r + 24 < k1; r += 32) {{
            uint4 a = __ldg((const uint4*)(w + r * N + col));
            uint4 b = __ldg((const uint4*)(w + (r + 8) * N + col));
            uint4 c = __ldg((const uint4*)(w + (r + 16) * N + col));
            uint4 e = __ldg((const uint4*)(w + (r + 24) * N + col));
            fma8(acc, a, {load}(xr[r])); fma8(acc, b, {load}(xr[r + 8]));
            fma8(acc, c, {load}(xr[r + 16])); fma8(acc, e, {load}(xr[r + 24]));
        }}
        for (; r < k1; r += 8) fma8(acc, __ldg((const uint4*)(w + r * N + col)), {load}(xr[r]));
    }}
    for (int j = 0; j < 8; ++j) red[warp][lane * 8 + j] = acc[j];
    __syncthreads();
    float s = 0;
    for (int j = 0; j < {WARPS}; ++j) s += red[j][threadIdx.x];
    const i64 c = (i64)blockIdx.x * {TILE} + threadIdx.x;
    if (gridDim.y == 1) {{
        if (c < N) out[m * N + c] = {store}(s);
        return;
    }}
    if (c < N) atomicAdd(partial + m * N + c, s);
    __threadfence();
    __syncthreads();
    unsigned* ticket = count + m * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    if (c < N) {{
        out[m * N + c] = {store}(__ldcg(partial + m * N + c));
        partial[m * N + c] = 0;
    }}
    if (threadIdx.x == 0) *ticket = 0;
}}
"#
    );
    Some(Source { name: "gemv", code })
}

/// `y = act(y [+ bias[column]])` in place over `y [rows, n]` of f16 / bf16, in f32 with one
/// rounding: the epilogue of `FusedMatMulBiasAct` after the GEMV, or after cuBLASLt's bias
/// for an activation it has no epilogue for. `k(y, bias, total, n)`, launched by
/// `launch::tiled`. Where `n` is a multiple of 8 and `y` and `bias` lie on 16 bytes, each
/// thread moves 8 elements (one row's 8 columns) with one 16-byte load and store; otherwise
/// one element at a time, the column in 32-bit arithmetic while `total` fits.
pub fn bias_act(d: DType, act: Option<ActivationKind>, bias: bool) -> Option<Source> {
    if !matches!(d, DType::F16 | DType::BF16) {
        return None;
    }
    let c = ctype(d)?;
    let f = act.map(|kind| super::forward_fn("f", kind, d)).unwrap_or_default();
    let add_at = |column: &str| if bias { format!(" + {}", c.load(&format!("bias[{column}]"))) } else { String::new() };
    let add = add_at("narrow ? (i64)((u32)i % (u32)n) : i % n");
    let apply = if act.is_some() { " v = f(v);" } else { "" };
    let code = format!(
        r#"{PRELUDE}{f}__device__ __forceinline__ u32 pair(u32 two, const u16* __restrict__ bias, i64 c) {{
    float lo_ = {lo}, hi_ = {hi};
    {{ float v = lo_{add_lo};{apply} lo_ = v; }}
    {{ float v = hi_{add_hi};{apply} hi_ = v; }}
    return (u32){store_lo} | ((u32){store_hi} << 16);
}}
extern "C" __global__ void k(u16* __restrict__ y, const u16* __restrict__ bias, i64 total, i64 n) {{
    CHAIN();
    if ((n & 7) == 0 && ((u64)y & 15) == 0{bias_aligned}) {{
        const i64 groups = total >> 3;
        for (i64 q = (i64)blockIdx.x * blockDim.x + threadIdx.x; q < groups; q += (i64)gridDim.x * blockDim.x) {{
            uint4 v = ((const uint4*)y)[q];
            const i64 c = (q << 3) % n;
            v.x = pair(v.x, bias, c); v.y = pair(v.y, bias, c + 2); v.z = pair(v.z, bias, c + 4); v.w = pair(v.w, bias, c + 6);
            ((uint4*)y)[q] = v;
        }}
        return;
    }}
    const bool narrow = total <= 0xffffffffll;
    TILES(t, total) {{
        float v_[UNROLL];
        LANES(u, i, t, total) {{ v_[u] = {load}{add}; }}
        LANES(u, i, t, total) {{ float v = v_[u];{apply} y[i] = {store}; }}
    }}
}}
"#,
        load = c.load("y[i]"),
        store = c.store("v"),
        bias_aligned = if bias { " && ((u64)bias & 15) == 0" } else { "" },
        lo = c.load("(u16)(two & 0xffffu)"),
        hi = c.load("(u16)(two >> 16)"),
        add_lo = add_at("c"),
        add_hi = add_at("c + 1"),
        store_lo = c.store("lo_"),
        store_hi = c.store("hi_"),
    );
    Some(Source { name: "bias and activation", code })
}

/// The kernels a staged product of `d` launches: padded copies and the f32 sums' rounding.
pub fn staging(d: DType) -> impl Iterator<Item = Source> {
    [rows_into(d, d), rows_into(d, DType::F32)].into_iter().flatten()
}

/// Rows of `cols` elements from `input` (rows `ld_in` apart) into f16 / bf16 `out` (rows
/// `ld_out` apart): a padded copy of a half-precision matrix (`from` = `d`), or f32 sums
/// rounded once into it (`from` = F32), for staged products (`crate::stage`). `k(out, in,
/// rows, cols, ld_in, ld_out)`; blocks of 256 threads step over rows, four loads in flight
/// per thread.
pub fn rows_into(d: DType, from: DType) -> Option<Source> {
    let c = ctype(d).filter(|_| matches!(d, DType::F16 | DType::BF16))?;
    let (src, convert) = match from {
        DType::F32 => ("float", c.store("v[u]")),
        f if f == d => ("u16", "v[u]".to_string()),
        _ => return None,
    };
    let code = format!(
        r#"{PRELUDE}extern "C" __global__ void __launch_bounds__(256) k(u16* __restrict__ out, const {src}* __restrict__ in, i64 rows, i64 cols, i64 ld_in, i64 ld_out) {{
    CHAIN();
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {{
        const {src}* from = in + r * ld_in;
        u16* to = out + r * ld_out;
        for (i64 c = threadIdx.x; c < cols; c += 1024) {{
            {src} v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) if (c + u * 256 < cols) v[u] = from[c + u * 256];
#pragma unroll
            for (int u = 0; u < 4; ++u) if (c + u * 256 < cols) to[c + u * 256] = {convert};
        }}
    }}
}}
"#
    );
    Some(Source { name: "staged rows", code })
}
