//! Data-dependent failure modes of the SPD kernels: a non-finite entry or a matrix outside an
//! op's domain is a clear error naming the op, the operand and the offending eigenvalue; the
//! eps floors of `ReEig`, `LogEig` and `SpdBatchNorm` define results instead; a Karcher mean
//! that runs out of iterations returns its last iterate.

mod common;

use common::{assert_close, run, session};
use rlx_ir::text::parse;
use rlx_runtime::Tensor;

fn t(v: &[f64], dims: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims).unwrap()
}

/// `diag(d)` as `[n, n]` values.
fn diag(d: &[f64]) -> Vec<f64> {
    let n = d.len();
    (0..n * n).map(|k| if k % (n + 1) == 0 { d[k / (n + 1)] } else { 0.0 }).collect()
}

/// The error of running `src` on `inputs`; panics if it succeeds.
fn error(src: &str, inputs: &[(&str, &Tensor)]) -> String {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut c = session().compile(&g).unwrap_or_else(|e| panic!("compile: {e}\n{g}"));
    match c.run(inputs) {
        Ok(_) => panic!("{src} ran without error"),
        Err(e) => e.to_string(),
    }
}

fn outputs(src: &str, inputs: &[(&str, &Tensor)]) -> Vec<Tensor> {
    run(&parse(src).unwrap_or_else(|e| panic!("{e}\n{src}")), inputs)
}

fn assert_contains(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} lacks {p:?}");
    }
}

/// An SPD 3×3 matrix with eigenvalues well apart from 0.
const SPD3: [f64; 9] = [4.0, 1.0, 0.5, 1.0, 3.0, -0.2, 0.5, -0.2, 2.0];
/// A symmetric 3×3 matrix with eigenvalues 2, 1 and −0.5.
const INDEFINITE3: [f64; 9] = [2.0, 0.0, 0.0, 0.0, 0.25, 0.75, 0.0, 0.75, 0.25];

const FN_BATCH: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,3]))()
    %1 = SpdMatrixFnBatch(kind:KIND)(%0)
    return %1"#;

fn batch(a: &[f64], b: &[f64]) -> Tensor {
    t(&[a, b].concat(), &[2, 3, 3])
}

#[test]
fn matrix_functions_reject_inputs_outside_their_domain() {
    let x = batch(&SPD3, &INDEFINITE3);
    for kind in ["Logm", "Invsqrtm", "Sqrtm"] {
        let e = error(&FN_BATCH.replace("KIND", kind), &[("x", &x)]);
        let want = if kind == "Sqrtm" { "X[1] is not positive semi-definite: eigenvalue -5.000e-1 < 0" } else { "X[1] is not positive definite: eigenvalue -5.000e-1 ≤ 0" };
        assert_contains(&e, &["SpdMatrixFnBatch (node %1)", want]);
    }
    // Expm takes any symmetric matrix, but not one whose exponential overflows f64.
    assert!(outputs(&FN_BATCH.replace("KIND", "Expm"), &[("x", &x)])[0].to_f64_vec().iter().all(|v| v.is_finite()));
    let big = batch(&SPD3, &diag(&[800.0, 1.0, 1.0]));
    let e = error(&FN_BATCH.replace("KIND", "Expm"), &[("x", &big)]);
    assert_contains(&e, &["X[1]: Exp of eigenvalue 8.000e2 is inf"]);
}

#[test]
fn sqrtm_accepts_a_singular_psd_matrix_but_its_gradient_does_not() {
    let x = batch(&SPD3, &diag(&[0.0, 4.0, 9.0]));
    let y = outputs(&FN_BATCH.replace("KIND", "Sqrtm"), &[("x", &x)]);
    assert_eq!(&y[0].to_f64_vec()[9..], &diag(&[0.0, 2.0, 3.0])[..]);
    let src = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,3]))()
        %1 = Input(name:"dy",ty:(dtype:F64,shape:[2,3,3]))()
        %2 = SpdMatrixFnBatchBackward(kind:Sqrtm)(%0, %1)
        return %2"#;
    let e = error(src, &[("x", &x), ("dy", &x)]);
    assert_contains(&e, &["SpdMatrixFnBatchBackward (node %2)", "X[1] is not positive definite: eigenvalue 0.000e0 ≤ 0"]);
}

