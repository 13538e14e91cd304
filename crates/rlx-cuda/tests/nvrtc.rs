//! Every kernel the backend can generate compiles with NVRTC for sm_90 — checked without a GPU
//! (NVRTC alone; `.ci/run` installs it from PyPI). Skips, saying so, where NVRTC is absent.

use rlx_cuda::source::{self, Source};
use rlx_ir::ops::attention::{Attention, AttentionBackwardAll, MaskKind, Rope, RopeBackward, RopeStyle};
use rlx_ir::ops::elementwise::{Activation, ActivationBackward, ActivationKind, Binary, BinaryOp, Cast, CmpOp, Compare, Fma, ReluBackward, Where};
use rlx_ir::ops::fused::{ChainStep, ElementwiseRegion, FusedMatMulBiasAct, FusedResidualLN, FusedResidualRmsNorm, Operand, RegionPrologue, MAX_REGION_INPUTS};
use rlx_ir::ops::index::{Gather, GatherBackward};
use rlx_ir::ops::norm::{
    LayerNorm, LayerNorm2d, LayerNormBackwardGamma, LayerNormBackwardInput, RmsNorm, RmsNormBackwardBeta, RmsNormBackwardGamma, RmsNormBackwardInput,
};
use rlx_ir::ops::reduce::{ArgMax, ArgMin, CumMax, CumProd, Cumsum, CumsumBackward, Reduce, ReduceOp};
use rlx_ir::ops::shape::{KvAppend, Transpose};
use rlx_ir::ops::softmax::{Softmax, SoftmaxCrossEntropyBackward, SoftmaxCrossEntropyWithLogits};
use rlx_ir::{DType, Op};

const DTYPES: [DType; 13] = {
    use DType::*;
    [F32, F64, F16, BF16, I8, U8, I16, U16, I32, U32, I64, U64, Bool]
};

/// Every distinct kernel source, over each op family and dtype the backend takes.
fn every_source() -> Vec<Source> {
    let mut nodes: Vec<(Op, Vec<DType>)> = Vec::new();
    for d in DTYPES {
        for kind in ActivationKind::ALL {
            nodes.push((Op::Activation(Activation { kind }), vec![d]));
            nodes.push((Op::ActivationBackward(ActivationBackward { kind }), vec![d, d]));
        }
        for op in BinaryOp::ALL {
            nodes.push((Op::Binary(Binary { op }), vec![d, d]));
        }
        for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
            nodes.push((Op::Compare(Compare { op }), vec![d, d]));
        }
        for to in DTYPES {
            nodes.push((Op::Cast(Cast { to }), vec![d]));
        }
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
            nodes.push((Op::Reduce(Reduce { op, axes: vec![0], keep_dim: false }), vec![d]));
        }
        for index in [DType::I64, DType::I32, DType::U8] {
            nodes.push((Op::Gather(Gather { axis: 0 }), vec![d, index]));
            nodes.push((Op::GatherBackward(GatherBackward { axis: 0, table_shape: rlx_ir::Shape::of(&[4, 3]) }), vec![d, index]));
        }
        nodes.push((Op::Where(Where {}), vec![DType::Bool, d, d]));
        nodes.push((Op::Fma(Fma {}), vec![d, d, d]));
        nodes.push((Op::ReluBackward(ReluBackward {}), vec![d, d]));
        nodes.push((Op::Transpose(Transpose { perm: vec![1, 0] }), vec![d]));
        for activation in [None, Some(ActivationKind::Relu), Some(ActivationKind::GeluApprox), Some(ActivationKind::Gelu), Some(ActivationKind::Silu)] {
            nodes.push((Op::FusedMatMulBiasAct(FusedMatMulBiasAct { activation }), vec![d; 3]));
        }
        nodes.extend(row_nodes(d));
        nodes.extend(region_nodes(d));
    }
    let mut all: Vec<Source> = Vec::new();
    for (op, dtypes) in &nodes {
        for s in source::for_node(op, dtypes).unwrap_or_default() {
            if !all.contains(&s) {
                all.push(s);
            }
        }
    }
    all
}

