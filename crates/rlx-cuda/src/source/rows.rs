//! Kernels over rows — the lanes along one axis of a tensor seen as `[outer, n, inner]`, lane
//! `r` holding the `n` elements `(r / inner)·n·inner + r % inner + j·inner`: softmax, the
//! norms, the arg-extrema, the running scans and the sparse cross-entropy with its gradient.
//!
//! A reducing kernel gives each row one warp (`per_warp`, several rows per block: short rows)
//! or one block (`blockDim.x` threads, a multiple of 32: long rows); its reductions
//! ([`ROWS`]) hand every lane of the row the same value. Statistics accumulate in `float`
//! (`double` for f64), as OPS.md asks. The scans walk each lane sequentially, one thread per
//! lane, in the CPU's order, so their floats are the CPU's bits.

use super::{ctype, CType, PRELUDE};
use super::Source;
use rlx_ir::DType;

/// The most threads a row kernel is launched with (its `__launch_bounds__`).
pub const ROW_THREADS: u32 = 512;

/// Row reductions, after [`PRELUDE`]: warp shuffles over all 32 lanes, then, for a row per
/// block, one partial per warp through shared memory.
pub const ROWS: &str = r#"#define FULL 0xffffffffu
#define INF __int_as_float(0x7f800000)
template <typename T> __device__ __forceinline__ T max_nan(T a, T b) { return (b > a || b != b) ? b : a; }
template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(FULL, v, o));
    return v;
}
/* A product rounded on its own, never contracted into a following add. */
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
/* This thread's row, its lane in the row and the row's lane count. */
struct Lane { i64 row; int lane, width; };
__device__ __forceinline__ Lane lane_of(int per_warp) {
    Lane l;
    if (per_warp) { l.lane = threadIdx.x & 31; l.width = 32; l.row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); }
    else { l.lane = threadIdx.x; l.width = blockDim.x; l.row = blockIdx.x; }
    return l;
}
/* The sum over the row's lanes, in every lane; a row per block calls it from every thread. */
template <typename T> __device__ T row_sum(T v, int per_warp) {
    __shared__ T part[32];
    v = warp_sum(v);
    if (per_warp) return v;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : (T)0;
    return warp_sum(v);
}
/* The maximum over the row's lanes (NaN if any lane holds one), in every lane. */
template <typename T> __device__ T row_max(T v, int per_warp) {
    __shared__ T part[32];
    v = warp_max(v);
    if (per_warp) return v;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < (blockDim.x >> 5) ? part[threadIdx.x & 31] : -(T)INF;
    return warp_max(v);
}
"#;

/// The C name of math function `f` (`exp`, `log`, `sqrt`, `tanh`) in `c`'s compute type.
pub(super) fn math(c: &CType, f: &str) -> String {
    if c.compute == "double" {
        f.to_string()
    } else {
        format!("{f}f")
    }
}

/// A float dtype's C form (f16/bf16 compute in `float`).
pub(super) fn float(d: DType) -> Option<CType> {
    ctype(d).filter(|c| c.float)
}

/// A row kernel's source: the prelude, the reductions, `T`/`acc_t` for `c`, then `body`.
fn row_source(name: &'static str, c: &CType, body: &str) -> Source {
    Source { name, code: format!("{PRELUDE}{ROWS}typedef {} T;\ntypedef {} acc_t;\n{body}", c.store, c.compute) }
}

/// The preamble of a row kernel's body: this thread's lane, the row's first element `base`
/// (`rows`, `n`, `inner` are parameters), leaving when the row is past the end.
const ROW: &str = "    const Lane l = lane_of(per_warp);
    if (l.row >= rows) return;
    const i64 base = (l.row / inner) * n * inner + l.row % inner;
";

