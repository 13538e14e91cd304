//! CUDA C for every kernel the backend launches, generated from the op and its dtypes alone
//! (never from shapes, which arrive as arguments), so one compiled kernel serves every shape.
//! Each source defines `extern "C" __global__ void k(...)`, whose body begins with `CHAIN()`
//! (programmatic dependent launch, see [`PRELUDE`]). Activations and their derivatives
//! come from the IR's expression table ([`rlx_ir::ops::elementwise::emit`]). Row kernels
//! (softmax, norms, arg-extrema, scans, cross-entropy) are in [`rows`], attention and rotary
//! embeddings in [`attention`].

pub mod attention;
pub mod decode;
pub mod flash;
pub mod fused;
pub mod matmul;
pub mod quant;
pub mod reduce;
pub mod rows;

use attention::Masking;
use rlx_ir::ops::attention::MaskKind;
use rlx_ir::ops::elementwise::{emit, table, ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::quant::QuantScheme;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Op};
use rows::{Norm, Scan};

/// A kernel's CUDA C and the family it belongs to (for errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub name: &'static str,
    pub code: String,
}

/// The most axes a strided walk ([`Walk`](crate::launch::Walk)) takes.
pub const RANK: usize = 8;

/// Shared definitions (first in every source): integer names, the strided walk, f16/bf16 conversions without headers.
pub const PRELUDE: &str = r#"typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef signed char i8;
typedef short i16;
struct Walk { i64 dims[8]; i64 strides[4][8]; int rank; int narrow; };
/* Operand o's offset of element i (i below the walk's size): the outermost dim takes what the
   inner ones leave, and the divisions are 32-bit where the walk has fewer than 2^32 elements. */
__device__ __forceinline__ i64 walk(const Walk& w, int o, i64 i) {
    if (w.rank == 0) return 0;
    i64 off = 0;
    if (w.narrow) {
        u32 j = (u32)i;
        for (int d = w.rank - 1; d > 0; --d) { const u32 e = (u32)w.dims[d]; off += (i64)(j % e) * w.strides[o][d]; j /= e; }
        return off + (i64)j * w.strides[o][0];
    }
    for (int d = w.rank - 1; d > 0; --d) { off += (i % w.dims[d]) * w.strides[o][d]; i /= w.dims[d]; }
    return off + i * w.strides[o][0];
}
__device__ __forceinline__ float bf16_load(u16 h) { return __uint_as_float(((u32)h) << 16); }
/* Round to nearest even by the hardware's conversion; a NaN keeps its sign and payload's top
   bits, quieted, as the CPU's conversion keeps them. */
