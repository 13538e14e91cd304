//! WGSL for every kernel the backend launches, generated from the op and its dtypes alone
//! (never from shapes, which arrive in the parameter buffer), so one pipeline serves every
//! shape. Activations and their derivatives come from the IR's expression table
//! ([`rlx_ir::ops::elementwise::emit`]); row kernels are in [`rows`], products in [`matmul`]
//! (over GGUF blocks in [`quant`]),
//! fused regions in [`region`], rotary embeddings and attention in [`attention`].
//!
//! Every operand is bound as words (`array<u32>`), read and written through per-dtype
//! functions: f16 and bf16 are unpacked to f32, narrow integers widened to i32 / u32, so no
//! optional adapter feature is needed and 1- and 2-byte outputs are written a whole word per
//! invocation. Binding 0 is the parameter buffer `p`: first the element offset of each
//! operand in its binding (operands in order: outputs, then inputs), then the kernel's own
//! parameters from `p[K]` on.

pub mod attention;
pub mod matmul;
pub mod quant;
pub mod region;
pub mod rows;

use rlx_ir::ops::elementwise::{emit, table, ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::quant::QuantScheme;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Op};
use std::fmt::Write;

/// A kernel's WGSL, its family (for errors) and how many operand bindings it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub name: &'static str,
    pub code: String,
    /// Operand bindings (1..=operands); binding 0 is the parameter buffer.
    pub operands: usize,
    /// Whether its last binding is the error report (`[flag, value, extent, _]` atomics).
    pub report: bool,
}

/// Invocations per workgroup of the one-dimensional kernels.
pub const GROUP: u32 = 256;

/// The most axes a strided walk takes (after merging).
pub const RANK: usize = 8;

/// How a dtype sits in words and which WGSL type its arithmetic runs in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ty {
    pub dtype: DType,
    /// `f32`, `i32` or `u32`.
    pub compute: &'static str,
    /// Bytes per element: 1, 2 or 4.
    pub size: usize,
}

impl Ty {
    pub fn float(&self) -> bool {
        self.compute == "f32"
    }

    /// Elements per word.
    pub fn per_word(&self) -> usize {
        4 / self.size
    }

    /// `(min, max)` of a narrow integer, where a cast saturates or wraps.
    fn range(&self) -> Option<(i64, i64)> {
        Some(match self.dtype {
            DType::I8 => (-128, 127),
            DType::U8 => (0, 255),
            DType::I16 => (-32768, 32767),
            DType::U16 => (0, 65535),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::U32 => (0, u32::MAX as i64),
            _ => return None,
        })
    }

    /// A literal `v` of the compute type.
    fn lit(&self, v: i64) -> String {
        match self.compute {
            "f32" => format!("{v}.0"),
            "i32" if v == i32::MIN as i64 => "(-2147483647i - 1i)".into(),
            "i32" => format!("{v}i"),
            _ => format!("{v}u"),
        }
    }
}

/// The word form of `d`, or `None` for dtypes the kernels do not compute in (f64, 64-bit
/// integers, complex, 8/4-bit floats, sub-byte integers).
pub fn ty(d: DType) -> Option<Ty> {
    let (compute, size) = match d {
        DType::F32 => ("f32", 4),
        DType::F16 | DType::BF16 => ("f32", 2),
        DType::I32 => ("i32", 4),
        DType::I16 => ("i32", 2),
        DType::I8 => ("i32", 1),
        DType::U32 => ("u32", 4),
        DType::U16 => ("u32", 2),
        DType::U8 | DType::Bool => ("u32", 1),
        _ => return None,
    };
    Some(Ty { dtype: d, compute, size })
}

/// Whether the elementwise kernels take `d`.
pub fn supported(d: DType) -> bool {
    ty(d).is_some()
}

