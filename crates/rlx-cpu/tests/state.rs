//! Graph state: a `KvAppend` whose cache is a parameter writes that parameter in place, so
//! the cache persists across runs; checked against a cache kept by hand beside it. A
//! recurrent layer whose carry is a parameter has its final state written back into it. A copy
//! made by `share` keeps a cache of its own.

mod common;

use common::{randn, session};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, Shape, TensorType};
use rlx_runtime::{CompiledGraph, Tensor};

/// Cache `[2, CAP, 3]` (heads, capacity, width) written along axis 1.
const CAP: usize = 8;

/// `out = KvAppend(cache, rows, at)` plus a sum over it, so a consumer reads the aliased state.
fn dynamic_graph() -> CompiledGraph {
    let mut g = Graph::new();
    let cache = g.param("cache", TensorType::of(DType::F32, &[2, CAP, 3]));
    let rows = g.input("rows", TensorType::new(DType::F32, Shape(vec![Dim::Static(2), Dim::sym("S"), Dim::Static(3)])));
    let at = g.input("at", TensorType::of(DType::I64, &[1]));
    let all = g.kv_append_at(cache, rows, at, 1).unwrap();
    let total = g.reduce(ReduceOp::Sum, all, &[0, 1, 2], false).unwrap();
    g.set_outputs(vec![all, total]).unwrap();
    let mut c = session().compile(&g).unwrap();
    c.set_param("cache", Tensor::zeros(DType::F32, &[2, CAP, 3])).unwrap();
    c
}

/// Writes `rows [2, s, 3]` at `at` into the hand-kept cache.
fn write_by_hand(cache: &mut [f32], rows: &[f32], at: usize) {
    let s = rows.len() / 6;
    for h in 0..2 {
        for t in 0..s {
            for w in 0..3 {
                cache[(h * CAP + at + t) * 3 + w] = rows[(h * s + t) * 3 + w];
            }
        }
    }
}

#[test]
fn cache_parameter_persists_across_runs() {
    let mut c = dynamic_graph();
    let mut want = vec![0f32; 2 * CAP * 3];
    for (step, (at, s)) in [(0, 3), (3, 1), (4, 2), (2, 1)].into_iter().enumerate() {
        let rows = randn(6 * s, step as u64 + 1);
        let rt = Tensor::from_vec(rows.clone(), &[2, s, 3]).unwrap();
        let out = c.run(&[("rows", &rt), ("at", &Tensor::from_vec(vec![at as i64], &[1]).unwrap())]).unwrap();
        write_by_hand(&mut want, &rows, at);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "output after step {step}");
        assert_eq!(c.param("cache").unwrap().to_vec::<f32>().unwrap(), want, "state after step {step}");
        let sum: f64 = want.iter().map(|&v| f64::from(v)).sum();
        assert!((f64::from(out[1].to_vec::<f32>().unwrap()[0]) - sum).abs() < 1e-4);
    }
}

#[test]
fn copies_sharing_parameters_keep_their_own_state() {
    let mut first = dynamic_graph();
    let step = |c: &mut CompiledGraph, rows: &[f32], at: i64| {
        let rt = Tensor::from_vec(rows.to_vec(), &[2, rows.len() / 6, 3]).unwrap();
        c.run(&[("rows", &rt), ("at", &Tensor::from_vec(vec![at], &[1]).unwrap())]).unwrap();
    };
    let (a, b, d) = (randn(12, 51), randn(6, 52), randn(18, 53));
    step(&mut first, &a, 0);
    let mut copy = first.share().unwrap();
    step(&mut copy, &b, 2);
    step(&mut first, &d, 4);
    let (mut want_first, mut want_copy) = (vec![0f32; 2 * CAP * 3], vec![0f32; 2 * CAP * 3]);
    write_by_hand(&mut want_first, &a, 0);
    write_by_hand(&mut want_copy, &a, 0);
    write_by_hand(&mut want_copy, &b, 2);
    write_by_hand(&mut want_first, &d, 4);
    assert_eq!(first.param("cache").unwrap().to_vec::<f32>().unwrap(), want_first, "the original's cache");
    assert_eq!(copy.param("cache").unwrap().to_vec::<f32>().unwrap(), want_copy, "the copy's cache");
}

#[test]
fn writes_past_the_capacity_fail_and_leave_the_state() {
    let mut c = dynamic_graph();
    let ok = Tensor::from_vec(randn(6, 9), &[2, 1, 3]).unwrap();
    c.run(&[("rows", &ok), ("at", &Tensor::from_vec(vec![0i64], &[1]).unwrap())]).unwrap();
    let before = c.param("cache").unwrap().to_vec::<f32>().unwrap();
    let two = Tensor::from_vec(randn(12, 4), &[2, 2, 3]).unwrap();
    let err = c.run(&[("rows", &two), ("at", &Tensor::from_vec(vec![CAP as i64 - 1], &[1]).unwrap())]).unwrap_err().to_string();
    assert!(err.contains("overflow the cache capacity 8"), "{err}");
    let err = c.run(&[("rows", &ok), ("at", &Tensor::from_vec(vec![-1i64], &[1]).unwrap())]).unwrap_err().to_string();
    assert!(err.contains("negative"), "{err}");
    assert_eq!(c.param("cache").unwrap().to_vec::<f32>().unwrap(), before);
}

