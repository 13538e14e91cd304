//! The reduce-family decompositions compute what the native kernels compute.
//!
//! Cases whose decomposition needs a primitive this backend does not claim yet (MatMul,
//! Transpose, Reshape, Narrow, GatherElements) are skipped with a note until it does.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_cpu::SUPPORTED_OPS;
use rlx_ir::{DType, Graph, OpKind, TensorType, ValueId};
use rlx_runtime::Tensor;

/// Whether the CPU backend claims every kind in `kinds`; says which it lacks if not.
fn claims(test: &str, kinds: &[OpKind]) -> bool {
    let missing: Vec<_> = kinds.iter().filter(|k| !SUPPORTED_OPS.contains(k)).collect();
    if !missing.is_empty() {
        eprintln!("{test}: skipped, the CPU backend does not claim {missing:?} yet");
    }
    missing.is_empty()
}

/// Small integers (many ties) with a few NaNs.
fn tied(n: usize, seed: u64, nans: &[usize]) -> Vec<f32> {
    let mut v: Vec<f32> = randn(n, seed).iter().map(|x| (x * 2.0).round()).collect();
    for &i in nans {
        v[i] = f32::NAN;
    }
    v
}

/// Runs `g` natively and with each of `kinds` decomposed; compares every output exactly
/// (indices) or to `tol` (values), equal infinities included (exclusive CumMax starts at −inf).
fn check(g: &Graph, inputs: &[(&str, &Tensor)], kinds: &[OpKind], tol: f64) {
    let native = run(g, inputs);
    for &kind in kinds {
        for (x, y) in run_decomposed(g, kind, inputs).iter().zip(&native) {
            let finite = |t: &Tensor| t.to_f64_vec().iter().map(|v| if v.is_infinite() { v.signum() * 1e300 } else { *v }).collect::<Vec<_>>();
            assert_eq!(x.ty(), y.ty(), "{kind}");
            let (a, b) = (Tensor::from_vec(finite(x), x.shape()).unwrap(), Tensor::from_vec(finite(y), y.shape()).unwrap());
            assert_close(&a, &b, tol, tol);
        }
    }
}

#[test]
fn arg_extrema_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[4, 7, 5]));
    let i = g.input("i", TensorType::of(DType::I32, &[6, 3]));
    let outs: Vec<ValueId> = vec![
        g.arg_max(x, 1, false).unwrap(),
        g.arg_min(x, 2, true).unwrap(),
        g.arg_max(x, 0, false).unwrap(),
        g.arg_min(i, 0, false).unwrap(),
    ];
    g.set_outputs(outs).unwrap();
    let tx = Tensor::from_vec(tied(140, 1, &[9, 37, 38, 101]), &[4, 7, 5]).unwrap();
    let ti = Tensor::from_vec(randn(18, 2).iter().map(|v| (v * 3.0) as i32).collect::<Vec<_>>(), &[6, 3]).unwrap();
    check(&g, &[("x", &tx), ("i", &ti)], &[OpKind::ArgMax, OpKind::ArgMin], 0.0);
}

#[test]
fn scans_match_their_kernels() {
    if !claims("scans", &[OpKind::MatMul, OpKind::Transpose, OpKind::Reshape]) {
        return;
    }
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[3, 6, 4]));
    let v = g.input("v", TensorType::of(DType::F32, &[9]));
    let outs = vec![
        g.cumsum(x, 1, false).unwrap(),
        g.cumsum(x, -1, true).unwrap(),
        g.cumsum(v, 0, true).unwrap(),
        g.cumsum_backward(x, 0, false).unwrap(),
        g.cumsum_backward(x, 2, true).unwrap(),
        g.cum_prod(x, 1, false).unwrap(),
        g.cum_prod(x, -1, true).unwrap(),
        g.cum_max(x, 1, false).unwrap(),
        g.cum_max(x, 2, true).unwrap(),
    ];
    g.set_outputs(outs).unwrap();
    let tx = Tensor::from_vec(randn(72, 3), &[3, 6, 4]).unwrap();
    let tv = Tensor::from_vec(randn(9, 4), &[9]).unwrap();
    check(&g, &[("x", &tx), ("v", &tv)], &[OpKind::Cumsum, OpKind::CumsumBackward, OpKind::CumProd, OpKind::CumMax], 1e-5);

    // The masked scans keep NaN where the kernels do (the triangular MatMul of Cumsum cannot:
    // 0·NaN poisons the whole lane).
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[3, 6, 4]));
    let outs = vec![g.cum_prod(x, 1, true).unwrap(), g.cum_max(x, 1, false).unwrap(), g.cum_max(x, 0, true).unwrap()];
    g.set_outputs(outs).unwrap();
    let mut xs = randn(72, 5);
    xs[13] = f32::NAN;
    let tx = Tensor::from_vec(xs, &[3, 6, 4]).unwrap();
    check(&g, &[("x", &tx)], &[OpKind::CumProd, OpKind::CumMax], 1e-5);
}

#[test]
fn sorts_and_top_k_match_their_kernels() {
    if !claims("sorts", &[OpKind::Narrow, OpKind::GatherElements]) {
        return;
    }
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[5, 8]));
    let tk = g.top_k(x, 3).unwrap();
    let s0 = g.sort(x, 0, true).unwrap();
    let s1 = g.sort(x, 1, false).unwrap();
    g.set_outputs(vec![tk[0], tk[1], s0, s1]).unwrap();
    let tx = Tensor::from_vec(tied(40, 5, &[3, 17, 18]), &[5, 8]).unwrap();
    check(&g, &[("x", &tx)], &[OpKind::TopK, OpKind::Sort], 0.0);
}
