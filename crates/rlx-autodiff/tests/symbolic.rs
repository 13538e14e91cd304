//! Gradients of graphs whose batch axis is symbolic: one gradient graph serves every size.

use rlx_autodiff::grad;
use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// `loss = mean(x²)` over a symbolic axis `B` and a static one.
const MEAN_SQUARE: &str = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:["B",3]))()
    %1 = Binary(op:Mul)(%0, %0)
    %2 = Reduce(op:Mean,axes:[0,1],keep_dim:false)(%1)
    return %2"#;

#[test]
fn mean_over_a_symbolic_axis_divides_by_the_run_time_size() {
    let g = rlx_ir::text::parse(MEAN_SQUARE).unwrap();
    let dg = grad(&g, g.outputs()[0], &["x"]).unwrap();
    let mut c = Session::new(Arc::new(CpuBackend::new())).compile(&dg).unwrap();
    for b in [1usize, 2, 5] {
        let x: Vec<f64> = (0..b * 3).map(|i| (i as f64 * 0.37).sin() + 0.1).collect();
        let out = c.run(&[("x", &Tensor::from_slice(&x, &[b, 3]).unwrap())]).unwrap();
        let want: Vec<f64> = x.iter().map(|v| 2.0 * v / (3 * b) as f64).collect();
        let got = out[1].to_f64_vec();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-15, "B = {b}: {got:?} vs {want:?}");
        }
    }
}