/// `Softmax` along one axis: per row the max (NaN-propagating), `Σ exp(x − max)`, then
/// `exp(x − max) / Σ`. A row holding NaN, or only −inf, gives NaN (as the CPU).
pub fn softmax(d: DType) -> Option<Source> {
    let c = float(d)?;
    let exp = math(&c, "exp");
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ x, i64 rows, i64 n, i64 inner, int per_warp) {{
    CHAIN();
{ROW}    const T* xr = x + base;
    T* yr = out + base;
    acc_t m = -(acc_t)INF;
    for (i64 j = l.lane; j < n; j += l.width) m = max_nan(m, (acc_t){x0});
    m = row_max(m, per_warp);
    acc_t s = 0;
    for (i64 j = l.lane; j < n; j += l.width) s += {exp}({x0} - m);
    s = row_sum(s, per_warp);
    for (i64 j = l.lane; j < n; j += l.width) yr[j * inner] = {y};
}}
",
        x0 = c.load("xr[j * inner]"),
        y = c.store(&format!("{exp}({} - m) / s", c.load("xr[j * inner]"))),
    );
    Some(row_source("softmax", &c, &body))
}

/// Which normalization a norm kernel applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// `(x − mean)/√(var + eps)·γ + β`, biased variance.
    Layer,
    /// `x/√(mean(x²) + eps)·γ + β`.
    Rms,
}

/// The statistics of the row `v(j)` into `mean` (0 for RMS) and `r = 1/√(… + eps)`, two
/// passes for LayerNorm.
fn stats(norm: Norm, c: &CType, v: &str) -> String {
    let sqrt = math(c, "sqrt");
    let mean = match norm {
        Norm::Layer => format!(
            "    acc_t mean = 0;
    for (i64 j = l.lane; j < n; j += l.width) mean += {v};
    mean = row_sum(mean, per_warp) / (acc_t)n;
    acc_t var = 0;
    for (i64 j = l.lane; j < n; j += l.width) {{ acc_t e = {v} - mean; var += e * e; }}
    var = row_sum(var, per_warp) / (acc_t)n;
"
        ),
        Norm::Rms => format!(
            "    const acc_t mean = 0;
    acc_t var = 0;
    for (i64 j = l.lane; j < n; j += l.width) {{ acc_t e = {v}; var += e * e; }}
    var = row_sum(var, per_warp) / (acc_t)n;
"
        ),
    };
    format!("{mean}    const acc_t r = (acc_t)1 / {sqrt}(var + (acc_t)eps);\n")
}

/// `LayerNorm` / `RmsNorm` (and `LayerNorm2d`: the channel axis) along one axis with `γ, β`
/// of `[n]`.
pub fn norm(norm: Norm, d: DType) -> Option<Source> {
    let c = float(d)?;
    let v = c.load("xr[j * inner]");
    let y = c.store(&format!("({v} - mean) * r * {} + {}", c.load("gamma[j]"), c.load("beta[j]")));
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta, i64 rows, i64 n, i64 inner, float eps, int per_warp) {{
    CHAIN();
{ROW}    const T* xr = x + base;
    T* yr = out + base;
{stats}    for (i64 j = l.lane; j < n; j += l.width) yr[j * inner] = {y};
}}
",
        stats = stats(norm, &c, &v),
    );
    Some(row_source(if norm == Norm::Layer { "layer norm" } else { "rms norm" }, &c, &body))
}

