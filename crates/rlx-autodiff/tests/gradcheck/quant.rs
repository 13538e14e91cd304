//! Gradient cases for the quant family. Straight-through gradients are not derivatives, so
//! those ops are checked against their stop-gradient form (`x + stop_gradient(q(x) − x)`,
//! the JAX/PyTorch idiom, built from checked primitives) rather than by finite differences.

use super::harness::{draw, domain, with_loss, Case, Domain::*, Rng};
use rlx_autodiff::grad;
use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// Ops whose outputs are F32 whatever `x` is: their rounding limits finite differences to ~1e-2.
const F32: f64 = 1e-2;
const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "dequantized-weight matmuls (input only; f32 outputs)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,32]))()
            %1 = Input(name:"rows",ty:(dtype:U8,shape:[4,34]))()
            %2 = DequantMatMul(scheme:Gguf(Q8_0),out_dim:None)(%0, %1)
            %3 = Cast(to:F64)(%2)
            %4 = Input(name:"w",ty:(dtype:I8,shape:[32,4]))()
            %5 = Input(name:"scale",ty:(dtype:F32,shape:[2,4]))()
            %6 = Input(name:"zp",ty:(dtype:F32,shape:[2,4]))()
            %7 = DequantMatMul(scheme:Int8BlockAsym(block_size:16),out_dim:None)(%0, %4, %5, %6)
            %8 = Cast(to:F64)(%7)
            return %3, %8"#,
        domains: &[("rows", Below(60)), ("w", Below(9)), ("scale", Frozen), ("zp", Frozen)],
        tol: F32,
    },
    Case {
        name: "dequantized expert matmuls (input only; f32 outputs)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,32]))()
            %1 = Input(name:"experts",ty:(dtype:U8,shape:[2,3,34]))()
            %2 = Input(name:"ids",ty:(dtype:I64,shape:[2]))()
            %3 = DequantGroupedMatMul(scheme:Gguf(Q8_0),out_dim:None)(%0, %1, %2)
            %4 = Cast(to:F64)(%3)
            return %4"#,
        domains: &[("experts", Below(40)), ("ids", Below(2))],
        tol: F32,
    },
    Case {
        name: "MLX expert matmul (input only; f32 output)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,32]))()
            %1 = Input(name:"words",ty:(dtype:U32,shape:[2,4,4]))()
            %2 = Input(name:"scales",ty:(dtype:F32,shape:[2,4,1]))()
            %3 = Input(name:"biases",ty:(dtype:F32,shape:[2,4,1]))()
            %4 = Input(name:"ids",ty:(dtype:I64,shape:[3]))()
            %5 = DequantGroupedMatMulMlx(scheme:MlxAffine(bits:4,group_size:32))(%0, %1, %2, %3, %4)
            %6 = Cast(to:F64)(%5)
            return %6"#,
        domains: &[("words", Below(u32::MAX)), ("scales", Frozen), ("biases", Frozen), ("ids", Below(2))],
        tol: F32,
    },
    Case {
        name: "quantization backward ops (second order)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"s",ty:(dtype:F64,shape:[3]))()
            %2 = Input(name:"dy",ty:(dtype:F64,shape:[4,3]))()
            %3 = FakeQuantizeLSQBackwardX(bits:3,axis:Some(1))(%0, %1, %2)
            %4 = FakeQuantizeLSQBackwardScale(bits:3,axis:Some(1))(%0, %1, %2)
            %5 = Input(name:"s1",ty:(dtype:F64,shape:[1]))()
            %6 = FakeQuantizeLSQBackwardScale(bits:2,axis:None)(%0, %5, %2)
            %7 = FakeQuantizeBackward(bits:3,axis:Some(1),ste:Tanh)(%0, %2)
            %8 = FakeQuantizeBackward(bits:3,axis:None,ste:HardTanh)(%0, %2, %5)
            %9 = FakeQuantizeBackward(bits:3,axis:Some(1),ste:ClippedIdentity)(%0, %2, %1)
            return %3, %4, %6, %7, %8, %9"#,
        domains: &[("s", Positive), ("s1", Positive)],
        tol: F64,
    },
];

