//! Each native CUDA kernel against the CPU backend on fresh random inputs (f32 within 1e-5
//! relative, f16/bf16 within their rounding), and the typed errors of a missing device and
//! bad indices. Every test skips, saying so, on a machine without a CUDA device; the GPU
//! machine runs them through `tools/gpu/check.sh`.

mod common;

use common::{agree, agree_native, f32_input, gpu, random, uniform, Tol};
use rlx_cpu::CpuBackend;
use rlx_cuda::CudaBackend;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, OpKind, Shape, TensorType};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

#[test]
fn a_missing_device_is_a_typed_error() {
    let Err(e) = CudaBackend::new(99) else { panic!("cuda:99 opened") };
    let msg = e.to_string();
    assert!(msg.contains("cuda:99"), "{msg}");
}

/// A step whose intermediate needs more than the device has (256 GiB of f32, sized by a
/// symbolic input dimension, so the arena is planned at run time) fails with a typed
/// out-of-memory error naming the device and the bytes; the weight it would have updated
/// keeps its value, and the same compiled graph then runs a step that fits.
#[test]
fn an_allocation_beyond_the_device_is_a_typed_error_and_keeps_the_weights() {
    let Some(gpu) = gpu() else { return };
    let side = 1usize << 18;
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("n"), Dim::Static(1)])));
    let w = g.param("w", TensorType::new(DType::F32, Shape::of(&[1, 4])));
    let wide = g.expand_to(x, &Shape(vec![Dim::sym("n"), Dim::Static(side)])).unwrap();
    let wide = g.activation(ActivationKind::Tanh, wide).unwrap();
    let total = g.reduce(ReduceOp::Sum, wide, &[0, 1], true).unwrap();
    let moved = g.binary(BinaryOp::Add, w, total).unwrap();
    g.set_outputs(vec![moved]).unwrap();
    let mut c = gpu.compile(&g).unwrap();
    let w0 = Tensor::from_vec(uniform(4, 40, -1.0, 1.0), &[1, 4]).unwrap();
    c.set_param("w", w0.clone()).unwrap();
    let huge = Tensor::from_vec(uniform(side, 41, -1.0, 1.0), &[side, 1]).unwrap();
    let err = c.run_updating(&[("x", &huge)], &[(0, "w")]).expect_err("a 256 GiB intermediate ran");
    let msg = err.to_string();
    assert!(matches!(err, rlx_runtime::RuntimeError::OutOfMemory { bytes, .. } if bytes >= side * side * 4), "{msg}");
    assert!(msg.contains("cuda:0"), "{msg}");
    assert_eq!(c.param("w").unwrap().to_vec::<f32>().unwrap(), w0.to_vec::<f32>().unwrap(), "the weight survives the failed step");
    let small = Tensor::from_vec(vec![0.5f32, -0.25], &[2, 1]).unwrap();
    c.run_updating(&[("x", &small)], &[(0, "w")]).unwrap();
    let got = c.param("w").unwrap().to_vec::<f32>().unwrap();
    let sum = side as f32 * (0.5f32.tanh() + (-0.25f32).tanh());
    for (g, w) in got.iter().zip(w0.to_vec::<f32>().unwrap()) {
        assert!((g - (w + sum)).abs() <= 1e-3 * sum.abs(), "the device still runs after the failed allocation: {g} vs {}", w + sum);
    }
}

#[test]
fn activations_and_their_derivatives() {
    let Some(gpu) = gpu() else { return };
    for kind in ActivationKind::ALL {
        let (lo, hi) = if matches!(kind, ActivationKind::Log | ActivationKind::Sqrt | ActivationKind::Rsqrt) { (0.05, 4.0) } else { (-4.0, 4.0) };
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[7, 33]);
        let dy = f32_input(&mut g, "dy", &[7, 33]);
        let y = g.activation(kind, x).unwrap();
        let dx = g.activation_backward(kind, x, dy).unwrap();
        g.set_outputs(vec![y, dx]).unwrap();
        let xs = Tensor::from_vec(uniform(231, 1, lo, hi), &[7, 33]).unwrap();
        let dys = Tensor::from_vec(uniform(231, 2, -1.0, 1.0), &[7, 33]).unwrap();
        agree(&gpu, &g, &[("x", xs), ("dy", dys)], Tol { rtol: 2e-5, floor: 1e-2 }, !matches!(kind, ActivationKind::Relu));
    }
}

