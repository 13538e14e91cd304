//! FlashAttention-2-style attention on the tensor cores, for f16/bf16 heads of 16 to 128
//! channels (a multiple of 16) and masks by position (`None`, `Causal`, `SlidingWindow`), forward and backward;
//! the forward also takes a `Custom` key mask (`[B, S_k]`, a key kept where ≥ 0.5: BERT's
//! padding).
//!
//! Every kernel stages its tiles in shared memory with `cp.async` (rows padded by 16 bytes,
//! so that `ldmatrix` reads them without bank conflicts), loading the next key or query
//! tile while the current one is multiplied, and multiplies with `mma.sync.m16n8k16`
//! (f32 accumulation). Scores are scaled into log2 units, so each weight is one `ex2`.
//!
//! - [`forward`]: a block of [`FWD_ROWS`] query rows (4 warps of 32 rows) walks the key tiles
//!   of [`FWD_KEYS`] its rows may see (whole tiles past the causal edge or before the window
//!   are skipped), keeping the online softmax (running max and sum) and the output in
//!   registers. A key mask is staged beside each key tile as `0` / `−∞` added to the
//!   scores. With `stats` it writes, instead of the output, each row's log-sum-exp (log2
//!   units) and `Σ dO∘O` (the backward's `D`), from the f32 output.
//! - [`key_grads`]: a block of [`BWD_KEYS`] keys (4 warps of 16) walks the query tiles of
//!   [`BWD_ROWS`] that see them: `Sᵀ = K·Qᵀ`, `Pᵀ` from the statistics, `dPᵀ = V·dOᵀ`,
//!   `dSᵀ = Pᵀ∘(dPᵀ − D)`, `dV += Pᵀ·dO`, `dK += dSᵀ·Q`.
//! - [`query_grads`]: a block of [`BWD_ROWS`] query rows walks its key tiles: `dQ += dS·K`.
//!
//! Rows that keep no key get uniform weights, as on the CPU: by position (causal with more
//! queries than keys) the forward leaves them to the scalar kernel and the backward adds
//! their `dV` share; by key mask (every key of a batch masked) the forward averages the
//! values itself.

use super::attention::ATTN;
use super::{ctype, Source, PRELUDE};
use rlx_ir::ops::attention::MaskKind;
use rlx_ir::DType;

/// Query rows per forward block.
pub const FWD_ROWS: usize = 128;
/// Keys per forward tile.
pub const FWD_KEYS: usize = 64;
/// Keys per `dK`/`dV` block and per `dQ` tile.
pub const BWD_KEYS: usize = 64;
/// Query rows per `dQ` block and per `dK`/`dV` tile; the statistics are laid out per head
/// in runs of a multiple of this.
pub const BWD_ROWS: usize = 64;
/// Threads per block (4 warps) in every flash kernel.
pub const THREADS: u32 = 128;

/// Whether the flash kernels take heads of `head` channels in dtype `d`: a whole number of
/// 16-deep tensor-core steps, and at most 128 (the output stays in registers).
pub fn takes(d: DType, head: usize) -> bool {
    matches!(d, DType::F16 | DType::BF16) && head % 16 == 0 && (16..=128).contains(&head)
}

/// Bytes of one shared-memory row of a head of `head` channels (16 bytes of padding).
fn row_bytes(head: usize) -> usize {
    2 * (head + 8)
}

/// Dynamic shared memory of [`forward`]: the query block, two stages of key and value tiles
/// and of the key mask.
pub fn forward_shared(head: usize) -> usize {
    (FWD_ROWS + 4 * FWD_KEYS) * row_bytes(head) + 2 * FWD_KEYS * 4
}

/// Dynamic shared memory of [`key_grads`]: its keys and values, two stages of query and
/// `dO` tiles with their statistics, and a row of `dV` for rows that keep no key.
pub fn key_grads_shared(head: usize) -> usize {
    (2 * BWD_KEYS + 4 * BWD_ROWS) * row_bytes(head) + 4 * BWD_ROWS * 4 + head * 4
}

/// Dynamic shared memory of [`query_grads`]: its query and `dO` rows, two stages of key and
/// value tiles.
pub fn query_grads_shared(head: usize) -> usize {
    (2 * BWD_ROWS + 4 * BWD_KEYS) * row_bytes(head)
}

