//! The shape decompositions compute what the native kernels compute.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_ir::ops::shape::PadMode;
use rlx_ir::{DType, Graph, OpKind, TensorType};
use rlx_runtime::Tensor;

fn check(g: &Graph, kinds: &[OpKind], inputs: &[(&str, &Tensor)]) {
    let native = run(g, inputs);
    for &kind in kinds {
        for (x, y) in run_decomposed(g, kind, inputs).iter().zip(&native) {
            assert_close(x, y, 0.0, 0.0);
        }
    }
}

#[test]
fn slices_reversal_and_pads_match_their_kernels() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[5, 13]));
    let mut outs = vec![
        g.slice(x, 1, 1, 6, 2).unwrap(),
        g.slice(x, 1, 12, 13, -1).unwrap(),
        g.slice(x, 0, 4, 2, -3).unwrap(),
        g.slice(x, 1, 3, 4, 1).unwrap(),
        g.reverse(x, &[0, 1]).unwrap(),
    ];
    for mode in [PadMode::Constant(-1.5), PadMode::Reflect, PadMode::Replicate, PadMode::Circular] {
        outs.push(g.pad(x, &[[2, 1], [4, 3]], mode).unwrap());
    }
    g.set_outputs(outs).unwrap();
    let t = Tensor::from_vec(randn(65, 3), &[5, 13]).unwrap();
    check(&g, &[OpKind::Slice, OpKind::Reverse, OpKind::Pad], &[("x", &t)]);
}

#[test]
fn integer_pads_and_reversal() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::I32, &[2, 3, 4]));
    let p = g.pad(x, &[[0, 0], [1, 2], [2, 0]], PadMode::Constant(7.0)).unwrap();
    let r = g.reverse(x, &[2]).unwrap();
    g.set_outputs(vec![p, r]).unwrap();
    let t = Tensor::from_vec((0..24).map(|v| v * 3 - 20).collect::<Vec<i32>>(), &[2, 3, 4]).unwrap();
    check(&g, &[OpKind::Pad, OpKind::Reverse], &[("x", &t)]);
}

#[test]
fn kv_append_decomposes_to_the_written_prefix() {
    let mut g = Graph::new();
    let cache = g.input("cache", TensorType::of(DType::F32, &[2, 6, 3]));
    let row = g.input("row", TensorType::of(DType::F32, &[2, 1, 3]));
    let y = g.kv_append(cache, row, 1, 4).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let c = randn(36, 5);
    let r = randn(6, 6);
    let (ct, rt) = (Tensor::from_vec(c.clone(), &[2, 6, 3]).unwrap(), Tensor::from_vec(r.clone(), &[2, 1, 3]).unwrap());
    let inputs = [("cache", &ct), ("row", &rt)];
    let want: Vec<f32> = (0..2).flat_map(|b| c[b * 18..b * 18 + 12].iter().chain(&r[b * 3..b * 3 + 3]).copied().collect::<Vec<_>>()).collect();
    let want = Tensor::from_vec(want, &[2, 5, 3]).unwrap();
    assert_close(&run_decomposed(&g, OpKind::KvAppend, &inputs)[0], &want, 0.0, 0.0);
    assert_close(&run(&g, &inputs)[0], &want, 0.0, 0.0);
}
