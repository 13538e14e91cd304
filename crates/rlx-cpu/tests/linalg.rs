//! Data-dependent failures of the linalg kernels (OPS.md §15) are errors naming the op and the
//! offending position, and the documented non-error semantics hold (singular `Det` = 0,
//! `LogDet` = −∞, wide `Qr`, degenerate `EighBackward` pairs), never a panic.

mod common;

use common::{run, session};
use rlx_ir::text::parse;
use rlx_runtime::Tensor;

fn t64(data: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(data, shape).unwrap()
}

/// The error of running `src` on `inputs`.
fn error(src: &str, inputs: &[(&str, &Tensor)]) -> String {
    let g = parse(src).unwrap();
    let mut c = session().compile(&g).unwrap();
    match c.run(inputs) {
        Ok(v) => panic!("expected an error, got {:?}", v.iter().map(Tensor::to_f64_vec).collect::<Vec<_>>()),
        Err(e) => e.to_string(),
    }
}

fn outputs(src: &str, inputs: &[(&str, &Tensor)]) -> Vec<Vec<f64>> {
    run(&parse(src).unwrap(), inputs).iter().map(Tensor::to_f64_vec).collect()
}

const SOLVE: &str = r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[3,3]))()
    %1 = Input(name:"b",ty:(dtype:F64,shape:[3]))()
    %2 = DenseSolve()(%0, %1)
    return %2"#;

#[test]
fn singular_dense_solve_names_the_zero_pivot() {
    // The middle column is zero: LU meets an exactly zero pivot in column 1.
    let a = t64(&[1.0, 0.0, 2.0, 3.0, 0.0, 4.0, 5.0, 0.0, 6.0], &[3, 3]);
    let b = t64(&[1.0, 2.0, 3.0], &[3]);
    let e = error(SOLVE, &[("a", &a), ("b", &b)]);
    assert!(e.starts_with("DenseSolve (node %2): A is singular: the LU pivot of column 1 is zero"), "{e}");
}

#[test]
fn batched_solve_names_the_singular_item() {
    let src = r#"%0 = Input(name:"a",ty:(dtype:F32,shape:[2,2,2]))()
        %1 = Input(name:"b",ty:(dtype:F32,shape:[2,2,1]))()
        %2 = BatchedDenseSolve()(%0, %1)
        return %2"#;
    let a = Tensor::from_slice(&[2.0f32, 1.0, 1.0, 3.0, 1.0, 2.0, 2.0, 4.0], &[2, 2, 2]).unwrap();
    let b = Tensor::from_slice(&[1.0f32; 4], &[2, 2, 1]).unwrap();
    let e = error(src, &[("a", &a), ("b", &b)]);
    assert!(e.contains("BatchedDenseSolve") && e.contains("batch item 1: A is singular: the LU pivot of column 1"), "{e}");
}

#[test]
fn non_finite_inputs_are_errors_naming_the_entry() {
    let a = t64(&[2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0], &[3, 3]);
    let b = t64(&[1.0, f64::INFINITY, 3.0], &[3]);
    let e = error(SOLVE, &[("a", &a), ("b", &b)]);
    assert!(e.contains("DenseSolve") && e.contains("b has the non-finite entry inf at [1]"), "{e}");
    for op in ["Svd", "Qr", "Eigh", "Det", "LogDet", "Cholesky"] {
        let src = format!(
            r#"%0 = Input(name:"a",ty:(dtype:F32,shape:[2,2]))()
            %1 = {op}()(%0)
            return %1"#
        );
        let a = Tensor::from_slice(&[1.0f32, 0.5, f32::NAN, 1.0], &[2, 2]).unwrap();
        let e = error(&src, &[("a", &a)]);
        assert!(e.starts_with(op) && e.contains("A has the non-finite entry NaN at [1, 0]"), "{e}");
    }
}

