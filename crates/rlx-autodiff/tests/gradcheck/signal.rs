//! Gradient cases for the signal and complex family. Complex values start from real inputs
//! (`Cast` to C64, then `Fft` for non-zero imaginary parts) and come back to real through
//! `ComplexNormSq` or `Cast`. Inputs that get no gradient by OPS.md (gates, twiddles, mel
//! filters) are built from integer inputs, which are not differentiated.

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;
/// C64 holds f32 pairs and `LogMel` returns F32: those cases are checked at f32 precision.
const F32: f64 = 1e-2;

pub const CASES: &[Case] = &[
    Case {
        name: "fft in the real-block layout, every norm",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,8]))()
            %1 = Fft(inverse:false,norm:Backward)(%0)
            %2 = Fft(inverse:true,norm:Backward)(%0)
            %3 = Fft(inverse:false,norm:Forward)(%0)
            %4 = Fft(inverse:true,norm:Ortho)(%0)
            %5 = Fft(inverse:false,norm:Unscaled)(%0)
            %6 = Input(name:"y",ty:(dtype:F64,shape:[6]))()
            %7 = Fft(inverse:true,norm:Forward)(%6)
            return %1, %2, %3, %4, %5, %7"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "partitioned convolution, direct and partitioned",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,10]))()
            %1 = Input(name:"ir",ty:(dtype:F64,shape:[5]))()
            %2 = PartitionedConv(block:4)(%0, %1)
            %3 = Input(name:"s",ty:(dtype:F64,shape:[12]))()
            %4 = Input(name:"long",ty:(dtype:F64,shape:[40]))()
            %5 = PartitionedConv(block:8)(%3, %4)
            %6 = Input(name:"one",ty:(dtype:F64,shape:[1]))()
            %7 = PartitionedConv(block:8)(%3, %6)
            return %2, %5, %7"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "gated butterfly stages",
        src: r#"%0 = Input(name:"state",ty:(dtype:F64,shape:[2,8,2]))()
            %1 = Input(name:"gate",ty:(dtype:I64,shape:[4]))()
            %2 = Cast(to:F64)(%1)
            %3 = Input(name:"rev",ty:(dtype:I64,shape:[4]))()
            %4 = Cast(to:F64)(%3)
            %5 = Input(name:"angle",ty:(dtype:I64,shape:[4]))()
            %6 = Cast(to:F64)(%5)
            %7 = Activation(kind:Cos)(%6)
            %8 = Activation(kind:Sin)(%6)
            %9 = FftButterflyStage(stage:0,n_fft:8)(%0, %2, %4, %7, %8)
            %10 = FftButterflyStage(stage:1,n_fft:8)(%9, %4, %2, %8, %7)
            %11 = FftButterflyStage(stage:2,n_fft:8)(%10, %2, %2, %7, %8)
            return %9, %11"#,
        domains: &[("gate", Below(2)), ("rev", Below(2)), ("angle", Below(7))],
        tol: F64,
    },
    Case {
        name: "log-mel, per clip and per frame",
        src: r#"%0 = Input(name:"spec",ty:(dtype:F64,shape:[2,3,16]))()
            %1 = Input(name:"k",ty:(dtype:I64,shape:[4,5]))()
            %2 = Cast(to:F64)(%1)
            %3 = Activation(kind:Exp)(%2)
            %4 = LogMel(per_frame_floor:false)(%0, %3)
            %5 = LogMel(per_frame_floor:true)(%0, %3)
            return %4, %5"#,
        domains: &[("k", Below(3))],
        tol: F32,
    },
    Case {
        name: "log-mel backward w.r.t. the spectrum (second order)",
        src: r#"%0 = Input(name:"spec",ty:(dtype:F64,shape:[2,3,16]))()
            %1 = Input(name:"k",ty:(dtype:I64,shape:[4,5]))()
            %2 = Cast(to:F64)(%1)
            %3 = Activation(kind:Exp)(%2)
            %4 = Input(name:"dy",ty:(dtype:I64,shape:[2,3,4]))()
            %5 = Cast(to:F32)(%4)
            %6 = LogMelBackward(per_frame_floor:false)(%0, %3, %5)
            %7 = LogMelBackward(per_frame_floor:true)(%0, %3, %5)
            return %6, %7"#,
        domains: &[("k", Below(3)), ("dy", Below(5))],
        tol: F64,
    },
    Case {
        name: "log-mel backward w.r.t. its cotangent (second order)",
        src: r#"%0 = Input(name:"spec",ty:(dtype:F64,shape:[1,3,16]))()
            %1 = Input(name:"k",ty:(dtype:I64,shape:[4,5]))()
            %2 = Cast(to:F64)(%1)
            %3 = Activation(kind:Exp)(%2)
            %4 = Input(name:"dy",ty:(dtype:F64,shape:[1,3,4]))()
            %5 = Cast(to:F32)(%4)
            %6 = LogMelBackward(per_frame_floor:false)(%0, %3, %5)
            return %6"#,
        domains: &[("k", Below(3))],
        tol: F32,
    },
    Case {
        name: "c64 transforms, conjugate and squared norms",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,4]))()
            %1 = Cast(to:C64)(%0)
            %2 = Fft(inverse:false,norm:Ortho)(%1)
            %3 = Input(name:"y",ty:(dtype:F64,shape:[2,4]))()
            %4 = Cast(to:C64)(%3)
            %5 = Binary(op:Add)(%2, %4)
            %6 = Conjugate()(%5)
            %7 = Fft(inverse:true,norm:Backward)(%6)
            %8 = ComplexNormSq()(%7)
            %9 = Input(name:"g",ty:(dtype:F64,shape:[2,4]))()
            %10 = Cast(to:F32)(%9)
            %11 = ComplexNormSqBackward()(%7, %10)
            %12 = ComplexNormSq()(%11)
            %13 = Cast(to:F32)(%7)
            return %8, %12, %13"#,
        domains: &[],
        tol: F32,
    },
];