__device__ __forceinline__ u16 bf16_store(float f) {
    if (f != f) return (u16)((__float_as_uint(f) >> 16) | 0x40u);
    u16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float f16_load(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f16_store(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
/* Programmatic dependent launch (sm_90+, launched so by crate::launch): lets the stream's
   next kernel begin launching, then waits until the previous kernel has finished and its
   writes are visible. First in every kernel, before it touches memory; a no-op elsewhere. */
#if __CUDA_ARCH__ >= 900
#define CHAIN() asm volatile("griddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;" ::: "memory")
#else
#define CHAIN()
#endif
#define EACH(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)
/* Tiles of UNROLL·blockDim elements, grid-stride (launched by crate::launch::tiled): each
   thread takes element t + u·blockDim + threadIdx.x of tile t for every u < UNROLL in one
   LANES loop to load and another to store, so that several of its loads are in flight. */
#define UNROLL 4
#define TILES(t, n) for (i64 t = (i64)blockIdx.x * blockDim.x * UNROLL; t < (n); t += (i64)gridDim.x * blockDim.x * UNROLL)
#define LANES(u, i, t, n) _Pragma("unroll") for (int u = 0; u < UNROLL; ++u) if (const i64 i = t + (i64)u * blockDim.x + threadIdx.x; i < (n))
"#;

/// How a dtype sits in memory and in arithmetic.
#[derive(Clone, Copy)]
struct CType {
    /// The element type in memory.
    store: &'static str,
    /// The type arithmetic runs in (`float` for f16/bf16).
    compute: &'static str,
    /// Conversion functions between them, for f16/bf16.
    convert: Option<(&'static str, &'static str)>,
    float: bool,
    /// `(min, max)` of an integer type, as C literals.
    range: Option<(&'static str, &'static str)>,
}

impl CType {
    fn load(&self, e: &str) -> String {
        match self.convert {
            Some((load, _)) => format!("{load}({e})"),
            None => e.to_string(),
        }
    }

    fn store(&self, e: &str) -> String {
        match self.convert {
            Some((_, store)) => format!("{store}({e})"),
            None => format!("({})({e})", self.store),
        }
    }
}

/// The C form of `d`, or `None` for dtypes the backend keeps off the device (complex, 8/4-bit
/// floats, sub-byte ints).
fn ctype(d: DType) -> Option<CType> {
    let int = |store, min, max| CType { store, compute: store, convert: None, float: false, range: Some((min, max)) };
    Some(match d {
        DType::F32 => CType { store: "float", compute: "float", convert: None, float: true, range: None },
        DType::F64 => CType { store: "double", compute: "double", convert: None, float: true, range: None },
        DType::F16 => CType { store: "u16", compute: "float", convert: Some(("f16_load", "f16_store")), float: true, range: None },
        DType::BF16 => CType { store: "u16", compute: "float", convert: Some(("bf16_load", "bf16_store")), float: true, range: None },
        DType::I8 => int("i8", "-128", "127"),
        DType::U8 => int("u8", "0", "255"),
        DType::I16 => int("i16", "-32768", "32767"),
        DType::U16 => int("u16", "0", "65535"),
        DType::I32 => int("int", "(-2147483647 - 1)", "2147483647"),
        DType::U32 => int("u32", "0u", "4294967295u"),
        DType::I64 => int("i64", "(-9223372036854775807ll - 1)", "9223372036854775807ll"),
        DType::U64 => int("u64", "0ull", "18446744073709551615ull"),
        DType::Bool => CType { store: "u8", compute: "u8", convert: None, float: false, range: Some(("0", "1")) },
        _ => return None,
    })
}

/// Whether the elementwise kernels take `d`.
pub fn supported(d: DType) -> bool {
    ctype(d).is_some()
}

/// Whether `d` is f32, f16 or bf16: computed in `float`.
pub fn single(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// Each output element from up to three operands read through the walk (`plain` bit `o`
/// set: operand `o` has the output's shape and is read at the same index),
/// [`UNROLL`](crate::launch::UNROLL) per thread (launched by `launch::tiled`). The operands load as `a`, `b`, `c` in their
/// compute types; `expr` gives the output's compute value; `defs` are functions it calls.
fn map(name: &'static str, out: DType, ins: &[DType], defs: &str, expr: &str) -> Option<Source> {
    let o = ctype(out)?;
    let mut params = format!("{}* __restrict__ out", o.store);
    let (mut held, mut loads, mut bind) = (String::new(), String::new(), String::new());
    for (i, &d) in ins.iter().enumerate() {
        let c = ctype(d)?;
        let v = ["a", "b", "c"][i];
        params += &format!(", const {}* __restrict__ in{i}", c.store);
        held += &format!("        {} {v}_[UNROLL];\n", c.compute);
        loads += &format!(" {v}_[u] = {};", c.load(&format!("in{i}[(plain >> {i} & 1) ? i : walk(w, {i}, i)]")));
        bind += &format!(" const {} {v} = {v}_[u];", c.compute);
    }
    let code = format!(
        "{PRELUDE}{defs}extern \"C\" __global__ void k({params}, i64 n, Walk w, int plain) {{\n    CHAIN();\n    TILES(t, n) {{\n{held}        LANES(u, i, t, n) {{{loads} }}\n        LANES(u, i, t, n) {{{bind} out[i] = {}; }}\n    }}\n}}\n",
        o.store(expr)
    );
    Some(Source { name, code })
}

/// `f(x)` of an activation over a float dtype.
pub fn activation(kind: ActivationKind, d: DType) -> Option<Source> {
    single(d).then_some(())?;
    map("activation", d, &[d], &forward_fn("f", kind, d), "f(a)")
}

/// Activation `kind` as the CUDA function `name(x)`, whose value is stored as `d`: the
/// expression table's, except exact GELU stored as f16 / bf16, which takes PyTorch's
/// `x/2·(1 + erf(x/√2))` in f32 (as its half-precision kernels do): erff costs about half of
/// the table's erfcf, and `1 + erf` loses more than a half's rounding to cancellation only
/// below about −3.3 for f16 and −4 for bf16, where |GELU| is under 4e-3.
fn forward_fn(name: &str, kind: ActivationKind, d: DType) -> String {
    if kind == ActivationKind::Gelu && matches!(d, DType::F16 | DType::BF16) {
        return format!("__device__ __forceinline__ float {name}(float x) {{ return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }}\n");
    }
    emit::function(emit::Target::CudaC, name, &table::forward_expr(kind))
}

/// `ȳ·f′(x)` (inputs `x`, `ȳ`) over a float dtype.
pub fn activation_backward(kind: ActivationKind, d: DType) -> Option<Source> {
    single(d).then_some(())?;
    let f = emit::function(emit::Target::CudaC, "df", &table::derivative_expr(kind));
    map("activation backward", d, &[d, d], &f, "b * df(a)")
}

/// `ȳ·1[x > 0]` (inputs `x`, `ȳ`).
pub fn relu_backward(d: DType) -> Option<Source> {
    ctype(d)?.float.then_some(())?;
    map("relu backward", d, &[d, d], "", "a > 0 ? b : 0")
}

/// `a op b` by OPS.md's rules: integer division and remainder truncate, by zero give 0, and
/// `MIN / −1` wraps; float max/min propagate NaN; bitwise ops on integers only.
pub fn binary(op: BinaryOp, d: DType) -> Option<Source> {
    map("binary", d, &[d, d], "", &binary_expr(op, d)?)
}

/// [`binary`]'s value of `a op b` (operands `a`, `b` in `d`'s compute type).
fn binary_expr(op: BinaryOp, d: DType) -> Option<String> {
    let c = ctype(d)?;
    let unsigned = c.range.is_some_and(|r| r.0.starts_with('0'));
    let expr = match (op, c.float) {
        (BinaryOp::Add, _) => "a + b".into(),
        (BinaryOp::Sub, _) => "a - b".into(),
        (BinaryOp::Mul, _) if d == DType::Bool => "a & b".into(),
        (BinaryOp::Mul, _) => "a * b".into(),
        (BinaryOp::Div, true) => "a / b".into(),
        (BinaryOp::Div, false) if unsigned => "b == 0 ? 0 : a / b".into(),
        (BinaryOp::Div, false) => format!("b == 0 ? ({t})0 : b == -1 ? ({t})(0ull - (u64)a) : ({t})(a / b)", t = c.compute),
        (BinaryOp::Mod, true) if d == DType::F64 => "fmod(a, b)".into(),
        (BinaryOp::Mod, true) => "fmodf(a, b)".into(),
        (BinaryOp::Mod, false) if unsigned => "b == 0 ? 0 : a % b".into(),
        (BinaryOp::Mod, false) => format!("(b == 0 || b == -1) ? ({})0 : a % b", c.compute),
        (BinaryOp::Max, _) => "(a > b || a != a) ? a : b".into(),
        (BinaryOp::Min, _) => "(a < b || a != a) ? a : b".into(),
        (BinaryOp::Pow, true) if d == DType::F64 => "pow(a, b)".into(),
        (BinaryOp::Pow, true) => "powf(a, b)".into(),
        (BinaryOp::Atan2, true) if d == DType::F64 => "atan2(a, b)".into(),
        (BinaryOp::Atan2, true) => "atan2f(a, b)".into(),
        (BinaryOp::BitAnd, false) => "a & b".into(),
        (BinaryOp::BitOr, false) => "a | b".into(),
        (BinaryOp::BitXor, false) => "a ^ b".into(),
        _ => return None,
    };
    Some(expr)
}

/// `a op b` into Bool, IEEE (only `Ne` holds with a NaN).
pub fn compare(op: CmpOp, d: DType) -> Option<Source> {
    map("compare", DType::Bool, &[d, d], "", &compare_expr(op))
}

/// [`compare`]'s value: 1 where `a op b` holds.
fn compare_expr(op: CmpOp) -> String {
    format!("(a {} b) ? 1 : 0", emit::cmp_symbol(op))
}

/// [`select`]'s value.
const SELECT: &str = "a != 0 ? b : c";

/// `cond ≠ 0 ? t : f` (inputs `cond`, `t`, `f`).
pub fn select(cond: DType, d: DType) -> Option<Source> {
    map("where", d, &[cond, d, d], "", SELECT)
}

/// `a·b + c` with one rounding.
pub fn fma(d: DType) -> Option<Source> {
    let f = match d {
        DType::F64 => "fma",
        d if single(d) => "fmaf",
        _ => return None,
    };
    map("fma", d, &[d, d, d], "", &format!("{f}(a, b, c)"))
}

/// `Cast` with Rust `as` semantics: floats to integers truncate and saturate (NaN → 0),
/// integers wrap, anything to Bool is `≠ 0`, floats round to nearest-even.
pub fn cast(from: DType, to: DType) -> Option<Source> {
    map("cast", to, &[from], "", &cast_expr(from, to)?)
}

/// [`cast`]'s value of `a` (in `from`'s compute type) in `to`'s compute type; `None` for
/// f64 to f16/bf16, which would round twice.
fn cast_expr(from: DType, to: DType) -> Option<String> {
    if from == DType::F64 && matches!(to, DType::F16 | DType::BF16) {
        return None;
    }
    let (f, t) = (ctype(from)?, ctype(to)?);
    let expr = match (f.float, t.range) {
        _ if to == DType::Bool => "a != 0 ? 1 : 0".to_string(),
        (true, Some((min, max))) => {
            format!("a != a ? ({s})0 : a <= ({c}){min} ? ({s}){min} : a >= ({c}){max} ? ({s}){max} : ({s})a", s = t.compute, c = f.compute)
        }
        _ => format!("({})a", t.compute),
    };
    Some(expr)
}

/// Element moves by size (1, 2, 4 or 8 bytes): `out[out_base + walk(1)] = in[in_base +
/// walk(0)]` — transposes, broadcasts, slices, concatenation pieces, flips.
pub fn copy(size: usize) -> Option<Source> {
    let t = match size {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        8 => "u64",
        _ => return None,
    };
    let code = format!(
        "{PRELUDE}extern \"C\" __global__ void k({t}* __restrict__ out, const {t}* __restrict__ in, i64 n, Walk w, i64 out_base, i64 in_base) {{\n    CHAIN();\n    TILES(tile, n) {{\n        {t} v[UNROLL];\n        LANES(u, i, tile, n) {{ v[u] = in[in_base + walk(w, 0, i)]; }}\n        LANES(u, i, tile, n) {{ out[out_base + walk(w, 1, i)] = v[u]; }}\n    }}\n}}\n"
    );
    Some(Source { name: "copy", code })
}

/// `Gather` of elements of `size` bytes by integer indices of `index`: `out[o, j, r] =
/// in[o, idx[j], r]`. An index outside `[0, extent)` writes 0 and reports itself in `err`
/// (`[flag, index, extent]`), which the engine turns into an error after the run. The
/// position splits in 32-bit arithmetic while the output has fewer than 2³² elements.
pub fn gather(size: usize, index: DType) -> Option<Source> {
    let t = ["u8", "u16", "", "u32", "", "", "", "u64"].get(size.checked_sub(1)?).filter(|t| !t.is_empty())?;
    let i = ctype(index).filter(|c| !c.float && index != DType::Bool)?;
    let code = format!(
        "{PRELUDE}extern \"C\" __global__ void k({t}* __restrict__ out, const {t}* __restrict__ in, const {it}* __restrict__ idx, i64 n, i64 inner, i64 count, i64 extent, i64* err) {{
    CHAIN();
    const bool narrow = n <= 0xffffffffll;
    EACH(i, n) {{
        i64 r, j, o;
        if (narrow) {{
            const u32 q = (u32)i / (u32)inner, p = q / (u32)count;
            r = (u32)i - q * (u32)inner; j = q - p * (u32)count; o = p;
        }} else {{
            const i64 q = i / inner;
            r = i - q * inner; j = q % count; o = q / count;
        }}
        i64 at = (i64)idx[j];
        if (at < 0 || at >= extent) {{
            if (atomicCAS((unsigned long long*)err, 0ull, 1ull) == 0ull) {{ err[1] = at; err[2] = extent; }}
            out[i] = 0;
        }} else {{
            out[i] = in[(o * extent + at) * inner + r];
        }}
    }}
}}
",
        it = i.store
    );
    Some(Source { name: "gather", code })
}

/// [`gather`] of whole rows of 16-byte chunks (`inner` elements that fill `chunks` of them,
/// every row's start on 16 bytes): warp `q` of a grid stride over warps copies output row `q`
/// (index `q mod count` of batch `q / count`), its lanes taking the row's chunks, so the
/// row's position is split once per row instead of once per element. Reports a bad index as
/// [`gather`] does.
pub fn gather_rows(index: DType) -> Option<Source> {
    let i = ctype(index).filter(|c| !c.float && index != DType::Bool)?;
    let code = format!(
        "{PRELUDE}extern \"C\" __global__ void k(uint4* __restrict__ out, const uint4* __restrict__ in, const {it}* __restrict__ idx, i64 rows, i64 chunks, i64 count, i64 extent, i64* err) {{
    CHAIN();
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (i64 q = (i64)blockIdx.x * warps + (threadIdx.x >> 5); q < rows; q += (i64)gridDim.x * warps) {{
        const i64 j = q % count, o = q / count;
        const i64 at = (i64)idx[j];
        uint4* to = out + q * chunks;
        if (at < 0 || at >= extent) {{
            if (lane == 0 && atomicCAS((unsigned long long*)err, 0ull, 1ull) == 0ull) {{ err[1] = at; err[2] = extent; }}
            for (i64 c = lane; c < chunks; c += 32) to[c] = make_uint4(0, 0, 0, 0);
        }} else {{
            const uint4* from = in + (o * extent + at) * chunks;
            for (i64 c = lane; c < chunks; c += 32) to[c] = from[c];
        }}
    }}
}}
",
        it = i.store
    );
    Some(Source { name: "gather rows", code })
}

