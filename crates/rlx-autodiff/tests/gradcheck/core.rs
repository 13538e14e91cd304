//! Gradient cases for the elementwise, matmul, reduce, softmax and shape families.

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "smooth activations",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,5]))()
            %1 = Activation(kind:Gelu)(%0)
            %2 = Activation(kind:GeluApprox)(%0)
            %3 = Activation(kind:Silu)(%0)
            %4 = Activation(kind:Sigmoid)(%0)
            %5 = Activation(kind:Tanh)(%0)
            %6 = Activation(kind:Exp)(%0)
            %7 = Activation(kind:Neg)(%0)
            %8 = Activation(kind:Sin)(%0)
            %9 = Activation(kind:Cos)(%0)
            %10 = Activation(kind:Atan)(%0)
            %11 = Activation(kind:Softplus)(%0)
            %12 = Activation(kind:Erf)(%0)
            %13 = Activation(kind:Mish)(%0)
            %14 = Activation(kind:Softsign)(%0)
            %15 = Activation(kind:LogSigmoid)(%0)
            %16 = Activation(kind:Relu)(%0)
            %17 = Activation(kind:Abs)(%0)
            %18 = Activation(kind:Elu)(%0)
            return %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "activations on positive inputs",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[7]))()
            %1 = Activation(kind:Log)(%0)
            %2 = Activation(kind:Sqrt)(%0)
            %3 = Activation(kind:Rsqrt)(%0)
            %4 = Activation(kind:Recip)(%0)
            %5 = Activation(kind:Tan)(%0)
            return %1, %2, %3, %4, %5"#,
        domains: &[("x", Positive)],
        tol: F64,
    },
    Case {
        name: "binary arithmetic with broadcasting",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"b",ty:(dtype:F64,shape:[3,1]))()
            %2 = Binary(op:Add)(%0, %1)
            %3 = Binary(op:Sub)(%0, %1)
            %4 = Binary(op:Mul)(%0, %1)
            %5 = Binary(op:Max)(%0, %1)
            %6 = Binary(op:Min)(%1, %0)
            %7 = Binary(op:Atan2)(%0, %1)
            return %2, %3, %4, %5, %6, %7"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "division, power and remainder",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[3,4]))()
            %1 = Input(name:"b",ty:(dtype:F64,shape:[4]))()
            %2 = Binary(op:Div)(%0, %1)
            %3 = Binary(op:Pow)(%0, %1)
            %4 = Binary(op:Mod)(%0, %1)
            return %2, %3, %4"#,
        domains: &[("a", Positive), ("b", Positive)],
        tol: F64,
    },
    Case {
        name: "select, fma and casts",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[3,4]))()
            %1 = Input(name:"b",ty:(dtype:F64,shape:[4]))()
            %2 = Input(name:"c",ty:(dtype:F64,shape:[3,1]))()
            %3 = Compare(op:Gt)(%0, %1)
            %4 = Where()(%3, %0, %2)
            %5 = Fma()(%0, %1, %2)
            return %4, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "casts through f32",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[5]))()
            %1 = Cast(to:F32)(%0)
            %2 = Activation(kind:Tanh)(%1)
            %3 = Cast(to:F64)(%2)
            return %3"#,
        domains: &[],
        tol: 1e-2,
    },
    Case {
        name: "relu backward and splines",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"dy",ty:(dtype:F64,shape:[4,3]))()
            %2 = Input(name:"coeff",ty:(dtype:F64,shape:[3,5]))()
            %3 = ReluBackward()(%0, %1)
            %4 = SplineActivation(num_basis:5,grid_min:-2,grid_max:2)(%0, %2)
            return %3, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "activation backward (second order)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,6]))()
            %1 = Input(name:"dy",ty:(dtype:F64,shape:[2,6]))()
            %2 = ActivationBackward(kind:Gelu)(%0, %1)
            %3 = ActivationBackward(kind:GeluApprox)(%0, %1)
            %4 = ActivationBackward(kind:Silu)(%0, %1)
            %5 = ActivationBackward(kind:Relu)(%0, %1)
            %6 = ActivationBackward(kind:Sigmoid)(%0, %1)
            %7 = ActivationBackward(kind:Tanh)(%0, %1)
            %8 = ActivationBackward(kind:Exp)(%0, %1)
            %9 = ActivationBackward(kind:Neg)(%0, %1)
            %10 = ActivationBackward(kind:Abs)(%0, %1)
            %11 = ActivationBackward(kind:Sin)(%0, %1)
            %12 = ActivationBackward(kind:Cos)(%0, %1)
            %13 = ActivationBackward(kind:Atan)(%0, %1)
            %14 = ActivationBackward(kind:Round)(%0, %1)
            %15 = ActivationBackward(kind:Floor)(%0, %1)
            %16 = ActivationBackward(kind:Ceil)(%0, %1)
            %17 = ActivationBackward(kind:Sign)(%0, %1)
            %18 = ActivationBackward(kind:Softplus)(%0, %1)
            %19 = ActivationBackward(kind:Elu)(%0, %1)
            %20 = ActivationBackward(kind:Erf)(%0, %1)
            %21 = ActivationBackward(kind:HardSwish)(%0, %1)
            %22 = ActivationBackward(kind:HardSigmoid)(%0, %1)
            %23 = ActivationBackward(kind:Mish)(%0, %1)
            %24 = ActivationBackward(kind:Softsign)(%0, %1)
            %25 = ActivationBackward(kind:LogSigmoid)(%0, %1)
            %26 = ActivationBackward(kind:Tan)(%0, %1)
            return %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "activation backward on positive inputs",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[7]))()
            %1 = Input(name:"dy",ty:(dtype:F64,shape:[7]))()
            %2 = ActivationBackward(kind:Log)(%0, %1)
            %3 = ActivationBackward(kind:Sqrt)(%0, %1)
            %4 = ActivationBackward(kind:Rsqrt)(%0, %1)
            %5 = ActivationBackward(kind:Recip)(%0, %1)
            return %2, %3, %4, %5"#,
        domains: &[("x", Positive)],
        tol: F64,
    },
    Case {
        name: "spline backward ops (second order, via decomposition)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"coeff",ty:(dtype:F64,shape:[3,5]))()
            %2 = Input(name:"dy",ty:(dtype:F64,shape:[4,3]))()
            %3 = SplineActivationBackwardX(num_basis:5,grid_min:-2,grid_max:2)(%0, %1, %2)
            %4 = SplineActivationBackwardCoeff(num_basis:5,grid_min:-2,grid_max:2)(%0, %2)
            return %3, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "dense cross-entropy and the sparse one's backward",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,5]))()
            %1 = Input(name:"targets",ty:(dtype:F64,shape:[3,5]))()
            %2 = SoftmaxCrossEntropy()(%0, %1)
            %3 = Input(name:"labels",ty:(dtype:I64,shape:[3]))()
            %4 = Input(name:"dloss",ty:(dtype:F64,shape:[3]))()
            %5 = SoftmaxCrossEntropyBackward(ignore_index:None)(%0, %3, %4)
            return %2, %5"#,
        domains: &[("labels", Below(5))],
        tol: F64,
    },
    Case {
        name: "running products and maxima",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,5]))()
            %1 = CumProd(axis:1,exclusive:false)(%0)
            %2 = CumProd(axis:-2,exclusive:true)(%0)
            %3 = CumMax(axis:1,exclusive:false)(%0)
            %4 = CumMax(axis:0,exclusive:true)(%0)
            %5 = Binary(op:Max)(%4, %0)
            return %1, %2, %3, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "sort and top-k values",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,5]))()
            %1 = Sort(axis:1,descending:false)(%0)
            %2 = Sort(axis:0,descending:true)(%0)
            %3 = TopK(k:2)(%0)
            return %1, %2, %3, %3.1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "batched matmul with a broadcast operand",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"b",ty:(dtype:F64,shape:[4,5]))()
            %2 = MatMul()(%0, %1)
            %3 = Input(name:"c",ty:(dtype:F64,shape:[2,5,2]))()
            %4 = MatMul()(%2, %3)
            return %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "reductions",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,4,2]))()
            %1 = Reduce(op:Sum,axes:[1],keep_dim:false)(%0)
            %2 = Reduce(op:Mean,axes:[0,2],keep_dim:true)(%0)
            %3 = Reduce(op:Max,axes:[2],keep_dim:false)(%0)
            %4 = Reduce(op:Min,axes:[0,1],keep_dim:true)(%0)
            %5 = Reduce(op:Prod,axes:[1],keep_dim:false)(%0)
            return %1, %2, %3, %4, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "running sums",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,5]))()
            %1 = Cumsum(axis:1,exclusive:false)(%0)
            %2 = Cumsum(axis:-2,exclusive:true)(%0)
            %3 = CumsumBackward(axis:1,exclusive:true)(%0)
            return %1, %2, %3"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "softmax and cross-entropy",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,5]))()
            %1 = Softmax(axis:-1)(%0)
            %2 = Softmax(axis:0)(%0)
            %3 = Input(name:"labels",ty:(dtype:I64,shape:[3]))()
            %4 = SoftmaxCrossEntropyWithLogits(ignore_index:None)(%0, %3)
            return %1, %2, %4"#,
        domains: &[("labels", Below(5))],
        tol: F64,
    },
    Case {
        name: "reshape, transpose, expand, reverse",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Reshape(new_shape:[6,-1])(%0)
            %2 = Transpose(perm:[2,0,1])(%0)
            %3 = Input(name:"v",ty:(dtype:F64,shape:[3,1]))()
            %4 = Expand(target_shape:[2,3,5])(%3)
            %5 = Reverse(axes:[0,2])(%0)
            return %1, %2, %4, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "narrow, slice, concat, pad",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[7,3]))()
            %1 = Narrow(axis:0,start:2,len:4)(%0)
            %2 = Slice(axis:0,start:1,len:3,step:2)(%0)
            %3 = Slice(axis:0,start:6,len:3,step:-3)(%0)
            %4 = Input(name:"y",ty:(dtype:F64,shape:[2,3]))()
            %5 = Concat(axis:0)(%4, %0, %4)
            %6 = Pad(pads:[(1,2),(0,1)],mode:Constant(0.5))(%0)
            return %1, %2, %3, %5, %6"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "fused ops through their decomposition",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[4,6]))()
            %2 = Input(name:"b",ty:(dtype:F64,shape:[6]))()
            %3 = FusedMatMulBiasAct(activation:Some(Gelu))(%0, %1, %2)
            %4 = FusedSwiGLU(cast_to:None,gate_first:true)(%3)
            return %4"#,
        domains: &[],
        tol: F64,
    },
];
