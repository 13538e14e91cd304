//! Attention and rotary embeddings (OPS.md §7).
//!
//! `Attention` is one fused kernel, FlashAttention-style without any `S_q × S_k` scratch:
//! a block takes `warps` consecutive query rows of one `(batch, head)`, a warp per row; the
//! block stages tiles of [`KEY_TILE`] key and value rows in shared memory (as `float`), each
//! lane scores one key of the tile against its warp's query, and the warp folds the tile
//! into its row's online softmax (running max, normalizer, and the weighted sum of values,
//! each lane owning the value columns `lane, lane + 32, …`). Scores and softmax are `float`
//! whatever the dtype. Masked keys are skipped, which is OPS.md's −1e9 for every row that
//! keeps a key; a row that keeps none gets the mean of all value rows (uniform weights), as
//! on the CPU.
//!
//! `Rope` is elementwise: each output channel reads its pair's two inputs and the table
//! entries, and rotates with explicitly rounded products (`__fmul_rn`), so that no fused
//! multiply-add changes the CPU's bits.

use super::rows::{float, ROWS};
use super::{ctype, Source, PRELUDE};
use rlx_ir::DType;

/// Keys per shared-memory tile: one per lane when scoring.
pub const KEY_TILE: usize = 32;

/// The most query rows (warps) one attention block takes.
pub const MAX_WARPS: u32 = 8;

/// The widest heads (of Q/K and of V) the kernel takes: their tiles fit the shared memory of
/// sm_80 and later (165 KiB at 512 and 8 warps); wider heads decompose.
pub const MAX_HEAD: usize = 512;

/// How the attention kernel masks: by row ranges alone (`None`, `Causal`, `SlidingWindow`,
/// from run-time `causal`/`window`), by a `Custom` key mask of this dtype (kept where ≥ 0.5),
/// or by adding a `Bias` of this dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Masking {
    Ranges,
    Keys(DType),
    Bias(DType),
}

/// The geometry every attention kernel takes (`struct Attn`, passed by value; see
/// [`crate::attention::AttnArgs`], its Rust twin).
pub(super) const ATTN: &str = "struct Attn {
    i64 q[3], k[3], v[3], o[3]; /* element strides of batch, head and row; channels are contiguous */
    i64 mask[4];                /* mask or bias strides over [B, H, S_q, S_k] (0 where it broadcasts) */
    i64 heads, group, s_q, s_k, d, dv, window;
    int causal;
    float scale, softcap;       /* softcap 0: none */
};
/* The keys [lo, hi) that query row qi may keep by position (queries sit at the end of the keys). */
__device__ __forceinline__ void key_range(const Attn& a, i64 qi, i64& lo, i64& hi) {
    const i64 at = a.s_k - a.s_q + qi;
    hi = a.causal ? (at + 1 < 0 ? 0 : (at + 1 > a.s_k ? a.s_k : at + 1)) : a.s_k;
    lo = a.window > 0 ? at - a.window + 1 : 0;
    lo = lo < 0 ? 0 : (lo > hi ? hi : lo);
}
";