/// Shared by the flash kernels: the head width, element type and the PTX they use.
fn prelude(d: DType, head: usize) -> Option<String> {
    let (mma, load) = match d {
        DType::F16 => ("f16", "f16_load"),
        DType::BF16 => ("bf16", "bf16_load"),
        _ => return None,
    };
    takes(d, head).then(|| {
        format!(
            "{PRELUDE}{ATTN}typedef u16 T;
#define D {head}
#define MMA_T \"{mma}\"
#define LOAD {load}
{COMMON}"
        )
    })
}

/// Tensor-core and copy helpers (PTX), after `D`, `MMA_T` and `LOAD` are defined.
const COMMON: &str = r#"#define FULL 0xffffffffu
#define INF __int_as_float(0x7f800000)
#define LOG2E 1.4426950408889634f
#define S_ (D + 8)   /* shared row stride in elements */
#define DT (D / 8)   /* 8-column tiles (and 16-byte chunks) of a row */
#define KD (D / 16)  /* 16-deep steps over a row */
__device__ __forceinline__ u32 smem(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
/* 16 bytes global -> shared, zero-filled when !ok (src must still be a valid address). */
__device__ __forceinline__ void cp16(u32 dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void ldsm4(u32* r, u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(u32* r, u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
/* c += a·b for one m16n8k16 tile. */
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." MMA_T "." MMA_T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats as one register of two halves, lo in the low half. */
__device__ __forceinline__ u32 pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn." MMA_T "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ float lg2(float x) { float y; asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
/* The A operand (16 rows x 16) of an accumulator pair c0 (columns 0-7), c1 (8-15). */
__device__ __forceinline__ void as_a(u32* r, const float* c0, const float* c1) {
    r[0] = pack(c0[0], c0[1]); r[1] = pack(c0[2], c0[3]); r[2] = pack(c1[0], c1[1]); r[3] = pack(c1[2], c1[3]);
}
/* Shared addresses for ldmatrix.x4 of 16 rows x 16 columns at (row, col) of a tile with
   rows of S_ elements: as an A operand (a_at), or as two B operands of 8 rows each (b_at,
   rows = the n index) from row-major rows; bt_at for B from k-major rows (with .trans). */
__device__ __forceinline__ u32 a_at(u32 base, int row, int col, int lane) { return base + ((row + (lane & 15)) * S_ + col + (lane >> 4) * 8) * 2; }
__device__ __forceinline__ u32 b_at(u32 base, int row, int col, int lane) { return base + ((row + (lane & 7) + ((lane >> 4) << 3)) * S_ + col + ((lane >> 3) & 1) * 8) * 2; }
#define bt_at a_at
#define RS (128 / DT)  /* rows per pass of a tile copy: thread t copies chunk t % DT of rows t / DT + RS·j */
/* The first tile row thread `tid` copies; past every row where DT does not divide 128. */
__device__ __forceinline__ int copy_row(int tid) { return tid / DT < RS ? tid / DT : 1 << 30; }
/* Whether the query at position `at` among the keys keeps `key` (by position alone). */
__device__ __forceinline__ bool kept(int key, int at, int s_k, int causal, int window) {
    return key < s_k && (!causal || key <= at) && (window <= 0 || key > at - window);
}
"#;

/// Undefines the macros of a flash source, so that sources can share one NVRTC program.
const END: &str = "#undef D\n#undef MMA_T\n#undef LOAD\n#undef LOG2E\n#undef S_\n#undef DT\n#undef KD\n#undef bt_at\n#undef RS\n#undef MT\n#undef NT\n#undef STATS\n#undef BR\n#undef BC\n#undef BN\n#undef BM\n#undef KEYMASK\n#undef MINB\n";

/// The forward kernel (`stats`: the backward's statistics pass instead of the output), with
/// a `Custom` key mask of dtype `mask` (float or bool) where given.
pub fn forward(d: DType, head: usize, stats: bool, mask: Option<DType>) -> Option<Source> {
    let keys = match mask {
        None => "#define KEYMASK 0\ntypedef u8 MK;\n".to_string(),
        Some(m) => {
            let mc = ctype(m).filter(|mc| mc.float || m == DType::Bool)?;
            let value = mc.load("m[i]");
            format!("#define KEYMASK 1\ntypedef {} MK;\n__device__ __forceinline__ bool keep_key(const MK* m, i64 i) {{ return (float){value} >= 0.5f; }}\n", mc.store)
        }
    };
    let code = format!("{}{keys}#define STATS {}\n#define BR {FWD_ROWS}\n#define BC {FWD_KEYS}\n{FORWARD}{END}", prelude(d, head)?, stats as u8);
    let name = match (stats, mask) {
        (true, _) => "attention statistics",
        (false, None) => "flash attention",
        (false, Some(_)) => "flash attention, key mask",
    };
    Some(Source { name, code })
}

/// The kernels of `AttentionBackward(All)` over heads of `head` channels in dtype `d` with a
/// mask by position (the statistics pass, `dK`/`dV`, `dQ`), or `None` where they do not
/// apply (the op decomposes).
pub fn backward(d: DType, head: usize, mask: MaskKind) -> Option<Vec<Source>> {
    if mask.takes_input() {
        return None;
    }
    Some(vec![forward(d, head, true, None)?, key_grads(d, head)?, query_grads(d, head)?])
}

/// The `dK`/`dV` kernel.
pub fn key_grads(d: DType, head: usize) -> Option<Source> {
    let code = format!("{}#define BN {BWD_KEYS}\n#define BM {BWD_ROWS}\n{KEY_GRADS}{END}", prelude(d, head)?);
    Some(Source { name: "attention key gradients", code })
}

/// The `dQ` kernel.
pub fn query_grads(d: DType, head: usize) -> Option<Source> {
    let code = format!("{}#define BN {BWD_KEYS}\n#define BM {BWD_ROWS}\n{QUERY_GRADS}{END}", prelude(d, head)?);
    Some(Source { name: "attention query gradients", code })
}

/// Grid `(B·H, ⌈S_q / BR⌉)`, the last query blocks (the most keys when causal) first.
/// `lse`/`dsum` (with `STATS`) are `[B·H, pad]`; `dy` has the output's strides; `kmask`
/// (with `KEYMASK`) has strides `a.mask[0]` (batch) and `a.mask[3]` (key).
const FORWARD: &str = r#"#define MT 2          /* 16-row tiles per warp */
#define NT (BC / 8)
/* Blocks an SM keeps: four for heads of up to 32 channels (their registers fit 128 a thread), else two. */
#define MINB (D <= 32 ? 4 : 2)
extern "C" __global__ void __launch_bounds__(128, MINB) k(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ kx, const T* __restrict__ vx, const T* __restrict__ dy, float* __restrict__ lse, float* __restrict__ dsum, i64 pad, const MK* __restrict__ kmask, Attn a) {
    CHAIN();
    extern __shared__ __align__(16) u16 flash_sm[];
    u16* sQ = flash_sm;
    float* sM = (float*)(flash_sm + (BR + 4 * BC) * S_);  /* [2][BC]: 0 for a kept key, -inf */
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3, lc = tid % DT, lr = copy_row(tid);
    const i64 bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads, hk = h / a.group;
    const i64 q0 = (i64)(gridDim.y - 1 - blockIdx.y) * BR;
    const i64 qend = q0 + BR < a.s_q ? q0 + BR : a.s_q;
    i64 lo_first, hi_first, lo_last, hi_last;
    key_range(a, q0, lo_first, hi_first);
    key_range(a, qend - 1, lo_last, hi_last);
    const T* qb = q + b * a.q[0] + h * a.q[1];
    const T* kb = kx + b * a.k[0] + hk * a.k[1];
    const T* vb = vx + b * a.v[0] + hk * a.v[1];
    const u32 sQa = smem(sQ), sKa = sQa + BR * S_ * 2, sVa = sKa + 2 * BC * S_ * 2;
    for (int r = lr; r < BR; r += RS) {
        const int c = lc;
        const bool ok = q0 + r < a.s_q;
        cp16(sQa + (r * S_ + c * 8) * 2, qb + (ok ? q0 + r : 0) * a.q[2] + c * 8, ok);
    }
    const i64 t_first = lo_first / BC * BC;
    const int n = hi_last > t_first ? (int)((hi_last - t_first + BC - 1) / BC) : 0;
    auto load_kv = [&](int it, int st) {
        const i64 t0 = t_first + (i64)it * BC;
        for (int r = lr; r < BC; r += RS) {
            const int c = lc;
            const bool ok = t0 + r < a.s_k;
            const i64 row = ok ? t0 + r : 0;
            cp16(sKa + ((st * BC + r) * S_ + c * 8) * 2, kb + row * a.k[2] + c * 8, ok);
            cp16(sVa + ((st * BC + r) * S_ + c * 8) * 2, vb + row * a.v[2] + c * 8, ok);
        }
#if KEYMASK
        if (tid < BC) sM[st * BC + tid] = t0 + tid < a.s_k && keep_key(kmask, b * a.mask[0] + (t0 + tid) * a.mask[3]) ? 0.f : -INF;
#endif
    };
    /* The position among the keys of this thread's rows: (mt, hf) is row w*32 + mt*16 + g + 8*hf. */
    int at[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) at[mt][hf] = (int)(q0 + a.s_k - a.s_q) + w * 32 + mt * 16 + g + 8 * hf;
    const int s_k = (int)a.s_k, causal = a.causal, window = (int)a.window;
    float o[MT][DT][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
        m[mt][0] = m[mt][1] = -INF;
        l[mt][0] = l[mt][1] = 0.f;
    }
    const float sl2 = a.scale * LOG2E;
    if (n > 0) load_kv(0, 0);
    cp_commit();
    for (int it = 0; it < n; ++it) {
        const int st = it & 1;
        if (it + 1 < n) load_kv(it + 1, st ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const i64 t0 = t_first + (i64)it * BC;
        const u32 kt_base = sKa + st * BC * S_ * 2, vt_base = sVa + st * BC * S_ * 2;
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            u32 qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) ldsm4(qa[mt], a_at(sQa, w * 32 + mt * 16, kk * 16, lane));
#pragma unroll
            for (int p = 0; p < NT / 2; ++p) {
                u32 kf[4];
                ldsm4(kf, b_at(kt_base, p * 16, kk * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma(s[mt][2 * p], qa[mt], kf[0], kf[1]);
                    mma(s[mt][2 * p + 1], qa[mt], kf[2], kf[3]);
                }
            }
        }
        const bool edge = t0 < lo_last || t0 + BC > hi_first;
        const bool cap = a.softcap > 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float x = s[mt][nt][i];
                    x = cap ? a.softcap * tanhf(x * a.scale / a.softcap) * LOG2E : x * sl2;
                    if (edge && !kept((int)t0 + nt * 8 + 2 * tq + (i & 1), at[mt][i >> 1], s_k, causal, window)) x = -INF;
#if KEYMASK
                    x += sM[st * BC + nt * 8 + 2 * tq + (i & 1)];
#endif
                    s[mt][nt][i] = x;
                }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float mx = m[mt][hf];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 2));
                const float mu = mx == -INF ? 0.f : mx;
                const float corr = ex2(m[mt][hf] - mu);
                m[mt][hf] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const float p0 = ex2(s[mt][nt][2 * hf] - mu), p1 = ex2(s[mt][nt][2 * hf + 1] - mu);
                    s[mt][nt][2 * hf] = p0;
                    s[mt][nt][2 * hf + 1] = p1;
                    sum += p0 + p1;
                }
                l[mt][hf] = l[mt][hf] * corr + sum;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) {
                    o[mt][dt][2 * hf] *= corr;
                    o[mt][dt][2 * hf + 1] *= corr;
                }
            }
#pragma unroll
        for (int kt = 0; kt < BC / 16; ++kt) {
            u32 pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) as_a(pa[mt], s[mt][2 * kt], s[mt][2 * kt + 1]);
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                u32 vf[4];
                ldsm4t(vf, bt_at(vt_base, kt * 16, dp * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma(o[mt][2 * dp], pa[mt], vf[0], vf[1]);
                    mma(o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
                }
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
    float inv[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float t = l[mt][hf];
            t += __shfl_xor_sync(FULL, t, 1);
            t += __shfl_xor_sync(FULL, t, 2);
            l[mt][hf] = t;
            inv[mt][hf] = t > 0.f ? 1.f / t : 0.f;
        }
#if KEYMASK && !STATS
    /* Every key of this batch masked (so every row of the block): the mean of the values. */
    if (l[0][0] == 0.f && a.s_k > 0) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            float v0 = 0.f, v1 = 0.f;
            for (i64 key = 0; key < a.s_k; ++key) {
                const u32 v2 = *(const u32*)(vb + key * a.v[2] + dt * 8 + 2 * tq);
                v0 += LOAD((u16)(v2 & 0xffffu));
                v1 += LOAD((u16)(v2 >> 16));
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    o[mt][dt][2 * hf] = v0;
                    o[mt][dt][2 * hf + 1] = v1;
                }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) inv[mt][0] = inv[mt][1] = 1.f / (float)a.s_k;
    }
#endif
#if STATS
    const T* yb = dy + b * a.o[0] + h * a.o[1];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const i64 row = q0 + w * 32 + mt * 16 + g + 8 * hf;
            const bool live = row < a.s_q;
            float dot = 0.f;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                const u32 y2 = live ? *(const u32*)(yb + row * a.o[2] + dt * 8 + 2 * tq) : 0u;
                dot += LOAD((u16)(y2 & 0xffffu)) * o[mt][dt][2 * hf] + LOAD((u16)(y2 >> 16)) * o[mt][dt][2 * hf + 1];
            }
            dot += __shfl_xor_sync(FULL, dot, 1);
            dot += __shfl_xor_sync(FULL, dot, 2);
            if (live && tq == 0) {
                const bool any = l[mt][hf] > 0.f;
                lse[bh * pad + row] = any ? m[mt][hf] + lg2(l[mt][hf]) : 0.f;
                dsum[bh * pad + row] = any ? dot * inv[mt][hf] : 0.f;
            }
        }
