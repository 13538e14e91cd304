//! Gradient cases for the matmul variants, all differentiated through their decompositions.

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "dot_general with batch and permuted free dims",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"b",ty:(dtype:F64,shape:[2,4,5]))()
            %2 = DotGeneral(lhs_contracting:[2],rhs_contracting:[1],lhs_batch:[0],rhs_batch:[0])(%0, %1)
            %3 = Input(name:"c",ty:(dtype:F64,shape:[4,3,2]))()
            %4 = DotGeneral(lhs_contracting:[1,2],rhs_contracting:[1,0],lhs_batch:[],rhs_batch:[])(%0, %3)
            return %2, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "expert, low-rank and codebook matmuls",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,4]))()
            %1 = Input(name:"experts",ty:(dtype:F64,shape:[2,4,5]))()
            %2 = Input(name:"ids",ty:(dtype:I64,shape:[3]))()
            %3 = GroupedMatMul()(%0, %1, %2)
            %4 = Input(name:"w",ty:(dtype:F64,shape:[4,5]))()
            %5 = Input(name:"la",ty:(dtype:F64,shape:[4,2]))()
            %6 = Input(name:"lb",ty:(dtype:F64,shape:[2,5]))()
            %7 = LoraMatMul(scale:0.5)(%0, %4, %5, %6)
            %8 = Input(name:"codes",ty:(dtype:U8,shape:[5,2]))()
            %9 = Input(name:"codebook",ty:(dtype:F64,shape:[6,2]))()
            %10 = SynthMatMul(kind:Codebook(entry_dim:2,num_entries:6))(%0, %8, %9)
            %11 = SynthReconstruct(kind:Codebook(entry_dim:2,num_entries:6))(%8, %9)
            return %3, %7, %10, %11"#,
        domains: &[("ids", Below(2)), ("codes", Below(6))],
        tol: F64,
    },
];
