//! Gradient cases for the SPD-manifold family. SPD operands are Gram matrices `Cᵀ·C` of a
//! free tall `C` and symmetric ones `B + Bᵀ`, built inside the graph so finite differences
//! stay on the manifold. The detached batch mean `M` of `SpdBatchNorm` comes from an integer
//! input, which is not differentiated.

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "bimap through its decomposition",
        src: r#"%0 = Input(name:"w",ty:(dtype:F64,shape:[2,3]))()
            %1 = Input(name:"c",ty:(dtype:F64,shape:[6,3]))()
            %2 = Transpose(perm:[1,0])(%1)
            %3 = MatMul()(%2, %1)
            %4 = BiMap()(%0, %3)
            return %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "reeig and logeig with floored eigenvalues",
        src: r#"%0 = Input(name:"b",ty:(dtype:F64,shape:[3,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = Binary(op:Add)(%0, %1)
            %3 = ReEig(eps:0.3)(%2)
            %4 = LogEig(eps:0.3)(%2)
            return %3, %3.1, %3.2, %4"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "riemannian batch norm",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[2,6,3]))()
            %1 = Transpose(perm:[0,2,1])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Input(name:"k",ty:(dtype:I64,shape:[6,3]))()
            %4 = Cast(to:F64)(%3)
            %5 = Transpose(perm:[1,0])(%4)
            %6 = MatMul()(%5, %4)
            %7 = Input(name:"d",ty:(dtype:F64,shape:[6,3]))()
            %8 = Transpose(perm:[1,0])(%7)
            %9 = MatMul()(%8, %7)
            %10 = SpdBatchNorm(eps:0.00001)(%2, %6, %9)
            return %10"#,
        domains: &[("k", Below(5))],
        tol: F64,
    },
    Case {
        name: "log map, exp map and parallel transport",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[6,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Input(name:"c",ty:(dtype:F64,shape:[6,3]))()
            %4 = Transpose(perm:[1,0])(%3)
            %5 = MatMul()(%4, %3)
            %6 = Input(name:"e",ty:(dtype:F64,shape:[3,3]))()
            %7 = Transpose(perm:[1,0])(%6)
            %8 = Binary(op:Add)(%6, %7)
            %9 = SpdLogMap()(%2, %5)
            %10 = SpdExpMap()(%2, %8)
            %11 = SpdParallelTransport()(%2, %5, %8)
            return %9, %10, %11"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "matrix functions per slice",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[2,6,3]))()
            %1 = Transpose(perm:[0,2,1])(%0)
            %2 = MatMul()(%1, %0)
            %3 = SpdMatrixFnBatch(kind:Logm)(%2)
            %4 = SpdMatrixFnBatch(kind:Sqrtm)(%2)
            %5 = SpdMatrixFnBatch(kind:Invsqrtm)(%2)
            %6 = Input(name:"b",ty:(dtype:F64,shape:[2,3,3]))()
            %7 = Transpose(perm:[0,2,1])(%6)
            %8 = Binary(op:Add)(%6, %7)
            %9 = SpdMatrixFnBatch(kind:Expm)(%8)
            return %3, %4, %5, %9"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "reeig and logeig backward (second order)",
        src: r#"%0 = Input(name:"b",ty:(dtype:F64,shape:[3,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = Binary(op:Add)(%0, %1)
            %3 = ReEig(eps:0.3)(%2)
            %4 = LogEig(eps:0.3)(%2)
            %5 = Input(name:"dy",ty:(dtype:F64,shape:[3,3]))()
            %6 = ReEigBackward(eps:0.3)(%3.1, %3.2, %5)
            %7 = LogEigBackward(eps:0.3)(%4.1, %4.2, %5)
            return %6, %7"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "matrix function backward (second order)",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[2,6,3]))()
            %1 = Transpose(perm:[0,2,1])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Input(name:"dy",ty:(dtype:F64,shape:[2,3,3]))()
            %4 = SpdMatrixFnBatchBackward(kind:Logm)(%2, %3)
            %5 = SpdMatrixFnBatchBackward(kind:Sqrtm)(%2, %3)
            %6 = SpdMatrixFnBatchBackward(kind:Invsqrtm)(%2, %3)
            %7 = Input(name:"b",ty:(dtype:F64,shape:[2,3,3]))()
            %8 = Transpose(perm:[0,2,1])(%7)
            %9 = Binary(op:Add)(%7, %8)
            %10 = SpdMatrixFnBatchBackward(kind:Expm)(%9, %3)
            return %4, %5, %6, %10"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "batch norm gradients (second order)",
        src: r#"%0 = Input(name:"k",ty:(dtype:I64,shape:[6,3]))()
            %1 = Cast(to:F64)(%0)
            %2 = Transpose(perm:[1,0])(%1)
            %3 = MatMul()(%2, %1)
            %4 = Input(name:"d",ty:(dtype:F64,shape:[6,3]))()
            %5 = Transpose(perm:[1,0])(%4)
            %6 = MatMul()(%5, %4)
            %7 = Input(name:"dy",ty:(dtype:F64,shape:[2,3,3]))()
            %8 = SpdBatchNormBackwardX(eps:0.00001)(%3, %6, %7)
            %9 = Input(name:"c",ty:(dtype:F64,shape:[2,6,3]))()
            %10 = Transpose(perm:[0,2,1])(%9)
            %11 = MatMul()(%10, %9)
            %12 = SpdBatchNormBackwardG(eps:0.00001)(%11, %3, %6, %7)
            return %8, %12"#,
        domains: &[("k", Below(5))],
        tol: F64,
    },
    Case {
        name: "log map, exp map and transport backward (second order)",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[6,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Input(name:"c",ty:(dtype:F64,shape:[6,3]))()
            %4 = Transpose(perm:[1,0])(%3)
            %5 = MatMul()(%4, %3)
            %6 = Input(name:"e",ty:(dtype:F64,shape:[3,3]))()
            %7 = Transpose(perm:[1,0])(%6)
            %8 = Binary(op:Add)(%6, %7)
            %9 = Input(name:"dy",ty:(dtype:F64,shape:[3,3]))()
            %10 = SpdLogMapBackward()(%2, %5, %9)
            %11 = SpdExpMapBackward()(%2, %8, %9)
            %12 = SpdParallelTransportBackward()(%2, %5, %8, %9)
            return %10, %10.1, %11, %11.1, %12, %12.1, %12.2"#,
        domains: &[],
        tol: F64,
    },
];