#else
    /* Through this warp's own query rows in shared memory, for 16-byte stores. */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
                *(u32*)(sQ + (w * 32 + mt * 16 + g + 8 * hf) * S_ + dt * 8 + 2 * tq) = pack(o[mt][dt][2 * hf] * inv[mt][hf], o[mt][dt][2 * hf + 1] * inv[mt][hf]);
    __syncwarp();
    T* ob = out + b * a.o[0] + h * a.o[1];
    for (int e = lane; e < 32 * DT; e += 32) {
        const int r = e / DT, c = e % DT;
        const i64 row = q0 + w * 32 + r;
        if (row < a.s_q) *(uint4*)(ob + row * a.o[2] + c * 8) = *(const uint4*)(sQ + (w * 32 + r) * S_ + c * 8);
    }
#endif
}
"#;

/// Grid `(B·H, ⌈S_k / BN⌉)`. `dk`/`dv` may be null (not wanted); `lse`/`dsum` are `[B·H,
/// pad]` with `pad` a multiple of `BM`, zero past `S_q`.
const KEY_GRADS: &str = r#"#define NT (BM / 8)
extern "C" __global__ void __launch_bounds__(128, 2) k(T* __restrict__ dk, T* __restrict__ dv, const T* __restrict__ q, const T* __restrict__ kx, const T* __restrict__ vx, const T* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ dsum, i64 pad, Attn a) {
    CHAIN();
    extern __shared__ __align__(16) u16 flash_sm[];
    u16* sK = flash_sm;
    u16* sV = sK + BN * S_;
    float* sL = (float*)(sV + BN * S_ + 4 * BM * S_);  /* [2][BM] log-sum-exp, then [2][BM] D */
    float* sX = sL + 4 * BM;                           /* [D]: dV of rows that keep no key */
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3, lc = tid % DT, lr = copy_row(tid);
    const i64 bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads;
    const i64 k0 = (i64)blockIdx.y * BN;
    const i64 kend = k0 + BN < a.s_k ? k0 + BN : a.s_k;
    const i64 off = a.s_k - a.s_q;
    i64 i0 = a.causal ? k0 - off : 0, i1 = a.window > 0 ? kend - 1 + a.window - off : a.s_q;
    i0 = i0 < 0 ? 0 : (i0 > a.s_q ? a.s_q : i0);
    i1 = i1 < 0 ? 0 : (i1 > a.s_q ? a.s_q : i1);
    i0 = i0 / BM * BM;
    const int n = i1 > i0 ? (int)((i1 - i0 + BM - 1) / BM) : 0;
    const T* qb = q + b * a.q[0] + h * a.q[1];
    const T* kb = kx + b * a.k[0] + h * a.k[1];
    const T* vb = vx + b * a.v[0] + h * a.v[1];
    const T* yb = dy + b * a.o[0] + h * a.o[1];
    const float* lb = lse + bh * pad;
    const float* db = dsum + bh * pad;
    const u32 sKa = smem(sK), sVa = sKa + BN * S_ * 2, sQa = sVa + BN * S_ * 2, sOa = sQa + 2 * BM * S_ * 2, sLa = smem(sL);
    for (int r = lr; r < BN; r += RS) {
        const int c = lc;
        const bool ok = k0 + r < a.s_k;
        const i64 row = ok ? k0 + r : 0;
        cp16(sKa + (r * S_ + c * 8) * 2, kb + row * a.k[2] + c * 8, ok);
        cp16(sVa + (r * S_ + c * 8) * 2, vb + row * a.v[2] + c * 8, ok);
    }
    auto load_q = [&](int it, int st) {
        const i64 t0 = i0 + (i64)it * BM;
        for (int r = lr; r < BM; r += RS) {
            const int c = lc;
            const bool ok = t0 + r < a.s_q;
            const i64 row = ok ? t0 + r : 0;
            cp16(sQa + ((st * BM + r) * S_ + c * 8) * 2, qb + row * a.q[2] + c * 8, ok);
            cp16(sOa + ((st * BM + r) * S_ + c * 8) * 2, yb + row * a.o[2] + c * 8, ok);
        }
        if (tid < BM / 4) cp16(sLa + (st * BM + tid * 4) * 4, lb + t0 + tid * 4, true);
        else if (tid < BM / 2) cp16(sLa + (2 * BM + st * BM + (tid - BM / 4) * 4) * 4, db + t0 + (tid - BM / 4) * 4, true);
    };
    float gk[DT][4], gv[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int i = 0; i < 4; ++i) gk[dt][i] = gv[dt][i] = 0.f;
    const float sl2 = a.scale * LOG2E;
    const int s_k = (int)a.s_k, causal = a.causal, window = (int)a.window;
    if (n > 0) load_q(0, 0);
    cp_commit();
    for (int it = 0; it < n; ++it) {
        const int st = it & 1;
        if (it + 1 < n) load_q(it + 1, st ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const i64 t0 = i0 + (i64)it * BM;
        const u32 qt = sQa + st * BM * S_ * 2, ot = sOa + st * BM * S_ * 2;
        const float* L = sL + st * BM;
        const float* Dr = sL + 2 * BM + st * BM;
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[nt][i] = dp[nt][i] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            u32 ka[4], va[4];
            ldsm4(ka, a_at(sKa, w * 16, kk * 16, lane));
            ldsm4(va, a_at(sVa, w * 16, kk * 16, lane));
#pragma unroll
            for (int p = 0; p < NT / 2; ++p) {
                u32 f[4];
                ldsm4(f, b_at(qt, p * 16, kk * 16, lane));
                mma(s[2 * p], ka, f[0], f[1]);
                mma(s[2 * p + 1], ka, f[2], f[3]);
                ldsm4(f, b_at(ot, p * 16, kk * 16, lane));
                mma(dp[2 * p], va, f[0], f[1]);
                mma(dp[2 * p + 1], va, f[2], f[3]);
            }
        }
        i64 lo_l, hi_l, lo_f, hi_f;
        key_range(a, (t0 + BM < a.s_q ? t0 + BM : a.s_q) - 1, lo_l, hi_l);
        key_range(a, t0, lo_f, hi_f);
        const bool edge = lo_l > k0 || hi_f < k0 + BN;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = nt * 8 + 2 * tq + (i & 1);
                float p = ex2(s[nt][i] * sl2 - L[col]);
                if (edge && !kept((int)k0 + w * 16 + g + 8 * (i >> 1), (int)(t0 + off) + col, s_k, causal, window)) p = 0.f;
                s[nt][i] = p;
                dp[nt][i] = p * (dp[nt][i] - Dr[col]);
            }
#pragma unroll
        for (int kt = 0; kt < BM / 16; ++kt) {
            u32 pa[4], da[4];
            as_a(pa, s[2 * kt], s[2 * kt + 1]);
            as_a(da, dp[2 * kt], dp[2 * kt + 1]);
#pragma unroll
            for (int p = 0; p < DT / 2; ++p) {
                u32 f[4];
                ldsm4t(f, bt_at(ot, kt * 16, p * 16, lane));
                mma(gv[2 * p], pa, f[0], f[1]);
                mma(gv[2 * p + 1], pa, f[2], f[3]);
                ldsm4t(f, bt_at(qt, kt * 16, p * 16, lane));
                mma(gk[2 * p], da, f[0], f[1]);
                mma(gk[2 * p + 1], da, f[2], f[3]);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
    if (a.causal && a.s_q > a.s_k) {
        /* Rows before the first key keep none: uniform weights 1/S_k, so each key's dV gains
           the mean of their dO. */
        for (int c = tid; c < D; c += 128) {
            float t = 0.f;
            for (i64 r = 0; r < a.s_q - a.s_k; ++r) t += LOAD(yb[r * a.o[2] + c]);
            sX[c] = t / (float)a.s_k;
        }
        __syncthreads();
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) gv[dt][i] += sX[dt * 8 + 2 * tq + (i & 1)];
    }
    /* Through this warp's own key and value rows in shared memory, for 16-byte stores. */
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = w * 16 + g + 8 * hf;
            *(u32*)(sK + r * S_ + dt * 8 + 2 * tq) = pack(gk[dt][2 * hf] * a.scale, gk[dt][2 * hf + 1] * a.scale);
            *(u32*)(sV + r * S_ + dt * 8 + 2 * tq) = pack(gv[dt][2 * hf], gv[dt][2 * hf + 1]);
        }
    __syncwarp();
    T* dkb = dk ? dk + b * a.k[0] + h * a.k[1] : 0;
    T* dvb = dv ? dv + b * a.v[0] + h * a.v[1] : 0;
    for (int e = lane; e < 16 * DT; e += 32) {
        const int r = e / DT, c = e % DT;
        const i64 row = k0 + w * 16 + r;
        if (row >= a.s_k) continue;
        if (dkb) *(uint4*)(dkb + row * a.k[2] + c * 8) = *(const uint4*)(sK + (w * 16 + r) * S_ + c * 8);
        if (dvb) *(uint4*)(dvb + row * a.v[2] + c * 8) = *(const uint4*)(sV + (w * 16 + r) * S_ + c * 8);
    }
}
"#;