/// `FusedResidualLN` / `FusedResidualRmsNorm` over the last axis: `x + residual [+ bias]`,
/// rounded to the dtype after each add as the unfused `Add`s would be, is written into the
/// output row, whose elements each thread reads back (the same ones it wrote), and
/// normalized there. `residual` is read at `walk(rw, 0, row) + j·res_last` (it broadcasts);
/// `bias` is null without one.
pub fn residual_norm(norm: Norm, d: DType) -> Option<Source> {
    let c = float(d)?;
    let v = c.load("yr[j]");
    let round = |e: &str| c.load(&c.store(e));
    let sum = format!("{} + {}", c.load("xr[j]"), c.load("rr[j * res_last]"));
    let y = c.store(&format!("({v} - mean) * r * {} + {}", c.load("gamma[j]"), c.load("beta[j]")));
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ bias, const T* __restrict__ gamma, const T* __restrict__ beta, i64 rows, i64 n, Walk rw, i64 res_last, float eps, int per_warp) {{
    CHAIN();
    const i64 inner = 1;
{ROW}    const T* xr = x + base;
    const T* rr = res + walk(rw, 0, l.row);
    T* yr = out + base;
    for (i64 j = l.lane; j < n; j += l.width) {{
        acc_t s = {sum};
        if (bias) s = {round_s} + {b};
        yr[j] = {store_s};
    }}
{stats}    for (i64 j = l.lane; j < n; j += l.width) yr[j] = {y};
}}
",
        round_s = round("s"),
        b = c.load("bias[j]"),
        store_s = c.store("s"),
        stats = stats(norm, &c, &v),
    );
    Some(row_source(if norm == Norm::Layer { "fused residual layer norm" } else { "fused residual rms norm" }, &c, &body))
}

/// Vectors of 4 a lane holds of its row in [`norm_held`]: rows of up to `4·VECS·width`.
pub const VECS: usize = 8;

/// Loads and stores of 4 consecutive elements of `c` as one vector (8 bytes for f16 / bf16,
/// 16 for f32) into / from 4 floats; the address lies on the vector's size.
fn vec4(c: &CType) -> String {
    let (load, store) = match c.convert {
        Some(convert) => convert,
        None => return "__device__ __forceinline__ void ld4(const float* p, float* o) { const float4 w = *(const float4*)p; o[0] = w.x; o[1] = w.y; o[2] = w.z; o[3] = w.w; }
__device__ __forceinline__ void st4(float* p, const float* v) { *(float4*)p = make_float4(v[0], v[1], v[2], v[3]); }
".into(),
    };
    format!(
        "__device__ __forceinline__ void ld4(const u16* p, float* o) {{ const uint2 w = *(const uint2*)p; o[0] = {load}((u16)(w.x & 0xffffu)); o[1] = {load}((u16)(w.x >> 16)); o[2] = {load}((u16)(w.y & 0xffffu)); o[3] = {load}((u16)(w.y >> 16)); }}
__device__ __forceinline__ void st4(u16* p, const float* v) {{ uint2 w; w.x = (u32){store}(v[0]) | ((u32){store}(v[1]) << 16); w.y = (u32){store}(v[2]) | ((u32){store}(v[3]) << 16); *(uint2*)p = w; }}
"
    )
}