#[test]
fn cholesky_of_a_non_spd_matrix_names_the_failing_pivot() {
    let src = r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[3,3]))()
        %1 = Cholesky()(%0)
        return %1"#;
    // Leading 2×2 minor [[1, 2], [2, 1]] has determinant −3.
    let a = t64(&[1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0, 1.0], &[3, 3]);
    let e = error(src, &[("a", &a)]);
    assert!(e.starts_with("Cholesky (node %1): A is not positive definite: the pivot of column 1 is -3"), "{e}");
    let neg = t64(&[-1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], &[3, 3]);
    assert!(error(src, &[("a", &neg)]).contains("pivot of column 0 is -1"));
}

#[test]
fn triangular_solve_with_a_zero_diagonal_is_an_error() {
    let src = r#"%0 = Input(name:"a",ty:(dtype:F32,shape:[2,2]))()
        %1 = Input(name:"b",ty:(dtype:F32,shape:[2,3]))()
        %2 = TriangularSolve(lower:false,transpose:true)(%0, %1)
        return %2"#;
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 0.0], &[2, 2]).unwrap();
    let b = Tensor::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let e = error(src, &[("a", &a), ("b", &b)]);
    assert!(e.contains("TriangularSolve") && e.contains("A is singular: its diagonal entry (1, 1) is zero"), "{e}");
}

#[test]
fn singular_determinants_are_zero_and_minus_infinity() {
    let src = r#"%0 = Input(name:"a",ty:(dtype:F32,shape:[3,3]))()
        %1 = Det()(%0)
        %2 = LogDet()(%0)
        return %1, %2"#;
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 2.0, 4.0, 6.0, 1.0, 0.0, 1.0], &[3, 3]).unwrap();
    assert_eq!(outputs(src, &[("a", &a)]), vec![vec![0.0], vec![f64::NEG_INFINITY]]);
    let empty = Tensor::from_slice::<f32>(&[], &[0, 0]).unwrap();
    let src0 = src.replace("[3,3]", "[0,0]");
    assert_eq!(outputs(&src0, &[("a", &empty)]), vec![vec![1.0], vec![0.0]]);
}

#[test]
fn wide_qr_has_a_square_q_like_numpy() {
    // np.linalg.qr([[1, 2, 3], [4, 5, 6]]): Q = −[[1, 4], [4, −1]]/√17.
    let src = r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,3]))()
        %1 = Qr()(%0)
        return %1, %1.1"#;
    let a = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let out = outputs(src, &[("a", &a)]);
    let s = 17f64.sqrt();
    let want_q = [-1.0 / s, -4.0 / s, -4.0 / s, 1.0 / s];
    let want_r = [-s, -22.0 / s, -27.0 / s, 0.0, -3.0 / s, -6.0 / s];
    for (x, y) in out[0].iter().zip(want_q).chain(out[1].iter().zip(want_r)) {
        assert!((x - y).abs() < 1e-14, "{out:?}");
    }
}

#[test]
fn degenerate_eigenvalue_pairs_add_no_vector_term() {
    // λ = (1, 1) with U = I: the pair is degenerate, so only diag(λ̄) remains.
    let src = r#"%0 = Input(name:"lam",ty:(dtype:F32,shape:[2]))()
        %1 = Input(name:"u",ty:(dtype:F32,shape:[2,2]))()
        %2 = Input(name:"dlam",ty:(dtype:F32,shape:[2]))()
        %3 = Input(name:"du",ty:(dtype:F32,shape:[2,2]))()
        %4 = EighBackward()(%0, %1, %2, %3)
        return %4"#;
    let f = |v: &[f32], s: &[usize]| Tensor::from_slice(v, s).unwrap();
    let (lam, u) = (f(&[1.0, 1.0], &[2]), f(&[1.0, 0.0, 0.0, 1.0], &[2, 2]));
    let (dlam, du) = (f(&[0.5, -2.0], &[2]), f(&[3.0, 7.0, -5.0, 1.0], &[2, 2]));
    let out = outputs(src, &[("lam", &lam), ("u", &u), ("dlam", &dlam), ("du", &du)]);
    assert_eq!(out, vec![vec![0.5, 0.0, 0.0, -2.0]]);
}

