//! Fused decompositions that lower to elementwise ops compute what OPS.md §19 defines
//! (scalar references here until the fused kernels exist).

mod common;

use common::{randn, run_decomposed};
use rlx_ir::text::parse;
use rlx_ir::OpKind;
use rlx_runtime::Tensor;

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "{what}: {got} vs {want}");
}

#[test]
fn elementwise_region_replays_its_chain_with_a_scalar() {
    // tanh(where((x + y)·c > c, (x + y)·c, c)) as f64, c a [1] scalar.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,4]))()
        %1 = Input(name:"y",ty:(dtype:F32,shape:[4]))()
        %2 = Input(name:"c",ty:(dtype:F32,shape:[1]))()
        %3 = ElementwiseRegion(chain:[Binary(Add,Input(0),Input(1)),Binary(Mul,Step(0),Input(2)),Compare(Gt,Step(1),Input(2)),Where(Step(2),Step(1),Input(2)),Activation(Tanh,Step(3)),Cast(F64,Step(4))],num_inputs:3,scalar_input_mask:4,input_modulus:(0,4,1,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0, %1, %2)
        return %3"#;
    let (x, y, c) = (randn(12, 1), randn(4, 2), 0.3f32);
    let tx = Tensor::from_vec(x.clone(), &[3, 4]).unwrap();
    let ty = Tensor::from_vec(y.clone(), &[4]).unwrap();
    let tc = Tensor::from_vec(vec![c], &[1]).unwrap();
    let out = run_decomposed(&parse(src).unwrap(), OpKind::ElementwiseRegion, &[("x", &tx), ("y", &ty), ("c", &tc)]);
    assert_eq!(out[0].dtype(), rlx_ir::DType::F64);
    for (i, got) in out[0].to_f64_vec().into_iter().enumerate() {
        let s = (x[i] + y[i % 4]) * c;
        let want = if s > c { s } else { c }.tanh();
        close(got, f64::from(want), &format!("element {i}"));
    }
}

#[test]
fn gated_residual_and_its_gradient() {
    let src = r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[2,5]))()
        %1 = Input(name:"y",ty:(dtype:F32,shape:[2,5]))()
        %2 = Input(name:"gate",ty:(dtype:F32,shape:[2,5]))()
        %3 = Input(name:"dy",ty:(dtype:F32,shape:[2,5]))()
        %4 = GatedResidual()(%0, %1, %2)
        %5 = GatedResidualBackward()(%0, %1, %2, %3)
        return %4, %5, %5.1, %5.2"#;
    let v: Vec<Vec<f32>> = (0..4).map(|s| randn(10, s + 10)).collect();
    let t: Vec<Tensor> = v.iter().map(|d| Tensor::from_vec(d.clone(), &[2, 5]).unwrap()).collect();
    let inputs = [("x", &t[0]), ("y", &t[1]), ("gate", &t[2]), ("dy", &t[3])];
    let out = run_decomposed(&parse(src).unwrap(), OpKind::GatedResidual, &inputs);
    let out: Vec<Vec<f64>> = out.iter().map(Tensor::to_f64_vec).collect();
    for i in 0..10 {
        let (x, y, gate, dy) = (v[0][i], v[1][i], v[2][i], v[3][i]);
        let want = [x + gate * y, dy, dy * gate, dy * y];
        for (k, w) in want.iter().enumerate() {
            close(out[k][i], f64::from(*w), &format!("output {k} element {i}"));
        }
    }
}
