//! End-to-end behaviour of compiled CPU graphs: named inputs, symbolic dims, errors.

use rlx_cpu::CpuBackend;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, Dim, Graph, Shape, TensorType};
use rlx_runtime::{RuntimeError, Session, Tensor};
use std::sync::Arc;

fn session() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

fn batch_graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("B"), Dim::Static(3)])));
    let w = g.param("w", TensorType::of(DType::F32, &[3]));
    let y = g.binary(BinaryOp::Mul, x, w).unwrap();
    let z = g.activation(ActivationKind::Relu, y).unwrap();
    g.set_outputs(vec![z]).unwrap();
    g
}

#[test]
fn one_compiled_graph_serves_every_batch_size() {
    let mut c = session().compile(&batch_graph()).unwrap();
    c.set_param("w", Tensor::from_vec(vec![1.0f32, -2.0, 0.5], &[3]).unwrap()).unwrap();
    for b in [1usize, 4, 2] {
        let x: Vec<f32> = (0..b * 3).map(|i| i as f32 - 2.0).collect();
        let out = c.run(&[("x", &Tensor::from_vec(x.clone(), &[b, 3]).unwrap())]).unwrap();
        let want: Vec<f32> = x.iter().enumerate().map(|(i, v)| (v * [1.0, -2.0, 0.5][i % 3]).max(0.0)).collect();
        assert_eq!(out[0].shape(), &[b, 3]);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
    }
}

#[test]
fn user_mistakes_are_typed_errors() {
    let mut c = session().compile(&batch_graph()).unwrap();
    let x = Tensor::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap();
    assert!(matches!(c.run(&[("x", &x)]), Err(RuntimeError::MissingParam { .. })));
    let bad = c.set_param("w", Tensor::from_vec(vec![1.0f32; 4], &[4]).unwrap()).unwrap_err();
    assert_eq!(bad.to_string(), "parameter `w`: expected f32[3], got f32[4]");
    c.set_param("w", Tensor::from_vec(vec![1.0f32; 3], &[3]).unwrap()).unwrap();
    let e = c.run(&[("y", &x)]).unwrap_err();
    assert_eq!(e.to_string(), "no input named `y`; the graph's inputs are: x");
    assert!(matches!(c.run(&[]), Err(RuntimeError::MissingInput { .. })));
    let wrong = Tensor::from_vec(vec![1.0f32; 8], &[2, 4]).unwrap();
    assert_eq!(c.run(&[("x", &wrong)]).unwrap_err().to_string(), "input `x`: expected f32[B, 3], got f32[2, 4]");
}

#[test]
fn symbols_must_agree_across_inputs() {
    let mut g = Graph::new();
    let t = TensorType::new(DType::F32, Shape(vec![Dim::sym("N")]));
    let a = g.input("a", t.clone());
    let b = g.input("b", t);
    let s = g.binary(BinaryOp::Add, a, b).unwrap();
    g.set_outputs(vec![s]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let a = Tensor::from_vec(vec![1.0f32; 2], &[2]).unwrap();
    let b = Tensor::from_vec(vec![1.0f32; 3], &[3]).unwrap();
    let e = c.run(&[("a", &a), ("b", &b)]).unwrap_err().to_string();
    assert_eq!(e, "symbolic dim `N` is 2 from input `a` but 3 from input `b`");
}

#[test]
fn constants_fold_at_compile_time() {
    let mut g = Graph::new();
    let k = g.constant_f32(&[2], &[1.0, 4.0]).unwrap();
    let r = g.activation(ActivationKind::Sqrt, k).unwrap();
    let x = g.input("x", TensorType::of(DType::F32, &[2]));
    let y = g.binary(BinaryOp::Mul, x, r).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = session().compile(&g).unwrap();
    assert!(!c.graph().to_string().contains("Sqrt"), "{}", c.graph());
    let out = c.run(&[("x", &Tensor::from_vec(vec![3.0f32, 3.0], &[2]).unwrap())]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0, 6.0]);
}

#[test]
fn inputs_declared_late_keep_their_memory() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[4]));
    let ex = g.activation(ActivationKind::Exp, x).unwrap();
    let v = g.input("v", TensorType::of(DType::F32, &[4]));
    let nv = g.activation(ActivationKind::Neg, v).unwrap();
    g.set_outputs(vec![ex, nv]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let (tx, tv) = (Tensor::from_vec(vec![0.0f32; 4], &[4]).unwrap(), Tensor::from_vec(vec![2.0f32; 4], &[4]).unwrap());
    let out = c.run(&[("x", &tx), ("v", &tv)]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0; 4]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![-2.0; 4]);
}

