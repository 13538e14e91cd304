//! Gradient cases for the normalizations and their backward ops (second order).

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "layer and rms norms over the last and a middle axis",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"g4",ty:(dtype:F64,shape:[4]))()
            %2 = Input(name:"b4",ty:(dtype:F64,shape:[4]))()
            %3 = Input(name:"g3",ty:(dtype:F64,shape:[3]))()
            %4 = Input(name:"b3",ty:(dtype:F64,shape:[3]))()
            %5 = LayerNorm(axis:-1,eps:0.00001)(%0, %1, %2)
            %6 = LayerNorm(axis:1,eps:0.00001)(%0, %3, %4)
            %7 = RmsNorm(axis:-1,eps:0.000001,flatten_leading:false)(%0, %1, %2)
            %8 = RmsNorm(axis:1,eps:0.000001,flatten_leading:false)(%0, %3, %4)
            %9 = RmsNorm(axis:-1,eps:0.000001,flatten_leading:true)(%0, %1, %2)
            return %5, %6, %7, %8, %9"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "group, channel-layer and frozen-statistics batch norms",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,4,3,2]))()
            %1 = Input(name:"g",ty:(dtype:F64,shape:[4]))()
            %2 = Input(name:"b",ty:(dtype:F64,shape:[4]))()
            %3 = GroupNorm(num_groups:2,eps:0.00001)(%0, %1, %2)
            %4 = GroupNorm(num_groups:4,eps:0.00001)(%0, %1, %2)
            %5 = Input(name:"rows",ty:(dtype:F64,shape:[3,4]))()
            %6 = GroupNorm(num_groups:2,eps:0.00001)(%5, %1, %2)
            %7 = LayerNorm2d(eps:0.000001)(%0, %1, %2)
            %8 = Input(name:"mean_units",ty:(dtype:I64,shape:[4]))()
            %9 = Cast(to:F64)(%8)
            %10 = Input(name:"log_var_units",ty:(dtype:I64,shape:[4]))()
            %11 = Cast(to:F64)(%10)
            %12 = Activation(kind:Exp)(%11)
            %13 = BatchNormInference(eps:0.001,axis:1)(%0, %1, %2, %9, %12)
            %14 = Input(name:"nhwc",ty:(dtype:F64,shape:[3,2,4]))()
            %15 = BatchNormInference(eps:0.001,axis:-1)(%14, %1, %2, %9, %12)
            return %3, %4, %6, %7, %13, %15"#,
        domains: &[("mean_units", Below(3)), ("log_var_units", Below(3))],
        tol: F64,
    },
    Case {
        name: "norm backward ops, differentiated through their decompositions",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,4,3]))()
            %1 = Input(name:"dy",ty:(dtype:F64,shape:[2,4,3]))()
            %2 = Input(name:"g3",ty:(dtype:F64,shape:[3]))()
            %3 = Input(name:"b3",ty:(dtype:F64,shape:[3]))()
            %4 = LayerNormBackwardInput(axis:-1,eps:0.00001)(%0, %2, %1)
            %5 = LayerNormBackwardGamma(axis:-1,eps:0.00001)(%0, %1)
            %6 = RmsNormBackwardInput(axis:-1,eps:0.000001)(%0, %2, %3, %1)
            %7 = RmsNormBackwardGamma(axis:-1,eps:0.000001)(%0, %2, %3, %1)
            %8 = RmsNormBackwardBeta(axis:-1,eps:0.000001)(%0, %2, %3, %1)
            %9 = Input(name:"g4",ty:(dtype:F64,shape:[4]))()
            %10 = Input(name:"b4",ty:(dtype:F64,shape:[4]))()
            %11 = GroupNormBackwardInput(num_groups:2,eps:0.00001)(%0, %9, %10, %1)
            %12 = GroupNormBackwardGamma(num_groups:2,eps:0.00001)(%0, %1)
            %13 = GroupNormBackwardBeta(num_groups:2,eps:0.00001)(%0, %1)
            %14 = Input(name:"mean",ty:(dtype:F64,shape:[4]))()
            %15 = Input(name:"var",ty:(dtype:F64,shape:[4]))()
            %16 = BatchNormInferenceBackwardInput(eps:0.001,axis:1)(%0, %9, %14, %15, %1)
            %17 = BatchNormInferenceBackwardGamma(eps:0.001,axis:1)(%0, %14, %15, %1)
            %18 = BatchNormInferenceBackwardBeta(axis:1)(%1)
            return %4, %5, %6, %7, %8, %11, %12, %13, %16, %17, %18"#,
        domains: &[("var", Positive)],
        tol: F64,
    },
];