#[test]
fn binary_ops_broadcast_over_floats_and_integers() {
    let Some(gpu) = gpu() else { return };
    use BinaryOp::*;
    for op in [Add, Sub, Mul, Div, Max, Min, Pow, Mod, Atan2] {
        let mut g = Graph::new();
        let a = f32_input(&mut g, "a", &[4, 1, 6]);
        let b = f32_input(&mut g, "b", &[5, 1]);
        let y = g.binary(op, a, b).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let lo = if op == Pow { 0.1 } else { -3.0 };
        let inputs = [("a", Tensor::from_vec(uniform(24, 3, lo, 3.0), &[4, 1, 6]).unwrap()), ("b", Tensor::from_vec(uniform(5, 4, -2.0, 2.0), &[5, 1]).unwrap())];
        agree(&gpu, &g, &inputs, Tol::rel(1e-5), true);
    }
    for dtype in [DType::I64, DType::I32] {
        for op in [Add, Sub, Mul, Div, Mod, Max, Min, BitAnd, BitXor] {
            let mut g = Graph::new();
            let a = g.input("a", TensorType::new(dtype, Shape::of(&[3, 8])));
            let b = g.input("b", TensorType::new(dtype, Shape::of(&[8])));
            let y = g.binary(op, a, b).unwrap();
            g.set_outputs(vec![y]).unwrap();
            let ints = |n, seed| uniform(n, seed, -50.0, 50.0).into_iter().map(|v| v as i64).collect::<Vec<_>>();
            let (mut av, mut bv) = (ints(24, 5), ints(8, 6));
            bv[2] = 0;
            bv[3] = -1;
            av[3] = i64::MIN;
            let t = |v: Vec<i64>, dims: &[usize]| match dtype {
                DType::I32 => Tensor::from_vec(v.into_iter().map(|x| x as i32).collect::<Vec<_>>(), dims).unwrap(),
                _ => Tensor::from_vec(v, dims).unwrap(),
            };
            agree(&gpu, &g, &[("a", t(av, &[3, 8])), ("b", t(bv, &[8]))], Tol::rel(0.0), true);
        }
    }
}

#[test]
fn compare_select_fma_and_casts() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let a = f32_input(&mut g, "a", &[6, 10]);
    let b = f32_input(&mut g, "b", &[10]);
    let c = f32_input(&mut g, "c", &[6, 10]);
    let mut outs = Vec::new();
    for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
        outs.push(g.compare(op, a, b).unwrap());
    }
    let mask = g.compare(CmpOp::Gt, a, b).unwrap();
    outs.push(g.select(mask, a, c).unwrap());
    outs.push(g.fma(a, c, c).unwrap());
    let big = g.binary(BinaryOp::Mul, a, c).unwrap();
    for to in [DType::I32, DType::I8, DType::U8, DType::I64, DType::BF16, DType::F16, DType::Bool, DType::F64] {
        outs.push(g.cast(big, to).unwrap());
    }
    let back = g.cast(big, DType::I64).unwrap();
    outs.push(g.cast(back, DType::F32).unwrap());
    g.set_outputs(outs).unwrap();
    let mut av = uniform(60, 7, -3e3, 3e3);
    av[1] = f32::NAN;
    av[2] = 0.0;
    let mut bv = uniform(10, 8, -3e3, 3e3);
    bv[2] = 0.0;
    let inputs = [
        ("a", Tensor::from_vec(av, &[6, 10]).unwrap()),
        ("b", Tensor::from_vec(bv, &[10]).unwrap()),
        ("c", Tensor::from_vec(uniform(60, 9, -200.0, 200.0), &[6, 10]).unwrap()),
    ];
    agree(&gpu, &g, &inputs, Tol::rel(0.0), true);
}

