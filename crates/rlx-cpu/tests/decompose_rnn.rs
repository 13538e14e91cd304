//! The unrolled rnn decompositions compute what the native kernels compute.

mod common;

use common::{assert_close, randn, run, run_decomposed};
use rlx_ir::ops::rnn::{Gru, Lstm, Rnn};
use rlx_ir::{DType, Graph, OpKind, TensorType};
use rlx_runtime::Tensor;

/// Inputs named by `names`, each `dims`, filled with values of magnitude `scale·[0.1, 2)`.
fn inputs(g: &mut Graph, specs: &[(&str, Vec<usize>)], scale: f32) -> Vec<(String, Tensor)> {
    specs
        .iter()
        .enumerate()
        .map(|(k, (name, dims))| {
            g.input(name, TensorType::of(DType::F32, dims));
            let n = dims.iter().product();
            let v = randn(n, 7 + k as u64).into_iter().map(|x| x * scale).collect();
            (name.to_string(), Tensor::from_vec(v, dims).unwrap())
        })
        .collect()
}

fn check(g: &Graph, kind: OpKind, data: &[(String, Tensor)]) {
    let named: Vec<(&str, &Tensor)> = data.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let native = run(g, &named);
    let lowered = run_decomposed(g, kind, &named);
    assert_eq!(native.len(), lowered.len());
    for (x, y) in lowered.iter().zip(&native) {
        assert_close(x, y, 1e-4, 1e-5);
    }
}

#[test]
fn lstm_two_layers_bidirectional_carried() {
    let (b, s, i, h) = (3, 5, 4, 6);
    // Layer 0 reads I = 4, layer 1 reads D·H = 12: flat w_ih of 2·24·4 + 2·24·12 elements.
    let mut g = Graph::new();
    let specs = [
        ("x", vec![b, s, i]),
        ("w_ih", vec![2 * 24 * 4 + 2 * 24 * 12]),
        ("w_hh", vec![4 * 24, h]),
        ("bias", vec![4 * 24]),
        ("h0", vec![4, b, h]),
        ("c0", vec![4, b, h]),
    ];
    let data = inputs(&mut g, &specs, 0.3);
    let v = |g: &Graph, k: usize| g.inputs()[k].1;
    let attrs = Lstm { hidden_size: h, num_layers: 2, bidirectional: true, carry: true };
    let (x, w_ih, w_hh, bias, h0, c0) = (v(&g, 0), v(&g, 1), v(&g, 2), v(&g, 3), v(&g, 4), v(&g, 5));
    let outs = g.lstm(attrs, x, w_ih, w_hh, bias, Some((h0, c0))).unwrap();
    g.set_outputs(outs).unwrap();
    check(&g, OpKind::Lstm, &data);
}

#[test]
fn gru_two_layers_from_zero_and_bidirectional_carried() {
    let (b, s, h) = (2, 4, 5);
    let mut g = Graph::new();
    let specs = [
        ("x", vec![b, s, h]),
        ("w_ih", vec![2 * 15, h]),
        ("w_hh", vec![2 * 15, h]),
        ("b_ih", vec![2 * 15]),
        ("b_hh", vec![2 * 15]),
        ("h0", vec![2, b, h]),
    ];
    let data = inputs(&mut g, &specs, 0.4);
    let v: Vec<_> = g.inputs().iter().map(|(_, v)| *v).collect();
    let stacked = Gru { hidden_size: h, num_layers: 2, bidirectional: false, carry: false };
    let mut outs = g.gru(stacked, v[0], v[1], v[2], v[3], v[4], None).unwrap();
    let bidir = Gru { hidden_size: h, num_layers: 1, bidirectional: true, carry: true };
    outs.extend(g.gru(bidir, v[0], v[1], v[2], v[3], v[4], Some(v[5])).unwrap());
    g.set_outputs(outs).unwrap();
    check(&g, OpKind::Gru, &data);
}

#[test]
fn rnn_tanh_and_relu() {
    let (b, s, i, h) = (2, 7, 3, 4);
    let mut g = Graph::new();
    let specs = [
        ("x", vec![b, s, i]),
        ("w_ih", vec![2 * h, i]),
        ("w_hh", vec![2 * h, h]),
        ("bias", vec![2 * h]),
        ("h0", vec![2, b, h]),
    ];
    let data = inputs(&mut g, &specs, 0.4);
    let v: Vec<_> = g.inputs().iter().map(|(_, v)| *v).collect();
    let mut outs = Vec::new();
    for relu in [false, true] {
        let attrs = Rnn { hidden_size: h, num_layers: 1, bidirectional: true, carry: true, relu };
        outs.extend(g.rnn(attrs, v[0], v[1], v[2], v[3], Some(v[4])).unwrap());
    }
    g.set_outputs(outs).unwrap();
    check(&g, OpKind::Rnn, &data);
}