#[test]
fn non_finite_entries_are_errors_naming_operand_and_index() {
    let mut v = [SPD3, SPD3].concat();
    v[9 + 5] = f64::NAN;
    let e = error(&FN_BATCH.replace("KIND", "Expm"), &[("x", &t(&v, &[2, 3, 3]))]);
    assert_contains(&e, &["X[1, 1, 2] is NaN"]);
    let src = r#"%0 = Input(name:"lam",ty:(dtype:F32,shape:[3]))()
        %1 = Input(name:"u",ty:(dtype:F32,shape:[3,3]))()
        %2 = Input(name:"dy",ty:(dtype:F32,shape:[3,3]))()
        %3 = ReEigBackward(eps:0.001)(%0, %1, %2)
        return %3"#;
    let lam = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let u = Tensor::from_vec(diag(&[1.0; 3]).iter().map(|&v| v as f32).collect(), &[3, 3]).unwrap();
    let mut dy = vec![0.5f32; 9];
    dy[3] = f32::INFINITY;
    let e = error(src, &[("lam", &lam), ("u", &u), ("dy", &Tensor::from_vec(dy, &[3, 3]).unwrap())]);
    assert_contains(&e, &["ReEigBackward (node %3)", "Ȳ[1, 0] is inf"]);
}

#[test]
fn re_eig_and_log_eig_floor_any_symmetric_input() {
    let src = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,3]))()
        %1 = ReEig(eps:0.5)(%0)
        %2 = LogEig(eps:0.5)(%0)
        return %1, %1.1, %2"#;
    let x = t(&diag(&[-3.0, 0.25, 2.0]), &[3, 3]);
    let out = outputs(src, &[("x", &x)]);
    assert_close(&out[0], &t(&diag(&[0.5, 0.5, 2.0]), &[3, 3]), 1e-15, 1e-15);
    assert_close(&out[1], &t(&[-3.0, 0.25, 2.0], &[3]), 0.0, 0.0);
    let l = 0.5f64.ln();
    assert_close(&out[2], &t(&diag(&[l, l, 2f64.ln()]), &[3, 3]), 1e-15, 1e-15);
}

const BATCH_NORM: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[1,3,3]))()
    %1 = Input(name:"m",ty:(dtype:F64,shape:[3,3]))()
    %2 = Input(name:"g",ty:(dtype:F64,shape:[3,3]))()
    %3 = SpdBatchNorm(eps:0.0625)(%0, %1, %2)
    return %3"#;

#[test]
fn batch_norm_needs_spd_statistics_and_floors_small_eigenvalues() {
    let x = t(&SPD3, &[1, 3, 3]);
    let spd = t(&SPD3, &[3, 3]);
    let bad = t(&INDEFINITE3, &[3, 3]);
    let e = error(BATCH_NORM, &[("x", &x), ("m", &bad), ("g", &spd)]);
    assert_contains(&e, &["SpdBatchNorm (node %3)", "M is not positive definite: eigenvalue -5.000e-1 ≤ 0"]);
    let singular = t(&diag(&[0.0, 1.0, 2.0]), &[3, 3]);
    let e = error(BATCH_NORM, &[("x", &x), ("m", &spd), ("g", &singular)]);
    assert_contains(&e, &["G is not positive definite: eigenvalue 0.000e0 ≤ 0"]);
    // M's eigenvalue 1e-6 is below eps = 1/16, so it acts as 1/16.
    let tiny = outputs(BATCH_NORM, &[("x", &x), ("m", &t(&diag(&[1e-6, 1.0, 4.0]), &[3, 3])), ("g", &spd)]);
    let floor = outputs(BATCH_NORM, &[("x", &x), ("m", &t(&diag(&[0.0625, 1.0, 4.0]), &[3, 3])), ("g", &spd)]);
    assert_close(&tiny[0], &floor[0], 1e-13, 1e-13);
}

#[test]
fn geometry_rejects_non_spd_points() {
    let spd = t(&SPD3, &[3, 3]);
    let bad = t(&INDEFINITE3, &[3, 3]);
    let log_map = r#"%0 = Input(name:"p",ty:(dtype:F64,shape:[3,3]))()
        %1 = Input(name:"x",ty:(dtype:F64,shape:[3,3]))()
        %2 = SpdLogMap()(%0, %1)
        return %2"#;
    assert_contains(&error(log_map, &[("p", &bad), ("x", &spd)]), &["SpdLogMap (node %2)", "P is not positive definite: eigenvalue -5.000e-1"]);
    assert_contains(&error(log_map, &[("p", &spd), ("x", &bad)]), &["X is not positive definite: eigenvalue -5.000e-1"]);
    let exp_map = r#"%0 = Input(name:"p",ty:(dtype:F64,shape:[3,3]))()
        %1 = Input(name:"v",ty:(dtype:F64,shape:[3,3]))()
        %2 = SpdExpMapBackward()(%0, %1, %1)
        return %2, %2.1"#;
    assert_contains(&error(exp_map, &[("p", &bad), ("v", &spd)]), &["SpdExpMapBackward (node %2)", "P is not positive definite"]);
    let transport = r#"%0 = Input(name:"p",ty:(dtype:F64,shape:[3,3]))()
        %1 = Input(name:"q",ty:(dtype:F64,shape:[3,3]))()
        %2 = SpdParallelTransport()(%0, %1, %1)
        return %2"#;
    assert_contains(&error(transport, &[("p", &spd), ("q", &bad)]), &["SpdParallelTransport (node %2)", "Q is not positive definite: eigenvalue -5.000e-1"]);
}

