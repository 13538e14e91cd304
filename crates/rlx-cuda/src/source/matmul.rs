//! The few-row products of f16 / bf16 activations with row-major `[K, N]` weights (decode's
//! GEMV), which cuBLAS serves poorly at one row: see [`products`]; and the epilogue that adds a
//! bias and applies an activation where cuBLASLt's own do not: see [`bias_act`].

use super::{ctype, Source, PRELUDE};
use rlx_ir::ops::elementwise::ActivationKind;
use rlx_ir::ops::fused::ElementwiseRegion;
use rlx_ir::DType;

/// Columns per block: 32 lanes of 8 columns each (one 16-byte load per lane and weight row).
pub const TILE: usize = 256;
/// Warps per block, each summing every eighth weight row of the block's rows.
pub const WARPS: usize = 8;

/// The most products one few-row launch computes.
pub const GROUP: usize = 3;
/// The most rows of K one block of the few-row products takes (its share of `x`, prepared by
/// the prologue, is staged in shared memory as f32).
pub const STAGE: usize = 4096;

/// What the few-row products multiply: `x` as it is, RMSNorm of its rows, or an elementwise
/// region of inputs shaped as `x` — computed as each block stages its share of the rows.
#[derive(Clone, Copy)]
pub enum Prologue<'a> {
    Plain,
    /// `x·r·γ + β` with `r = 1/√(mean(x²) + eps)` over each row, rounded to the dtype as the
    /// norm's own output would be.
    Rms,
    /// A region over inputs of these dtypes, each read element for element.
    Region(&'a ElementwiseRegion, &'a [DType]),
}