/// `GatherBackward` of an f32 gradient (the output zeroed before): `out[o, idx[j], r] +=
/// dy[o, j, r]` by atomic adds (duplicate indices sum in no fixed order). An index outside
/// `[0, extent)` adds nothing and reports itself in `err` as [`gather`] does.
pub fn gather_backward(d: DType, index: DType) -> Option<Source> {
    let i = ctype(index).filter(|c| !c.float && index != DType::Bool && d == DType::F32)?;
    let code = format!(
        "{PRELUDE}extern \"C\" __global__ void k(float* __restrict__ out, const float* __restrict__ dy, const {it}* __restrict__ idx, i64 n, i64 inner, i64 count, i64 extent, i64* err) {{
    CHAIN();
    EACH(i, n) {{
        i64 r = i % inner, q = i / inner, j = q % count, o = q / count;
        i64 at = (i64)idx[j];
        if (at < 0 || at >= extent) {{
            if (atomicCAS((unsigned long long*)err, 0ull, 1ull) == 0ull) {{ err[1] = at; err[2] = extent; }}
        }} else {{
            atomicAdd(out + (o * extent + at) * inner + r, dy[i]);
        }}
    }}
}}
",
        it = i.store
    );
    Some(Source { name: "gather backward", code })
}

/// `KvAppend`'s write of elements of `size` bytes: the `n = outer·steps·inner` elements of
/// `rows` go to positions `p..p + steps` along the axis of a cache of capacity `cap`, in
/// place, `p` being `at[0]` (read on the device) or `pos` when `at` is null. A position that
/// does not fit writes nothing and reports `[2, p, steps, cap, axis]` in `err`.
pub fn kv_write(size: usize) -> Option<Source> {
    let t = ["u8", "u16", "", "u32", "", "", "", "u64"].get(size.checked_sub(1)?).filter(|t| !t.is_empty())?;
    let code = format!(
        "{PRELUDE}extern \"C\" __global__ void k({t}* __restrict__ cache, const {t}* __restrict__ rows, const i64* __restrict__ at, i64 pos, i64 n, i64 steps, i64 inner, i64 cap, i64 axis, i64* err) {{
    CHAIN();
    const i64 p = at ? at[0] : pos;
    if (p < 0 || p > cap - steps) {{
        if (blockIdx.x == 0 && threadIdx.x == 0 && atomicCAS((unsigned long long*)err, 0ull, 2ull) == 0ull) {{ err[1] = p; err[2] = steps; err[3] = cap; err[4] = axis; }}
        return;
    }}
    const i64 span = steps * inner;
    EACH(i, n) {{ cache[(i / span * cap + p) * inner + i % span] = rows[i]; }}
}}
"
    );
    Some(Source { name: "kv append", code })
}