/// A norm over contiguous rows (`inner` 1) of f32 / f16 / bf16 whose length `n` is a multiple
/// of 4 and at most `4·VECS` per lane: each lane loads its vectors of the row once into
/// registers (`x`, or with `residual` the rounded `x + residual [+ bias]` as
/// [`residual_norm`] forms it), takes the statistics from them and writes the normalized
/// vectors; nothing is read twice from memory. Parameters as [`residual_norm`]'s with
/// `residual` (its feature axis contiguous), else as [`norm`]'s without `inner`.
pub fn norm_held(norm: Norm, d: DType, residual: bool) -> Option<Source> {
    let c = float(d).filter(|c| c.compute == "float")?;
    let round = |e: &str| c.load(&c.store(e));
    let (params, rows_in, sum) = if residual {
        (
            "const T* __restrict__ res, const T* __restrict__ bias, const T* __restrict__ gamma, const T* __restrict__ beta, i64 rows, i64 n, Walk rw, float eps, int per_warp",
            "    const T* rr = res + walk(rw, 0, l.row);\n",
            format!(
                "float b[4], s[4]; ld4(rr + 4 * j, b);
            if (bias) ld4(bias + 4 * j, s);
#pragma unroll
            for (int e = 0; e < 4; ++e) {{ float t = {sum}; if (bias) t = {plus}; v[q][e] = t; }}",
                sum = round("a[e] + b[e]"),
                plus = round("t + s[e]"),
            ),
        )
    } else {
        ("const T* __restrict__ gamma, const T* __restrict__ beta, i64 rows, i64 n, float eps, int per_warp", "", "for (int e = 0; e < 4; ++e) v[q][e] = a[e];".to_string())
    };
    let centre = match norm {
        Norm::Layer => "    mean = row_sum(mean, per_warp) / (float)n;
    float var = 0;
#pragma unroll
    for (int q = 0; q < VECS; ++q) if (l.lane + q * l.width < nv) for (int e = 0; e < 4; ++e) { const float t = v[q][e] - mean; var += t * t; }
",
        Norm::Rms => "    mean = 0;
    float var = 0;
#pragma unroll
    for (int q = 0; q < VECS; ++q) for (int e = 0; e < 4; ++e) var += v[q][e] * v[q][e];
",
    };
    let body = format!(
        "#define VECS {VECS}
{vec4}extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ x, {params}) {{
    CHAIN();
    const i64 inner = 1;
{ROW}    const T* xr = x + base;
{rows_in}    T* yr = out + base;
    const int nv = (int)(n >> 2);
    float v[VECS][4];
    float mean = 0;
#pragma unroll
    for (int q = 0; q < VECS; ++q) {{
        const int j = l.lane + q * l.width;
        if (j < nv) {{
            float a[4]; ld4(xr + 4 * j, a);
            {sum}
            mean += (v[q][0] + v[q][1]) + (v[q][2] + v[q][3]);
        }} else {{
            v[q][0] = v[q][1] = v[q][2] = v[q][3] = 0;
        }}
    }}
{centre}    var = row_sum(var, per_warp) / (float)n;
    const float r = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int q = 0; q < VECS; ++q) {{
        const int j = l.lane + q * l.width;
        if (j < nv) {{
            float g[4], h[4], y[4]; ld4(gamma + 4 * j, g); ld4(beta + 4 * j, h);
#pragma unroll
            for (int e = 0; e < 4; ++e) y[e] = (v[q][e] - mean) * r * g[e] + h[e];
            st4(yr + 4 * j, y);
        }}
    }}
}}
",
        vec4 = vec4(&c),
    );
    Some(row_source(if residual { "fused residual norm, rows held" } else { "norm, rows held" }, &c, &body))
}

/// `LayerNormBackwardInput` (`x, γ, ȳ`) / `RmsNormBackwardInput` (`x, γ, β, ȳ`: `beta` is
/// not read) along one axis: with `x̂ = (x − mean)·r` and `g = ȳ·γ`, `dx = r·(g − mean(g) −
/// x̂·mean(g·x̂))` for LayerNorm and `r·(g − x̂·mean(g·x̂))` for RMS (mean 0), which is OPS.md's
/// `r·g − x·r³·mean(g·x)`.
pub fn norm_backward_input(norm: Norm, d: DType) -> Option<Source> {
    let c = float(d)?;
    let v = c.load("xr[j * inner]");
    // Rounded before use: were `g − shift` contracted into an fma, a row whose terms cancel
    // exactly (a LayerNorm row of one) would keep the product's rounding error.
    let g = format!("mul_rn({}, {})", c.load("dyr[j * inner]"), c.load("gamma[j]"));
    let shift = if norm == Norm::Layer { "a / (acc_t)n" } else { "(acc_t)0" };
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ dy, i64 rows, i64 n, i64 inner, float eps, int per_warp) {{
    CHAIN();
{ROW}    const T* xr = x + base;
    const T* dyr = dy + base;
    T* yr = out + base;
{stats}    acc_t a = 0, b = 0;
    for (i64 j = l.lane; j < n; j += l.width) {{
        const acc_t g = {g}, xh = ({v} - mean) * r;
        a += g;
        b += g * xh;
    }}
    a = row_sum(a, per_warp);
    b = row_sum(b, per_warp) / (acc_t)n;
    const acc_t shift = {shift};
    for (i64 j = l.lane; j < n; j += l.width) {{
        const acc_t g = {g}, xh = ({v} - mean) * r;
        yr[j * inner] = {y};
    }}
}}
",
        stats = stats(norm, &c, &v),
        y = c.store("r * (g - shift - xh * b)"),
    );
    Some(row_source(if norm == Norm::Layer { "layer norm input gradient" } else { "rms norm input gradient" }, &c, &body))
}