/// The declarations every kernel starts with: `p`, operands `b0..` (the report last when
/// `report`), `K` (where the kernel's own parameters start) and the f16 / bf16 codecs.
fn header(operands: usize, report: bool) -> String {
    let mut s = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    let words = operands - usize::from(report);
    for j in 0..words {
        let _ = writeln!(s, "@group(0) @binding({}) var<storage, read_write> b{j}: array<u32>;", j + 1);
    }
    if report {
        let _ = writeln!(s, "@group(0) @binding({operands}) var<storage, read_write> err: array<atomic<u32>, 4>;");
    }
    let _ = writeln!(s, "const K: u32 = {words}u;");
    s += CODECS;
    s
}

/// `nan`, tested on the bits (WGSL lets a compiler assume that `v != v` is false), and f16
/// and bf16 from f32: round to nearest even, NaN kept quiet, overflow to ±inf.
const CODECS: &str = "fn nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
fn f16_bits(v: f32) -> u32 {
    if (nan(v)) { return 0x7e00u; }
    if (abs(v) >= 65520.0) { return select(0x7c00u, 0xfc00u, v < 0.0); }
    return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;
}
fn bf16_bits(v: f32) -> u32 {
    let u = bitcast<u32>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
    return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}
";

/// `fn ld{j}(i: u32) -> compute`: element `i` of operand `j` (after its offset).
pub fn load_fn(j: usize, t: Ty) -> String {
    let e = format!("p[{j}u] + i");
    let body = match t.dtype {
        DType::F32 => format!("bitcast<f32>(b{j}[{e}])"),
        DType::I32 => format!("bitcast<i32>(b{j}[{e}])"),
        DType::U32 => format!("b{j}[{e}]"),
        DType::F16 => format!("unpack2x16float(b{j}[e >> 1u])[e & 1u]"),
        DType::BF16 => format!("bitcast<f32>(((b{j}[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu) << 16u)"),
        DType::U16 => format!("(b{j}[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu"),
        DType::I16 => format!("bitcast<i32>(b{j}[e >> 1u] << ((1u - (e & 1u)) * 16u)) >> 16u"),
        DType::U8 | DType::Bool => format!("(b{j}[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu"),
        DType::I8 => format!("bitcast<i32>(b{j}[e >> 2u] << ((3u - (e & 3u)) * 8u)) >> 24u"),
        _ => unreachable!("ty() admits only the dtypes above"),
    };
    if t.size == 4 {
        format!("fn ld{j}(i: u32) -> {c} {{ return {body}; }}\n", c = t.compute)
    } else {
        format!("fn ld{j}(i: u32) -> {c} {{ let e = {e}; return {body}; }}\n", c = t.compute)
    }
}

/// The bits of compute value `v` stored as `t` (in the low `8·size` bits).
pub fn bits(t: Ty, v: &str) -> String {
    match t.dtype {
        DType::F32 | DType::I32 => format!("bitcast<u32>({v})"),
        DType::U32 => v.to_string(),
        DType::F16 => format!("f16_bits({v})"),
        DType::BF16 => format!("bf16_bits({v})"),
        DType::I16 | DType::I8 => format!("(bitcast<u32>({v}) & {:#x}u)", (1u64 << (8 * t.size)) - 1),
        _ => format!("({v} & {:#x}u)", (1u64 << (8 * t.size)) - 1),
    }
}

/// The strided walk: element `e` of an iteration space of `p[K + 1]` dims (`p[K + 2 ..]`)
/// at operand `o`'s signed element strides (`p[K + 10 + 8·o ..]`).
const WALK: &str = "fn walk(e: u32, o: u32) -> u32 {
    var r = e;
    var off = 0i;
    for (var d = p[K + 1u]; d > 0u; d--) {
        let dim = p[K + 1u + d];
        let q = r % dim;
        r = r / dim;
        off += i32(q) * bitcast<i32>(p[K + 9u + 8u * o + d]);
    }
    return u32(off);
}
";

/// The entry point of a one-dimensional kernel: `g` the invocation's index over a grid of up
/// to 65535 × 65535 workgroups.
const ENTRY: &str = "@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = (wg.y * nwg.x + wg.x) * 256u + li;
";