#[test]
fn static_position_on_a_parameter_writes_it_and_returns_the_prefix() {
    let mut g = Graph::new();
    let cache = g.param("cache", TensorType::of(DType::F32, &[2, CAP, 3]));
    let row = g.input("row", TensorType::of(DType::F32, &[2, 1, 3]));
    let y = g.kv_append(cache, row, 1, 5).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let init = randn(2 * CAP * 3, 21);
    c.set_param("cache", Tensor::from_vec(init.clone(), &[2, CAP, 3]).unwrap()).unwrap();
    let rows = randn(6, 22);
    let out = c.run(&[("row", &Tensor::from_vec(rows.clone(), &[2, 1, 3]).unwrap())]).unwrap();
    let mut want = init;
    write_by_hand(&mut want, &rows, 5);
    assert_eq!(c.param("cache").unwrap().to_vec::<f32>().unwrap(), want);
    let prefix: Vec<f32> = (0..2).flat_map(|h| want[h * CAP * 3..(h * CAP + 6) * 3].to_vec()).collect();
    assert_eq!(out[0].shape(), &[2, 6, 3]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), prefix);
}

#[test]
fn a_cache_that_is_an_input_is_not_written() {
    let mut g = Graph::new();
    let cache = g.input("cache", TensorType::of(DType::F32, &[2, CAP, 3]));
    let rows = g.input("rows", TensorType::of(DType::F32, &[2, 2, 3]));
    let at = g.input("at", TensorType::of(DType::I64, &[1]));
    let y = g.kv_append_at(cache, rows, at, 1).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let init = randn(2 * CAP * 3, 31);
    let rows_v = randn(12, 32);
    let ct = Tensor::from_vec(init.clone(), &[2, CAP, 3]).unwrap();
    let out = session()
        .compile(&g)
        .unwrap()
        .run(&[("cache", &ct), ("rows", &Tensor::from_vec(rows_v.clone(), &[2, 2, 3]).unwrap()), ("at", &Tensor::from_vec(vec![6i64], &[1]).unwrap())])
        .unwrap();
    let mut want = init.clone();
    write_by_hand(&mut want, &rows_v, 6);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
    assert_eq!(ct.to_vec::<f32>().unwrap(), init);
}

/// A one-layer GRU over `x [2, 3, 4]` (hidden 5) whose initial state is `h` — a parameter
/// (carried across runs) or an input (passed by hand).
fn gru_graph(carried: bool) -> CompiledGraph {
    use rlx_ir::ops::rnn::Gru;
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[2, 3, 4]));
    let h_ty = TensorType::of(DType::F32, &[1, 2, 5]);
    let h = if carried { g.param("h", h_ty) } else { g.input("h", h_ty) };
    let w_ih = g.param("w_ih", TensorType::of(DType::F32, &[15, 4]));
    let w_hh = g.param("w_hh", TensorType::of(DType::F32, &[15, 5]));
    let b_ih = g.param("b_ih", TensorType::of(DType::F32, &[15]));
    let b_hh = g.param("b_hh", TensorType::of(DType::F32, &[15]));
    let attrs = Gru { hidden_size: 5, num_layers: 1, bidirectional: false, carry: true };
    let out = g.gru(attrs, x, w_ih, w_hh, b_ih, b_hh, Some(h)).unwrap();
    g.set_outputs(out).unwrap();
    let mut c = session().compile(&g).unwrap();
    for (i, (name, dims)) in [("w_ih", vec![15, 4]), ("w_hh", vec![15, 5]), ("b_ih", vec![15]), ("b_hh", vec![15])].into_iter().enumerate() {
        let n = dims.iter().product();
        c.set_param(name, Tensor::from_vec(randn(n, 40 + i as u64), &dims).unwrap()).unwrap();
    }
    c
}

#[test]
fn a_gru_carry_held_as_a_parameter_is_written_back_after_each_run() {
    let h0 = Tensor::from_vec(randn(10, 7), &[1, 2, 5]).unwrap();
    let mut carried = gru_graph(true);
    carried.set_param("h", h0.clone()).unwrap();
    let mut by_hand = gru_graph(false);
    let mut h = h0;
    for step in 0..3 {
        let x = Tensor::from_vec(randn(24, 100 + step), &[2, 3, 4]).unwrap();
        let want = by_hand.run(&[("x", &x), ("h", &h)]).unwrap();
        let got = carried.run(&[("x", &x)]).unwrap();
        assert_eq!(got, want, "step {step}");
        h = want[1].clone();
        assert_eq!(carried.param("h").unwrap(), h, "step {step}: the parameter holds the final state");
    }
}