/// The statistics of every row of a norm's input for [`norm_backward_params`]: `stats[2·row]
/// = mean` (0 for RMS), `stats[2·row + 1] = r`, in the compute type.
pub fn norm_stats(norm: Norm, d: DType) -> Option<Source> {
    let c = float(d)?;
    let v = c.load("xr[j * inner]");
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(acc_t* __restrict__ out, const T* __restrict__ x, i64 rows, i64 n, i64 inner, float eps, int per_warp) {{
    CHAIN();
{ROW}    const T* xr = x + base;
{stats}    if (l.lane == 0) {{ out[2 * l.row] = mean; out[2 * l.row + 1] = r; }}
}}
",
        stats = stats(norm, &c, &v),
    );
    Some(row_source(if norm == Norm::Layer { "layer norm statistics" } else { "rms norm statistics" }, &c, &body))
}

/// The `[n]` parameter gradients of a norm over rows seen as `[outer, n, inner]`: `out[j] =
/// Σ_rows ȳ·x̂` (`dγ`) from the rows' [`norm_stats`], or `Σ_rows ȳ` (`dβ`) where `stats` is
/// null. Grid `(⌈n / 32⌉, splits)`, 256 threads: lane `x` of warp `w` takes column `32·tile +
/// x` over rows `w, w + 8, …` of its split, then warp 0 folds the eight; one split stores the
/// output, more store `partial[y·n + j]` for [`super::reduce::combine`] (a sum).
pub fn norm_backward_params(d: DType) -> Option<Source> {
    let c = float(d)?;
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__(256) k(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ dy, const acc_t* __restrict__ stats, acc_t* __restrict__ partial, i64 rows, i64 n, i64 inner, i64 chunk) {{
    CHAIN();
    __shared__ acc_t red[8][33];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const i64 j = (i64)blockIdx.x * 32 + lane;
    const i64 r0 = (i64)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    acc_t acc = 0;
    if (j < n) {{
#pragma unroll 4
        for (i64 row = r0 + w; row < r1; row += 8) {{
            const i64 at = (row / inner) * n * inner + row % inner + j * inner;
            const acc_t g = {dy};
            acc += stats ? g * ({x} - stats[2 * row]) * stats[2 * row + 1] : g;
        }}
    }}
    red[w][lane] = acc;
    __syncthreads();
    if (w != 0 || j >= n) return;
    for (int k = 1; k < 8; ++k) acc += red[k][lane];
    if (gridDim.y == 1) out[j] = {y};
    else partial[(i64)blockIdx.y * n + j] = acc;
}}
",
        dy = c.load("dy[at]"),
        x = c.load("x[at]"),
        y = c.store("acc"),
    );
    Some(row_source("norm parameter gradient", &c, &body))
}

/// The type arg-extrema compare in and shuffle: `float`/`double` for floats, `long long`
/// for integers and Bool, `unsigned long long` for u64.
fn key_type(d: DType) -> Option<&'static str> {
    let c = ctype(d)?;
    Some(match (d, c.float) {
        (DType::F64, _) => "double",
        (_, true) => "float",
        (DType::U64, _) => "unsigned long long",
        _ => "long long",
    })
}