/// The rest of a one-dimensional kernel after [`ENTRY`] that writes its output a word per
/// invocation (`per` elements of `p[K]`, 1 for 4-byte elements): `element` (WGSL statements
/// over element `e`, the `k`-th of the word) ORs each element's bits into `word`.
fn words(per: usize, element: &str) -> String {
    format!(
        "    let n = p[K];
    if (g * {per}u >= n) {{ return; }}
    var word = 0u;
    for (var k = 0u; k < {per}u; k++) {{
        let e = g * {per}u + k;
        if (e >= n) {{ break; }}
{element}    }}
    b0[p[0] / {per}u + g] = word;
}}
"
    )
}

/// One output word per invocation (one element for 4-byte outputs) from up to three
/// operands read through the walk (`p[K + 34]` bit `o` set: operand `o` is read at the output's
/// own index); the operands load as `a`, `b`, `c` in their compute types and `expr` gives the
/// output's compute value; `defs` are functions it calls. `p[K]` holds the element count.
fn map(name: &'static str, out: DType, ins: &[DType], defs: &str, expr: &str) -> Option<Kernel> {
    let o = ty(out)?;
    let mut code = header(ins.len() + 1, false);
    code += WALK;
    code += defs;
    let mut body = String::new();
    for (i, &d) in ins.iter().enumerate() {
        let t = ty(d)?;
        code += &load_fn(i + 1, t);
        let v = ["a", "b", "c"][i];
        let _ = writeln!(body, "        let {v} = ld{j}(select(walk(e, {i}u), e, ((p[K + 34u] >> {i}u) & 1u) == 1u));", j = i + 1);
    }
    code += ENTRY;
    code += &words(o.per_word(), &format!("{body}        let v: {c} = {expr};\n        word |= {bits} << (k * {sh}u);\n", c = o.compute, bits = bits(o, "v"), sh = 8 * o.size));
    Some(Kernel { name, code, operands: ins.len() + 1, report: false })
}

/// Whether `d` computes in `f32`.
fn float(d: DType) -> bool {
    ty(d).is_some_and(|t| t.float())
}

/// `f(x)` of an activation over a float dtype.
pub fn activation(kind: ActivationKind, d: DType) -> Option<Kernel> {
    float(d).then_some(())?;
    let defs = emit::prelude(emit::Target::Wgsl) + &emit::function(emit::Target::Wgsl, "f", &table::forward_expr(kind));
    map("activation", d, &[d], &defs, "f(a)")
}

/// `ȳ·f′(x)` (inputs `x`, `ȳ`) over a float dtype.
pub fn activation_backward(kind: ActivationKind, d: DType) -> Option<Kernel> {
    float(d).then_some(())?;
    let defs = emit::prelude(emit::Target::Wgsl) + &emit::function(emit::Target::Wgsl, "df", &table::derivative_expr(kind));
    map("activation backward", d, &[d, d], &defs, "b * df(a)")
}

/// `ȳ·1[x > 0]` (inputs `x`, `ȳ`).
pub fn relu_backward(d: DType) -> Option<Kernel> {
    float(d).then_some(())?;
    map("relu backward", d, &[d, d], "", "select(0.0, b, a > 0.0)")
}

/// `a op b` by OPS.md's rules: integer division and remainder truncate, by zero give 0, and
/// `MIN / −1` wraps; float max/min propagate NaN; bitwise ops on integers only; no Pow
/// (WGSL's `pow` is undefined for negative bases) and no shifts.
pub fn binary(op: BinaryOp, d: DType) -> Option<Kernel> {
    map("binary", d, &[d, d], "", &binary_expr(op, d)?)
}

