//! Gradient cases for gathers and scatters.

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "gathers with repeated indices",
        src: r#"%0 = Input(name:"table",ty:(dtype:F64,shape:[5,3]))()
            %1 = Input(name:"ids",ty:(dtype:I64,shape:[2,4]))()
            %2 = Gather(axis:0)(%0, %1)
            %3 = Input(name:"cols",ty:(dtype:I64,shape:[4]))()
            %4 = Gather(axis:1)(%0, %3)
            return %2, %4"#,
        domains: &[("ids", Below(5)), ("cols", Below(3))],
        tol: F64,
    },
    Case {
        name: "element and tuple gathers",
        src: r#"%0 = Input(name:"data",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"idx",ty:(dtype:I64,shape:[4,2]))()
            %2 = GatherElements(axis:1)(%0, %1)
            %3 = Input(name:"rows",ty:(dtype:I64,shape:[3,1]))()
            %4 = GatherNd(batch_dims:0)(%0, %3)
            return %2, %4"#,
        domains: &[("idx", Below(3)), ("rows", Below(4))],
        tol: F64,
    },
    Case {
        name: "scatters",
        src: r#"%0 = Input(name:"updates",ty:(dtype:F64,shape:[4,3]))()
            %1 = Input(name:"ids",ty:(dtype:I64,shape:[4]))()
            %2 = ScatterAdd(out_dim:6)(%0, %1)
            %3 = Input(name:"dy",ty:(dtype:F64,shape:[2,4,3]))()
            %4 = GatherBackward(axis:1,table_shape:[2,6,3])(%3, %1)
            %5 = Input(name:"data",ty:(dtype:F64,shape:[6,3]))()
            %6 = Input(name:"rows",ty:(dtype:I64,shape:[4,1]))()
            %7 = ScatterNd(reduction:None)(%5, %6, %0)
            %8 = ScatterNd(reduction:Add)(%5, %6, %0)
            %9 = Input(name:"flat",ty:(dtype:F64,shape:[6]))()
            %10 = Input(name:"vals",ty:(dtype:F64,shape:[4]))()
            %11 = ScatterElements(axis:0,reduction:None)(%9, %1, %10)
            %12 = ScatterElements(axis:0,reduction:Add)(%9, %1, %10)
            return %2, %4, %7, %8, %11, %12"#,
        domains: &[("ids", Distinct(6)), ("rows", Distinct(6))],
        tol: F64,
    },
];