/// Straight-through cases, each with its stop-gradient form: a graph with the same inputs and
/// output types whose ordinary gradient is the estimator's.
pub const STE: &[(Case, &str)] = &[
    (
        Case {
            name: "fake quantization with a per-batch scale",
            src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,6]))()
                %1 = FakeQuantize(bits:4,axis:None,ste:Identity,scale_mode:PerBatch)(%0)
                %2 = FakeQuantize(bits:4,axis:Some(1),ste:ClippedIdentity,scale_mode:PerBatch)(%0)
                return %1, %2"#,
            domains: &[],
            tol: F64,
        },
        // The per-batch scale never clips, so both are the identity.
        r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,6]))()
            %1 = FakeQuantize(bits:4,axis:None,ste:Identity,scale_mode:PerBatch)(%0)
            %2 = FakeQuantize(bits:4,axis:Some(1),ste:ClippedIdentity,scale_mode:PerBatch)(%0)
            %3 = Binary(op:Sub)(%1, %0)
            %4 = StopGradient()(%3)
            %5 = Binary(op:Add)(%0, %4)
            %6 = Binary(op:Sub)(%2, %0)
            %7 = StopGradient()(%6)
            %8 = Binary(op:Add)(%0, %7)
            return %5, %8"#,
    ),
    (
        Case {
            name: "fake quantization with a fixed scale",
            src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
                %1 = Input(name:"s",ty:(dtype:F64,shape:[3]))()
                %2 = FakeQuantize(bits:2,axis:Some(1),ste:Tanh,scale_mode:Fixed)(%0, %1)
                %3 = FakeQuantize(bits:2,axis:Some(1),ste:HardTanh,scale_mode:Fixed)(%0, %1)
                %4 = FakeQuantize(bits:2,axis:Some(1),ste:ClippedIdentity,scale_mode:Fixed)(%0, %1)
                return %2, %3, %4"#,
            domains: &[("s", Frozen)],
            tol: F64,
        },
        // q_max = 1. Tanh: s·tanh(x/s); HardTanh: sign(x)·(m − m²/2s), m = min(|x|, s);
        // ClippedIdentity: x·1[|round(x/s)| ≤ 1].
        r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"s",ty:(dtype:F64,shape:[3]))()
            %2 = FakeQuantize(bits:2,axis:Some(1),ste:Tanh,scale_mode:Fixed)(%0, %1)
            %3 = FakeQuantize(bits:2,axis:Some(1),ste:HardTanh,scale_mode:Fixed)(%0, %1)
            %4 = FakeQuantize(bits:2,axis:Some(1),ste:ClippedIdentity,scale_mode:Fixed)(%0, %1)
            %5 = Reshape(new_shape:[1,3])(%1)
            %6 = StopGradient()(%5)
            %7 = Binary(op:Div)(%0, %6)
            %8 = Activation(kind:Tanh)(%7)
            %9 = Binary(op:Mul)(%8, %6)
            %10 = Binary(op:Sub)(%2, %9)
            %11 = StopGradient()(%10)
            %12 = Binary(op:Add)(%9, %11)
            %13 = Activation(kind:Abs)(%0)
            %14 = Binary(op:Min)(%13, %6)
            %15 = Binary(op:Mul)(%14, %14)
            %16 = Binary(op:Add)(%6, %6)
            %17 = Binary(op:Div)(%15, %16)
            %18 = Binary(op:Sub)(%14, %17)
            %19 = Activation(kind:Sign)(%0)
            %20 = Binary(op:Mul)(%19, %18)
            %21 = Binary(op:Sub)(%3, %20)
            %22 = StopGradient()(%21)
            %23 = Binary(op:Add)(%20, %22)
            %24 = Activation(kind:Round)(%7)
            %25 = Activation(kind:Abs)(%24)
            %26 = Constant(ty:(dtype:F64,shape:[]),data:[0,0,0,0,0,0,240,63])()
            %27 = Compare(op:Le)(%25, %26)
            %28 = Cast(to:F64)(%27)
            %29 = Binary(op:Mul)(%0, %28)
            %30 = Binary(op:Sub)(%4, %29)
            %31 = StopGradient()(%30)
            %32 = Binary(op:Add)(%29, %31)
            return %12, %23, %32"#,
    ),
    (
        Case {
            name: "learned step size",
            src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
                %1 = Input(name:"s",ty:(dtype:F64,shape:[3]))()
                %2 = FakeQuantizeLSQ(bits:3,axis:Some(1))(%0, %1)
                return %2"#,
            domains: &[("s", Positive)],
            tol: F64,
        },
        // q_max = 3, z = x/s, r = round z: s·(inside ? z + sg(r − z) : sg(clamp r)), inside
        // = |r| ≤ 3 (PyTorch's mask on the rounded value).
        r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"s",ty:(dtype:F64,shape:[3]))()
            %2 = FakeQuantizeLSQ(bits:3,axis:Some(1))(%0, %1)
            %3 = Reshape(new_shape:[1,3])(%1)
            %4 = Binary(op:Div)(%0, %3)
            %5 = Activation(kind:Round)(%4)
            %6 = StopGradient()(%5)
            %7 = Activation(kind:Abs)(%6)
            %8 = Constant(ty:(dtype:F64,shape:[]),data:[0,0,0,0,0,0,8,64])()
            %9 = Compare(op:Le)(%7, %8)
            %10 = Binary(op:Sub)(%6, %4)
            %11 = StopGradient()(%10)
            %12 = Binary(op:Add)(%4, %11)
            %13 = Binary(op:Min)(%6, %8)
            %14 = Constant(ty:(dtype:F64,shape:[]),data:[0,0,0,0,0,0,8,192])()
            %15 = Binary(op:Max)(%13, %14)
            %16 = StopGradient()(%15)
            %17 = Where()(%9, %12, %16)
            %18 = Binary(op:Mul)(%3, %17)
            %19 = Binary(op:Sub)(%2, %18)
            %20 = StopGradient()(%19)
            %21 = Binary(op:Add)(%18, %20)
            return %21"#,
    ),
    (
        Case {
            name: "integer matmul between quantizers",
            src: r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,8]))()
                %1 = Input(name:"w",ty:(dtype:F32,shape:[8,4]))()
                %2 = Input(name:"b",ty:(dtype:I32,shape:[4]))()
                %3 = Quantize(axis:None,scales:[0.05],zero_points:[3])(%0)
                %4 = Quantize(axis:Some(1),scales:[0.02,0.03,0.025,0.04],zero_points:[0,0,0,0])(%1)
                %5 = QMatMul(x_zp:3,w_zp:0,out_zp:-2,mult:0.0125)(%3, %4, %2)
                %6 = Dequantize(axis:None,scales:[0.1],zero_points:[-2])(%5)
                %7 = Dequantize(axis:None,scales:[0.05],zero_points:[3])(%3)
                return %6, %7"#,
            domains: &[("b", Below(5))],
            tol: 1e-5,
        },
        // QMatMul: mult·(x·sg(w_q) + sg(x_q − 3)·w); the quantizers: identity.
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,8]))()
            %1 = Input(name:"w",ty:(dtype:F32,shape:[8,4]))()
            %2 = Input(name:"b",ty:(dtype:I32,shape:[4]))()
            %3 = Quantize(axis:None,scales:[0.05],zero_points:[3])(%0)
            %4 = Quantize(axis:Some(1),scales:[0.02,0.03,0.025,0.04],zero_points:[0,0,0,0])(%1)
            %5 = QMatMul(x_zp:3,w_zp:0,out_zp:-2,mult:0.0125)(%3, %4, %2)
            %6 = Dequantize(axis:None,scales:[0.1],zero_points:[-2])(%5)
            %7 = Dequantize(axis:None,scales:[0.05],zero_points:[3])(%3)
            %8 = Cast(to:F32)(%4)
            %9 = MatMul()(%0, %8)
            %10 = Cast(to:F32)(%3)
            %11 = Constant(ty:(dtype:F32,shape:[]),data:[0,0,64,64])()
            %12 = Binary(op:Sub)(%10, %11)
            %13 = MatMul()(%12, %1)
            %14 = Binary(op:Add)(%9, %13)
            %15 = Constant(ty:(dtype:F32,shape:[]),data:[205,204,76,60])()
            %16 = Binary(op:Mul)(%14, %15)
            %17 = Binary(op:Sub)(%6, %16)
            %18 = StopGradient()(%17)
            %19 = Binary(op:Add)(%16, %18)
            %20 = Binary(op:Sub)(%7, %0)
            %21 = StopGradient()(%20)
            %22 = Binary(op:Add)(%0, %21)
            return %19, %22"#,
    ),
    (
        Case {
            name: "integer convolution between quantizers",
            src: r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,2,5,5]))()
                %1 = Input(name:"w",ty:(dtype:F32,shape:[3,2,3,3]))()
                %2 = Input(name:"b",ty:(dtype:I32,shape:[3]))()
                %3 = Quantize(axis:None,scales:[0.05],zero_points:[0])(%0)
                %4 = Quantize(axis:None,scales:[0.02],zero_points:[0])(%1)
                %5 = QConv2d(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:1,x_zp:0,w_zp:0,out_zp:0,mult:0.01)(%3, %4, %2)
                %6 = Dequantize(axis:None,scales:[0.1],zero_points:[0])(%5)
                return %6"#,
            domains: &[("b", Below(5))],
            tol: 1e-5,
        },
        // mult·(conv(x, sg(w_q)) + conv(sg(x_q), w)).
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[1,2,5,5]))()
            %1 = Input(name:"w",ty:(dtype:F32,shape:[3,2,3,3]))()
            %2 = Input(name:"b",ty:(dtype:I32,shape:[3]))()
            %3 = Quantize(axis:None,scales:[0.05],zero_points:[0])(%0)
            %4 = Quantize(axis:None,scales:[0.02],zero_points:[0])(%1)
            %5 = QConv2d(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:1,x_zp:0,w_zp:0,out_zp:0,mult:0.01)(%3, %4, %2)
            %6 = Dequantize(axis:None,scales:[0.1],zero_points:[0])(%5)
            %7 = Cast(to:F32)(%4)
            %8 = Conv(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:1)(%0, %7)
            %9 = Cast(to:F32)(%3)
            %10 = Conv(kernel_size:[3,3],stride:[2,2],padding:[1,1],dilation:[1,1],groups:1)(%9, %1)
            %11 = Binary(op:Add)(%8, %10)
            %12 = Constant(ty:(dtype:F32,shape:[]),data:[10,215,35,60])()
            %13 = Binary(op:Mul)(%11, %12)
            %14 = Binary(op:Sub)(%6, %13)
            %15 = StopGradient()(%14)
            %16 = Binary(op:Add)(%13, %15)
            return %16"#,
    ),
    (
        Case {
            name: "low-precision matmul and its operand prep",
            src: r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,32]))()
                %1 = Input(name:"w",ty:(dtype:F32,shape:[3,32]))()
                %2 = Input(name:"bias",ty:(dtype:F32,shape:[3]))()
                %3 = ScaledQuantScale(format:F8E4M3,scale_layout:BlockMxE8M0(block:16))(%0)
                %4 = ScaledQuantize(format:F8E4M3,scale_layout:BlockMxE8M0(block:16))(%0, %3)
                %5 = ScaledQuantScale(format:F8E5M2,scale_layout:BlockMxE8M0(block:16))(%1)
                %6 = ScaledQuantize(format:F8E5M2,scale_layout:BlockMxE8M0(block:16))(%1, %5)
                %7 = ScaledMatMul(lhs_format:F8E4M3,rhs_format:F8E5M2,scale_layout:BlockMxE8M0(block:16),has_bias:true)(%4, %6, %3, %5, %2)
                %8 = ScaledQuantScale(format:F8E4M3,scale_layout:PerTensor)(%0)
                %9 = ScaledQuantize(format:F8E4M3,scale_layout:PerTensor)(%0, %8)
                %10 = ScaledDequantize(format:F8E4M3,scale_layout:PerTensor)(%9, %8)
                return %7, %10"#,
            domains: &[],
            tol: 1e-5,
        },
        // x·sg(rhs_f)ᵀ + sg(lhs_f)·wᵀ + bias; the per-tensor round trip: identity.
        r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,32]))()
            %1 = Input(name:"w",ty:(dtype:F32,shape:[3,32]))()
            %2 = Input(name:"bias",ty:(dtype:F32,shape:[3]))()
            %3 = ScaledQuantScale(format:F8E4M3,scale_layout:BlockMxE8M0(block:16))(%0)
            %4 = ScaledQuantize(format:F8E4M3,scale_layout:BlockMxE8M0(block:16))(%0, %3)
            %5 = ScaledQuantScale(format:F8E5M2,scale_layout:BlockMxE8M0(block:16))(%1)
            %6 = ScaledQuantize(format:F8E5M2,scale_layout:BlockMxE8M0(block:16))(%1, %5)
            %7 = ScaledMatMul(lhs_format:F8E4M3,rhs_format:F8E5M2,scale_layout:BlockMxE8M0(block:16),has_bias:true)(%4, %6, %3, %5, %2)
            %8 = ScaledQuantScale(format:F8E4M3,scale_layout:PerTensor)(%0)
            %9 = ScaledQuantize(format:F8E4M3,scale_layout:PerTensor)(%0, %8)
            %10 = ScaledDequantize(format:F8E4M3,scale_layout:PerTensor)(%9, %8)
            %11 = ScaledDequantize(format:F8E4M3,scale_layout:BlockMxE8M0(block:16))(%4, %3)
            %12 = ScaledDequantize(format:F8E5M2,scale_layout:BlockMxE8M0(block:16))(%6, %5)
            %13 = StopGradient()(%11)
            %14 = StopGradient()(%12)
            %15 = Transpose(perm:[1,0])(%14)
            %16 = MatMul()(%0, %15)
            %17 = Transpose(perm:[1,0])(%1)
            %18 = MatMul()(%13, %17)
            %19 = Binary(op:Add)(%16, %18)
            %20 = Binary(op:Add)(%19, %2)
            %21 = Binary(op:Sub)(%7, %20)
            %22 = StopGradient()(%21)
            %23 = Binary(op:Add)(%20, %22)
            %24 = Binary(op:Sub)(%10, %0)
            %25 = StopGradient()(%24)
            %26 = Binary(op:Add)(%0, %25)
            return %23, %26"#,
    ),
];

