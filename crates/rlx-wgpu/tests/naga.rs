//! Every kind of WGSL the backend generates — each op family over each dtype its claims
//! admit — parsed and validated by naga and written as Metal Shading Language, so the
//! Metal path compiles from the same sources. Needs no adapter. Validation grants only the
//! capability of WebGPU core that naga gates (`pack2x16float` and `unpack2x16float`).

use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::fused::{ChainStep, ElementwiseRegion, Operand, RegionPrologue, MAX_REGION_INPUTS};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::DType;
use rlx_ir::ops::quant::{Activations, GgufType};
use rlx_wgpu::shader::{self, attention, matmul, quant, region, rows, Kernel};

/// The dtypes the elementwise kernels compute in.
const DTYPES: [DType; 10] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I16, DType::U16, DType::I8, DType::U8, DType::Bool];

/// One kernel of every generator over every dtype it takes.
fn kernels() -> Vec<Kernel> {
    let mut all = Vec::new();
    for kind in ActivationKind::ALL {
        all.extend(shader::activation(kind, DType::F32));
        all.extend(shader::activation_backward(kind, DType::F32));
    }
    all.extend(shader::activation(ActivationKind::Gelu, DType::BF16));
    for d in DTYPES {
        all.extend(shader::relu_backward(d));
        all.extend(shader::fma(d));
        all.extend(BinaryOp::ALL.into_iter().filter_map(|op| shader::binary(op, d)));
        all.extend([CmpOp::Eq, CmpOp::Lt].into_iter().filter_map(|op| shader::compare(op, d)));
        all.extend(shader::select(DType::Bool, d));
        all.extend(DTYPES.iter().filter_map(|&to| shader::cast(d, to)));
    }
    for size in [1, 2, 4, 8] {
        all.extend(shader::copy(size));
        all.extend([DType::I32, DType::U32, DType::I64].into_iter().filter_map(|i| shader::gather(size, i)));
    }
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
        all.extend(shader::reduce(op, DType::F32));
    }
    all.extend(matmul::matmul(DType::F32, None));
    all.extend([None, Some(ActivationKind::Gelu), Some(ActivationKind::Relu)].into_iter().filter_map(|a| matmul::matmul(DType::F32, Some(a))));
    for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0] {
        all.extend([Activations::Exact, Activations::Q8Blocks].into_iter().filter_map(|a| quant::dequant_matmul(t, a)));
    }
    all.extend(rows::softmax(DType::F32));
    all.extend(rows::arg_extreme(true, DType::F32));
    all.extend(rows::arg_extreme(false, DType::F32));
    all.extend(shader::kv_write(4));
    all.extend(shader::kv_write(8));
    for norm in [rows::Norm::Layer, rows::Norm::Rms] {
        for residual in [None, Some(false), Some(true)] {
            all.extend(rows::norm(norm, residual, DType::F32));
        }
    }
    all.extend(attention::rope(DType::F32, DType::F32));
    for (mask, m) in [(MaskKind::Causal, None), (MaskKind::Custom, Some(DType::F32)), (MaskKind::Custom, Some(DType::Bool))] {
        let dtypes: Vec<DType> = [DType::F32; 3].into_iter().chain(m).collect();
        all.extend(attention::for_attention(&Attention::new(4, 64, mask), &dtypes));
    }
    let chain = vec![
        ChainStep::Binary(BinaryOp::Add, Operand::Input(0), Operand::Input(1)),
        ChainStep::Activation(ActivationKind::Gelu, Operand::Step(0)),
        ChainStep::Compare(CmpOp::Gt, Operand::Step(1), Operand::Input(1)),
        ChainStep::Where(Operand::Step(2), Operand::Step(1), Operand::Input(0)),
        ChainStep::Cast(DType::BF16, Operand::Step(3)),
    ];
    let r = ElementwiseRegion { chain, num_inputs: 2, scalar_input_mask: 0, input_modulus: [0; MAX_REGION_INPUTS], prologue: RegionPrologue::None, prologue_input: 0 };
    all.extend(region::region(&r, &[DType::F32, DType::F32]));
    let wrap = ElementwiseRegion { chain: vec![ChainStep::Binary(BinaryOp::Mul, Operand::Input(0), Operand::Input(0)), ChainStep::Cast(DType::U8, Operand::Step(0))], num_inputs: 1, ..r };
    all.extend(region::region(&wrap, &[DType::I8]));
    all
}

#[test]
fn every_generated_kernel_validates_and_translates_to_metal() {
    let all = kernels();
    assert!(all.len() > 300, "only {} kernels were generated", all.len());
    let mut failures = Vec::new();
    for k in &all {
        let module = match naga::front::wgsl::parse_str(&k.code) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{} does not parse: {}\n{}", k.name, e.emit_to_string(&k.code), k.code));
                continue;
            }
        };
        let info = match naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32).validate(&module) {
            Ok(i) => i,
            Err(e) => {
                failures.push(format!("{} does not validate: {}\n{}", k.name, e.emit_to_string(&k.code), k.code));
                continue;
            }
        };
        let options = naga::back::msl::Options { lang_version: (2, 1), ..Default::default() };
        if let Err(e) = naga::back::msl::write_string(&module, &info, &options, &naga::back::msl::PipelineOptions::default()) {
            failures.push(format!("{} does not translate to MSL: {e}", k.name));
        }
    }
    assert!(failures.is_empty(), "{} of {} kernels failed:\n{}", failures.len(), all.len(), failures.iter().take(3).cloned().collect::<Vec<_>>().join("\n\n"));
}