/// `ArgMax` / `ArgMin` (`max`) along one axis into I64: each lane keeps the first best of
/// its elements, then the row reduces `(value, index)` pairs where NaN beats every number
/// and ties go to the lower index, which picks the first extreme (`np.argmax`) whatever the
/// order of reduction. A lane loads eight of its elements at a time before comparing them,
/// so that a long row's loads overlap.
///
/// `k(out, x, rows, n, inner, chunk, vs, is, count, per_warp)`. With `gridDim.y` > 1 (few
/// long rows: a vocabulary's logits) block `(r, p)` takes elements `p·chunk ..` of row `r`,
/// leaves its best pair in `vs / is [r·gridDim.y + p]` and counts itself in `count[r]`; the
/// row's last block reduces the pairs, writes the index and leaves its count at zero.
pub fn arg_extreme(max: bool, d: DType) -> Option<Source> {
    let c = ctype(d)?;
    let key = key_type(d)?;
    let cmp = if max { ">" } else { "<" };
    let code = format!(
        "{PRELUDE}{ROWS}typedef {store} T;
typedef {key} key_t;
/* Whether (v, i) beats (w, j): a candidate beats none (j < 0); NaN beats numbers; ties by index. */
__device__ __forceinline__ bool beats(key_t v, i64 i, key_t w, i64 j) {{
    if (i < 0) return false;
    if (j < 0) return true;
    const bool vn = v != v, wn = w != w;
    if (vn || wn) return vn && (!wn || i < j);
    return v {cmp} w || (v == w && i < j);
}}
__device__ __forceinline__ void warp_best(key_t& v, i64& i) {{
    for (int o = 16; o > 0; o >>= 1) {{
        key_t w = __shfl_xor_sync(FULL, v, o);
        i64 j = __shfl_xor_sync(FULL, i, o);
        if (beats(w, j, v, i)) {{ v = w; i = j; }}
    }}
}}
/* The best pair of the block's lanes, in every lane (a block per row). */
__device__ __forceinline__ void block_best(key_t& best, i64& at) {{
    __shared__ key_t vs[32];
    __shared__ i64 is[32];
    warp_best(best, at);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {{ vs[threadIdx.x >> 5] = best; is[threadIdx.x >> 5] = at; }}
    __syncthreads();
    const bool has = (threadIdx.x & 31) < (blockDim.x >> 5);
    best = has ? vs[threadIdx.x & 31] : (key_t)0;
    at = has ? is[threadIdx.x & 31] : -1;
    warp_best(best, at);
}}
extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(i64* __restrict__ out, const T* __restrict__ x, i64 rows, i64 n, i64 inner, i64 chunk, key_t* parts_v, i64* parts_i, unsigned* count, int per_warp) {{
    CHAIN();
    __shared__ int last;
{ROW}    const T* xr = x + base;
    const i64 from = (i64)blockIdx.y * chunk, to = min(n, from + chunk);
    key_t best = 0;
    i64 at = -1;
    i64 j = from + l.lane;
    for (; j + 7 * l.width < to; j += 8 * l.width) {{
        key_t v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = (key_t){load_u};
#pragma unroll
        for (int u = 0; u < 8; ++u) if (beats(v[u], j + u * l.width, best, at)) {{ best = v[u]; at = j + u * l.width; }}
    }}
    for (; j < to; j += l.width) {{
        const key_t v = (key_t){load};
        if (beats(v, j, best, at)) {{ best = v; at = j; }}
    }}
    if (per_warp) warp_best(best, at);
    else block_best(best, at);
    if (gridDim.y == 1) {{
        if (l.lane == 0) out[l.row] = at;
        return;
    }}
    const i64 slot = l.row * gridDim.y + blockIdx.y;
    if (threadIdx.x == 0) {{ parts_v[slot] = best; parts_i[slot] = at; }}
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(count + l.row, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    best = 0;
    at = -1;
    for (i64 p = threadIdx.x; p < gridDim.y; p += blockDim.x) {{
        const i64 s = l.row * gridDim.y + p;
        const key_t v = __ldcg(parts_v + s);
        const i64 i = __ldcg(parts_i + s);
        if (beats(v, i, best, at)) {{ best = v; at = i; }}
    }}
    block_best(best, at);
    if (threadIdx.x == 0) {{ out[l.row] = at; count[l.row] = 0; }}
}}
",
        store = c.store,
        load = c.load("xr[j * inner]"),
        load_u = c.load("xr[(j + u * l.width) * inner]"),
    );
    Some(Source { name: if max { "argmax" } else { "argmin" }, code })
}

/// Which running fold a scan kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    Sum,
    Prod,
    Max,
}