/// [`binary`]'s value of `a op b` (operands `a`, `b` in `d`'s compute type).
pub fn binary_expr(op: BinaryOp, d: DType) -> Option<String> {
    let t = ty(d).filter(|_| d != DType::Bool)?;
    let zero = t.lit(0);
    Some(match (op, t.float()) {
        (BinaryOp::Add, _) => "a + b".into(),
        (BinaryOp::Sub, _) => "a - b".into(),
        (BinaryOp::Mul, _) => "a * b".into(),
        (BinaryOp::Div, true) => "a / b".into(),
        (BinaryOp::Div, false) => format!("select(a / b, {zero}, b == {zero})"),
        (BinaryOp::Mod, true) => "a - b * trunc(a / b)".into(),
        (BinaryOp::Mod, false) => format!("select(a % b, {zero}, b == {zero})"),
        (BinaryOp::Max, true) => "select(b, a, a > b || nan(a))".into(),
        (BinaryOp::Min, true) => "select(b, a, a < b || nan(a))".into(),
        (BinaryOp::Max, false) => "max(a, b)".into(),
        (BinaryOp::Min, false) => "min(a, b)".into(),
        (BinaryOp::Atan2, true) => "atan2(a, b)".into(),
        (BinaryOp::BitAnd, false) => "a & b".into(),
        (BinaryOp::BitOr, false) => "a | b".into(),
        (BinaryOp::BitXor, false) => "a ^ b".into(),
        _ => return None,
    })
}

/// `a op b` into Bool, IEEE (only `Ne` holds with a NaN).
pub fn compare(op: CmpOp, d: DType) -> Option<Kernel> {
    map("compare", DType::Bool, &[d, d], "", &compare_expr(op))
}

/// [`compare`]'s value: 1 where `a op b` holds.
pub fn compare_expr(op: CmpOp) -> String {
    format!("select(0u, 1u, a {} b)", emit::cmp_symbol(op))
}

/// [`select`]'s value: `b` where `a ≠ 0`, else `c`.
pub fn select_expr(cond: DType) -> Option<String> {
    Some(format!("select(c, b, a != {})", ty(cond)?.lit(0)))
}

/// `cond ≠ 0 ? t : f` (inputs `cond`, `t`, `f`).
pub fn select(cond: DType, d: DType) -> Option<Kernel> {
    map("where", d, &[cond, d, d], "", &select_expr(cond)?)
}

/// `a·b + c` in f32 (WGSL's `fma`).
pub fn fma(d: DType) -> Option<Kernel> {
    float(d).then_some(())?;
    map("fma", d, &[d, d, d], "", "fma(a, b, c)")
}

/// `Cast` with Rust `as` semantics: floats to integers truncate and saturate (NaN → 0),
/// integers wrap, anything to Bool is `≠ 0`, floats round to nearest even.
pub fn cast(from: DType, to: DType) -> Option<Kernel> {
    map("cast", to, &[from], "", &cast_expr(from, to)?)
}

/// [`cast`]'s value of `a` (in `from`'s compute type) in `to`'s compute type.
pub fn cast_expr(from: DType, to: DType) -> Option<String> {
    let (f, t) = (ty(from)?, ty(to)?);
    if to == DType::Bool {
        let nan = if f.float() { " || nan(a)" } else { "" };
        return Some(format!("select(0u, 1u, a != {}{nan})", f.lit(0)));
    }
    Some(match (f.float(), t.compute) {
        (true, "f32") => "a".into(),
        (true, c) => {
            let (lo, hi) = t.range()?;
            // Bounds as f32: a value at or past the type's f32 edge saturates.
            let (flo, fhi) = (lo as f32, hi as f32);
            format!("select(select(select({c}(a), {l}, a <= {flo:?}), {h}, a >= {fhi:?}), {z}, nan(a))", l = t.lit(lo), h = t.lit(hi), z = t.lit(0))
        }
        (false, c) => format!("{c}(a)"),
    })
}

/// Bytes → the WGSL expression of the word element `e` of a source of `size`-byte elements
/// in binding 1 (offset applied), shifted to the low bits.
fn fetch(size: usize, e: &str) -> String {
    match size {
        4 => format!("b1[p[1] + {e}]"),
        2 => format!("((b1[(p[1] + {e}) >> 1u] >> (((p[1] + {e}) & 1u) * 16u)) & 0xffffu)"),
        _ => format!("((b1[(p[1] + {e}) >> 2u] >> (((p[1] + {e}) & 3u) * 8u)) & 0xffu)"),
    }
}

