//! Gradient cases for the fused family: every fused op and region differentiates through its
//! decomposition (the pre-pass unfuses it).

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "residual norms",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"res",ty:(dtype:F64,shape:[2,3,4]))()
            %2 = Input(name:"bias",ty:(dtype:F64,shape:[4]))()
            %3 = Input(name:"gamma",ty:(dtype:F64,shape:[4]))()
            %4 = Input(name:"beta",ty:(dtype:F64,shape:[4]))()
            %5 = FusedResidualLN(has_bias:false,eps:0.00001)(%0, %1, %3, %4)
            %6 = FusedResidualRmsNorm(has_bias:true,eps:0.00001)(%0, %1, %2, %3, %4)
            return %5, %6"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "attention block with rope",
        src: r#"%0 = Input(name:"hidden",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"qkv_w",ty:(dtype:F64,shape:[4,12]))()
            %2 = Input(name:"out_w",ty:(dtype:F64,shape:[4,4]))()
            %3 = Input(name:"keep",ty:(dtype:I64,shape:[2,3]))()
            %4 = Constant(ty:(dtype:I64,shape:[]),data:[0,0,0,0,0,0,0,0])()
            %5 = Compare(op:Gt)(%3, %4)
            %6 = Input(name:"qkv_b",ty:(dtype:F64,shape:[12]))()
            %7 = Input(name:"out_b",ty:(dtype:F64,shape:[4]))()
            %8 = Input(name:"cos",ty:(dtype:F64,shape:[3,1]))()
            %9 = Input(name:"sin",ty:(dtype:F64,shape:[3,1]))()
            %10 = FusedAttentionBlock(num_heads:2,head_dim:2,has_bias:true,has_rope:true)(%0, %1, %2, %5, %6, %7, %8, %9)
            %11 = FusedAttentionBlock(num_heads:2,head_dim:2,has_bias:false,has_rope:false)(%0, %1, %2, %5)
            return %10, %11"#,
        // The rotary tables are constants to the Rope rule.
        domains: &[("keep", Below(4)), ("cos", Frozen), ("sin", Frozen)],
        tol: F64,
    },
    Case {
        name: "transformer layer",
        src: r#"%0 = Input(name:"hidden",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"qkv_w",ty:(dtype:F64,shape:[4,12]))()
            %2 = Input(name:"qkv_b",ty:(dtype:F64,shape:[12]))()
            %3 = Input(name:"out_w",ty:(dtype:F64,shape:[4,4]))()
            %4 = Input(name:"out_b",ty:(dtype:F64,shape:[4]))()
            %5 = Input(name:"ln1_g",ty:(dtype:F64,shape:[4]))()
            %6 = Input(name:"ln1_b",ty:(dtype:F64,shape:[4]))()
            %7 = Input(name:"fc1_w",ty:(dtype:F64,shape:[4,8]))()
            %8 = Input(name:"fc1_b",ty:(dtype:F64,shape:[8]))()
            %9 = Input(name:"fc2_w",ty:(dtype:F64,shape:[8,4]))()
            %10 = Input(name:"fc2_b",ty:(dtype:F64,shape:[4]))()
            %11 = Input(name:"ln2_g",ty:(dtype:F64,shape:[4]))()
            %12 = Input(name:"ln2_b",ty:(dtype:F64,shape:[4]))()
            %13 = Input(name:"keep",ty:(dtype:I64,shape:[2,3]))()
            %14 = Constant(ty:(dtype:I64,shape:[]),data:[0,0,0,0,0,0,0,0])()
            %15 = Compare(op:Gt)(%13, %14)
            %16 = FusedTransformerLayer(num_heads:2,head_dim:2,intermediate_size:8,eps1:0.00001,eps2:0.00001,activation:Gelu,has_bias:true)(%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %15)
            return %16"#,
        domains: &[("keep", Below(4))],
        tol: F64,
    },
    Case {
        name: "conv epilogue",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[1,2,4,4]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[3,2,3,3]))()
            %2 = Input(name:"b",ty:(dtype:F64,shape:[3]))()
            %3 = Input(name:"res",ty:(dtype:F64,shape:[1,3,4,4]))()
            %4 = FusedConvBiasAct(kernel_size:[3,3],stride:[1,1],padding:[1,1],dilation:[1,1],groups:1,activation:Some(Tanh),has_residual:true)(%0, %1, %2, %3)
            return %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "DiT modulation and gated residual",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"scale",ty:(dtype:F64,shape:[2,1,4]))()
            %2 = Input(name:"shift",ty:(dtype:F64,shape:[2,1,4]))()
            %3 = AdaLayerNorm(norm:LayerNorm,eps:0.00001)(%0, %1, %2)
            %4 = AdaLayerNorm(norm:RmsNorm,eps:0.00001)(%0, %1, %2)
            %5 = Input(name:"y",ty:(dtype:F64,shape:[2,3,4]))()
            %6 = GatedResidual()(%0, %5, %1)
            return %3, %4, %6"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "DiT backward ops (second order)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"scale",ty:(dtype:F64,shape:[2,1,4]))()
            %2 = Input(name:"shift",ty:(dtype:F64,shape:[2,1,4]))()
            %3 = Input(name:"dy",ty:(dtype:F64,shape:[2,3,4]))()
            %4 = AdaLayerNormBackward(norm:LayerNorm,eps:0.00001)(%0, %1, %2, %3)
            %5 = AdaLayerNormBackward(norm:RmsNorm,eps:0.00001)(%0, %1, %2, %3)
            %6 = Input(name:"y",ty:(dtype:F64,shape:[2,3,4]))()
            %7 = GatedResidualBackward()(%0, %6, %1, %3)
            return %4, %4.1, %4.2, %5, %5.1, %5.2, %7, %7.1, %7.2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "fusion regions",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"b",ty:(dtype:F64,shape:[4]))()
            %2 = Input(name:"c",ty:(dtype:F64,shape:[1]))()
            %3 = ElementwiseRegion(chain:[Binary(Mul,Input(0),Input(1)),Activation(Tanh,Step(0)),Binary(Add,Step(1),Input(2)),Compare(Gt,Step(2),Input(0)),Where(Step(3),Step(2),Input(0)),Activation(Sigmoid,Step(4))],num_inputs:3,scalar_input_mask:4,input_modulus:(0,4,1,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0, %1, %2)
            %4 = Input(name:"low",ty:(dtype:F64,shape:[1,2,2,2]))()
            %5 = Input(name:"full",ty:(dtype:F64,shape:[1,2,4,4]))()
            %6 = ElementwiseRegion(chain:[Binary(Mul,Input(0),Input(1)),Activation(Sin,Step(0))],num_inputs:2,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:ResizeNearest2x,prologue_input:0)(%4, %5)
            %7 = TransformRegion(steps:[ResizeNearest2x(Input(0))],num_inputs:1)(%4)
            %8 = Input(name:"slice",ty:(dtype:F64,shape:[1,2,2,2]))()
            %9 = BatchElementwiseRegion(chain:[Activation(Tanh,Input(0))],num_batch_inputs:2,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%4, %8)
            return %3, %6, %7, %9"#,
        domains: &[],
        tol: F64,
    },
];