/// `Cumsum`, `CumProd`, `CumMax` and `CumsumBackward` (`reverse`) along one axis, one
/// thread per lane walking it in order (exclusive: each output is the fold before its
/// element). Floats fold in their compute type; integers sum and multiply in `u64`, which
/// wraps as the dtype does once truncated, and take their max in their own type. A thread
/// loads eight elements of its lane before folding them, so that its loads overlap.
pub fn scan(op: Scan, d: DType) -> Option<Source> {
    let c = ctype(d).filter(|_| d != DType::Bool)?;
    let (acc, init, step) = match (op, c.float) {
        (Scan::Sum, true) => (c.compute, "0".to_string(), "a + v"),
        (Scan::Prod, true) => (c.compute, "1".to_string(), "a * v"),
        (Scan::Max, true) => (c.compute, "-(acc_t)INF".to_string(), "max_nan(a, v)"),
        (Scan::Sum, false) => ("u64", "0".to_string(), "a + v"),
        (Scan::Prod, false) => ("u64", "1".to_string(), "a * v"),
        (Scan::Max, false) => (c.compute, c.range?.0.to_string(), "(v > a ? v : a)"),
    };
    let code = format!(
        "{PRELUDE}{ROWS}typedef {store} T;
typedef {acc} acc_t;
extern \"C\" __global__ void k(T* __restrict__ out, const T* __restrict__ x, i64 lanes, i64 n, i64 inner, int exclusive, int reverse) {{
    CHAIN();
    EACH(r, lanes) {{
        const i64 base = (r / inner) * n * inner + r % inner;
        acc_t a = {init};
        i64 s = 0;
        for (; s + 8 <= n; s += 8) {{
            acc_t v_[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {{ const i64 at = base + (reverse ? n - 1 - s - u : s + u) * inner; v_[u] = (acc_t){load}; }}
#pragma unroll
            for (int u = 0; u < 8; ++u) {{
                const i64 at = base + (reverse ? n - 1 - s - u : s + u) * inner;
                const acc_t v = v_[u];
                if (exclusive) {{ out[at] = {store_a}; a = {step}; }}
                else {{ a = {step}; out[at] = {store_a}; }}
            }}
        }}
        for (; s < n; ++s) {{
            const i64 at = base + (reverse ? n - 1 - s : s) * inner;
            const acc_t v = (acc_t){load};
            if (exclusive) {{ out[at] = {store_a}; a = {step}; }}
            else {{ a = {step}; out[at] = {store_a}; }}
        }}
    }}
}}
",
        store = c.store,
        load = c.load("x[at]"),
        store_a = c.store("a"),
    );
    Some(Source { name: "scan", code })
}

/// What both sparse cross-entropy kernels share: the labels' C type, the row's label as an
/// i64 (`label`), and code leaving the max of the row at `xr` in `m` and the log of
/// `Σ exp(x − m)` in `ls` (0 where the max is not finite, as the CPU).
struct XentRow {
    labels: &'static str,
    label: &'static str,
    lse: String,
}