/// `Attention` over `q, k, v` of float dtype `d` with `masking`; f16/bf16 load into and
/// store from `float`.
pub fn attention(d: DType, masking: Masking) -> Option<Source> {
    let c = float(d).filter(|_| d != DType::F64)?;
    let (mask_type, keep, bias) = match masking {
        Masking::Ranges => ("void".to_string(), String::new(), String::new()),
        Masking::Keys(m) => {
            let mc = ctype(m).filter(|mc| mc.float || m == DType::Bool)?;
            let value = format!("(float){}", mc.load("mask[b * a.mask[0] + key * a.mask[3]]"));
            (mc.store.to_string(), format!("        if (kept) kept = {value} >= 0.5f;\n"), String::new())
        }
        Masking::Bias(m) => {
            let mc = ctype(m).filter(|mc| mc.float)?;
            let value = format!("(float){}", mc.load("mask[b * a.mask[0] + h * a.mask[1] + qi * a.mask[2] + key * a.mask[3]]"));
            (mc.store.to_string(), String::new(), format!("            s += {value};\n"))
        }
    };
    let load = |e: &str| c.load(e);
    let code = format!(
        "{PRELUDE}{ROWS}{ATTN}typedef {store} T;
#define KT {KEY_TILE}
extern \"C\" __global__ void __launch_bounds__({threads}) k(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ kx, const T* __restrict__ vx, const {mask_type}* __restrict__ mask, Attn a) {{
    CHAIN();
    extern __shared__ float sm[];
    const int warps = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const i64 d = a.d, dv = a.dv;
    float* qs = sm;                  /* [warps][d]: each warp's query row */
    float* ks = qs + warps * d;      /* [KT][d + 1]: the key tile (padded: lanes read down a column) */
    float* vs = ks + KT * (d + 1);   /* [KT][dv]: the value tile */
    float* ps = vs + KT * dv;        /* [warps][KT]: each row's weights of the tile */
    float* acc = ps + warps * KT;    /* [warps][dv]: each row's weighted sum of values */
    const i64 blocks = (a.s_q + warps - 1) / warps;
    const i64 bh = blockIdx.x / blocks, first = (blockIdx.x % blocks) * warps;
    const i64 b = bh / a.heads, h = bh % a.heads, hk = h / a.group;
    const i64 last = (first + warps < a.s_q ? first + warps : a.s_q) - 1;
    const i64 qi = first + w;
    const bool live = qi < a.s_q;
    i64 lo, hi, block_lo, block_hi, unused;
    key_range(a, live ? qi : last, lo, hi);
    key_range(a, first, block_lo, unused);
    key_range(a, last, unused, block_hi);
    if (live) for (i64 c = lane; c < d; c += 32) qs[w * d + c] = {q};
    for (i64 c = lane; c < dv; c += 32) acc[w * dv + c] = 0.f;
    const T* kb = kx + b * a.k[0] + hk * a.k[1];
    const T* vb = vx + b * a.v[0] + hk * a.v[1];
    float m = -INF, l = 0.f;
    bool any = false;
    for (i64 t0 = block_lo; t0 < block_hi; t0 += KT) {{
        const int nt = (int)(block_hi - t0 < KT ? block_hi - t0 : KT);
        __syncthreads();
        for (i64 e = threadIdx.x; e < (i64)nt * d; e += blockDim.x) {{ const i64 j = e / d, c = e % d; ks[j * (d + 1) + c] = {k}; }}
        for (i64 e = threadIdx.x; e < (i64)nt * dv; e += blockDim.x) {{ const i64 j = e / dv, c = e % dv; vs[j * dv + c] = {v}; }}
        __syncthreads();
        const i64 key = t0 + lane;
        bool kept = live && lane < nt && key >= lo && key < hi;
{keep}        float s = -INF;
        if (kept) {{
            const float* qr = qs + w * d;
            const float* kr = ks + lane * (d + 1);
            float dot = 0.f;
            for (i64 c = 0; c < d; ++c) dot += qr[c] * kr[c];
            s = dot * a.scale;
            if (a.softcap > 0.f) s = a.softcap * tanhf(s / a.softcap);
{bias}        }}
        any = __any_sync(FULL, kept) || any;
        const float top = max_nan(m, warp_max(s));
        if (top == -INF) continue;
        const float corr = m == -INF ? 0.f : expf(m - top);
        const float p = kept ? expf(s - top) : 0.f;
        l = l * corr + warp_sum(p);
        ps[w * KT + lane] = p;
        __syncwarp();
        for (i64 c = lane; c < dv; c += 32) {{
            float o = acc[w * dv + c] * corr;
            for (int j = 0; j < nt; ++j) o += ps[w * KT + j] * vs[j * dv + c];
            acc[w * dv + c] = o;
        }}
        __syncwarp();
        m = top;
    }}
    if (!live) return;
    T* orow = out + b * a.o[0] + h * a.o[1] + qi * a.o[2];
    if (!any) {{
        for (i64 c = lane; c < dv; c += 32) {{
            float s = 0.f;
            for (i64 j = 0; j < a.s_k; ++j) s += {vj};
            orow[c] = {mean};
        }}
        return;
    }}
    for (i64 c = lane; c < dv; c += 32) orow[c] = {y};
}}
",
        store = c.store,
        threads = MAX_WARPS * 32,
        q = load("q[b * a.q[0] + h * a.q[1] + qi * a.q[2] + c]"),
        k = load("kb[(t0 + j) * a.k[2] + c]"),
        v = load("vb[(t0 + j) * a.v[2] + c]"),
        vj = load("vb[j * a.v[2] + c]"),
        mean = c.store("s / (float)a.s_k"),
        y = c.store("acc[w * dv + c] / l"),
    );
    Some(Source { name: "attention", code })
}

/// `Rope` / `RopeBackward` on `x` of float dtype `d` with tables of float dtype `table`, one
/// thread per element of `x` (rows of `width = heads·head_dim` channels, position `row % seq`):
/// NeoX pairs channel `i` with `i + n_rot/2` (`gptj = 0`), GptJ `2i` with `2i + 1`; channels
/// from `n_rot` on are copied. `negate` negates the sine (the inverse rotation).
pub fn rope(d: DType, table: DType) -> Option<Source> {
    let c = float(d)?;
    let t = float(table)?;
    let (mul, add, sub) = if c.compute == "double" { ("__dmul_rn", "__dadd_rn", "__dsub_rn") } else { ("__fmul_rn", "__fadd_rn", "__fsub_rn") };
    let code = format!(
        "{PRELUDE}typedef {store} T;
typedef {compute} acc_t;
extern \"C\" __global__ void k(T* __restrict__ out, const T* __restrict__ x, const {ts}* __restrict__ cos_t, const {ts}* __restrict__ sin_t, i64 n, i64 width, i64 seq, i64 head_dim, i64 n_rot, i64 stride, int gptj, int negate) {{
    CHAIN();
    EACH(e, n) {{
        const i64 ch = e % head_dim;
        if (ch >= n_rot) {{ out[e] = x[e]; continue; }}
        const i64 half = n_rot / 2, head = e - ch;
        /* This channel's pair (a, b) and table entry i; `second`: this channel is b. */
        const bool second = gptj ? (ch & 1) : ch >= half;
        const i64 i = gptj ? ch >> 1 : (second ? ch - half : ch);
        const i64 ia = gptj ? 2 * i : i, ib = gptj ? 2 * i + 1 : i + half;
        const i64 row = ((e / width) % seq) * stride + i;
        const acc_t xa = {xa}, xb = {xb};
        const acc_t co = (acc_t){co}, si = negate ? -(acc_t){si} : (acc_t){si};
        const acc_t y = second ? {add}({mul}(xa, si), {mul}(xb, co)) : {sub}({mul}(xa, co), {mul}(xb, si));
        out[e] = {y};
    }}
}}
",
        store = c.store,
        compute = c.compute,
        ts = t.store,
        xa = c.load("x[head + ia]"),
        xb = c.load("x[head + ib]"),
        co = t.load("cos_t[row]"),
        si = t.load("sin_t[row]"),
        y = c.store("y"),
    );
    Some(Source { name: "rope", code })
}
