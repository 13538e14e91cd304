//! Row kernels: softmax and the norms (plain or fused with a residual), one workgroup of 256
//! invocations per row, statistics reduced through workgroup memory in f32.
//!
//! A tensor is seen as `[outer, n, inner]` around the kernel's axis; row `r` is `(r / inner,
//! r % inner)` and its element `k` lies at `(r / inner · n + k) · inner + r % inner`.
//! Parameters: `p[K]` the rows (with the walk of the residual's rows for fused norms), then
//! `p[K + 36 ..]` = `n, inner, eps`.

use super::{header, load_fn, ty, Kernel, WALK};
use rlx_ir::DType;
use std::fmt::Write;

/// Which statistics a norm takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// Mean and variance.
    Layer,
    /// Root mean square, no mean subtraction.
    Rms,
}

/// Workgroup-wide sum and max of one f32 per invocation, and the row's entry point.
const ROW: &str = "var<workgroup> red: array<f32, 256>;
fn wg_sum(v: f32, li: u32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (li < s) { red[li] += red[li + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
fn wg_max(v: f32, li: u32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (li < s) { let o = red[li + s]; if (o > red[li] || nan(o)) { red[li] = o; } }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wg.y * nwg.x + wg.x;
    if (row >= p[K]) { return; }
    let n = p[K + 36u];
    let inner = p[K + 37u];
    let base = (row / inner) * n * inner + row % inner;
";

/// `Softmax` of f32 along one axis: max, sum of exponentials, then the quotients.
pub fn softmax(d: DType) -> Option<Kernel> {
    (d == DType::F32).then_some(())?;
    let mut code = header(2, false);
    code += &load_fn(1, ty(d)?);
    code += ROW;
    code += "    var m = bitcast<f32>(0xff800000u);
    for (var k = li; k < n; k += 256u) { let v = ld1(base + k * inner); if (v > m || nan(v)) { m = v; } }
    m = wg_max(m, li);
    var s = 0.0;
    for (var k = li; k < n; k += 256u) { s += exp(ld1(base + k * inner) - m); }
    s = wg_sum(s, li);
    for (var k = li; k < n; k += 256u) { b0[p[0] + base + k * inner] = bitcast<u32>(exp(ld1(base + k * inner) - m) / s); }
}
";
    Some(Kernel { name: "softmax", code, operands: 2, report: false })
}

/// `LayerNorm` / `RmsNorm` of f32 along one axis (`residual` `None`), operands `(out, x, gamma,
/// beta)`; with `residual` `Some(has_bias)`, the fused form over the last axis, operands `(out, x, residual [, bias],
/// gamma, beta)`: the sum `x + residual [+ bias]` is written to `out` first and normalized
/// there. The residual's row offset is `walk(row, 0)` over x's leading dims and its feature
/// stride `p[K + 39]` (0 where it broadcasts).
pub fn norm(kind: Norm, residual: Option<bool>, d: DType) -> Option<Kernel> {
    (d == DType::F32).then_some(())?;
    let operands = match residual {
        None => 4,
        Some(bias) => 5 + usize::from(bias),
    };
    let (gamma, beta) = (operands - 2, operands - 1);
    let t = ty(d)?;
    let mut code = header(operands, false);
    if residual.is_some() {
        code += WALK;
    }
    for j in 1..operands {
        code += &load_fn(j, t);
    }
    code += ROW;
    let x = match residual {
        None => "ld1(base + k * inner)".to_string(),
        Some(bias) => {
            let b = if bias { " + ld3(k)" } else { "" };
            let _ = write!(
                code,
                "    let rbase = walk(row, 0u);
    for (var k = li; k < n; k += 256u) {{ b0[p[0] + base + k] = bitcast<u32>(ld1(base + k) + ld2(rbase + k * p[K + 39u]){b}); }}
    storageBarrier();
    workgroupBarrier();
"
            );
            "bitcast<f32>(b0[p[0] + base + k * inner])".to_string()
        }
    };
    let _ = writeln!(code, "    let eps = bitcast<f32>(p[K + 38u]);");
    match kind {
        Norm::Layer => {
            let _ = write!(
                code,
                "    var s = 0.0;
    for (var k = li; k < n; k += 256u) {{ s += {x}; }}
    let mean = wg_sum(s, li) / f32(n);
    var q = 0.0;
    for (var k = li; k < n; k += 256u) {{ let c = {x} - mean; q += c * c; }}
    let r = 1.0 / sqrt(wg_sum(q, li) / f32(n) + eps);
"
            );
        }
        Norm::Rms => {
            let _ = write!(
                code,
                "    let mean = 0.0;
    var q = 0.0;
    for (var k = li; k < n; k += 256u) {{ let c = {x}; q += c * c; }}
    let r = 1.0 / sqrt(wg_sum(q, li) / f32(n) + eps);
"
            );
        }
    }
    let _ = write!(
        code,
        "    for (var k = li; k < n; k += 256u) {{ b0[p[0] + base + k * inner] = bitcast<u32>(({x} - mean) * r * ld{gamma}(k) + ld{beta}(k)); }}\n}}\n"
    );
    let name = match (kind, residual.is_some()) {
        (Norm::Layer, false) => "layer norm",
        (Norm::Rms, false) => "rms norm",
        (Norm::Layer, true) => "fused residual layer norm",
        (Norm::Rms, true) => "fused residual rms norm",
    };
    Some(Kernel { name, code, operands, report: false })
}

/// `ArgMax` / `ArgMin` (`max`) of f32 along one axis into i64 (two words per index): each
/// invocation keeps the first best of its elements, then the row reduces `(value, index)`
/// pairs where NaN beats every number and ties go to the lower index, which picks the first
/// extreme (`np.argmax`) whatever the order of reduction.
pub fn arg_extreme(max: bool, d: DType) -> Option<Kernel> {
    (d == DType::F32).then_some(())?;
    let better = if max { ">" } else { "<" };
    let mut code = header(2, false);
    code += &load_fn(1, ty(d)?);
    let _ = write!(
        code,
        "var<workgroup> vals: array<f32, 256>;
var<workgroup> idxs: array<u32, 256>;
fn beats(v: f32, i: u32, w: f32, j: u32) -> bool {{
    if (nan(w)) {{ return nan(v) && i < j; }}
    if (nan(v)) {{ return true; }}
    return v {better} w || (v == w && i < j);
}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let row = wg.y * nwg.x + wg.x;
    if (row >= p[K]) {{ return; }}
    let n = p[K + 36u];
    let inner = p[K + 37u];
    let base = (row / inner) * n * inner + row % inner;
    var bv = 0.0;
    var bi = 0xffffffffu;
    for (var k = li; k < n; k += 256u) {{
        let v = ld1(base + k * inner);
        if (bi == 0xffffffffu || beats(v, k, bv, bi)) {{ bv = v; bi = k; }}
    }}
    vals[li] = bv;
    idxs[li] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {{
        if (li < s && idxs[li + s] != 0xffffffffu && (idxs[li] == 0xffffffffu || beats(vals[li + s], idxs[li + s], vals[li], idxs[li]))) {{
            vals[li] = vals[li + s];
            idxs[li] = idxs[li + s];
        }}
        workgroupBarrier();
    }}
    if (li == 0u) {{
        b0[(p[0] + row) * 2u] = idxs[0];
        b0[(p[0] + row) * 2u + 1u] = 0u;
    }}
}}
"
    );
    Some(Kernel { name: if max { "argmax" } else { "argmin" }, code, operands: 2, report: false })
}
