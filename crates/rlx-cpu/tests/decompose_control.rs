//! Inlined control flow computes what the op means (OPS.md §20, §21): `If` selects the taken
//! branch, a bounded `While` stops where the loop stops (or at its bound), `CustomFn` runs its
//! forward body.

mod common;

use common::{randn, run_decomposed};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::{DType, Graph, OpKind, TensorType};
use rlx_runtime::Tensor;

fn f32s(dims: &[usize]) -> TensorType {
    TensorType::of(DType::F32, dims)
}

#[test]
fn if_takes_the_selected_branch() {
    let body = |kind| {
        let mut b = Graph::new();
        let x = b.input("x", f32s(&[6]));
        let y = b.activation(kind, x).unwrap();
        b.set_outputs(vec![y]).unwrap();
        b
    };
    let mut g = Graph::new();
    let p = g.input("p", TensorType::of(DType::Bool, &[1]));
    let x = g.input("x", f32s(&[6]));
    let y = g.if_else(p, &[x], body(ActivationKind::Relu), body(ActivationKind::Neg)).unwrap();
    g.set_outputs(y).unwrap();
    let xs = randn(6, 5);
    let tx = Tensor::from_vec(xs.clone(), &[6]).unwrap();
    for pred in [true, false] {
        let tp = Tensor::from_bools(&[pred], &[1]).unwrap();
        let out = run_decomposed(&g, OpKind::If, &[("p", &tp), ("x", &tx)])[0].to_vec::<f32>().unwrap();
        let want: Vec<f32> = xs.iter().map(|&v| if pred { v.max(0.0) } else { -v }).collect();
        assert_eq!(out, want, "pred {pred}");
    }
}

/// `while i < 5 { i += 1; acc = 2·acc }` with at most `bound` iterations.
fn doubling(bound: usize) -> Graph {
    let i_ty = TensorType::of(DType::I32, &[]);
    let acc_ty = f32s(&[3]);
    let mut cond = Graph::new();
    let i = cond.input("i", i_ty.clone());
    cond.input("acc", acc_ty.clone());
    let five = cond.constant(i_ty.clone(), 5i32.to_le_bytes().to_vec()).unwrap();
    let lt = cond.compare(CmpOp::Lt, i, five).unwrap();
    cond.set_outputs(vec![lt]).unwrap();
    let mut body = Graph::new();
    let i = body.input("i", i_ty.clone());
    let acc = body.input("acc", acc_ty.clone());
    let one = body.constant(i_ty.clone(), 1i32.to_le_bytes().to_vec()).unwrap();
    let i1 = body.binary(BinaryOp::Add, i, one).unwrap();
    let twice = body.binary(BinaryOp::Add, acc, acc).unwrap();
    body.set_outputs(vec![i1, twice]).unwrap();
    let mut g = Graph::new();
    let i = g.input("i", i_ty);
    let acc = g.input("acc", acc_ty);
    let out = g.while_loop(&[i, acc], cond, body, Some(bound)).unwrap();
    g.set_outputs(out).unwrap();
    g
}

#[test]
fn bounded_while_stops_at_the_condition_or_the_bound() {
    let acc = randn(3, 9);
    let tacc = Tensor::from_vec(acc.clone(), &[3]).unwrap();
    for (start, bound, steps) in [(0, 3, 3), (0, 8, 5), (4, 8, 1), (7, 8, 0)] {
        let ti = Tensor::scalar(start);
        let out = run_decomposed(&doubling(bound), OpKind::While, &[("i", &ti), ("acc", &tacc)]);
        assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![start + steps], "start {start}, bound {bound}");
        let want: Vec<f32> = acc.iter().map(|v| v * 2f32.powi(steps)).collect();
        assert_eq!(out[1].to_vec::<f32>().unwrap(), want, "start {start}, bound {bound}");
    }
}

#[test]
fn custom_fn_runs_its_forward_body() {
    let mut fwd = Graph::new();
    let x = fwd.input("x", f32s(&[4]));
    let w = fwd.input("w", f32s(&[4]));
    let y = fwd.binary(BinaryOp::Mul, x, w).unwrap();
    let y = fwd.activation(ActivationKind::Sigmoid, y).unwrap();
    fwd.set_outputs(vec![y]).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", f32s(&[4]));
    let w = g.input("w", f32s(&[4]));
    let y = g.custom_fn(&[x, w], fwd, None, None).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let (xs, ws) = (randn(4, 1), randn(4, 2));
    let tx = Tensor::from_vec(xs.clone(), &[4]).unwrap();
    let tw = Tensor::from_vec(ws.clone(), &[4]).unwrap();
    let out = run_decomposed(&g, OpKind::CustomFn, &[("x", &tx), ("w", &tw)])[0].to_vec::<f32>().unwrap();
    for i in 0..4 {
        let want = 1.0 / (1.0 + (-(xs[i] * ws[i])).exp());
        assert!((out[i] - want).abs() <= 1e-6, "element {i}: {} vs {want}", out[i]);
    }
}
