//! Rotary embeddings and attention.
//!
//! Attention runs one workgroup of 64 invocations per query row (batch, head, query): key
//! blocks of 64 are scored one key per invocation, and the row's running maximum, sum and
//! output are rescaled block by block (the online softmax), each invocation holding up to
//! four of the output's channels. Masked scores become −1e9 as OPS.md specifies, so a row
//! that keeps no key averages all of them.

use super::{header, load_fn, ty, Kernel, ENTRY};
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::DType;
use std::fmt::Write;

/// The widest head (of Q·K and of V) the attention kernel holds.
pub const MAX_HEAD: usize = 256;

/// `Rope` / `RopeBackward` of f32 `x` with f32 tables, one element per invocation;
/// `p[K ..]` = `n, width (elements per position), seq, head_dim, n_rot, table row stride,
/// GptJ, negate`.
pub fn rope(x: DType, table: DType) -> Option<Kernel> {
    (x == DType::F32 && table == DType::F32).then_some(())?;
    let mut code = header(4, false);
    code += &load_fn(1, ty(x)?);
    code += &load_fn(2, ty(table)?);
    code += &load_fn(3, ty(table)?);
    code += ENTRY;
    code += "    if (g >= p[K]) { return; }
    let width = p[K + 1u];
    let s = (g / width) % p[K + 2u];
    let hd = p[K + 3u];
    let rot = p[K + 4u];
    let d = (g % width) % hd;
    let x = ld1(g);
    if (d >= rot) { b0[p[0] + g] = bitcast<u32>(x); return; }
    let half = rot / 2u;
    let gptj = p[K + 6u] == 1u;
    let i = select(select(d - half, d, d < half), d / 2u, gptj);
    let c = ld2(s * p[K + 5u] + i);
    let sn = select(1.0, -1.0, p[K + 7u] == 1u) * ld3(s * p[K + 5u] + i);
    var y: f32;
    if (gptj) {
        if ((d & 1u) == 0u) { y = x * c - ld1(g + 1u) * sn; } else { y = ld1(g - 1u) * sn + x * c; }
    } else {
        if (d < half) { y = x * c - ld1(g + half) * sn; } else { y = x * c + ld1(g - half) * sn; }
    }
    b0[p[0] + g] = bitcast<u32>(y);
}
";
    Some(Kernel { name: "rope", code, operands: 4, report: false })
}

/// The attention kernel for `a` over inputs of `dtypes`, or `None` for dtypes, masks or
/// heads it does not take (f32 Q, K, V; masks by position or a key mask of any dtype;
/// heads up to [`MAX_HEAD`] wide; no additive bias).
pub fn for_attention(a: &Attention, dtypes: &[DType]) -> Option<Kernel> {
    if a.head_dim.max(a.v_head_dim.unwrap_or(0)) > MAX_HEAD || a.mask_kind == MaskKind::Bias || a.kv_rows_input(dtypes.len()).is_some() {
        return None;
    }
    if dtypes.len() < 3 || dtypes[..3].iter().any(|&d| d != DType::F32) {
        return None;
    }
    let mask = match a.mask_kind {
        MaskKind::Custom => Some(ty(*dtypes.get(3)?)?),
        _ => None,
    };
    attention(mask.map(|t| t.dtype))
}

/// Attention over f32 Q, K, V (operands 1–3) into operand 0, with a key mask as operand 4
/// when `mask` is its dtype. `p[K ..]`: `rows` (batch·heads·S_q), then the batch, head and row
/// strides of Q, K, V and the output (12), `heads, group, s_q, s_k, d, dv, window, causal`,
/// the scale and softcap as f32 bits (softcap 0: none), the mask's batch stride.
pub fn attention(mask: Option<DType>) -> Option<Kernel> {
    let operands = 4 + usize::from(mask.is_some());
    let mut code = header(operands, false);
    for j in 1..4 {
        code += &load_fn(j, ty(DType::F32)?);
    }
    if let Some(m) = mask {
        code += &load_fn(4, ty(m)?);
    }
    let masked = if mask.is_some() { "keep = keep && f32(ld4(b * p[K + 23u] + ki)) >= 0.5;" } else { "" };
    let _ = write!(
        code,
        "var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> red: array<f32, 64>;
fn wg_reduce(v: f32, li: u32, is_max: bool) -> f32 {{
    red[li] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {{
        if (li < s) {{ red[li] = select(red[li] + red[li + s], max(red[li], red[li + s]), is_max); }}
        workgroupBarrier();
    }}
    let r = red[0];
    workgroupBarrier();
    return r;
}}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let row = wg.y * nwg.x + wg.x;
    if (row >= p[K]) {{ return; }}
    let heads = p[K + 13u];
    let s_q = p[K + 15u];
    let s_k = p[K + 16u];
    let d = p[K + 17u];
    let dv = p[K + 18u];
    let qi = row % s_q;
    let h = (row / s_q) % heads;
    let b = row / (s_q * heads);
    let hk = h / p[K + 14u];
    let qb = b * p[K + 1u] + h * p[K + 2u] + qi * p[K + 3u];
    let kb = b * p[K + 4u] + hk * p[K + 5u];
    let vb = b * p[K + 7u] + hk * p[K + 8u];
    let ob = b * p[K + 10u] + h * p[K + 11u] + qi * p[K + 12u];
    let window = p[K + 19u];
    let causal = p[K + 20u] == 1u;
    let scale = bitcast<f32>(p[K + 21u]);
    let cap = bitcast<f32>(p[K + 22u]);
    let abs_q = i32(s_k) - i32(s_q) + i32(qi);
    for (var c = li; c < d; c += 64u) {{ qs[c] = ld1(qb + c); }}
    workgroupBarrier();
    var m = bitcast<f32>(0xff800000u);
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < s_k; k0 += 64u) {{
        let ki = k0 + li;
        var s = bitcast<f32>(0xff800000u);
        if (ki < s_k) {{
            let kr = kb + ki * p[K + 6u];
            var dot = 0.0;
            for (var c = 0u; c < d; c++) {{ dot += qs[c] * ld2(kr + c); }}
            s = dot * scale;
            if (cap != 0.0) {{ s = cap * tanh(s / cap); }}
            var keep = true;
            if (causal || window > 0u) {{ keep = i32(ki) <= abs_q; }}
            if (window > 0u) {{ keep = keep && i32(ki + window) > abs_q; }}
            {masked}
            if (!keep) {{ s = -1e9; }}
        }}
        let bm = wg_reduce(s, li, true);
        let mn = max(m, bm);
        var e = 0.0;
        if (ki < s_k) {{ e = exp(s - mn); }}
        sc[li] = e;
        let f = exp(m - mn);
        l = l * f + wg_reduce(e, li, false);
        m = mn;
        acc *= f;
        let count = min(64u, s_k - k0);
        for (var j = 0u; j < count; j++) {{
            let w = sc[j];
            let vr = vb + (k0 + j) * p[K + 9u];
            for (var t = 0u; t < 4u; t++) {{
                let c = li + 64u * t;
                if (c < dv) {{ acc[t] += w * ld3(vr + c); }}
            }}
        }}
        workgroupBarrier();
    }}
    for (var t = 0u; t < 4u; t++) {{
        let c = li + 64u * t;
        if (c < dv) {{ b0[p[0] + ob + c] = bitcast<u32>(acc[t] / l); }}
    }}
}}
"
    );
    Some(Kernel { name: "attention", code, operands, report: false })
}
