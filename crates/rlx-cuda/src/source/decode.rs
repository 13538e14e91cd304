//! Attention of one query row per `(batch, head)` over a whole KV cache — a decode step —
//! with the keys split over many blocks ("flash decoding"): see [`attention`].

use super::rows::{float, ROWS};
use super::{ctype, Source, PRELUDE};
use rlx_ir::DType;

/// Warps per block, each taking every fourth key of the block's chunk.
pub const WARPS: usize = 4;
/// Channels per lane at most: heads up to 256 wide.
pub const PER_LANE: usize = 8;

/// `Attention` for one query row per `(batch, head)`, `q, k, v` of float dtype `d`, heads of
/// `32·per` channels (`per ≤ 8`, values as wide as keys), every key kept (no mask, or a
/// `bias` of that dtype added to the scores). Grid `(B·H, splits)`, 128 threads: block
/// `(bh, s)` takes keys `s·chunk ..`, each warp every fourth one, lane `l` channels
/// `l·per ..`; the warps' online softmaxes (running max, normalizer, weighted sum of values,
/// in `float`) merge into the block's, written to `partial [B·H, splits, 2 + D]`, and the
/// last block of `bh` to finish (counted in `count [B·H]`, left at zero) merges the splits
/// into the output row.
pub fn attention(d: DType, bias: Option<DType>) -> Option<Source> {
    let c = float(d).filter(|_| d != DType::F64)?;
    let (mask_type, add) = match bias {
        None => ("void".to_string(), String::new()),
        Some(m) => {
            let mc = ctype(m).filter(|mc| mc.float)?;
            (mc.store.to_string(), format!("        s += (float){};\n", mc.load("mask[b * mb + h * mh + key * mk]")))
        }
    };
    let code = format!(
        r#"{PRELUDE}{ROWS}typedef {store} T;
extern "C" __global__ void __launch_bounds__({threads}) k(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ kx, const T* __restrict__ vx, const {mask_type}* __restrict__ mask,
    i64 qb, i64 qh, i64 kb, i64 kh, i64 kr, i64 vb, i64 vh, i64 vr, i64 ob, i64 oh, i64 mb, i64 mh, i64 mk,
    i64 heads, i64 group, i64 s_k, i64 d, i64 chunk, float scale, float softcap, float* partial, unsigned* count) {{
    CHAIN();
    __shared__ float wm[{WARPS}], wl[{WARPS}], wacc[{WARPS}][{width}];
    __shared__ int last;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, per = (int)(d / 32);
    const i64 bh = blockIdx.x, b = bh / heads, h = bh % heads, hk = h / group;
    const T* qr = q + b * qb + h * qh + lane * per;
    const T* kbase = kx + b * kb + hk * kh + lane * per;
    const T* vbase = vx + b * vb + hk * vh + lane * per;
    float qv[{PER_LANE}], acc[{PER_LANE}];
    #pragma unroll
    for (int j = 0; j < {PER_LANE}; ++j) {{ qv[j] = j < per ? {qload} : 0.f; acc[j] = 0.f; }}
    float m = -INF, l = 0.f;
    const i64 k1 = min(s_k, ((i64)blockIdx.y + 1) * chunk);
    for (i64 key = (i64)blockIdx.y * chunk + w; key < k1; key += {WARPS}) {{
        const T* kr_ = kbase + key * kr;
        const T* vr_ = vbase + key * vr;
        float dot = 0.f;
        #pragma unroll
        for (int j = 0; j < {PER_LANE}; ++j) if (j < per) dot += qv[j] * {kload};
        float s = warp_sum(dot) * scale;
        if (softcap > 0.f) s = softcap * tanhf(s / softcap);
{add}        if (s == -INF) continue;
        const float top = fmaxf(m, s);
        const float corr = m == -INF ? 0.f : expf(m - top), p = expf(s - top);
        l = l * corr + p;
        #pragma unroll
        for (int j = 0; j < {PER_LANE}; ++j) if (j < per) acc[j] = acc[j] * corr + p * {vload};
        m = top;
    }}
    if (lane == 0) {{ wm[w] = m; wl[w] = l; }}
    #pragma unroll
    for (int j = 0; j < {PER_LANE}; ++j) if (j < per) wacc[w][lane * per + j] = acc[j];
    __syncthreads();
    float top = -INF;
    for (int i = 0; i < {WARPS}; ++i) top = fmaxf(top, wm[i]);
    float* mine = partial + (bh * gridDim.y + blockIdx.y) * (d + 2);
    for (i64 t = threadIdx.x; t < d; t += blockDim.x) {{
        float sum = 0.f, o = 0.f;
        for (int i = 0; i < {WARPS}; ++i) {{
            if (wm[i] == -INF) continue;
            const float e = expf(wm[i] - top);
            sum += wl[i] * e;
            o += wacc[i][t] * e;
        }}
        mine[2 + t] = o;
        if (t == 0) {{ mine[0] = top; mine[1] = sum; }}
    }}
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(count + bh, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    const float* all = partial + bh * gridDim.y * (d + 2);
    float most = -INF;
    for (unsigned s = 0; s < gridDim.y; ++s) most = fmaxf(most, __ldcg(all + s * (d + 2)));
    for (i64 t = threadIdx.x; t < d; t += blockDim.x) {{
        float sum = 0.f, o = 0.f;
        for (unsigned s = 0; s < gridDim.y; ++s) {{
            const float* part = all + s * (d + 2);
            const float ms = __ldcg(part);
            if (ms == -INF) continue;
            const float e = expf(ms - most);
            sum += __ldcg(part + 1) * e;
            o += __ldcg(part + 2 + t) * e;
        }}
        out[b * ob + h * oh + t] = {result};
    }}
    if (threadIdx.x == 0) count[bh] = 0;
}}
"#,
        store = c.store,
        threads = 32 * WARPS,
        width = 32 * PER_LANE,
        qload = c.load("qr[j]"),
        kload = c.load("kr_[j]"),
        vload = c.load("vr_[j]"),
        result = c.store("o / sum"),
    );
    Some(Source { name: "decode attention", code })
}