#[test]
fn data_movement() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[3, 4, 5]);
    let y = f32_input(&mut g, "y", &[3, 2, 5]);
    let outs = vec![
        g.transpose(x, &[2, 0, 1]).unwrap(),
        g.reshape(x, &[12, 5]).unwrap(),
        g.expand(y, &[2, 3, 2, 5]).unwrap(),
        g.narrow(x, 1, 1, 2).unwrap(),
        g.slice(x, 2, 4, 3, -2).unwrap(),
        g.reverse(x, &[0, 2]).unwrap(),
        g.concat(&[x, y, x], 1).unwrap(),
    ];
    g.set_outputs(outs).unwrap();
    let inputs = [("x", Tensor::from_vec(uniform(60, 10, -1.0, 1.0), &[3, 4, 5]).unwrap()), ("y", Tensor::from_vec(uniform(30, 11, -1.0, 1.0), &[3, 2, 5]).unwrap())];
    agree(&gpu, &g, &inputs, Tol::rel(0.0), true);
}

#[test]
fn gathers_and_a_bad_index_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let table = f32_input(&mut g, "table", &[4, 9, 3]);
    let idx = g.input("idx", TensorType::new(DType::I64, Shape::of(&[2, 5])));
    let y = g.gather(table, idx, 1).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let t = Tensor::from_vec(uniform(108, 12, -1.0, 1.0), &[4, 9, 3]).unwrap();
    let good = Tensor::from_vec(vec![0i64, 8, 3, 3, 1, 7, 2, 0, 5, 6], &[2, 5]).unwrap();
    agree(&gpu, &g, &[("table", t.clone()), ("idx", good)], Tol::rel(0.0), true);
    let bad = Tensor::from_vec(vec![0i64, 8, 3, 9, 1, 7, 2, 0, 5, 6], &[2, 5]).unwrap();
    let mut c = gpu.compile(&g).unwrap();
    let e = c.run(&[("table", &t), ("idx", &bad)]).unwrap_err().to_string();
    assert!(e.contains("held 9, outside [0, 9)"), "{e}");
    let fine = Tensor::from_vec(vec![1i64; 10], &[2, 5]).unwrap();
    c.run(&[("table", &t), ("idx", &fine)]).expect("the report clears after the error");
}

#[test]
fn reductions() {
    let Some(gpu) = gpu() else { return };
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[5, 6, 7]);
        let outs = vec![g.reduce(op, x, &[2], false).unwrap(), g.reduce(op, x, &[0, 2], true).unwrap(), g.reduce(op, x, &[0, 1, 2], false).unwrap()];
        g.set_outputs(outs).unwrap();
        let (lo, hi) = if op == ReduceOp::Prod { (0.9, 1.1) } else { (-2.0, 2.0) };
        agree(&gpu, &g, &[("x", Tensor::from_vec(uniform(210, 13, lo, hi), &[5, 6, 7]).unwrap())], Tol::norm(1e-5), true);
    }
}

/// Reductions long enough to split across blocks: long rows, tall columns, a middle axis,
/// reduced axes with a kept one between (the walked kernel), and bf16 rows.
#[test]
fn long_reductions_split_across_blocks() {
    let Some(gpu) = gpu() else { return };
    let cases: [(&[usize], &[usize]); 5] = [(&[3, 50000], &[1]), (&[6000, 40], &[0]), (&[7, 300, 33], &[1]), (&[2, 3, 4, 5], &[0, 2]), (&[1, 200000], &[0, 1])];
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
        for (i, &(dims, axes)) in cases.iter().enumerate() {
            let mut g = Graph::new();
            let x = f32_input(&mut g, "x", dims);
            let y = g.reduce(op, x, axes, false).unwrap();
            g.set_outputs(vec![y]).unwrap();
            let n = dims.iter().product();
            agree(&gpu, &g, &[("x", Tensor::from_vec(uniform(n, 50 + i as u64, -1.0, 2.0), dims).unwrap())], Tol::norm(1e-5), true);
        }
    }
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[64, 3000]);
    let h = g.cast(x, DType::BF16).unwrap();
    let y = g.reduce(ReduceOp::Sum, h, &[1], true).unwrap();
    let y = g.cast(y, DType::F32).unwrap();
    g.set_outputs(vec![y]).unwrap();
    agree(&gpu, &g, &[("x", Tensor::from_vec(uniform(64 * 3000, 60, -1.0, 2.0), &[64, 3000]).unwrap())], Tol::norm(1e-2), true);
}