#[test]
fn log_and_exp_maps_are_inverse_and_accept_an_indefinite_tangent() {
    let src = r#"%0 = Input(name:"p",ty:(dtype:F64,shape:[3,3]))()
        %1 = Input(name:"v",ty:(dtype:F64,shape:[3,3]))()
        %2 = SpdExpMap()(%0, %1)
        %3 = SpdLogMap()(%0, %2)
        return %3"#;
    let v = t(&INDEFINITE3, &[3, 3]);
    let out = outputs(src, &[("p", &t(&SPD3, &[3, 3])), ("v", &v)]);
    assert_close(&out[0], &v, 1e-12, 1e-12);
}

const KARCHER: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:["B",3,3]))()
    %1 = Input(name:"w",ty:(dtype:F64,shape:["B"]))()
    %2 = SpdKarcherMeanWeighted(iters:ITERS,tol:0.0)(%0, %1)
    return %2"#;

#[test]
fn karcher_means_check_inputs_and_weights_but_not_convergence() {
    let x = batch(&SPD3, &INDEFINITE3);
    let w = t(&[1.0, 1.0], &[2]);
    let e = error(&KARCHER.replace("ITERS", "5"), &[("x", &x), ("w", &w)]);
    assert_contains(&e, &["SpdKarcherMeanWeighted (node %2)", "X[1] is not positive definite: eigenvalue -5.000e-1 ≤ 0"]);
    let x = batch(&SPD3, &diag(&[1.0, 2.0, 3.0]));
    let e = error(&KARCHER.replace("ITERS", "5"), &[("x", &x), ("w", &t(&[1.0, -0.5], &[2]))]);
    assert_contains(&e, &["weight w[1] is -0.5 < 0"]);
    let e = error(&KARCHER.replace("ITERS", "5"), &[("x", &x), ("w", &t(&[0.0, 0.0], &[2]))]);
    assert_contains(&e, &["the weights w sum to 0"]);
    // For commuting (diagonal) inputs the mean is the geometric mean of the eigenvalues.
    let d = batch(&diag(&[1.0, 4.0, 9.0]), &diag(&[4.0, 1.0, 1.0]));
    let mean = outputs(&KARCHER.replace("ITERS", "40"), &[("x", &d), ("w", &w)]);
    assert_close(&mean[0], &t(&diag(&[2.0, 2.0, 3.0]), &[3, 3]), 1e-12, 1e-12);
    // One step with tol = 0 has not converged for three non-commuting inputs (for two, the
    // first step from the arithmetic mean is exact): that iterate comes back.
    let x = t(&[&SPD3[..], &diag(&[1.0, 2.0, 3.0]), &[2.0, -1.0, 0.0, -1.0, 2.0, -1.0, 0.0, -1.0, 2.0]].concat(), &[3, 3, 3]);
    let w = t(&[1.0, 2.0, 0.5], &[3]);
    let one = outputs(&KARCHER.replace("ITERS", "1"), &[("x", &x), ("w", &w)]);
    let many = outputs(&KARCHER.replace("ITERS", "40"), &[("x", &x), ("w", &w)]);
    let gap = one[0].to_f64_vec().iter().zip(many[0].to_f64_vec()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(gap > 1e-6, "one step already converged: {gap}");
}

#[test]
fn empty_matrices_and_batches_run() {
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,0,0]))()
        %1 = SpdMatrixFnBatch(kind:Logm)(%0)
        %2 = Input(name:"e",ty:(dtype:F32,shape:[0,3,3]))()
        %3 = SpdMatrixFnBatch(kind:Expm)(%2)
        return %1, %3"#;
    let x = Tensor::from_vec(Vec::<f32>::new(), &[2, 0, 0]).unwrap();
    let e = Tensor::from_vec(Vec::<f32>::new(), &[0, 3, 3]).unwrap();
    let out = outputs(src, &[("x", &x), ("e", &e)]);
    assert_eq!((out[0].to_f64_vec().len(), out[1].to_f64_vec().len()), (0, 0));
}
