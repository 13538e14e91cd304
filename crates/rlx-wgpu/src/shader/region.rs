//! One kernel per `ElementwiseRegion`: the region's chain of steps, each computed by the
//! expression its standalone kernel uses, in one pass over the output (a word of it per
//! invocation). A step whose dtype is narrower than its compute type (f16, bf16, 8- and
//! 16-bit integers) is rounded or wrapped to it, as storing it between two launches would.

use super::{binary_expr, bits, cast_expr, compare_expr, header, load_fn, select_expr, ty, words, Kernel, Ty, ENTRY};
use rlx_ir::ops::elementwise::{emit, table};
use rlx_ir::ops::fused::{chain_dtypes, ChainStep, ElementwiseRegion, Operand, RegionPrologue};
use rlx_ir::DType;
use std::fmt::Write;

/// The most inputs a region kernel binds: with its output and the parameters, eight storage
/// buffers, what every WebGPU adapter allows a shader.
pub const MAX_INPUTS: usize = 6;

/// `v` (in `t`'s compute type) as a value of `t` would read back after a store.
fn narrowed(t: Ty, v: &str) -> String {
    match t.dtype {
        DType::F16 => format!("unpack2x16float(f16_bits({v})).x"),
        DType::BF16 => format!("bitcast<f32>(bf16_bits({v}) << 16u)"),
        DType::I8 | DType::I16 => {
            let sh = 32 - 8 * t.size;
            format!("(({v} << {sh}u) >> {sh}u)")
        }
        DType::U8 | DType::U16 | DType::Bool => bits(t, v),
        _ => v.to_string(),
    }
}

/// The kernel of region `r` over inputs of `dtypes`, or `None` for a prologue, more than
/// [`MAX_INPUTS`] inputs, a dtype the kernels do not take, or a step without a standalone
/// kernel for its dtypes. Output element `g` reads input `i` at `g mod p[K + 1 + i]` (0: at `g`);
/// `p[K]` holds the element count.
pub fn region(r: &ElementwiseRegion, dtypes: &[DType]) -> Option<Kernel> {
    if r.prologue != RegionPrologue::None || dtypes.len() != r.num_inputs as usize || dtypes.len() > MAX_INPUTS {
        return None;
    }
    let steps = chain_dtypes(&r.chain, dtypes).ok()?;
    let out = ty(*steps.last()?)?;
    let mut code = header(dtypes.len() + 1, false);
    code += &emit::prelude(emit::Target::Wgsl);
    let mut body = String::new();
    for (i, &d) in dtypes.iter().enumerate() {
        code += &load_fn(i + 1, ty(d)?);
        let _ = writeln!(body, "        let x{i} = ld{j}(select(e % p[K + {j}u], e, p[K + {j}u] == 0u));", j = i + 1);
    }
    let name = |o: &Operand| match *o {
        Operand::Input(i) => format!("x{i}"),
        Operand::Step(j) => format!("s{j}"),
    };
    let dtype_of = |o: &Operand| match *o {
        Operand::Input(i) => dtypes[i as usize],
        Operand::Step(j) => steps[j as usize],
    };
    for (j, (step, &sd)) in r.chain.iter().zip(&steps).enumerate() {
        let (operands, expr) = match step {
            ChainStep::Activation(kind, a) => {
                ty(dtype_of(a))?.float().then_some(())?;
                code += &emit::function(emit::Target::Wgsl, &format!("f{j}"), &table::forward_expr(*kind));
                (vec![a], format!("f{j}(a)"))
            }
            ChainStep::Cast(to, a) => (vec![a], cast_expr(dtype_of(a), *to)?),
            ChainStep::Binary(op, a, b) => (vec![a, b], binary_expr(*op, dtype_of(a))?),
            ChainStep::Compare(op, a, b) => {
                ty(dtype_of(a))?;
                (vec![a, b], compare_expr(*op))
            }
            ChainStep::Where(c, t, f) => (vec![c, t, f], select_expr(dtype_of(c))?),
        };
        let st = ty(sd)?;
        let mut bind = String::new();
        for (v, o) in ["a", "b", "c"].iter().zip(&operands) {
            let _ = write!(bind, "let {v} = {}; ", name(o));
        }
        let _ = writeln!(body, "        var s{j}: {c}; {{ {bind}let v: {c} = {expr}; s{j} = {n}; }}", c = st.compute, n = narrowed(st, "v"));
    }
    let last = steps.len() - 1;
    code += ENTRY;
    code += &words(out.per_word(), &format!("{body}        word |= {} << (k * {}u);\n", bits(out, &format!("s{last}")), 8 * out.size));
    Some(Kernel { name: "elementwise region", code, operands: dtypes.len() + 1, report: false })
}