/// Element moves of `size` bytes (1, 2, 4 or 8): element `e` of the walk (`p[K]` elements)
/// reads the input at `p[K + 35] + walk(e, 0)` and writes the output at `p[K + 36] +
/// walk(e, 1)`. 1- and 2-byte elements are moved a whole output word per invocation, so
/// their output must be contiguous from a word boundary (operand 1's walk the identity, base 0).
pub fn copy(size: usize) -> Option<Kernel> {
    let mut code = header(2, false);
    code += WALK;
    code += ENTRY;
    match size {
        4 | 8 => {
            let w = size / 4;
            let _ = write!(code, "    if (g >= p[K]) {{ return; }}\n    let src = (p[1] + p[K + 35u] + walk(g, 0u)) * {w}u;\n    let dst = (p[0] + p[K + 36u] + walk(g, 1u)) * {w}u;\n");
            for k in 0..w {
                let _ = writeln!(code, "    b0[dst + {k}u] = b1[src + {k}u];");
            }
            code += "}\n";
        }
        1 | 2 => code += &words(4 / size, &format!("        word |= {} << (k * {}u);\n", fetch(size, "p[K + 35u] + walk(e, 0u)"), 8 * size)),
        _ => return None,
    }
    Some(Kernel { name: "copy", code, operands: 2, report: false })
}

/// `Gather` of `size`-byte elements (1, 2, 4 or 8) by integer indices (i32, u32 or i64):
/// `out[o, j, r] = in[o, idx[j], r]` with `p[K ..]` = `n, inner, count, extent`. An index
/// outside `[0, extent)` writes 0 and reports itself (`[1, index, extent]`).
pub fn gather(size: usize, index: DType) -> Option<Kernel> {
    let read_index = match index {
        DType::I32 => "let raw = b2[p[2] + j]; let ok = bitcast<i32>(raw) >= 0i && raw < extent;",
        DType::U32 => "let raw = b2[p[2] + j]; let ok = raw < extent;",
        DType::I64 => "let raw = b2[(p[2] + j) * 2u]; let ok = b2[(p[2] + j) * 2u + 1u] == 0u && raw < extent;",
        _ => return None,
    };
    let mut code = header(4, true);
    let _ = write!(
        code,
        "fn source(e: u32) -> u32 {{
    let inner = p[K + 1u];
    let count = p[K + 2u];
    let extent = p[K + 3u];
    let r = e % inner;
    let q = e / inner;
    let j = q % count;
    let o = q / count;
    {read_index}
    if (!ok) {{
        if (atomicExchange(&err[0], 1u) == 0u) {{ atomicStore(&err[1], raw); atomicStore(&err[2], extent); }}
        return 0xffffffffu;
    }}
    return (o * extent + raw) * inner + r;
}}
"
    );
    code += ENTRY;
    match size {
        4 | 8 => {
            let w = size / 4;
            let _ = write!(code, "    if (g >= p[K]) {{ return; }}\n    let s = source(g);\n");
            for k in 0..w {
                let _ = writeln!(code, "    b0[(p[0] + g) * {w}u + {k}u] = select(b1[(p[1] + s) * {w}u + {k}u], 0u, s == 0xffffffffu);");
            }
            code += "}\n";
        }
        1 | 2 => {
            let element = format!("        let s = source(e);\n        if (s != 0xffffffffu) {{ word |= {} << (k * {}u); }}\n", fetch(size, "s"), 8 * size);
            code += &words(4 / size, &element);
        }
        _ => return None,
    }
    Some(Kernel { name: "gather", code, operands: 4, report: true })
}

