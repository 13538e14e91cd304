//! Gradient cases for the linear-algebra family. Symmetric and SPD operands are Gram matrices
//! `Cᵀ·C` of a free tall `C` built inside the graph, so finite differences stay symmetric and
//! well conditioned; general square systems add a free matrix to one.

use super::harness::Case;

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "dense solves and determinants",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[8,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Input(name:"n",ty:(dtype:F64,shape:[3,3]))()
            %4 = Binary(op:Add)(%2, %3)
            %5 = Input(name:"b",ty:(dtype:F64,shape:[3]))()
            %6 = DenseSolve()(%4, %5)
            %7 = Input(name:"bm",ty:(dtype:F64,shape:[3,2]))()
            %8 = DenseSolve()(%4, %7)
            %9 = Det()(%4)
            %10 = LogDet()(%4)
            return %6, %8, %9, %10"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "batched dense solves",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[2,8,3]))()
            %1 = Transpose(perm:[0,2,1])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Input(name:"n",ty:(dtype:F64,shape:[2,3,3]))()
            %4 = Binary(op:Add)(%2, %3)
            %5 = Input(name:"b",ty:(dtype:F64,shape:[2,3]))()
            %6 = BatchedDenseSolve()(%4, %5)
            %7 = Input(name:"bm",ty:(dtype:F64,shape:[2,3,2]))()
            %8 = BatchedDenseSolve()(%4, %7)
            return %6, %8"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "cholesky and triangular solves on both triangles",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[8,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Cholesky()(%2)
            %4 = Input(name:"b",ty:(dtype:F64,shape:[3,2]))()
            %5 = TriangularSolve(lower:true,transpose:false)(%3, %4)
            %6 = Input(name:"v",ty:(dtype:F64,shape:[3]))()
            %7 = TriangularSolve(lower:true,transpose:true)(%3, %6)
            %8 = Input(name:"n",ty:(dtype:F64,shape:[3,3]))()
            %9 = Binary(op:Add)(%2, %8)
            %10 = TriangularSolve(lower:false,transpose:false)(%9, %4)
            %11 = TriangularSolve(lower:false,transpose:true)(%9, %6)
            %12 = TriangularSolve(lower:true,transpose:false)(%9, %6)
            return %3, %5, %7, %10, %11, %12"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "singular values of tall and wide matrices",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[4,3]))()
            %1 = Svd()(%0)
            %2 = Input(name:"w",ty:(dtype:F64,shape:[2,5]))()
            %3 = Svd()(%2)
            return %1.1, %3.1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "thin qr of tall and square matrices",
        src: r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[5,3]))()
            %1 = Qr()(%0)
            %2 = Input(name:"s",ty:(dtype:F64,shape:[3,3]))()
            %3 = Qr()(%2)
            return %1, %1.1, %3, %3.1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "symmetric eigendecompositions",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[8,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Eigh()(%2)
            %4 = Input(name:"cb",ty:(dtype:F64,shape:[2,8,3]))()
            %5 = Transpose(perm:[0,2,1])(%4)
            %6 = MatMul()(%5, %4)
            %7 = EighBatch()(%6)
            return %3, %3.1, %7, %7.1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "eigh backward (second order)",
        src: r#"%0 = Input(name:"c",ty:(dtype:F64,shape:[8,3]))()
            %1 = Transpose(perm:[1,0])(%0)
            %2 = MatMul()(%1, %0)
            %3 = Eigh()(%2)
            %4 = Input(name:"dl",ty:(dtype:F64,shape:[3]))()
            %5 = Input(name:"du",ty:(dtype:F64,shape:[3,3]))()
            %6 = EighBackward()(%3, %3.1, %4, %5)
            %7 = Input(name:"cb",ty:(dtype:F64,shape:[2,8,3]))()
            %8 = Transpose(perm:[0,2,1])(%7)
            %9 = MatMul()(%8, %7)
            %10 = EighBatch()(%9)
            %11 = Input(name:"dlb",ty:(dtype:F64,shape:[2,3]))()
            %12 = Input(name:"dub",ty:(dtype:F64,shape:[2,3,3]))()
            %13 = EighBatchBackward()(%10, %10.1, %11, %12)
            return %6, %13"#,
        domains: &[],
        tol: F64,
    },
];

/// The error `grad` reports for `src`, whose output is its loss.
fn grad_error(src: &str) -> String {
    let g = rlx_ir::text::parse(src).unwrap();
    let loss = g.outputs()[0];
    rlx_autodiff::grad(&g, loss, &["a"]).expect_err("differentiation should fail").to_string()
}

#[test]
fn svd_vectors_and_wide_qr_have_no_gradient() {
    let e = grad_error(
        r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[3,3]))()
        %1 = Svd()(%0)
        %2 = Reduce(op:Sum,axes:[0,1],keep_dim:false)(%1)
        return %2"#,
    );
    assert!(e.contains("Svd: U is forward-only"), "{e}");
    let e = grad_error(
        r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,3]))()
        %1 = Qr()(%0)
        %2 = Reduce(op:Sum,axes:[0,1],keep_dim:false)(%1.1)
        return %2"#,
    );
    assert!(e.contains("Qr: no gradient for a wide matrix"), "{e}");
}
