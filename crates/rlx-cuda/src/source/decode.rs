//! Attention of one query row per `(batch, head)` over a whole KV cache — a decode step —
//! with the keys split over many blocks ("flash decoding"): see [`attention`].

use super::rows::{float, ROWS};
use super::{ctype, Source, PRELUDE};
use rlx_ir::DType;

/// Warps per block, each taking every fourth key of the block's chunk.
pub const WARPS: usize = 4;
/// Channels per lane at most: heads up to 256 wide.
pub const PER_LANE: usize = 8;
/// Key splits per row at most (their maxima and normalizers sit in shared memory to merge).
pub const MAX_SPLITS: usize = 512;

/// `Attention` for one query row per `(batch, head)`, `q, k, v` of float dtype `d`, heads of
/// `32·per` channels (`per ≤ 8`, values as wide as keys), every key kept (no mask, or a
/// `bias` of that dtype added to the scores). Grid `(B·H, splits)`, 128 threads: block
/// `(bh, s)` takes keys `s·chunk ..`, each warp every fourth one in turns of 32 keys whose
/// biases its lanes read together first, so that keys the bias hides (`-inf`: a cache's
/// unwritten slots) cost no load, then the kept ones four at a time, their loads issued
/// together; lane `l` takes channels `l·per ..`; the warps' online softmaxes (running max, normalizer, weighted sum of values,
/// in `float`) merge into the block's, written to `partial [B·H, splits, 2 + D]`, and the
/// last block of `bh` to finish (counted in `count [B·H]`, left at zero) merges the splits
/// into the output row: the splits' maxima and normalizers read once into shared memory,
/// then each output channel's sum with its loads in flight together.
pub fn attention(d: DType, bias: Option<DType>) -> Option<Source> {
    let c = float(d).filter(|_| d != DType::F64)?;
    let (mask_type, add) = match bias {
        None => ("void".to_string(), String::new()),
        Some(m) => {
            let mc = ctype(m).filter(|mc| mc.float)?;
            (mc.store.to_string(), format!("        if (mine_ < k1) bias = (float){};\n", mc.load("mask[b * mb + h * mh + mine_ * mk]")))
        }
    };
    let code = format!(
        r#"{PRELUDE}{ROWS}typedef {store} T;
extern "C" __global__ void __launch_bounds__({threads}) k(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ kx, const T* __restrict__ vx, const {mask_type}* __restrict__ mask,
    i64 qb, i64 qh, i64 kb, i64 kh, i64 kr, i64 vb, i64 vh, i64 vr, i64 ob, i64 oh, i64 mb, i64 mh, i64 mk,
    i64 heads, i64 group, i64 s_k, i64 d, i64 chunk, float scale, float softcap, float* partial, unsigned* count) {{
    CHAIN();
    __shared__ float wm[{WARPS}], wl[{WARPS}], wacc[{WARPS}][{width}], sm[{MAX_SPLITS}], sl[{MAX_SPLITS}];
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
    for (i64 turn = (i64)blockIdx.y * chunk + w; turn < k1; turn += 32 * {WARPS}) {{
        const i64 mine_ = turn + (i64)lane * {WARPS};
        float bias = 0.f;
{add}        unsigned live = __ballot_sync(FULL, mine_ < k1 && bias != -INF);
        while (live) {{
            int idx[4];
            #pragma unroll
            for (int u = 0; u < 4; ++u) {{ idx[u] = live ? __ffs(live) - 1 : -1; live &= live - 1; }}
            float kf[4][{PER_LANE}], vf[4][{PER_LANE}];
            #pragma unroll
            for (int u = 0; u < 4; ++u) {{
                const i64 key = turn + (i64)(idx[u] < 0 ? 0 : idx[u]) * {WARPS};
                const T* kr_ = kbase + key * kr;
                const T* vr_ = vbase + key * vr;
                #pragma unroll
                for (int j = 0; j < {PER_LANE}; ++j) {{
                    kf[u][j] = idx[u] >= 0 && j < per ? {kload} : 0.f;
                    vf[u][j] = idx[u] >= 0 && j < per ? {vload} : 0.f;
                }}
            }}
            #pragma unroll
            for (int u = 0; u < 4; ++u) {{
                if (idx[u] < 0) break;
                float dot = 0.f;
                #pragma unroll
                for (int j = 0; j < {PER_LANE}; ++j) dot += qv[j] * kf[u][j];
                float s = warp_sum(dot) * scale;
                if (softcap > 0.f) s = softcap * tanhf(s / softcap);
                s += __shfl_sync(FULL, bias, idx[u]);
                if (s == -INF) continue;
                const float top = fmaxf(m, s);
                const float corr = m == -INF ? 0.f : expf(m - top), p = expf(s - top);
                l = l * corr + p;
                #pragma unroll
                for (int j = 0; j < {PER_LANE}; ++j) acc[j] = acc[j] * corr + p * vf[u][j];
                m = top;
            }}
        }}
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
    const int splits = (int)gridDim.y;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {{ sm[s] = __ldcg(all + s * (d + 2)); sl[s] = __ldcg(all + s * (d + 2) + 1); }}
    __syncthreads();
    float most = -INF;
    for (int s = 0; s < splits; ++s) most = fmaxf(most, sm[s]);
    __syncthreads();
    for (int s = threadIdx.x; s < splits; s += blockDim.x) sm[s] = sm[s] == -INF ? 0.f : expf(sm[s] - most);
    __syncthreads();
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += sl[s] * sm[s];
    for (i64 t = threadIdx.x; t < d; t += blockDim.x) {{
        float o = 0.f;
        #pragma unroll 8
        for (int s = 0; s < splits; ++s) o += __ldcg(all + s * (d + 2) + 2 + t) * sm[s];
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
