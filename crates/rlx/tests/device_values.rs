//! Device values and submit through the test-only subset backend ([`subset`]): graphs feed
//! each other's outputs without host copies, submitted runs queue before one `sync`, values of
//! another memory and ill-typed inputs are typed errors, and a partitioned graph keeps the
//! values between its device segments on the device. Results equal the CPU's `run` bit for bit.

// Shared with fallback.rs, which uses all of it.
#[allow(dead_code)]
mod subset;

use rlx_cpu::CpuBackend;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, Dim, Graph, OpKind, Shape, TensorType};
use rlx_opt::partition::Place;
use rlx_runtime::{CompiledGraph, DeviceTensor, RuntimeError, Session, Tensor};
use rlx_train::init::Rng;
use std::sync::Arc;

fn cpu() -> Session {
    Session::new(Arc::new(CpuBackend::new()))
}

/// `n` values from a fresh seeded stream, uniform in ±`scale`.
fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (rng.uniform() as f32 * 2.0 - 1.0) * scale).collect()
}

fn random_tensor(dims: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(random(dims.iter().product(), seed, 1.0), dims).unwrap()
}

/// An f32 type of `[B, n]`.
fn rows(n: usize) -> TensorType {
    TensorType::new(DType::F32, Shape(vec![Dim::sym("B"), Dim::Static(n)]))
}

/// What the graphs below run, all on the device.
const DENSE: &[OpKind] = {
    use OpKind::*;
    &[Input, Param, Constant, MatMul, Activation, Binary]
};

/// `relu(x · w)`: x `[B, 8]`, w `[8, 16]`.
fn first() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", rows(8));
    let w = g.param("w", TensorType::of(DType::F32, &[8, 16]));
    let xw = g.matmul(x, w).unwrap();
    let y = g.activation(ActivationKind::Relu, xw).unwrap();
    g.set_outputs(vec![y]).unwrap();
    g
}

/// `tanh(h · v)`: h `[B, 16]`, v `[16, 3]`.
fn second() -> Graph {
    let mut g = Graph::new();
    let h = g.input("h", rows(16));
    let v = g.param("v", TensorType::of(DType::F32, &[16, 3]));
    let hv = g.matmul(h, v).unwrap();
    let z = g.activation(ActivationKind::Tanh, hv).unwrap();
    g.set_outputs(vec![z]).unwrap();
    g
}

/// The two graphs compiled by `session`, their parameters set from seeded draws.
fn pair(session: &Session) -> (CompiledGraph, CompiledGraph) {
    let (mut a, mut b) = (session.compile(&first()).unwrap(), session.compile(&second()).unwrap());
    a.set_param("w", random_tensor(&[8, 16], 11)).unwrap();
    b.set_param("v", random_tensor(&[16, 3], 12)).unwrap();
    (a, b)
}

/// Bytes a value's host form holds.
fn bytes(t: &Tensor) -> usize {
    t.bytes().len()
}

#[test]
fn a_value_passes_from_one_graph_to_the_next_without_crossing_to_the_host() {
    let (device, traffic) = subset::session(DENSE);
    let (mut a, mut b) = pair(&device);
    let (mut want_a, mut want_b) = pair(&cpu());
    for (batch, seed) in [(4, 21), (7, 22)] {
        let x = random_tensor(&[batch, 8], seed);
        let want_y = want_a.run(&[("x", &x)]).unwrap();
        let want_z = want_b.run(&[("h", &want_y[0])]).unwrap();

        let start = traffic.bytes();
        let xd = a.upload(&x).unwrap();
        assert_eq!((xd.dtype(), xd.shape(), xd.byte_len()), (DType::F32, &[batch, 8][..], bytes(&x)));
        let y = a.submit(&[("x", &xd)]).unwrap();
        let z = b.submit(&[("h", &y[0])]).unwrap();
        b.sync().unwrap();
        assert_eq!(traffic.bytes(), (start.0 + bytes(&x), start.1), "B={batch}: only the input went up");
        let got = b.download(&z[0]).unwrap();
        assert_eq!(traffic.bytes(), (start.0 + bytes(&x), start.1 + bytes(&got)), "B={batch}: only the result came down");
        assert!(subset::same(&[got], &want_z), "B={batch}");
        assert!(subset::same(&[a.download(&y[0]).unwrap()], &want_y), "B={batch}: the value between");
    }
}