/// Grid `(B·H, ⌈S_q / BM⌉)`, the last query blocks first; statistics as for `KEY_GRADS`.
const QUERY_GRADS: &str = r#"#define NT (BN / 8)
extern "C" __global__ void __launch_bounds__(128, 2) k(T* __restrict__ dq, const T* __restrict__ q, const T* __restrict__ kx, const T* __restrict__ vx, const T* __restrict__ dy, const float* __restrict__ lse, const float* __restrict__ dsum, i64 pad, Attn a) {
    CHAIN();
    extern __shared__ __align__(16) u16 flash_sm[];
    u16* sQ = flash_sm;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3, lc = tid % DT, lr = copy_row(tid);
    const i64 bh = blockIdx.x, b = bh / a.heads, h = bh % a.heads;
    const i64 q0 = (i64)(gridDim.y - 1 - blockIdx.y) * BM;
    const i64 qend = q0 + BM < a.s_q ? q0 + BM : a.s_q;
    i64 lo_first, hi_first, lo_last, hi_last;
    key_range(a, q0, lo_first, hi_first);
    key_range(a, qend - 1, lo_last, hi_last);
    const T* qb = q + b * a.q[0] + h * a.q[1];
    const T* kb = kx + b * a.k[0] + h * a.k[1];
    const T* vb = vx + b * a.v[0] + h * a.v[1];
    const T* yb = dy + b * a.o[0] + h * a.o[1];
    const u32 sQa = smem(sQ), sOa = sQa + BM * S_ * 2, sKa = sOa + BM * S_ * 2, sVa = sKa + 2 * BN * S_ * 2;
    for (int r = lr; r < BM; r += RS) {
        const int c = lc;
        const bool ok = q0 + r < a.s_q;
        const i64 row = ok ? q0 + r : 0;
        cp16(sQa + (r * S_ + c * 8) * 2, qb + row * a.q[2] + c * 8, ok);
        cp16(sOa + (r * S_ + c * 8) * 2, yb + row * a.o[2] + c * 8, ok);
    }
    const i64 t_first = lo_first / BN * BN;
    const int n = hi_last > t_first ? (int)((hi_last - t_first + BN - 1) / BN) : 0;
    auto load_kv = [&](int it, int st) {
        const i64 t0 = t_first + (i64)it * BN;
        for (int r = lr; r < BN; r += RS) {
            const int c = lc;
            const bool ok = t0 + r < a.s_k;
            const i64 row = ok ? t0 + r : 0;
            cp16(sKa + ((st * BN + r) * S_ + c * 8) * 2, kb + row * a.k[2] + c * 8, ok);
            cp16(sVa + ((st * BN + r) * S_ + c * 8) * 2, vb + row * a.v[2] + c * 8, ok);
        }
    };
    int at[2];
    float L[2], Dr[2];
    const int s_k = (int)a.s_k, causal = a.causal, window = (int)a.window;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const i64 row = q0 + w * 16 + g + 8 * hf;
        at[hf] = (int)(row + a.s_k - a.s_q);
        L[hf] = lse[bh * pad + row];
        Dr[hf] = dsum[bh * pad + row];
    }
    float gq[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) gq[dt][0] = gq[dt][1] = gq[dt][2] = gq[dt][3] = 0.f;
    const float sl2 = a.scale * LOG2E;
    if (n > 0) load_kv(0, 0);
    cp_commit();
    for (int it = 0; it < n; ++it) {
        const int st = it & 1;
        if (it + 1 < n) load_kv(it + 1, st ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const i64 t0 = t_first + (i64)it * BN;
        const u32 kt_base = sKa + st * BN * S_ * 2, vt_base = sVa + st * BN * S_ * 2;
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[nt][i] = dp[nt][i] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            u32 qa[4], ya[4];
            ldsm4(qa, a_at(sQa, w * 16, kk * 16, lane));
            ldsm4(ya, a_at(sOa, w * 16, kk * 16, lane));
#pragma unroll
            for (int p = 0; p < NT / 2; ++p) {
                u32 f[4];
                ldsm4(f, b_at(kt_base, p * 16, kk * 16, lane));
                mma(s[2 * p], qa, f[0], f[1]);
                mma(s[2 * p + 1], qa, f[2], f[3]);
                ldsm4(f, b_at(vt_base, p * 16, kk * 16, lane));
                mma(dp[2 * p], ya, f[0], f[1]);
                mma(dp[2 * p + 1], ya, f[2], f[3]);
            }
        }
        const bool edge = t0 < lo_last || t0 + BN > hi_first;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int hf = i >> 1;
                float p = ex2(s[nt][i] * sl2 - L[hf]);
                if (edge && !kept((int)t0 + nt * 8 + 2 * tq + (i & 1), at[hf], s_k, causal, window)) p = 0.f;
                s[nt][i] = p * (dp[nt][i] - Dr[hf]);
            }
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt) {
            u32 da[4];
            as_a(da, s[2 * kt], s[2 * kt + 1]);
#pragma unroll
            for (int p = 0; p < DT / 2; ++p) {
                u32 f[4];
                ldsm4t(f, bt_at(kt_base, kt * 16, p * 16, lane));
                mma(gq[2 * p], da, f[0], f[1]);
                mma(gq[2 * p + 1], da, f[2], f[3]);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
            *(u32*)(sQ + (w * 16 + g + 8 * hf) * S_ + dt * 8 + 2 * tq) = pack(gq[dt][2 * hf] * a.scale, gq[dt][2 * hf + 1] * a.scale);
    __syncwarp();
    T* qo = dq + b * a.q[0] + h * a.q[1];
    for (int e = lane; e < 16 * DT; e += 32) {
        const int r = e / DT, c = e % DT;
        const i64 row = q0 + w * 16 + r;
        if (row < a.s_q) *(uint4*)(qo + row * a.q[2] + c * 8) = *(const uint4*)(sQ + (w * 16 + r) * S_ + c * 8);
    }
}
"#;