#[test]
fn products_batched_broadcast_and_half_precision() {
    let Some(gpu) = gpu() else { return };
    for (a_dims, b_dims) in [(vec![33, 70], vec![70, 45]), (vec![3, 8, 16], vec![3, 16, 5]), (vec![2, 1, 4, 16], vec![3, 16, 6]), (vec![4, 7, 16], vec![16, 9])] {
        let mut g = Graph::new();
        let a = f32_input(&mut g, "a", &a_dims);
        let b = f32_input(&mut g, "b", &b_dims);
        let y = g.matmul(a, b).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let ta = Tensor::from_vec(uniform(a_dims.iter().product(), 14, -1.0, 1.0), &a_dims).unwrap();
        let tb = Tensor::from_vec(uniform(b_dims.iter().product(), 15, -1.0, 1.0), &b_dims).unwrap();
        agree(&gpu, &g, &[("a", ta), ("b", tb)], Tol::norm(1e-5), true);
    }
    for dtype in [DType::BF16, DType::F16] {
        let mut g = Graph::new();
        let a = f32_input(&mut g, "a", &[64, 128]);
        let b = f32_input(&mut g, "b", &[128, 32]);
        let (a16, b16) = (g.cast(a, dtype).unwrap(), g.cast(b, dtype).unwrap());
        let y = g.matmul(a16, b16).unwrap();
        let y = g.cast(y, DType::F32).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let inputs = [("a", Tensor::from_vec(uniform(64 * 128, 16, -1.0, 1.0), &[64, 128]).unwrap()), ("b", Tensor::from_vec(uniform(128 * 32, 17, -1.0, 1.0), &[128, 32]).unwrap())];
        agree(&gpu, &g, &inputs, Tol::norm(2e-2), true);
    }
}

#[test]
fn dot_general_reads_operands_transposed_in_place_or_copies_them() {
    use rlx_ir::ops::matmul::DotGeneral;
    let Some(gpu) = gpu() else { return };
    let dot = |lc: &[usize], rc: &[usize], lb: &[usize], rb: &[usize]| DotGeneral {
        lhs_contracting: lc.to_vec(),
        rhs_contracting: rc.to_vec(),
        lhs_batch: lb.to_vec(),
        rhs_batch: rb.to_vec(),
    };
    let cases: Vec<(&[usize], &[usize], DotGeneral)> = vec![
        // x·wᵀ and the gradient of a shared weight (every row of every item contracted).
        (&[33, 70], &[45, 70], dot(&[1], &[1], &[], &[])),
        (&[4, 7, 16], &[4, 7, 9], dot(&[0, 1], &[0, 1], &[], &[])),
        // Batched, each side transposed in turn.
        (&[3, 8, 16], &[3, 5, 16], dot(&[2], &[2], &[0], &[0])),
        (&[3, 8, 16], &[3, 8, 5], dot(&[1], &[1], &[0], &[0])),
        // Copied first: a contracted axis in the middle, a batch axis that does not lead,
        // contracted axes paired out of order.
        (&[5, 6, 7], &[6, 4], dot(&[1], &[0], &[], &[])),
        (&[6, 3, 5], &[4, 3, 6], dot(&[0], &[2], &[1], &[1])),
        (&[2, 3, 4], &[4, 3, 5], dot(&[1, 2], &[1, 0], &[], &[])),
    ];
    for (i, (a_dims, b_dims, d)) in cases.into_iter().enumerate() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let mut g = Graph::new();
            let a = f32_input(&mut g, "a", a_dims);
            let b = f32_input(&mut g, "b", b_dims);
            let (a, b) = if dtype == DType::F32 { (a, b) } else { (g.cast(a, dtype).unwrap(), g.cast(b, dtype).unwrap()) };
            let y = g.dot_general(a, b, d.clone()).unwrap();
            let y = if dtype == DType::F32 { y } else { g.cast(y, DType::F32).unwrap() };
            g.set_outputs(vec![y]).unwrap();
            let seed = 40 + 2 * i as u64;
            let inputs = [("a", random(a_dims, seed, -1.0, 1.0)), ("b", random(b_dims, seed + 1, -1.0, 1.0))];
            let tol = if dtype == DType::F32 { Tol::norm(1e-5) } else { Tol::norm(2e-2) };
            agree_native(&gpu, &g, &inputs, tol, &[OpKind::DotGeneral]);
        }
    }
}