/// The generated kernels a node of `op` over inputs of `dtypes` launches (empty for byte
/// copies and cuBLAS products), or `None` when the backend has no kernel for it: what the
/// claims, the compile-time build and the NVRTC check in CI all read.
pub fn for_node(op: &Op, dtypes: &[DType]) -> Option<Vec<Source>> {
    let d = |i: usize| dtypes.get(i).copied();
    let moves = |d: DType| supported(d).then(|| copy(d.size())).flatten().map(|s| vec![s]);
    let same = |n: usize| dtypes.len() == n && dtypes.iter().all(|&t| t == dtypes[0]);
    match op {
        Op::Activation(a) => activation(a.kind, d(0)?).map(|s| vec![s]),
        Op::ActivationBackward(a) => activation_backward(a.kind, d(0)?).map(|s| vec![s]),
        Op::ReluBackward(_) => relu_backward(d(0)?).map(|s| vec![s]),
        Op::Binary(b) => binary(b.op, d(0)?).map(|s| vec![s]),
        Op::Compare(c) => compare(c.op, d(0)?).map(|s| vec![s]),
        Op::Where(_) => select(d(0)?, d(1)?).map(|s| vec![s]),
        Op::Fma(_) => fma(d(0)?).map(|s| vec![s]),
        Op::Cast(c) => cast(d(0)?, c.to).map(|s| vec![s]),
        Op::Reshape(_) | Op::StopGradient(_) => Some(Vec::new()),
        Op::Transpose(_) | Op::Expand(_) | Op::Narrow(_) | Op::Slice(_) | Op::Reverse(_) | Op::Concat(_) => moves(d(0)?),
        Op::Gather(_) => supported(d(0)?).then(|| Some(vec![gather(d(0)?.size(), d(1)?)?, gather_rows(d(1)?)?])).flatten(),
        Op::GatherBackward(_) => gather_backward(d(0)?, d(1)?).map(|s| vec![s]),
        Op::Reduce(r) => reduce::all(r.op, d(0)?),
        Op::MatMul(_) => (crate::matmul::supported(d(0)?) && d(1)? == d(0)?).then(|| matmul::products(dtypes[0], matmul::Prologue::Plain).into_iter().chain(matmul::staging(dtypes[0])).collect()),
        Op::DotGeneral(_) => (crate::matmul::supported(d(0)?) && d(1)? == d(0)?).then(|| copy(dtypes[0].size()).into_iter().chain(matmul::staging(dtypes[0])).collect()),
        Op::FusedMatMulBiasAct(f) => {
            let t = d(0)?;
            if dtypes != [t; 3] {
                return None;
            }
            let mut sources = vec![matmul::products(t, matmul::Prologue::Plain)?, matmul::bias_act(t, f.activation, true)?];
            sources.extend(f.activation.and_then(|a| matmul::bias_act(t, Some(a), false)));
            Some(sources)
        }
        Op::DequantMatMul(q) => match (&q.scheme, d(0)?, d(1)?) {
            (QuantScheme::Gguf(t), DType::F32, DType::U8) => quant::dequant_matmul(*t, q.activations).map(|s| vec![s]),
            _ => None,
        },
        Op::Softmax(_) => rows::softmax(d(0)?).map(|s| vec![s]),
        Op::LayerNorm(_) | Op::LayerNorm2d(_) => norms(rows::norm(Norm::Layer, d(0)?), Norm::Layer, d(0)?, false),
        Op::RmsNorm(_) => norms(rows::norm(Norm::Rms, d(0)?), Norm::Rms, d(0)?, false),
        Op::FusedResidualLN(_) => norms(rows::residual_norm(Norm::Layer, d(0)?), Norm::Layer, d(0)?, true),
        Op::FusedResidualRmsNorm(_) => norms(rows::residual_norm(Norm::Rms, d(0)?), Norm::Rms, d(0)?, true),
        Op::LayerNormBackwardInput(_) if same(3) => rows::norm_backward_input(Norm::Layer, d(0)?).map(|s| vec![s]),
        Op::RmsNormBackwardInput(_) if same(4) => rows::norm_backward_input(Norm::Rms, d(0)?).map(|s| vec![s]),
        Op::LayerNormBackwardGamma(_) if same(2) => norm_params(Some(Norm::Layer), d(0)?),
        Op::RmsNormBackwardGamma(_) if same(4) => norm_params(Some(Norm::Rms), d(0)?),
        Op::RmsNormBackwardBeta(_) if same(4) => norm_params(None, d(0)?),
        Op::ArgMax(_) => rows::arg_extreme(true, d(0)?).map(|s| vec![s]),
        Op::ArgMin(_) => rows::arg_extreme(false, d(0)?).map(|s| vec![s]),
        Op::Cumsum(_) | Op::CumsumBackward(_) => rows::scan(Scan::Sum, d(0)?).map(|s| vec![s]),
        Op::CumProd(_) => rows::scan(Scan::Prod, d(0)?).map(|s| vec![s]),
        Op::CumMax(_) => rows::scan(Scan::Max, d(0)?).map(|s| vec![s]),
        Op::SoftmaxCrossEntropyWithLogits(_) => rows::sparse_cross_entropy(d(0)?, d(1)?).map(|s| vec![s]),
        Op::SoftmaxCrossEntropyBackward(_) if d(2)? == d(0)? => rows::sparse_cross_entropy_backward(d(0)?, d(1)?).map(|s| vec![s]),
        Op::Rope(_) | Op::RopeBackward(_) => attention::rope(d(0)?, d(1)?).map(|s| vec![s]),
        // K and V read at rows have no kernel here: the decomposition gathers them.
        Op::Attention(a) if a.kv_rows_input(dtypes.len()).is_some() => None,
        Op::Attention(a) if a.head_dim.max(a.v_head_dim.unwrap_or(0)) > attention::MAX_HEAD => None,
        Op::Attention(a) => {
            let mut sources = vec![attention::attention(d(0)?, masking(a.mask_kind, d(3))?)?];
            let key_mask = match a.mask_kind {
                MaskKind::Custom => Some(Some(d(3)?)),
                MaskKind::Bias => None,
                _ => Some(None),
            };
            if let (Some(mask), true) = (key_mask, a.v_head_dim.is_none_or(|v| v == a.head_dim)) {
                sources.extend(flash::forward(d(0)?, a.head_dim, false, mask));
            }
            sources.extend(match a.mask_kind {
                MaskKind::None => decode::attention(d(0)?, None),
                MaskKind::Bias => decode::attention(d(0)?, Some(d(3)?)),
                _ => None,
            });
            Some(sources)
        }
        Op::AttentionBackward(a) => flash::backward(d(0)?, a.head_dim, a.mask_kind),
        Op::AttentionBackwardAll(a) => flash::backward(d(0)?, a.head_dim, a.mask_kind),
        Op::ElementwiseRegion(r) => fused::region(r, dtypes).map(|s| vec![s]),
        Op::KvAppend(_) => supported(d(0)?).then(|| Some(vec![kv_write(d(0)?.size())?, copy(d(0)?.size())?])).flatten(),
        _ => None,
    }
}

/// A norm's general row kernel and, where the dtype has one, its rows-held form.
fn norms(general: Option<Source>, norm: Norm, d: DType, residual: bool) -> Option<Vec<Source>> {
    Some(std::iter::once(general?).chain(rows::norm_held(norm, d, residual)).collect())
}

/// The kernels of a norm's parameter gradient: the rows' statistics (`dγ`, for `norm`), the
/// column sums, and the fold of their splits.
fn norm_params(norm: Option<Norm>, d: DType) -> Option<Vec<Source>> {
    let mut sources = Vec::new();
    if let Some(norm) = norm {
        sources.push(rows::norm_stats(norm, d)?);
    }
    sources.push(rows::norm_backward_params(d)?);
    sources.push(reduce::combine(ReduceOp::Sum, d)?);
    Some(sources)
}

/// The attention kernel's masking for `kind`, given the dtype of the mask or bias operand.
fn masking(kind: MaskKind, extra: Option<DType>) -> Option<Masking> {
    Some(match kind {
        MaskKind::None | MaskKind::Causal | MaskKind::SlidingWindow(_) => Masking::Ranges,
        MaskKind::Custom => Masking::Keys(extra?),
        MaskKind::Bias => Masking::Bias(extra?),
    })
}
