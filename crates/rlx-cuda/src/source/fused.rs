//! One kernel per `ElementwiseRegion`: the region's chain of steps, each computed by the
//! expression its standalone kernel uses, in one pass over the output, several elements per
//! thread with their loads issued first (`TILES` / `LANES` of the prelude). A step whose dtype is
//! f16 or bf16 is rounded to it, as storing it between two launches would.

use super::{binary_expr, cast_expr, compare_expr, ctype, single, CType, Source, PRELUDE, SELECT};
use rlx_ir::ops::fused::{chain_dtypes, ChainStep, ElementwiseRegion, Operand, RegionPrologue};
use rlx_ir::DType;

/// Index helpers of the region kernel: input `i` with modulus `m` is read at `g mod m` (`m` 0:
/// at `g`), in 32-bit arithmetic while the output has fewer than 2³² elements.
const AT: &str = "__device__ __forceinline__ i64 at(i64 g, i64 m, bool narrow) { return m == 0 ? g : narrow ? (i64)((u32)g % (u32)m) : g % m; }\n";

/// A region's chain as CUDA C: device functions (`defs`), then statements (`body`) that read
/// `x0, x1, …` (the inputs, in their compute types) and compute `s0, s1, …`, each rounded to
/// its step's dtype; `out` is the last step's, held in `s{last}`.
pub(crate) struct Chain {
    pub defs: String,
    pub body: String,
    pub out: DType,
    pub last: usize,
}

/// The chain of region `r` over inputs of `dtypes`, or `None` for a prologue, a dtype the
/// elementwise kernels do not take, or a step without a standalone kernel for its dtypes.
pub(crate) fn chain(r: &ElementwiseRegion, dtypes: &[DType]) -> Option<Chain> {
    if r.prologue != RegionPrologue::None || dtypes.len() != r.num_inputs as usize {
        return None;
    }
    let steps = chain_dtypes(&r.chain, dtypes).ok()?;
    dtypes.iter().try_for_each(|&d| ctype(d).map(|_| ()))?;
    let (mut defs, mut body) = (String::new(), String::new());
    let name = |o: &Operand| match *o {
        Operand::Input(i) => format!("x{i}"),
        Operand::Step(j) => format!("s{j}"),
    };
    let dtype_of = |o: &Operand| match *o {
        Operand::Input(i) => dtypes[i as usize],
        Operand::Step(j) => steps[j as usize],
    };
    for (j, (step, &out)) in r.chain.iter().zip(&steps).enumerate() {
        let (operands, expr) = match step {
            ChainStep::Activation(kind, a) => {
                single(dtype_of(a)).then_some(())?;
                defs += &super::forward_fn(&format!("f{j}"), *kind, out);
                (vec![a], format!("f{j}(a)"))
            }
            ChainStep::Cast(to, a) => (vec![a], cast_expr(dtype_of(a), *to)?),
            ChainStep::Binary(op, a, b) => (vec![a, b], binary_expr(*op, dtype_of(a))?),
            ChainStep::Compare(op, a, b) => (vec![a, b], compare_expr(*op)),
            ChainStep::Where(c, t, f) => (vec![c, t, f], SELECT.to_string()),
        };
        let oc = ctype(out)?;
        let mut bind = String::new();
        for (v, o) in ["a", "b", "c"].iter().zip(&operands) {
            bind += &format!("{} {v} = {}; ", ctype(dtype_of(o))?.compute, name(o));
        }
        let value = match oc.convert {
            Some(_) => oc.load(&oc.store(&format!("({expr})"))),
            None => format!("({})({expr})", oc.compute),
        };
        body += &format!("            {} s{j}; {{ {bind}s{j} = {value}; }}\n", oc.compute);
    }
    Some(Chain { defs, body, out: *steps.last()?, last: steps.len() - 1 })
}

/// The kernel of region `r` over inputs of `dtypes`, or `None` where [`chain`] has none.
///
/// `k(out, in0, …, n, m0, …)`: `n` output elements, `mᵢ` input `i`'s `input_modulus`.
pub fn region(r: &ElementwiseRegion, dtypes: &[DType]) -> Option<Source> {
    let chain = chain(r, dtypes)?;
    let ins: Vec<CType> = dtypes.iter().map(|&d| ctype(d)).collect::<Option<_>>()?;
    let mut params = format!("{}* __restrict__ out", ctype(chain.out)?.store);
    let (mut held, mut loads, mut body) = (String::new(), String::new(), String::new());
    for (i, c) in ins.iter().enumerate() {
        params += &format!(", const {}* __restrict__ in{i}", c.store);
    }
    params += ", i64 n";
    for (i, c) in ins.iter().enumerate() {
        params += &format!(", i64 m{i}");
        held += &format!("        {} x{i}_[UNROLL];\n", c.compute);
        loads += &format!(" x{i}_[u] = {};", c.load(&format!("in{i}[at(g, m{i}, narrow)]")));
        body += &format!("            const {} x{i} = x{i}_[u];\n", c.compute);
    }
    body += &chain.body;
    let store = ctype(chain.out)?.store(&format!("s{}", chain.last));
    let code = format!(
        "{PRELUDE}{AT}{defs}extern \"C\" __global__ void k({params}) {{\n    CHAIN();\n    const bool narrow = n <= 0xffffffffll;\n    TILES(t, n) {{\n{held}        LANES(u, g, t, n) {{{loads} }}\n        LANES(u, g, t, n) {{\n{body}            out[g] = {store};\n        }}\n    }}\n}}\n",
        defs = chain.defs
    );
    Some(Source { name: "elementwise region", code })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
    use rlx_ir::ops::fused::MAX_REGION_INPUTS;

    fn region_of(chain: Vec<ChainStep>, num_inputs: u32) -> ElementwiseRegion {
        ElementwiseRegion { chain, num_inputs, scalar_input_mask: 0, input_modulus: [0; MAX_REGION_INPUTS], prologue: RegionPrologue::None, prologue_input: 0 }
    }

    #[test]
    fn a_bf16_step_is_rounded_and_the_output_stored_in_its_dtype() {
        use Operand::*;
        let r = region_of(vec![ChainStep::Binary(BinaryOp::Add, Input(0), Input(1)), ChainStep::Activation(ActivationKind::Gelu, Step(0)), ChainStep::Cast(DType::BF16, Step(1))], 2);
        let code = region(&r, &[DType::F32, DType::F32]).unwrap().code;
        assert!(code.contains("void k(u16* __restrict__ out, const float* __restrict__ in0, const float* __restrict__ in1, i64 n, i64 m0, i64 m1)"), "{code}");
        assert!(code.contains("s2 = bf16_load(bf16_store(((float)a)))"), "{code}");
        assert!(code.contains("out[g] = bf16_store(s2)"), "{code}");
        assert!(region(&r, &[DType::F32]).is_none(), "an input count other than the region's");
        let f64_to_bf16 = region_of(vec![ChainStep::Cast(DType::BF16, Input(0))], 1);
        assert!(region(&f64_to_bf16, &[DType::F64]).is_none());
    }
}
