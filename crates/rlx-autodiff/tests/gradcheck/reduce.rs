//! Gradient cases for products through exact zeros (`Reduce Prod`, `CumProd`), where `ȳ·y/x`
//! is NaN; and the tie rule of `CumMax`, which finite differences cannot see (its one-sided
//! derivatives differ at a tie), checked against an explicit loop.

use super::harness::{draw, with_loss, Case, Domain::*, Rng};
use rlx_autodiff::grad;
use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[Case {
    name: "products through exact zeros",
    // `x`: one zero in the slices (0, :, 0) and (:, 1, :), two in (1, :, 1); `s`: one zero in
    // row 0, two in row 1, none in row 2.
    src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,4,2]))()
        %1 = Reduce(op:Prod,axes:[1],keep_dim:false)(%0)
        %2 = Reduce(op:Prod,axes:[0,2],keep_dim:true)(%0)
        %3 = Input(name:"s",ty:(dtype:F64,shape:[3,5]))()
        %4 = CumProd(axis:1,exclusive:false)(%3)
        %5 = CumProd(axis:1,exclusive:true)(%3)
        %6 = CumProd(axis:0,exclusive:false)(%3)
        return %1, %2, %4, %5, %6"#,
    domains: &[("x", Zeros(&[2, 9, 15])), ("s", Zeros(&[1, 7, 8]))],
    tol: F64,
}];

/// `CumMax` over inputs full of ties: each `ȳ_i` must land on the last position `j ≤ i`
/// (`j < i` exclusive) that holds the running maximum (OPS.md §8), nowhere else.
#[test]
fn cum_max_sends_each_cotangent_to_the_last_tied_position() {
    let src = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3,7]))()
        %1 = CumMax(axis:1,exclusive:false)(%0)
        %2 = CumMax(axis:0,exclusive:true)(%0)
        return %1, %2"#;
    let g = rlx_ir::text::parse(src).unwrap();
    let (lg, weights) = with_loss(&g);
    let gg = grad(&lg, lg.outputs()[0], &["x"]).unwrap();
    let mut rng = Rng::new(7);
    let x = draw(&mut rng, g.ty(g.inputs()[0].1), Below(3));
    let w: Vec<Tensor> = g.outputs().iter().map(|&y| draw(&mut rng, g.ty(y), Normal)).collect();
    let mut run = Session::new(Arc::new(CpuBackend::new())).compile(&gg).unwrap();
    let named: Vec<(&str, &Tensor)> =
        std::iter::once(("x", &x)).chain(weights.iter().map(String::as_str).zip(&w)).collect();
    let got = run.run(&named).unwrap().last().unwrap().to_f64_vec();

    let (xs, (rows, cols)) = (x.to_f64_vec(), (3, 7));
    let at = |r: usize, c: usize| xs[r * cols + c];
    let mut want = vec![0.0; rows * cols];
    let (w1, w2) = (w[0].to_f64_vec(), w[1].to_f64_vec());
    for r in 0..rows {
        for i in 0..cols {
            let top = (0..=i).map(|j| at(r, j)).fold(f64::NEG_INFINITY, f64::max);
            let j = (0..=i).rev().find(|&j| at(r, j) == top).unwrap();
            want[r * cols + j] += w1[r * cols + i];
        }
    }
    for c in 0..cols {
        for i in 1..rows {
            let top = (0..i).map(|j| at(j, c)).fold(f64::NEG_INFINITY, f64::max);
            let j = (0..i).rev().find(|&j| at(j, c) == top).unwrap();
            want[j * cols + c] += w2[i * cols + c];
        }
    }
    let ties = (0..rows).any(|r| (1..cols).any(|c| at(r, c) == (0..c).map(|j| at(r, j)).fold(f64::NEG_INFINITY, f64::max)));
    assert!(ties, "the draw must tie a running maximum: {xs:?}");
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() < 1e-12, "x̄[{k}] = {a}, want {b}\n  x {xs:?}\n  got  {got:?}\n  want {want:?}");
    }
}