#[test]
fn batches_large_enough_for_threads_match_their_definitions() {
    // 16 systems of 16 unknowns and 8 eigenproblems of order 9 pass the rayon threshold.
    let src = r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[16,16,16]))()
        %1 = Input(name:"b",ty:(dtype:F64,shape:[16,16,2]))()
        %2 = BatchedDenseSolve()(%0, %1)
        %3 = Input(name:"s",ty:(dtype:F64,shape:[8,9,9]))()
        %4 = EighBatch()(%3)
        return %2, %4, %4.1"#;
    let mut a: Vec<f64> = common::randn(16 * 256, 3).iter().map(|&v| f64::from(v)).collect();
    for (i, v) in a.iter_mut().enumerate() {
        if (i % 256) % 17 == 0 {
            *v += 16.0;
        }
    }
    let b: Vec<f64> = common::randn(16 * 32, 4).iter().map(|&v| f64::from(v)).collect();
    let s: Vec<f64> = common::randn(8 * 81, 5).iter().map(|&v| f64::from(v)).collect();
    let out = outputs(src, &[("a", &t64(&a, &[16, 16, 16])), ("b", &t64(&b, &[16, 16, 2])), ("s", &t64(&s, &[8, 9, 9]))]);
    for item in 0..16 {
        for (row, col) in (0..16).flat_map(|r| (0..2).map(move |c| (r, c))) {
            let ax: f64 = (0..16).map(|k| a[item * 256 + row * 16 + k] * out[0][item * 32 + k * 2 + col]).sum();
            assert!((ax - b[item * 32 + row * 2 + col]).abs() < 1e-12, "item {item}");
        }
    }
    let (lam, u) = (&out[1], &out[2]);
    for item in 0..8 {
        // Lower triangle of slice `item` = U·diag(λ)·Uᵀ.
        for (i, j) in (0..9).flat_map(|i| (0..=i).map(move |j| (i, j))) {
            let rebuilt: f64 = (0..9).map(|k| u[item * 81 + i * 9 + k] * lam[item * 9 + k] * u[item * 81 + j * 9 + k]).sum();
            assert!((rebuilt - s[item * 81 + i * 9 + j]).abs() < 1e-12, "item {item} ({i}, {j})");
        }
    }
}

#[test]
fn svd_of_a_larger_matrix_is_orthonormal_and_exact() {
    let (m, n) = (40, 25);
    let src = r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[40,25]))()
        %1 = Svd()(%0)
        return %1, %1.1, %1.2"#;
    let a: Vec<f64> = common::randn(m * n, 9).iter().map(|&v| f64::from(v)).collect();
    let out = outputs(src, &[("a", &t64(&a, &[m, n]))]);
    let (u, s, vt) = (&out[0], &out[1], &out[2]);
    assert!(s.windows(2).all(|w| w[0] >= w[1]));
    for (i, j) in (0..m).flat_map(|i| (0..n).map(move |j| (i, j))) {
        let x: f64 = (0..n).map(|k| u[i * n + k] * s[k] * vt[k * n + j]).sum();
        assert!((x - a[i * n + j]).abs() < 1e-12);
    }
    for (p, q) in (0..n).flat_map(|p| (0..n).map(move |q| (p, q))) {
        let uu: f64 = (0..m).map(|i| u[i * n + p] * u[i * n + q]).sum();
        let vv: f64 = (0..n).map(|i| vt[p * n + i] * vt[q * n + i]).sum();
        let id = f64::from(u8::from(p == q));
        assert!((uu - id).abs() < 1e-13 && (vv - id).abs() < 1e-13, "({p}, {q})");
    }
}
