//! Gradient cases for convolution, pooling and resize, and for the conv / max-pool backward
//! ops (second order). Windows mix groups, strides, dilations, per-axis and explicit
//! asymmetric padding, batch 2 and odd extents.

use super::harness::Case;

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "grouped strided dilated conv",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,4,7,9]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[6,2,3,2]))()
            %2 = Conv(kernel_size:[3,2],stride:[2,1],padding:[1,0],dilation:[1,2],groups:2)(%0, %1)
            %3 = Input(name:"wd",ty:(dtype:F64,shape:[4,1,3,3]))()
            %4 = Conv(kernel_size:[3,3],stride:[3,2],padding:[],dilation:[],groups:4)(%0, %3)
            return %2, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "conv after an asymmetric pad",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[1,3,5,6]))()
            %1 = Pad(pads:[(0,0),(0,0),(1,0),(0,2)],mode:Constant(0.0))(%0)
            %2 = Input(name:"w",ty:(dtype:F64,shape:[2,3,3,3]))()
            %3 = Conv(kernel_size:[3,3],stride:[2,2],padding:[0,1],dilation:[1,1],groups:1)(%1, %2)
            return %3"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "max and min pools with overlapping padded windows",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,7,6]))()
            %1 = Pool(kind:Max,kernel_size:[3,2],stride:[2,1],padding:[1,0])(%0)
            %2 = Pool(kind:Min,kernel_size:[2,3],stride:[2,2],padding:[1,1])(%0)
            return %1, %2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "mean, sum and product pools",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,7,6]))()
            %1 = Pool(kind:Mean,kernel_size:[3,3],stride:[2,2],padding:[1,1])(%0)
            %2 = Pool(kind:Sum,kernel_size:[2,3],stride:[1,2],padding:[0,1])(%0)
            %3 = Pool(kind:Prod,kernel_size:[2,2],stride:[2,3],padding:[1,0])(%0)
            return %1, %2, %3"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "3-d pools",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,2,5,4,3]))()
            %1 = Pool(kind:Max,kernel_size:[2,3,2],stride:[2,1,1],padding:[1,1,0])(%0)
            %2 = Pool(kind:Mean,kernel_size:[3,2,2],stride:[1,2,1],padding:[1,0,1])(%0)
            return %1, %2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "small cnn: conv, bias, relu, max pool, mean pool",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,1,8,8]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[4,1,3,3]))()
            %2 = Conv(kernel_size:[3,3],stride:[1,1],padding:[1,1],dilation:[1,1],groups:1)(%0, %1)
            %3 = Input(name:"b",ty:(dtype:F64,shape:[1,4,1,1]))()
            %4 = Binary(op:Add)(%2, %3)
            %5 = Activation(kind:Relu)(%4)
            %6 = Pool(kind:Max,kernel_size:[2,2],stride:[2,2],padding:[])(%5)
            %7 = Pool(kind:Mean,kernel_size:[2,2],stride:[2,2],padding:[])(%6)
            return %7"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "grouped dilated 3-d conv",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,4,4,5,3]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[4,2,2,3,2]))()
            %2 = Conv3d(stride:(1,2,1),padding:(1,0,1),dilation:(2,1,1),groups:2)(%0, %1)
            return %2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "transposed convs with output padding",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,4,3,4]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[4,3,3,3]))()
            %2 = ConvTranspose2d(kernel_size:[3,3],stride:[2,1],padding:[1,0],dilation:[1,2],output_padding:[1,0],groups:2)(%0, %1)
            %3 = Input(name:"u",ty:(dtype:F64,shape:[1,2,3,3]))()
            %4 = Input(name:"v",ty:(dtype:F64,shape:[2,2,2,2]))()
            %5 = ConvTranspose2d(kernel_size:[2,2],stride:[1,2],padding:[0,0],dilation:[2,1],output_padding:[1,1],groups:1)(%3, %4)
            return %2, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "3-d transposed conv",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,2,2,3,2]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[2,3,2,2,3]))()
            %2 = ConvTranspose3d(stride:(2,1,1),padding:(0,1,1),dilation:(1,1,2),output_padding:(1,0,0),groups:1)(%0, %1)
            return %2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "im2col",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,5,4]))()
            %1 = Im2Col(kernel_size:[2,3],stride:[2,1],padding:[1,1],dilation:[1,2])(%0)
            return %1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "nearest resizes",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,3,2]))()
            %1 = ResizeNearest2x()(%0)
            %2 = Input(name:"v",ty:(dtype:F64,shape:[1,2,3,2,4]))()
            %3 = Interpolate3d(size:[5,3,4])(%2)
            %4 = Interpolate3d(size:[2,1,3])(%2)
            return %1, %3, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "fused conv, bias, residual and activation",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,5,5]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[4,3,3,3]))()
            %2 = Input(name:"b",ty:(dtype:F64,shape:[4]))()
            %3 = Input(name:"r",ty:(dtype:F64,shape:[2,4,3,5]))()
            %4 = FusedConvBiasAct(kernel_size:[3,3],stride:[2,1],padding:[1,1],dilation:[1,1],groups:1,activation:Some(Tanh),has_residual:true)(%0, %1, %2, %3)
            return %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "2-d conv backward ops (second order)",
        src: r#"%0 = Input(name:"dy",ty:(dtype:F64,shape:[2,6,4,7]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[6,2,3,2]))()
            %2 = Conv2dBackwardInput(kernel_size:[3,2],stride:[2,1],padding:[1,0],dilation:[1,2],groups:2,input_size:[8,9])(%0, %1)
            %3 = Input(name:"x",ty:(dtype:F64,shape:[2,4,7,9]))()
            %4 = Conv2dBackwardWeight(kernel_size:[3,2],stride:[2,1],padding:[1,0],dilation:[1,2],groups:2)(%3, %0)
            return %2, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "3-d conv backward ops (second order)",
        src: r#"%0 = Input(name:"dy",ty:(dtype:F64,shape:[2,4,4,2,4]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[4,2,2,3,2]))()
            %2 = Conv3dBackwardInput(kernel_size:[2,3,2],stride:[1,2,1],padding:[1,0,1],dilation:[2,1,1],groups:2,input_size:[4,6,3])(%0, %1)
            %3 = Input(name:"x",ty:(dtype:F64,shape:[2,4,4,5,3]))()
            %4 = Conv3dBackwardWeight(kernel_size:[2,3,2],stride:[1,2,1],padding:[1,0,1],dilation:[2,1,1],groups:2)(%3, %0)
            return %2, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "max-pool backward ops (second order)",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,7,6]))()
            %1 = Input(name:"dy",ty:(dtype:F64,shape:[2,3,4,5]))()
            %2 = MaxPool2dBackward(kernel_size:[3,2],stride:[2,1],padding:[1,0])(%0, %1)
            %3 = Input(name:"v",ty:(dtype:F64,shape:[2,2,5,4,3]))()
            %4 = Input(name:"dv",ty:(dtype:F64,shape:[2,2,3,4,2]))()
            %5 = MaxPool3dBackward(kernel_size:[2,3,2],stride:[2,1,1],padding:[1,1,0])(%3, %4)
            return %2, %5"#,
        domains: &[],
        tol: F64,
    },
];
