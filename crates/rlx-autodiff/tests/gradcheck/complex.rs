//! Gradient cases for complex arithmetic with genuinely complex operands (both parts drawn),
//! so a rule missing a conjugate fails: `a·b`, `a/b` and a product reduction. Values come
//! back to real through `ComplexNormSq` and `Cast`.

use super::harness::{Case, Domain::*};

/// C64 holds f32 pairs: checked at f32 precision.
const F32: f64 = 1e-2;

pub const CASES: &[Case] = &[Case {
    name: "c64 multiply, divide and product with non-real operands",
    src: r#"%0 = Input(name:"ar",ty:(dtype:F64,shape:[2,3]))()
        %1 = Input(name:"ai",ty:(dtype:F64,shape:[2,3]))()
        %2 = Input(name:"br",ty:(dtype:F64,shape:[3]))()
        %3 = Input(name:"bi",ty:(dtype:F64,shape:[3]))()
        %4 = Constant(ty:(dtype:C64,shape:[]),data:[0,0,0,0,0,0,128,63])()
        %5 = Cast(to:C64)(%0)
        %6 = Cast(to:C64)(%1)
        %7 = Binary(op:Mul)(%6, %4)
        %8 = Binary(op:Add)(%5, %7)
        %9 = Cast(to:C64)(%2)
        %10 = Cast(to:C64)(%3)
        %11 = Binary(op:Mul)(%10, %4)
        %12 = Binary(op:Add)(%9, %11)
        %13 = Binary(op:Mul)(%8, %12)
        %14 = Binary(op:Div)(%8, %12)
        %15 = Reduce(op:Prod,axes:[1],keep_dim:false)(%8)
        %16 = ComplexNormSq()(%13)
        %17 = ComplexNormSq()(%14)
        %18 = Cast(to:F32)(%13)
        %19 = Cast(to:F32)(%14)
        %20 = ComplexNormSq()(%15)
        %21 = Cast(to:F32)(%15)
        return %16, %17, %18, %19, %20, %21"#,
    domains: &[("br", Positive), ("bi", Positive)],
    tol: F32,
}];