/// `Reduce` of f32, one workgroup per output element: element `g` of the kept walk (operand
/// 0) gives the first input element, the reduced walk (operand 1, a second walk in `p[K + 40
/// ..]`) the `p[K + 39]` others, which the workgroup's invocations take in turns and combine
/// in workgroup memory; `p[K]` outputs.
pub fn reduce(op: ReduceOp, d: DType) -> Option<Kernel> {
    (d == DType::F32).then_some(())?;
    let (init, step) = match op {
        ReduceOp::Sum | ReduceOp::Mean => ("0.0", "a + b"),
        ReduceOp::Prod => ("1.0", "a * b"),
        ReduceOp::Max => ("bitcast<f32>(0xff800000u)", "select(a, b, b > a || nan(b))"),
        ReduceOp::Min => ("bitcast<f32>(0x7f800000u)", "select(a, b, b < a || nan(b))"),
    };
    let finish = if op == ReduceOp::Mean { "red[0] / f32(m)" } else { "red[0]" };
    let mut code = header(2, false);
    code += WALK;
    code += "fn walk2(e: u32) -> u32 {
    var r = e;
    var off = 0u;
    for (var d = p[K + 40u]; d > 0u; d--) {
        let dim = p[K + 40u + d];
        let q = r % dim;
        r = r / dim;
        off += q * p[K + 48u + d];
    }
    return off;
}
var<workgroup> red: array<f32, 256>;
";
    code += &load_fn(1, ty(d)?);
    let _ = write!(
        code,
        "fn combine(a: f32, b: f32) -> f32 {{ return {step}; }}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let g = wg.y * nwg.x + wg.x;
    if (g >= p[K]) {{ return; }}
    let base = walk(g, 0u);
    let m = p[K + 39u];
    var acc: f32 = {init};
    for (var r = li; r < m; r += 256u) {{ acc = combine(acc, ld1(base + walk2(r))); }}
    red[li] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {{
        if (li < s) {{ red[li] = combine(red[li], red[li + s]); }}
        workgroupBarrier();
    }}
    if (li == 0u) {{ b0[p[0] + g] = bitcast<u32>({finish}); }}
}}
"
    );
    Some(Kernel { name: "reduce", code, operands: 2, report: false })
}

/// `KvAppend`'s write of `size`-byte elements (4 or 8), in place: the `n = outer·steps·inner`
/// elements of `rows` (operand 1) go to positions `p..p + steps` along the axis of a cache
/// (operand 0) of capacity `cap`, `p` being the i64 `at` (operand 2) when `p[K + 5]` is 1, else
/// `p[K + 4]`; `p[K ..]` = `n, steps, inner, cap`. A position where the rows do not fit
/// writes nothing and reports itself (`[2, p, cap]`).
pub fn kv_write(size: usize) -> Option<Kernel> {
    let w = match size {
        4 | 8 => size / 4,
        _ => return None,
    };
    let mut code = header(4, true);
    code += ENTRY;
    let _ = write!(
        code,
        "    let n = p[K];
    let steps = p[K + 1u];
    let inner = p[K + 2u];
    let cap = p[K + 3u];
    var pos = p[K + 4u];
    var ok = true;
    if (p[K + 5u] == 1u) {{ pos = b2[p[2] * 2u]; ok = b2[p[2] * 2u + 1u] == 0u; }}
    ok = ok && steps <= cap && pos <= cap - steps;
    if (!ok) {{
        if (g == 0u && atomicExchange(&err[0], 2u) == 0u) {{ atomicStore(&err[1], pos); atomicStore(&err[2], cap); }}
        return;
    }}
    if (g >= n) {{ return; }}
    let span = steps * inner;
    let dst = ((g / span) * cap + pos) * inner + g % span;
"
    );
    for k in 0..w {
        let _ = writeln!(code, "    b0[(p[0] + dst) * {w}u + {k}u] = b1[(p[1] + g) * {w}u + {k}u];");
    }
    code += "}\n";
    Some(Kernel { name: "kv append", code, operands: 4, report: true })
}