/// The row, attention, rope and KV-cache nodes over `d` (with every mask, table and label
/// dtype beside it).
fn row_nodes(d: DType) -> Vec<(Op, Vec<DType>)> {
    let (axis, eps) = (-1, 1e-5);
    let mut nodes = vec![
        (Op::Softmax(Softmax { axis }), vec![d]),
        (Op::LayerNorm(LayerNorm { axis, eps }), vec![d; 3]),
        (Op::LayerNorm2d(LayerNorm2d { eps }), vec![d; 3]),
        (Op::RmsNorm(RmsNorm { axis, eps, flatten_leading: false }), vec![d; 3]),
        (Op::LayerNormBackwardInput(LayerNormBackwardInput { axis, eps }), vec![d; 3]),
        (Op::LayerNormBackwardGamma(LayerNormBackwardGamma { axis, eps }), vec![d; 2]),
        (Op::RmsNormBackwardInput(RmsNormBackwardInput { axis, eps }), vec![d; 4]),
        (Op::RmsNormBackwardGamma(RmsNormBackwardGamma { axis, eps }), vec![d; 4]),
        (Op::RmsNormBackwardBeta(RmsNormBackwardBeta { axis, eps }), vec![d; 4]),
        (Op::FusedResidualLN(FusedResidualLN { has_bias: true, eps }), vec![d; 5]),
        (Op::FusedResidualRmsNorm(FusedResidualRmsNorm { has_bias: false, eps }), vec![d; 4]),
        (Op::ArgMax(ArgMax { axis: 0, keep_dim: false }), vec![d]),
        (Op::ArgMin(ArgMin { axis: 0, keep_dim: true }), vec![d]),
        (Op::Cumsum(Cumsum { axis, exclusive: false }), vec![d]),
        (Op::CumsumBackward(CumsumBackward { axis, exclusive: true }), vec![d]),
        (Op::CumProd(CumProd { axis, exclusive: false }), vec![d]),
        (Op::CumMax(CumMax { axis, exclusive: false }), vec![d]),
        (Op::KvAppend(KvAppend { axis: 1, pos: 0 }), vec![d, d, DType::I64]),
        (Op::Attention(Attention::new(4, 8, MaskKind::Causal)), vec![d; 3]),
    ];
    for head_dim in [64, 128] {
        nodes.push((Op::Attention(Attention::new(4, head_dim, MaskKind::Causal)), vec![d; 3]));
        nodes.push((Op::AttentionBackwardAll(AttentionBackwardAll { num_heads: 4, head_dim, mask_kind: MaskKind::Causal }), vec![d; 4]));
        for mask in [DType::F32, DType::F16, DType::BF16, DType::Bool] {
            nodes.push((Op::Attention(Attention::new(4, head_dim, MaskKind::Custom)), vec![d, d, d, mask]));
        }
    }
    for other in DTYPES {
        nodes.push((Op::SoftmaxCrossEntropyWithLogits(SoftmaxCrossEntropyWithLogits { ignore_index: Some(-100) }), vec![d, other]));
        nodes.push((Op::SoftmaxCrossEntropyBackward(SoftmaxCrossEntropyBackward { ignore_index: Some(-100) }), vec![d, other, d]));
        nodes.push((Op::Rope(Rope { head_dim: 8, n_rot: 8, style: RopeStyle::NeoX }), vec![d, other, other]));
        nodes.push((Op::RopeBackward(RopeBackward { head_dim: 8, n_rot: 4, style: RopeStyle::GptJ }), vec![d, other, other]));
        for kind in [MaskKind::Custom, MaskKind::Bias] {
            nodes.push((Op::Attention(Attention::new(4, 8, kind)), vec![d, d, d, other]));
        }
    }
    nodes
}

