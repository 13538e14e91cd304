//! `DequantMatMul` over GGUF `Q4_0`, `Q4_1` and `Q8_0` blocks as the file stores them
//! (`[N, row_bytes]`, one row of `K` weights per output; `GgufType::plain_header` says which
//! types): see [`dequant_matmul`].

use super::{Source, PRELUDE};
use rlx_ir::ops::quant::{Activations, GgufType};

/// Weight rows per block: a warp each.
pub const ROWS: usize = 8;

/// `out [M, N] = x [M, K] · dequant(w)ᵀ`, F32 in and out. Grid `(⌈N/8⌉, M)`, 256 threads:
/// warp `j` of block `(b, m)` takes weight row `8·b + j`, lane `l` its blocks `l, l + 32, …`,
/// then the lanes' sums are added. With `Activations::Q8Blocks` the block first rounds row
/// `m` of `x` to 8-bit blocks in shared memory (`K` codes, then per block the f16-rounded
/// scale `max|x|/127`, `f16(scale·Σq)` and `Σq`: `K + 12·K/32` bytes), as the CPU backend
/// and llama.cpp do, and each block pair adds `f32(Σ q_w·q_x)·(d_w·d_x)` (`Q4_0`'s codes
/// offset by −8) plus `Q4_1`'s `m_w·s_x`, fused as the CPU rounds them; otherwise each
/// decoded weight (`(q − 8)·d`, `q·d + m`, `q·d`) meets the float activation.
pub fn dequant_matmul(t: GgufType, a: Activations) -> Option<Source> {
    let (bytes, codes) = (t.block_bytes(), t.plain_header()?);
    // Code `e` (0..32) of the block at `b`, as an int.
    let code = match t {
        GgufType::Q8_0 => format!("(int)(i8)b[{codes} + e]"),
        _ => format!("(int)((b[{codes} + (e & 15)] >> ((e >> 4) * 4)) & 15)"),
    };
    let body = match a {
        Activations::Q8Blocks => {
            let offset = if t == GgufType::Q4_0 { "s -= 8 * qsum[j];\n            " } else { "" };
            let min = if t == GgufType::Q4_1 { "\n            acc = fmaf(half_at(b + 2), qs[j], acc);" } else { "" };
            format!(
                r#"    extern __shared__ float shared[];
    const i64 nb = K / 32;
    float* qd = shared;
    float* qs = qd + nb;
    int* qsum = (int*)(qs + nb);
    i8* q = (i8*)(qsum + nb);
    for (i64 j = threadIdx.x; j < nb; j += blockDim.x) {{
        const float* xb = xr + j * 32;
        float amax = 0;
        for (int e = 0; e < 32; ++e) amax = fmaxf(amax, fabsf(xb[e]));
        const float d = amax / 127.0f, id = amax == 0.0f ? 0.0f : 127.0f / amax;
        int sum = 0;
        for (int e = 0; e < 32; ++e) {{ int v = (int)rintf(xb[e] * id); q[j * 32 + e] = (i8)v; sum += v; }}
        qd[j] = f16_load(f16_store(d));
        qs[j] = f16_load(f16_store(d * (float)sum));
        qsum[j] = sum;
    }}
    __syncthreads();
    if (n >= N) return;
    for (i64 j = lane; j < nb; j += 32) {{
        const u8* b = row + j * {bytes};
        int s = 0;
        for (int e = 0; e < 32; ++e) s += {code} * (int)q[j * 32 + e];
        {offset}acc = fmaf((float)s, half_at(b) * qd[j], acc);{min}
    }}
"#
            )
        }
        Activations::Exact => {
            let value = match t {
                GgufType::Q4_0 => format!("(float)({code} - 8) * d"),
                GgufType::Q4_1 => format!("(float)({code}) * d + mn"),
                _ => format!("(float)({code}) * d"),
            };
            let mn = if t == GgufType::Q4_1 { "const float mn = half_at(b + 2);" } else { "" };
            format!(
                r#"    if (n >= N) return;
    for (i64 j = lane; j < K / 32; j += 32) {{
        const u8* b = row + j * {bytes};
        const float d = half_at(b);
        {mn}
        for (int e = 0; e < 32; ++e) acc += xr[j * 32 + e] * ({value});
    }}
"#
            )
        }
    };
    let code = format!(
        r#"{PRELUDE}__device__ __forceinline__ float half_at(const u8* p) {{ return f16_load((u16)(p[0] | (p[1] << 8))); }}
extern "C" __global__ void k(float* __restrict__ out, const float* __restrict__ x, const u8* __restrict__ w, i64 K, i64 N) {{
    CHAIN();
    const int lane = threadIdx.x & 31;
    const i64 m = blockIdx.y, n = (i64)blockIdx.x * {ROWS} + (threadIdx.x >> 5);
    const float* xr = x + m * K;
    const u8* row = w + n * (K / 32) * {bytes};
    float acc = 0;
{body}    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[m * N + n] = acc;
}}
"#
    );
    Some(Source { name: "dequant matmul", code })
}