/// Half-precision products whose rows are not 16-byte aligned (an odd number of columns) run
/// through padded copies (`stage.rs`), here with scratch budgets small enough that each is
/// cut into several chunks — along N (an odd vocabulary's forward product), M (its input's
/// gradient), N again (its weight's gradient) and K (into f32 sums) — as `stage.rs`'s unit
/// test `the_device_test_cuts_each_way_in_several_chunks` checks of these shapes and budgets.
#[test]
fn products_over_misaligned_rows_are_staged_through_padded_copies() {
    use rlx_ir::ops::matmul::DotGeneral;
    // A backend of its own, as its budgets must not reach other tests' products.
    let backend = match CudaBackend::new(0) {
        Ok(b) => Arc::new(b),
        Err(e) => return eprintln!("skipped: {e}"),
    };
    let gpu = Session::new(backend.clone()).with_host(Arc::new(CpuBackend::new()));
    let dot = |c: usize| DotGeneral { lhs_contracting: vec![c], rhs_contracting: vec![c], lhs_batch: vec![], rhs_batch: vec![] };
    let cases = [
        ([1024, 1024], [1024, 1001], None, 1 << 20),
        ([1024, 1001], [768, 1001], Some(dot(1)), 2 << 20),
        ([4096, 512], [4096, 1001], Some(dot(0)), 4 << 20),
        ([640, 4001], [640, 4001], Some(dot(1)), 4 << 20),
    ];
    for (i, (a_dims, b_dims, d, budget)) in cases.into_iter().enumerate() {
        backend.set_stage_budget(budget);
        for dtype in [DType::BF16, DType::F16] {
            let mut g = Graph::new();
            let a = f32_input(&mut g, "a", &a_dims);
            let b = f32_input(&mut g, "b", &b_dims);
            let (a, b) = (g.cast(a, dtype).unwrap(), g.cast(b, dtype).unwrap());
            let y = match &d {
                Some(d) => g.dot_general(a, b, d.clone()).unwrap(),
                None => g.matmul(a, b).unwrap(),
            };
            let y = g.cast(y, DType::F32).unwrap();
            g.set_outputs(vec![y]).unwrap();
            let seed = 70 + 2 * i as u64;
            let inputs = [("a", random(&a_dims, seed, -1.0, 1.0)), ("b", random(&b_dims, seed + 1, -1.0, 1.0))];
            let kind = if d.is_some() { OpKind::DotGeneral } else { OpKind::MatMul };
            agree_native(&gpu, &g, &inputs, Tol::norm(2e-2), &[kind]);
        }
    }
}

#[test]
fn device_values_pass_between_graphs_and_submits_queue_until_sync() {
    let Some(gpu) = gpu() else { return };
    let (mut first, mut second) = (Graph::new(), Graph::new());
    let x = f32_input(&mut first, "x", &[4, 50]);
    let y = first.activation(ActivationKind::Tanh, x).unwrap();
    first.set_outputs(vec![y]).unwrap();
    let y = f32_input(&mut second, "y", &[4, 50]);
    let z = second.binary(BinaryOp::Mul, y, y).unwrap();
    second.set_outputs(vec![z]).unwrap();
    let (mut a, mut b) = (gpu.compile(&first).unwrap(), gpu.compile(&second).unwrap());
    let xs = Tensor::from_vec(uniform(200, 18, -2.0, 2.0), &[4, 50]).unwrap();
    let on_device = a.upload(&xs).unwrap();
    let mut results = Vec::new();
    for _ in 0..3 {
        let mid = a.submit(&[("x", &on_device)]).unwrap();
        results.push(b.submit(&[("y", &mid[0])]).unwrap().remove(0));
    }
    b.sync().unwrap();
    let cpu = Session::new(Arc::new(CpuBackend::new()));
    let mid = cpu.compile(&first).unwrap().run(&[("x", &xs)]).unwrap();
    let want = cpu.compile(&second).unwrap().run(&[("y", &mid[0])]).unwrap().remove(0).to_vec::<f32>().unwrap();
    for r in &results {
        let got = b.download(r).unwrap().to_vec::<f32>().unwrap();
        assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-6 * w.abs().max(1e-3)), "{got:?} vs {want:?}");
    }
}