/// Elementwise regions over `d`: every step kind (each binary op, compare, where, activation,
/// and a cast to every dtype) after a first step, as the fuse pass chains them.
fn region_nodes(d: DType) -> Vec<(Op, Vec<DType>)> {
    use Operand::{Input, Step};
    let region = |chain: Vec<ChainStep>, dtypes: Vec<DType>| {
        let r = ElementwiseRegion { chain, num_inputs: dtypes.len() as u32, scalar_input_mask: 0, input_modulus: [0; MAX_REGION_INPUTS], prologue: RegionPrologue::None, prologue_input: 0 };
        (Op::ElementwiseRegion(r), dtypes)
    };
    let mut nodes = Vec::new();
    for op in BinaryOp::ALL {
        nodes.push(region(vec![ChainStep::Binary(op, Input(0), Input(1)), ChainStep::Binary(op, Step(0), Input(2))], vec![d; 3]));
    }
    let kinds = ActivationKind::ALL.iter().filter(|k| k.region_fusable()).map(|&kind| ChainStep::Activation(kind, Step(0)));
    nodes.push(region(std::iter::once(ChainStep::Binary(BinaryOp::Add, Input(0), Input(1))).chain(kinds).collect(), vec![d; 2]));
    for to in DTYPES {
        nodes.push(region(vec![ChainStep::Binary(BinaryOp::Mul, Input(0), Input(1)), ChainStep::Cast(to, Step(0))], vec![d; 2]));
    }
    nodes.push(region(vec![ChainStep::Compare(CmpOp::Lt, Input(0), Input(1)), ChainStep::Where(Step(0), Input(0), Input(1))], vec![d; 2]));
    nodes
}

#[test]
fn every_generated_kernel_compiles_for_sm_90() {
    let sources = every_source();
    assert!(sources.len() > 300, "only {} kernels generated", sources.len());
    if let Err(e) = rlx_cuda::compile("extern \"C\" __global__ void k() {}", "sm_90") {
        eprintln!("skipped: {e} (put NVRTC on the loader path: see .ci/run)");
        return;
    }
    // One NVRTC program per hundred kernels (each in a namespace of its own, entry `k` renamed),
    // as compiling each alone would take minutes; a failing program is retried kernel by kernel
    // to name the culprit.
    for chunk in sources.chunks(100) {
        let mut program = source::PRELUDE.to_string();
        for (i, s) in chunk.iter().enumerate() {
            let body = s.code.strip_prefix(source::PRELUDE).expect("every source starts with the prelude");
            program += &format!("namespace n{i} {{\n{}}}\n", body.replacen(" k(", &format!(" k{i}("), 1));
        }
        if rlx_cuda::compile(&program, "sm_90").is_ok() {
            continue;
        }
        let failures: Vec<String> = chunk
            .iter()
            .filter_map(|s| rlx_cuda::compile(&s.code, "sm_90").err().map(|log| format!("{} kernel:\n{}\n{log}", s.name, s.code)))
            .collect();
        assert!(!failures.is_empty(), "the kernels compile one by one but not together");
        panic!("{} kernels fail to compile; the first:\n{}", failures.len(), failures[0]);
    }
    eprintln!("{} kernels compile for sm_90", sources.len());
}

/// Kernels launch as programmatic dependents of the one before (sm_90), so each must wait
/// for it (`CHAIN()`) before touching memory: the first statement of every entry point.
#[test]
fn every_kernel_begins_by_waiting_for_the_one_before() {
    for s in every_source() {
        let entry = s.code.find(" k(").unwrap_or_else(|| panic!("the {} kernel has no entry `k`", s.name));
        let (mut depth, mut close) = (0, entry);
        for (i, c) in s.code[entry..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 1 => {
                    close = entry + i;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let body = &s.code[close..];
        let body = body[body.find('{').expect("a body") + 1..].trim_start();
        assert!(body.starts_with("CHAIN();"), "the {} kernel does not begin with CHAIN():\n{}", s.name, s.code);
    }
}