#[test]
fn reshape_targets_may_name_symbols() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("B"), Dim::Static(6)])));
    let target = Shape(vec![Dim::sym("B"), Dim::Static(2), Dim::Static(3)]);
    let y = g.reshape_to(x, &target).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = session().compile(&g).unwrap();
    for b in [1usize, 3] {
        let out = c.run(&[("x", &Tensor::from_vec(vec![1.0f32; b * 6], &[b, 6]).unwrap())]).unwrap();
        assert_eq!(out[0].shape(), &[b, 2, 3]);
    }
}

#[test]
fn profiling_counts_each_node_of_each_run() {
    let mut c = session().compile(&batch_graph()).unwrap();
    c.set_param("w", Tensor::from_vec(vec![1.0f32, -2.0, 0.5], &[3]).unwrap()).unwrap();
    let x = Tensor::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap();
    c.run(&[("x", &x)]).unwrap();
    assert!(c.profile().nodes.is_empty(), "nothing is timed before profiling is turned on");
    assert!(c.set_profiling(true));
    for _ in 0..3 {
        c.run(&[("x", &x)]).unwrap();
    }
    let nodes = c.profile().nodes;
    assert!(!nodes.is_empty());
    assert!(nodes.iter().all(|n| n.calls == 3 && n.dims == [2, 3]), "{nodes:?}");
    c.set_profiling(true);
    assert!(c.profile().nodes.is_empty(), "turning profiling on again starts from zero");
}

#[test]
fn work_on_parameters_alone_follows_set_param() {
    // y = x · wᵀ: the transpose of the parameter runs once per parameter value, not per run.
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[2, 3]));
    let w = g.param("w", TensorType::of(DType::F32, &[4, 3]));
    let wt = g.transpose(w, &[1, 0]).unwrap();
    let y = g.matmul(x, wt).unwrap();
    g.set_outputs(vec![y, wt]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let xs: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    let x = Tensor::from_vec(xs.clone(), &[2, 3]).unwrap();
    for round in 0..3 {
        let ws: Vec<f32> = (0..12).map(|i| ((i * 7 + round * 5) % 11) as f32 - 5.0).collect();
        c.set_param("w", Tensor::from_vec(ws.clone(), &[4, 3]).unwrap()).unwrap();
        for _ in 0..2 {
            let out = c.run(&[("x", &x)]).unwrap();
            let want: Vec<f32> = (0..8).map(|i| (0..3).map(|k| xs[i / 4 * 3 + k] * ws[i % 4 * 3 + k]).sum()).collect();
            assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "round {round}");
            assert_eq!(out[1].to_vec::<f32>().unwrap(), (0..12).map(|i| ws[i % 4 * 3 + i / 4]).collect::<Vec<_>>());
        }
    }
    c.set_profiling(true);
    c.run(&[("x", &x)]).unwrap();
    let ran: Vec<String> = c.profile().nodes.into_iter().map(|n| n.op).collect();
    assert!(!ran.iter().any(|op| op == "Transpose"), "the transpose ran again: {ran:?}");
}

/// Plans of two input sizes share the hoisted `wᵀ` (computed the same way in both) but not a
/// hoisted value sized by the input (`[S]` ones summed up): each plan reads the right values,
/// before and after `set_param` reruns the hoisted steps into the shared buffer.
#[test]
fn plans_share_hoisted_values_computed_the_same_way_and_only_those() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("S"), Dim::Static(2)])));
    let w = g.param("w", TensorType::of(DType::F32, &[2, 2]));
    let wt = g.transpose(w, &[1, 0]).unwrap();
    let y = g.matmul(x, wt).unwrap();
    let one = g.constant_f32(&[1], &[1.0]).unwrap();
    let ones = g.expand_to(one, &Shape(vec![Dim::sym("S")])).unwrap();
    let counts = g.cumsum(ones, 0, false).unwrap();
    g.set_outputs(vec![y, counts]).unwrap();
    let mut c = session().compile(&g).unwrap();
    for (round, w) in [[1.0f32, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, -3.0]].into_iter().enumerate() {
        c.set_param("w", Tensor::from_vec(w.to_vec(), &[2, 2]).unwrap()).unwrap();
        for s in [3usize, 5, 3] {
            let xs: Vec<f32> = (0..s * 2).map(|i| i as f32 - 1.5).collect();
            let out = c.run(&[("x", &Tensor::from_vec(xs.clone(), &[s, 2]).unwrap())]).unwrap();
            let want: Vec<f32> = (0..s * 2).map(|e| xs[e / 2 * 2] * w[e % 2 * 2] + xs[e / 2 * 2 + 1] * w[e % 2 * 2 + 1]).collect();
            assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "round {round}, S = {s}: x · wᵀ");
            assert_eq!(out[1].to_vec::<f32>().unwrap(), (1..=s).map(|i| i as f32).collect::<Vec<_>>(), "round {round}, S = {s}: counts");
        }
    }
}