/// Copies of one compiled graph share the device, its stream and the weights; run from four
/// threads at once (each first recording its CUDA graph, as another captures or replays
/// theirs), every result equals the one run alone.
#[test]
fn copies_on_several_threads_share_one_device_and_agree_with_one_run() {
    const THREADS: usize = 4;
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[64, 256]);
    let w = g.param("w", TensorType::new(DType::F32, Shape::of(&[256, 256])));
    let h = g.matmul(x, w).unwrap();
    let h = g.activation(ActivationKind::Tanh, h).unwrap();
    let y = g.matmul(h, w).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut single = gpu.compile(&g).unwrap();
    single.set_param("w", Tensor::from_vec(uniform(256 * 256, 40, -0.1, 0.1), &[256, 256]).unwrap()).unwrap();
    let cases: Vec<Tensor> = (0..THREADS).map(|t| Tensor::from_vec(uniform(64 * 256, 41 + t as u64, -1.0, 1.0), &[64, 256]).unwrap()).collect();
    let want: Vec<Vec<f32>> = cases.iter().map(|x| single.run(&[("x", x)]).unwrap().remove(0).to_vec::<f32>().unwrap()).collect();
    let copies: Vec<_> = (0..THREADS).map(|_| single.share().unwrap()).collect();
    let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = copies
            .into_iter()
            .zip(&cases)
            .map(|(mut c, x)| s.spawn(move || (0..20).map(|_| c.run(&[("x", x)]).unwrap().remove(0).to_vec::<f32>().unwrap()).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, (runs, want)) in got.iter().zip(&want).enumerate() {
        for (r, got) in runs.iter().enumerate() {
            assert!(got == want, "thread {t}, run {r}: differs from the run alone");
        }
    }
}

#[test]
fn repeated_runs_replay_their_recording_and_rerecord_when_weights_move() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", &[8, 16]);
    let w = g.param("w", TensorType::new(DType::F32, Shape::of(&[16, 16])));
    let h = g.matmul(x, w).unwrap();
    let h = g.activation(ActivationKind::Tanh, h).unwrap();
    let y = g.binary(BinaryOp::Add, h, x).unwrap();
    let half = g.constant(TensorType::new(DType::F32, Shape::of(&[])), 0.9f32.to_le_bytes().to_vec()).unwrap();
    let decayed = g.binary(BinaryOp::Mul, w, half).unwrap();
    g.set_outputs(vec![y, decayed]).unwrap();
    let cpu = Session::new(Arc::new(CpuBackend::new()));
    let (mut want, mut got) = (cpu.compile(&g).unwrap(), gpu.compile(&g).unwrap());
    let close = |a: &Tensor, b: &Tensor| a.to_vec::<f32>().unwrap().iter().zip(b.to_vec::<f32>().unwrap()).all(|(p, q)| (p - q).abs() <= 1e-5 * q.abs().max(1.0));
    for (round, seed) in [(0, 20u64), (1, 21), (2, 22)] {
        let w0 = Tensor::from_vec(uniform(256, seed, -0.5, 0.5), &[16, 16]).unwrap();
        want.set_param("w", w0.clone()).unwrap();
        got.set_param("w", w0).unwrap();
        for step in 0..4u64 {
            let xs = Tensor::from_vec(uniform(128, seed * 10 + step, -1.0, 1.0), &[8, 16]).unwrap();
            let (a, b) = (got.run_updating(&[("x", &xs)], &[(1, "w")]).unwrap(), want.run_updating(&[("x", &xs)], &[(1, "w")]).unwrap());
            assert!(close(&a[0], &b[0]), "round {round} step {step}");
        }
        assert!(close(&got.param("w").unwrap(), &want.param("w").unwrap()), "round {round}: the updated weight");
    }
}
