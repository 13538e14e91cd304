//! Gradients at ties of `Max` / `Min`, which finite differences cannot see (the one-sided
//! derivatives differ there): OPS.md §3 splits `ȳ` ½–½, as `torch.maximum` does.

use rlx_autodiff::grad;
use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

fn grads(op: &str, a: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let src = format!(
        r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[4]))()
        %1 = Input(name:"b",ty:(dtype:F64,shape:[4]))()
        %2 = Binary(op:{op})(%0, %1)
        %3 = Constant(ty:(dtype:F64,shape:[4]),data:[0,0,0,0,0,0,240,63,0,0,0,0,0,0,0,64,0,0,0,0,0,0,8,64,0,0,0,0,0,0,16,64])()
        %4 = Binary(op:Mul)(%2, %3)
        %5 = Reduce(op:Sum,axes:[0],keep_dim:false)(%4)
        return %5"#
    );
    let g = rlx_ir::text::parse(&src).unwrap();
    let dg = grad(&g, g.outputs()[0], &["a", "b"]).unwrap();
    let mut c = Session::new(Arc::new(CpuBackend::new())).compile(&dg).unwrap();
    let (ta, tb) = (Tensor::from_slice(a, &[4]).unwrap(), Tensor::from_slice(b, &[4]).unwrap());
    let out = c.run(&[("a", &ta), ("b", &tb)]).unwrap();
    (out[1].to_f64_vec(), out[2].to_f64_vec())
}

#[test]
fn max_and_min_split_the_cotangent_at_ties() {
    let (a, b) = ([1.0, 2.0, 3.0, -1.0], [1.0, 5.0, 0.5, -1.0]);
    let weights = [1.0, 2.0, 3.0, 4.0];
    let (da, db) = grads("Max", &a, &b);
    assert_eq!(da, vec![0.5 * weights[0], 0.0, weights[2], 0.5 * weights[3]]);
    assert_eq!(db, vec![0.5 * weights[0], weights[1], 0.0, 0.5 * weights[3]]);
    let (da, db) = grads("Min", &a, &b);
    assert_eq!(da, vec![0.5 * weights[0], weights[1], 0.0, 0.5 * weights[3]]);
    assert_eq!(db, vec![0.5 * weights[0], 0.0, weights[2], 0.5 * weights[3]]);
}