#[test]
fn submitted_runs_queue_and_keep_their_outputs_until_one_sync() {
    let (device, traffic) = subset::session(DENSE);
    let (mut a, mut b) = pair(&device);
    let (mut want_a, mut want_b) = pair(&cpu());
    let xs: Vec<Tensor> = (0..4).map(|i| random_tensor(&[3, 8], 30 + i)).collect();
    let start = traffic.bytes();
    let mut outputs = Vec::new();
    for x in &xs {
        let y = a.submit(&[("x", &a.upload(x).unwrap())]).unwrap();
        outputs.push(b.submit(&[("h", &y[0])]).unwrap().remove(0));
    }
    b.sync().unwrap();
    let up: usize = xs.iter().map(bytes).sum();
    assert_eq!(traffic.bytes(), (start.0 + up, start.1));
    for (x, z) in xs.iter().zip(&outputs) {
        let want = want_b.run(&[("h", &want_a.run(&[("x", x)]).unwrap()[0])]).unwrap();
        assert!(subset::same(&[b.download(z).unwrap()], &want), "each run's output outlives the runs after it");
    }
}

/// `acc ← acc + x`, also returning `tanh(acc + x)`: x and acc `[8]`.
fn accumulator() -> Graph {
    let mut g = Graph::new();
    let ty = TensorType::of(DType::F32, &[8]);
    let x = g.input("x", ty.clone());
    let acc = g.param("acc", ty);
    let sum = g.binary(BinaryOp::Add, acc, x).unwrap();
    let y = g.activation(ActivationKind::Tanh, sum).unwrap();
    g.set_outputs(vec![sum, y]).unwrap();
    g
}

#[test]
fn a_submitted_update_keeps_the_parameter_on_the_device() {
    let (device, traffic) = subset::session(DENSE);
    let mut got = device.compile(&accumulator()).unwrap();
    let mut want = cpu().compile(&accumulator()).unwrap();
    let acc = random_tensor(&[8], 40);
    got.set_param("acc", acc.clone()).unwrap();
    want.set_param("acc", acc).unwrap();
    let xs: Vec<Tensor> = (0..3).map(|i| random_tensor(&[8], 41 + i)).collect();
    let uploaded: Vec<DeviceTensor> = xs.iter().map(|x| got.upload(x).unwrap()).collect();
    let start = traffic.bytes();
    let ys: Vec<DeviceTensor> = uploaded.iter().map(|x| got.submit_updating(&[("x", x)], &[(0, "acc")]).unwrap().remove(0)).collect();
    got.sync().unwrap();
    assert_eq!(traffic.bytes(), start, "three steps move nothing");
    for (x, y) in xs.iter().zip(&ys) {
        let want_y = want.run_updating(&[("x", x)], &[(0, "acc")]).unwrap();
        assert!(subset::same(&[got.download(y).unwrap()], &want_y));
    }
    assert_eq!(got.param("acc").unwrap(), want.param("acc").unwrap());
}

#[test]
fn a_value_of_another_memory_is_refused() {
    let (one, _) = subset::session(DENSE);
    let (other, _) = subset::session(DENSE);
    let (a, _) = pair(&one);
    let (mut b, _) = pair(&other);
    let (mut on_cpu, _) = pair(&cpu());
    let x = a.upload(&random_tensor(&[2, 8], 50)).unwrap();
    let e = b.submit(&[("x", &x)]).unwrap_err();
    assert!(matches!(&e, RuntimeError::ForeignValue { what, .. } if what == "input `x`"), "{e}");
    assert!(e.to_string().contains("subset memory"), "{e}");
    assert!(matches!(b.download(&x), Err(RuntimeError::ForeignValue { .. })));
    assert!(matches!(on_cpu.submit(&[("x", &x)]), Err(RuntimeError::ForeignValue { .. })));
    let host_value = on_cpu.upload(&random_tensor(&[2, 8], 51)).unwrap();
    assert!(matches!(b.submit(&[("x", &host_value)]), Err(RuntimeError::ForeignValue { .. })));
}