fn xent_row(c: &CType, labels: DType) -> Option<XentRow> {
    let lc = ctype(labels).filter(|l| !l.float && labels != DType::Bool)?;
    let label = if labels == DType::U64 { "(labels[l.row] > 9223372036854775807ull ? 9223372036854775807ll : (i64)labels[l.row])" } else { "(i64)labels[l.row]" };
    let (exp, log, x) = (math(c, "exp"), math(c, "log"), c.load("xr[j]"));
    let lse = format!(
        "    acc_t m = -(acc_t)INF;
    for (i64 j = l.lane; j < n; j += l.width) m = max_nan(m, (acc_t){x});
    m = row_max(m, per_warp);
    acc_t ls = 0;
    if (m == m && m != (acc_t)INF && m != -(acc_t)INF) {{
        acc_t s = 0;
        for (i64 j = l.lane; j < n; j += l.width) s += {exp}({x} - m);
        ls = {log}(row_sum(s, per_warp));
    }}
"
    );
    Some(XentRow { labels: lc.store, label, lse })
}

/// `SoftmaxCrossEntropyWithLogits` over rows of `c` logits: `logsumexp − logit[label]`, 0
/// where the label is `ignore_index` (`has_ignore`). Any other label outside `[0, c)` is
/// reported in `err` (`[3, row, label, c, has_ignore, ignore]`) and its row left unwritten.
pub fn sparse_cross_entropy(d: DType, labels: DType) -> Option<Source> {
    let c = float(d)?;
    let XentRow { labels, label, lse } = xent_row(&c, labels)?;
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ logits, const {labels}* __restrict__ labels, i64 rows, i64 n, int has_ignore, i64 ignore, i64* err, int per_warp) {{
    CHAIN();
    const i64 inner = 1;
{ROW}    const i64 label = {label};
    if (has_ignore && label == ignore) {{
        if (l.lane == 0) out[l.row] = {zero};
        return;
    }}
    if (label < 0 || label >= n) {{
        if (l.lane == 0 && atomicCAS((unsigned long long*)err, 0ull, 3ull) == 0ull) {{ err[1] = l.row; err[2] = label; err[3] = n; err[4] = has_ignore; err[5] = ignore; }}
        return;
    }}
    const T* xr = logits + base;
{lse}    if (l.lane == 0) out[l.row] = {y};
}}
",
        zero = c.store("0"),
        y = c.store(&format!("m + ls - {}", c.load("xr[label]"))),
    );
    Some(row_source("sparse cross-entropy", &c, &body))
}

/// `SoftmaxCrossEntropyBackward`: per row of `n` logits, `(softmax(x) − onehot(label))·dl[row]`,
/// the softmax recomputed from the row's max and log-sum-exp as the forward does; rows whose
/// label is `ignore_index` (`has_ignore`) or outside `[0, n)` get zeros. `dl` has the logits'
/// dtype.
pub fn sparse_cross_entropy_backward(d: DType, labels: DType) -> Option<Source> {
    let c = float(d)?;
    let XentRow { labels, label, lse } = xent_row(&c, labels)?;
    let body = format!(
        "extern \"C\" __global__ void __launch_bounds__({ROW_THREADS}) k(T* __restrict__ out, const T* __restrict__ logits, const {labels}* __restrict__ labels, const T* __restrict__ dl, i64 rows, i64 n, int has_ignore, i64 ignore, int per_warp) {{
    CHAIN();
    const i64 inner = 1;
{ROW}    const i64 label = {label};
    T* yr = out + base;
    if ((has_ignore && label == ignore) || label < 0 || label >= n) {{
        for (i64 j = l.lane; j < n; j += l.width) yr[j] = {zero};
        return;
    }}
    const T* xr = logits + base;
{lse}    const acc_t g = {g};
    for (i64 j = l.lane; j < n; j += l.width) yr[j] = {y};
}}
",
        zero = c.store("0"),
        g = c.load("dl[l.row]"),
        y = c.store(&format!("({}({} - m - ls) - (j == label ? (acc_t)1 : (acc_t)0)) * g", math(&c, "exp"), c.load("xr[j]"))),
    );
    Some(row_source("sparse cross-entropy gradient", &c, &body))
}