/// The kernels a node of `op` over inputs of `dtypes` launches (empty for byte copies), or
/// `None` when the backend has no kernel for it: what the claims, the compile-time build and
/// the naga check all read.
pub fn for_node(op: &Op, dtypes: &[DType]) -> Option<Vec<Kernel>> {
    let d = |i: usize| dtypes.get(i).copied();
    let one = |k: Option<Kernel>| k.map(|k| vec![k]);
    match op {
        Op::Activation(a) => one(activation(a.kind, d(0)?)),
        Op::ActivationBackward(a) => one(activation_backward(a.kind, d(0)?)),
        Op::ReluBackward(_) => one(relu_backward(d(0)?)),
        Op::Binary(b) => one(binary(b.op, d(0)?)),
        Op::Compare(c) => one(compare(c.op, d(0)?)),
        Op::Where(_) => one(select(d(0)?, d(1)?)),
        Op::Fma(_) => one(fma(d(0)?)),
        Op::Cast(c) => one(cast(d(0)?, c.to)),
        Op::Reshape(_) | Op::StopGradient(_) => Some(Vec::new()),
        Op::Transpose(_) | Op::Expand(_) | Op::Narrow(_) | Op::Slice(_) | Op::Reverse(_) => one(copy(d(0)?.size())),
        Op::Concat(_) => matches!(d(0)?.size(), 4 | 8).then(|| copy(d(0)?.size())).flatten().map(|k| vec![k]),
        Op::Gather(_) => one(gather(d(0)?.size(), d(1)?)),
        Op::Reduce(r) => one(reduce(r.op, d(0)?)),
        Op::MatMul(_) => (d(0)? == d(1)?).then(|| matmul::matmul(d(0)?, None)).flatten().map(|k| vec![k]),
        Op::FusedMatMulBiasAct(f) => (dtypes == [d(0)?; 3]).then(|| matmul::matmul(d(0)?, Some(f.activation))).flatten().map(|k| vec![k]),
        Op::DequantMatMul(q) => match (&q.scheme, dtypes) {
            (QuantScheme::Gguf(t), [DType::F32, DType::U8]) => one(quant::dequant_matmul(*t, q.activations)),
            _ => None,
        },
        Op::Softmax(_) => one(rows::softmax(d(0)?)),
        Op::ArgMax(_) => one(rows::arg_extreme(true, d(0)?)),
        Op::ArgMin(_) => one(rows::arg_extreme(false, d(0)?)),
        Op::LayerNorm(_) | Op::LayerNorm2d(_) => one(rows::norm(rows::Norm::Layer, None, d(0)?)),
        Op::RmsNorm(_) => one(rows::norm(rows::Norm::Rms, None, d(0)?)),
        Op::FusedResidualLN(n) => one(rows::norm(rows::Norm::Layer, Some(n.has_bias), d(0)?).filter(|_| d(1) == d(0))),
        Op::FusedResidualRmsNorm(n) => one(rows::norm(rows::Norm::Rms, Some(n.has_bias), d(0)?).filter(|_| d(1) == d(0))),
        Op::Rope(_) | Op::RopeBackward(_) => one(attention::rope(d(0)?, d(1)?)),
        Op::Attention(a) => attention::for_attention(a, dtypes).map(|k| vec![k]),
        Op::ElementwiseRegion(r) => one(region::region(r, dtypes)),
        Op::KvAppend(_) if dtypes.get(2).is_none_or(|&at| at == DType::I64) => Some(vec![kv_write(d(0)?.size())?, copy(d(0)?.size())?]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_saturate_and_wrap_as_rust_does() {
        let f_to_i8 = cast_expr(DType::F32, DType::I8).unwrap();
        assert!(f_to_i8.contains("-128i") && f_to_i8.contains("127i") && f_to_i8.contains("nan(a)"), "{f_to_i8}");
        assert_eq!(cast_expr(DType::I32, DType::U8).unwrap(), "u32(a)", "integers wrap when stored");
        assert_eq!(cast_expr(DType::F32, DType::Bool).unwrap(), "select(0u, 1u, a != 0.0 || nan(a))");
        assert!(cast_expr(DType::F64, DType::F32).is_none(), "no f64 in WGSL");
    }

    #[test]
    fn only_integers_take_bitwise_ops_and_no_kernel_has_pow() {
        assert!(binary_expr(BinaryOp::BitAnd, DType::F32).is_none());
        assert_eq!(binary_expr(BinaryOp::BitXor, DType::U8).unwrap(), "a ^ b");
        assert!(binary_expr(BinaryOp::Pow, DType::F32).is_none());
        assert!(binary_expr(BinaryOp::Shl, DType::I32).is_none());
        assert!(binary_expr(BinaryOp::Add, DType::I64).is_none());
    }
}