/// Checks a straight-through case: same loss and gradients (relative to `tol`) as its
/// stop-gradient form, on the same random inputs.
pub fn check_ste((case, form): &(Case, &str)) -> Result<(), String> {
    let name = case.name;
    let parse = |src: &str| rlx_ir::text::parse(src).map_err(|e| format!("{name}: {e}"));
    let (lg, _) = with_loss(&parse(case.src)?);
    let (lf, _) = with_loss(&parse(form)?);
    let sources: Vec<(String, rlx_ir::TensorType)> =
        lg.inputs().iter().map(|(n, v)| (n.to_string(), lg.ty(*v).clone())).collect();
    let wrt: Vec<&str> =
        sources.iter().filter(|(n, t)| t.dtype.is_float() && !n.starts_with("__w")).map(|(n, _)| n.as_str()).collect();
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut rng = Rng::new(0x5EED ^ name.len() as u64);
    let values: Vec<(String, Tensor)> =
        sources.iter().map(|(n, t)| (n.clone(), draw(&mut rng, t, domain(case, n)))).collect();
    let named: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut results = Vec::new();
    for g in [&lg, &lf] {
        let gg = grad(g, g.outputs()[0], &wrt).map_err(|e| format!("{name}: grad: {e}"))?;
        let mut c = session.compile(&gg).map_err(|e| format!("{name}: {e}\n{gg}"))?;
        results.push(c.run(&named).map_err(|e| format!("{name}: {e}"))?);
    }
    for (k, what) in std::iter::once("loss").chain(wrt.iter().copied()).enumerate() {
        let (got, want) = (results[0][k].to_f64_vec(), results[1][k].to_f64_vec());
        let diff: f64 = got.iter().zip(&want).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
        let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
        if diff > case.tol * norm.max(1.0) {
            return Err(format!("{name}: {what} differs from the stop-gradient form's\n  op   {got:?}\n  form {want:?}"));
        }
    }
    Ok(())
}

#[test]
fn ema_fake_quantization_takes_only_the_identity_estimator() {
    let src = |ste: &str| {
        format!(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[4]))()
            %1 = Input(name:"m",ty:(dtype:F32,shape:[1]))()
            %2 = FakeQuantize(bits:8,axis:None,ste:{ste},scale_mode:Ema(decay:0.9))(%0, %1)
            %3 = Reduce(op:Sum,axes:[0],keep_dim:false)(%2)
            return %3"#
        )
    };
    let g = rlx_ir::text::parse(&src("Identity")).unwrap();
    grad(&g, g.outputs()[0], &["x"]).unwrap();
    let g = rlx_ir::text::parse(&src("Tanh")).unwrap();
    let e = grad(&g, g.outputs()[0], &["x"]).unwrap_err().to_string();
    assert!(e.contains("EMA scale"), "{e}");
}
