//! `DequantMatMul` over GGUF `Q4_0`, `Q4_1` and `Q8_0` blocks as the file stores them (`w
//! [N, row_bytes]`, one row of `K` weights per output column; `GgufType::plain_header` says
//! which types), read byte by byte from the words they were uploaded as: see
//! [`dequant_matmul`].

use super::{header, load_fn, ty, Kernel};
use rlx_ir::ops::quant::{Activations, GgufType};
use rlx_ir::DType;

/// Invocations per workgroup, each taking every 64th block of the workgroup's output.
pub const GROUP: u32 = 64;

/// `out [M, N] = x [M, K] · dequant(w)ᵀ`, F32 in and out; one workgroup per output element
/// (`p[K]` = N, `p[K + 1]` = K, `p[K + 2]` = M·N), its invocations striding over the blocks
/// and adding their sums in workgroup memory. With `Activations::Exact` each decoded weight
/// (`(q − 8)·d`, `q·d + m`, `q·d`) meets the float activation; with `Q8Blocks` each block of
/// 32 activations is first rounded to 8-bit codes as llama.cpp's CPU backend does (scale
/// `max|x|/127` rounded to f16, codes rounded half to even), and the block adds
/// `f32(Σ q_w·q_x)·(d_w·d_x)` (`Q4_0`'s codes offset by −8) plus `Q4_1`'s `m_w·f16(d_x·Σq_x)`.
pub fn dequant_matmul(t: GgufType, a: Activations) -> Option<Kernel> {
    let (bytes, codes) = (t.block_bytes(), t.plain_header()?);
    let code = match t {
        GgufType::Q8_0 => format!("bitcast<i32>(ld2(b + {codes}u + e) << 24u) >> 24u"),
        _ => format!("i32((ld2(b + {codes}u + (e & 15u)) >> ((e >> 4u) * 4u)) & 15u)"),
    };
    let block = match a {
        Activations::Exact => {
            let value = match t {
                GgufType::Q4_0 => "f32(code(b, e) - 8) * d",
                GgufType::Q4_1 => "f32(code(b, e)) * d + half_at(b + 2u)",
                _ => "f32(code(b, e)) * d",
            };
            format!(
                "fn block(b: u32, xb: u32) -> f32 {{
    let d = half_at(b);
    var s = 0.0;
    for (var e = 0u; e < 32u; e++) {{ s += ld1(xb + e) * ({value}); }}
    return s;
}}
"
            )
        }
        Activations::Q8Blocks => {
            let offset = if t == GgufType::Q4_0 { "    s -= 8i * sum;\n" } else { "" };
            let min = if t == GgufType::Q4_1 { "    r = fma(half_at(b + 2u), f16r(amax / 127.0 * f32(sum)), r);\n" } else { "" };
            format!(
                "fn f16r(v: f32) -> f32 {{ return unpack2x16float(f16_bits(v)).x; }}
fn block(b: u32, xb: u32) -> f32 {{
    var amax = 0.0;
    for (var e = 0u; e < 32u; e++) {{ amax = max(amax, abs(ld1(xb + e))); }}
    let id = select(127.0 / amax, 0.0, amax == 0.0);
    var s = 0i;
    var sum = 0i;
    for (var e = 0u; e < 32u; e++) {{
        let q = i32(round(ld1(xb + e) * id));
        sum += q;
        s += code(b, e) * q;
    }}
{offset}    var r = f32(s) * (half_at(b) * f16r(amax / 127.0));
{min}    return r;
}}
"
            )
        }
    };
    let mut wgsl = header(3, false);
    wgsl += &load_fn(1, ty(DType::F32)?);
    wgsl += &load_fn(2, ty(DType::U8)?);
    wgsl += &format!(
        "fn half_at(b: u32) -> f32 {{ return unpack2x16float(ld2(b) | (ld2(b + 1u) << 8u)).x; }}
fn code(b: u32, e: u32) -> i32 {{ return {code}; }}
{block}var<workgroup> part: array<f32, {GROUP}>;
@compute @workgroup_size({GROUP})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let nn = p[K];
    let kd = p[K + 1u];
    let o = wg.y * nwg.x + wg.x;
    let live = o < p[K + 2u];
    let m = o / max(nn, 1u);
    let n = o % max(nn, 1u);
    let nb = kd / 32u;
    var acc = 0.0;
    if (live) {{
        for (var j = li; j < nb; j += {GROUP}u) {{ acc += block((n * nb + j) * {bytes}u, m * kd + j * 32u); }}
    }}
    part[li] = acc;
    workgroupBarrier();
    for (var s = {half}u; s > 0u; s >>= 1u) {{
        if (li < s) {{ part[li] += part[li + s]; }}
        workgroupBarrier();
    }}
    if (live && li == 0u) {{ b0[p[0] + o] = bitcast<u32>(part[0]); }}
}}
",
        half = GROUP / 2,
    );
    Some(Kernel { name: "dequant matmul", code: wgsl, operands: 3, report: false })
}