#[test]
fn ill_named_or_ill_typed_device_inputs_are_typed_errors() {
    let (device, _) = subset::session(DENSE);
    let mut g = Graph::new();
    let x = g.input("x", rows(8));
    let m = g.input("m", rows(8));
    let y = g.binary(BinaryOp::Mul, x, m).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = device.compile(&g).unwrap();
    let up = |dims: &[usize], seed| c.upload(&random_tensor(dims, seed)).unwrap();
    let (x2, m2, m3, x7) = (up(&[2, 8], 60), up(&[2, 8], 61), up(&[3, 8], 62), up(&[2, 7], 63));
    let x64 = c.upload(&Tensor::from_vec(random(16, 64, 1.0).into_iter().map(f64::from).collect::<Vec<_>>(), &[2, 8]).unwrap()).unwrap();

    let e = c.submit(&[("x", &x2), ("n", &m2)]).unwrap_err();
    assert!(matches!(&e, RuntimeError::UnknownInput { name, known } if name == "n" && known == "x, m"), "{e}");
    assert!(matches!(c.submit(&[("x", &x2)]), Err(RuntimeError::MissingInput { name }) if name == "m"));
    assert!(matches!(c.submit(&[("x", &x2), ("m", &m2), ("m", &m2)]), Err(RuntimeError::DuplicateInput { name }) if name == "m"));
    let e = c.submit(&[("x", &x64), ("m", &m2)]).unwrap_err();
    assert!(matches!(&e, RuntimeError::TypeMismatch { what: "input", name, .. } if name == "x"), "{e}");
    assert_eq!(e.to_string(), "input `x`: expected f32[B, 8], got f64[2, 8]");
    let e = c.submit(&[("x", &x7), ("m", &m2)]).unwrap_err();
    assert!(matches!(&e, RuntimeError::TypeMismatch { name, .. } if name == "x"), "{e}");
    let e = c.submit(&[("x", &x2), ("m", &m3)]).unwrap_err();
    assert!(matches!(&e, RuntimeError::SymbolConflict { symbol, first: 2, second: 3, .. } if symbol == "B"), "{e}");
    assert!(matches!(c.submit_updating(&[("x", &x2), ("m", &m2)], &[(1, "w")]), Err(RuntimeError::UnknownOutput { index: 1, count: 1 })));

    let mut unset = device.compile(&first()).unwrap();
    assert!(matches!(unset.submit(&[("x", &x2)]), Err(RuntimeError::MissingParam { name }) if name == "w"));
    let mut acc = device.compile(&accumulator()).unwrap();
    acc.set_param("acc", random_tensor(&[8], 65)).unwrap();
    let x8 = acc.upload(&random_tensor(&[8], 66)).unwrap();
    assert!(matches!(acc.submit_updating(&[("x", &x8)], &[(0, "bias")]), Err(RuntimeError::UnknownParam { name, .. }) if name == "bias"));
    assert!(matches!(acc.submit_updating(&[("x", &x8)], &[(5, "acc")]), Err(RuntimeError::UnknownOutput { index: 5, count: 2 })));
}

/// `exp(x) · cumsum(x) + x` over x `[4, S]`: the device makes `exp(x)` and the rest, the host
/// the cumulative sum between them (over a symbolic length, it has no lowering).
fn split() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::Static(4), Dim::sym("S")])));
    let a = g.activation(ActivationKind::Exp, x).unwrap();
    let h = g.cumsum(x, 1, false).unwrap();
    let ah = g.binary(BinaryOp::Mul, a, h).unwrap();
    let y = g.binary(BinaryOp::Add, ah, x).unwrap();
    g.set_outputs(vec![y]).unwrap();
    g
}

#[test]
fn a_partitioned_graph_keeps_values_between_device_segments_on_the_device() {
    let (device, traffic) = subset::session(DENSE);
    let mut got = device.compile(&split()).unwrap();
    let places: Vec<Place> = got.partition().expect("the host runs the cumulative sum").segments.iter().map(|s| s.place).collect();
    assert_eq!(places, [Place::Device, Place::Host, Place::Device]);
    let mut want = cpu().compile(&split()).unwrap();
    let x = random_tensor(&[4, 16], 70);
    let n = bytes(&x);
    let want_y = want.run(&[("x", &x)]).unwrap();

    // `run`: x goes up once for both device segments and the sum once; exp(x) stays on the
    // device; the result comes down.
    let start = traffic.bytes();
    let y = got.run(&[("x", &x)]).unwrap();
    assert!(subset::same(&y, &want_y));
    assert_eq!(traffic.bytes(), (start.0 + 2 * n, start.1 + n));

    // `submit`: x comes down for the host segment, the sum goes up; the result stays.
    let xd = got.upload(&x).unwrap();
    let start = traffic.bytes();
    let y = got.submit(&[("x", &xd)]).unwrap();
    assert_eq!(traffic.bytes(), (start.0 + n, start.1 + n));
    assert!(subset::same(&[got.download(&y[0]).unwrap()], &want_y));
}