/// Up to [`GROUP`] products `out_j [M, N_j] = p(x) [M, K] · w_j [K, N_j]` in f16 or bf16
/// with f32 sums, sharing one row-wise prologue `p` of `x`, each `N_j` a multiple of 8 and
/// each `w_j` 16-byte aligned: decode's GEMV, which cuBLAS serves poorly at one row. Each
/// product is rounded to the dtype, then may take a residual (`+ r_j`) or a rotary embedding
/// (`Rope` over `[M, N_j]` rows, position `m`), as the separate ops would round.
///
/// `k(in0, in1, in2, in3, eps, [out_j, w_j, r_j, N_j, end_j] × 3, K, rows, partial, count,
/// cos, sin, head_dim, n_rot, stride, gptj, roped)`; grid `(end_2, splits, M)`, 256 threads,
/// `rows·4` bytes of dynamic shared memory. The prologue reads `in0..` (`x` for `Plain`; `x,
/// γ, β` for `Rope`; the region's inputs). The blocks `end_{j-1} .. end_j` (tiles of 256
/// columns) belong to product `j`; a null `r_j` adds no residual; bit `j` of `roped` rotates
/// product `j` with the f32 tables `cos / sin [M, stride]` (heads of `head_dim` dividing 256,
/// so that a tile holds whole heads). Block `(t, s, m)` issues its first weight loads, stages
/// rows `s·rows .. (s + 1)·rows` of `p(x)` for row `m`, then sums them against its tile's
/// weight columns, warp `i` taking weight rows `i, i + 8, …` with eight loads in flight.
/// With one split the block writes the output; with more each block adds its f32 sums into
/// `partial [M, ΣN_j]` and counts itself in `count [M, end_2]`, and the tile's last block
/// writes the total, then leaves both zeroed for the next launch.
pub fn products(d: DType, prologue: Prologue<'_>) -> Option<Source> {
    if !matches!(d, DType::F16 | DType::BF16) {
        return None;
    }
    let c = ctype(d)?;
    let (load, store) = c.convert?;
    let unpack = match d {
        DType::BF16 => "__uint_as_float(h << 16)",
        _ => "f16_load((u16)h)",
    };
    let x = |i: &str| format!("{load}(in0[m * K + {i}])");
    let (ins, defs, stats, stage) = match prologue {
        Prologue::Plain => (["u16"; 4], String::new(), String::new(), x("k0 + i")),
        Prologue::Rms => {
            let stats = format!(
                "    float sq = 0;
    for (i64 i = threadIdx.x; i < K; i += 256) {{ const float v = {x}; sq += v * v; }}
    const float inv = 1.0f / sqrtf(block_sum(sq, red[0]) / (float)K + eps);
",
                x = x("i")
            );
            (["u16"; 4], String::new(), stats, format!("{load}({store}(({x} * inv) * {load}(in1[k0 + i]) + {load}(in2[k0 + i])))", x = x("k0 + i")))
        }
        Prologue::Region(r, dtypes) => {
            let chain = super::fused::chain(r, dtypes).filter(|ch| ch.out == d && dtypes.len() <= 4)?;
            let mut ins = ["u16"; 4];
            let mut reads = String::new();
            for (i, &t) in dtypes.iter().enumerate() {
                let ct = ctype(t)?;
                ins[i] = ct.store;
                reads += &format!("    const {} x{i} = {};\n", ct.compute, ct.load(&format!("in{i}[g]")));
            }
            let defs = format!(
                "{defs}__device__ __forceinline__ float pro({params}, i64 g) {{\n{reads}{body}    return (float)s{last};\n}}\n",
                defs = chain.defs,
                params = ins.iter().enumerate().map(|(i, t)| format!("const {t}* __restrict__ in{i}")).collect::<Vec<_>>().join(", "),
                body = chain.body,
                last = chain.last,
            );
            (ins, defs, String::new(), "pro(in0, in1, in2, in3, m * K + k0 + i)".to_string())
        }
    };
    let finish = |v: &str| {
        format!(
            "{{
        float v = {load}({store}({v}));
        if ((roped >> j) & 1) v = rotated(red[0], v, c, m, cos_t, sin_t, hd, n_rot, stride, gptj);
        if (c < N) out[m * N + c] = r ? {store}({load}(r[m * N + c]) + v) : {store}(v);
    }}"
        )
    };
    let code = format!(
        r#"{PRELUDE}{defs}__device__ __forceinline__ float lo(u32 v) {{ u32 h = v & 0xffffu; return {unpack}; }}
__device__ __forceinline__ float hi(u32 v) {{ u32 h = v >> 16; return {unpack}; }}
__device__ __forceinline__ void fma8(float* acc, uint4 w, float x) {{
    acc[0] += x * lo(w.x); acc[1] += x * hi(w.x); acc[2] += x * lo(w.y); acc[3] += x * hi(w.y);
    acc[4] += x * lo(w.z); acc[5] += x * hi(w.z); acc[6] += x * lo(w.w); acc[7] += x * hi(w.w);
}}
/* The block's sum of v (every thread gets it); `red` holds a value per warp. */
__device__ __forceinline__ float block_sum(float v, float* red) {{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0;
    for (int i = 0; i < {WARPS}; ++i) s += red[i];
    __syncthreads();
    return s;
}}
/* Product value v of column c (row m) rotated with its pair, which every thread of the block
   leaves in `tile` first (a tile of 256 columns holds whole heads). */
__device__ __forceinline__ float rotated(float* tile, float v, i64 c, i64 m, const float* cos_t, const float* sin_t, i64 hd, i64 n_rot, i64 stride, int gptj) {{
    tile[threadIdx.x] = v;
    __syncthreads();
    const i64 ch = c % hd;
    if (ch >= n_rot) return v;
    const i64 half = n_rot / 2, head = (i64)threadIdx.x - ch;
    const bool second = gptj ? (ch & 1) : ch >= half;
    const i64 i = gptj ? ch >> 1 : (second ? ch - half : ch);
    const float xa = tile[head + (gptj ? 2 * i : i)], xb = tile[head + (gptj ? 2 * i + 1 : i + half)];
    const float co = cos_t[m * stride + i], si = sin_t[m * stride + i];
    return second ? __fadd_rn(__fmul_rn(xa, si), __fmul_rn(xb, co)) : __fsub_rn(__fmul_rn(xa, co), __fmul_rn(xb, si));
}}
#define LD(q) __ldg((const uint4*)(w + (q) * N + col))
extern "C" __global__ void __launch_bounds__(256) k(const {i0}* __restrict__ in0, const {i1}* __restrict__ in1, const {i2}* __restrict__ in2, const {i3}* __restrict__ in3, float eps,
        u16* out0, const u16* __restrict__ w0, const u16* r0, i64 n0, i64 end0,
        u16* out1, const u16* __restrict__ w1, const u16* r1, i64 n1, i64 end1,
        u16* out2, const u16* __restrict__ w2, const u16* r2, i64 n2, i64 end2,
        i64 K, i64 rows, float* partial, unsigned* count,
        const float* __restrict__ cos_t, const float* __restrict__ sin_t, i64 hd, i64 n_rot, i64 stride, int gptj, int roped) {{
    CHAIN();
    extern __shared__ float xs[];
    __shared__ float red[{WARPS}][{TILE}];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 t = blockIdx.x, m = blockIdx.z;
    const int j = t < end0 ? 0 : t < end1 ? 1 : 2;
    u16* out = j == 0 ? out0 : j == 1 ? out1 : out2;
    const u16* __restrict__ w = j == 0 ? w0 : j == 1 ? w1 : w2;
    const u16* r = j == 0 ? r0 : j == 1 ? r1 : r2;
    const i64 N = j == 0 ? n0 : j == 1 ? n1 : n2;
    const i64 tile = t - (j == 0 ? 0 : j == 1 ? end0 : end1), before = j == 0 ? 0 : j == 1 ? n0 : n0 + n1;
    const i64 col = (tile * 32 + lane) * 8;
    const i64 k0 = (i64)blockIdx.y * rows, k1 = min(K, k0 + rows);
    const bool live = col < N;
    i64 q = k0 + warp;
    uint4 wa = make_uint4(0, 0, 0, 0), wb = wa, wc = wa, wd = wa;
    if (live && q + 24 < k1) {{ wa = LD(q); wb = LD(q + 8); wc = LD(q + 16); wd = LD(q + 24); }}
{stats}    for (i64 i = threadIdx.x; k0 + i < k1; i += 256) xs[i] = {stage};
    __syncthreads();
    float acc[8] = {{0, 0, 0, 0, 0, 0, 0, 0}};
    if (live) {{
        while (q + 24 < k1) {{
            const i64 next = q + 32;
            uint4 na = wa, nb = wb, nc = wc, nd = wd;
            if (next + 24 < k1) {{ na = LD(next); nb = LD(next + 8); nc = LD(next + 16); nd = LD(next + 24); }}
            fma8(acc, wa, xs[q - k0]); fma8(acc, wb, xs[q + 8 - k0]);
            fma8(acc, wc, xs[q + 16 - k0]); fma8(acc, wd, xs[q + 24 - k0]);
            wa = na; wb = nb; wc = nc; wd = nd;
            q = next;
        }}
        for (; q < k1; q += 8) fma8(acc, LD(q), xs[q - k0]);
    }}
    for (int u = 0; u < 8; ++u) red[warp][lane * 8 + u] = acc[u];
    __syncthreads();
    float s = 0;
    for (int i = 0; i < {WARPS}; ++i) s += red[i][threadIdx.x];
    const i64 c = tile * {TILE} + threadIdx.x;
    if (gridDim.y == 1) {{
        {done_s}
        return;
    }}
    float* part = partial + m * (n0 + n1 + n2) + before;
    if (c < N) atomicAdd(part + c, s);
    __threadfence();
    __syncthreads();
    unsigned* ticket = count + m * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    {done_part}
    if (c < N) part[c] = 0;
    if (threadIdx.x == 0) *ticket = 0;
}}
"#,
        i0 = ins[0],
        i1 = ins[1],
        i2 = ins[2],
        i3 = ins[3],
        done_s = finish("s"),
        done_part = finish("c < N ? __ldcg(part + c) : 0.0f"),
    );
    Some(Source { name: "few-row products", code })
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
