//! The row kernels against the CPU backend on random inputs: softmax, LayerNorm /
//! LayerNorm2d / RmsNorm, their fused residual forms and their backward kinds, ArgMax /
//! ArgMin, the running scans and the sparse cross-entropy with its gradient, over odd row
//! lengths (1 to past 8192, so rows per warp and per block of both sizes), many rows, axes
//! other than the last, and f16/bf16/f64. Each asserts that its kind ran natively. f32
//! agrees within 1e-5 (norms normwise: their small values are differences of larger ones),
//! halves within 2e-2; skips without a device.

mod common;

use common::{agree_native, f32_input, gpu, random, uniform, Tol};
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType, ValueId};
use rlx_runtime::Tensor;

/// Row lengths: one, a warp and one, a warp's share of a block, a block's, a large block's.
const LENGTHS: [usize; 5] = [1, 33, 1000, 4097, 20000];

/// `x` cast to `dtype` (nothing for F32).
fn as_dtype(g: &mut Graph, x: ValueId, dtype: DType) -> ValueId {
    if dtype == DType::F32 {
        x
    } else {
        g.cast(x, dtype).unwrap()
    }
}

/// `y` cast back to F32 when it is f16/bf16, so the CPU's halves and the GPU's compare as
/// numbers.
fn back(g: &mut Graph, y: ValueId) -> ValueId {
    if matches!(g.ty(y).dtype, DType::F16 | DType::BF16) {
        g.cast(y, DType::F32).unwrap()
    } else {
        y
    }
}

/// The tolerance for `dtype` (`norm`: normwise in f32).
fn tol(dtype: DType, norm: bool) -> Tol {
    match dtype {
        DType::F32 if norm => Tol::norm(1e-5),
        DType::F32 => Tol::rel(1e-5),
        DType::F64 => Tol::rel(1e-12),
        _ => Tol::rel(2e-2),
    }
}

#[test]
fn softmax_over_odd_row_lengths() {
    let Some(gpu) = gpu() else { return };
    for n in LENGTHS {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[3, n]);
        let y = g.softmax(x, -1).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let mut xs = uniform(3 * n, n as u64, -8.0, 8.0);
        // A −inf logit weighs nothing (a row of it alone is NaN, on both).
        xs[0] = f32::NEG_INFINITY;
        // Rows of thousands normalise by sums taken in another order than the CPU's: their
        // probabilities agree to 1e-4 (2e-5 seen on the H200), shorter rows to 1e-5.
        let tol = if n >= 1000 { Tol::rel(1e-4) } else { tol(DType::F32, false) };
        agree_native(&gpu, &g, &[("x", Tensor::from_vec(xs, &[3, n]).unwrap())], tol, &[OpKind::Softmax]);
    }
}

#[test]
fn softmax_over_inner_axes_and_other_dtypes() {
    let Some(gpu) = gpu() else { return };
    for axis in [0, 1, -2, 2] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[7, 33, 5]);
        let y = g.softmax(x, axis).unwrap();
        g.set_outputs(vec![y]).unwrap();
        agree_native(&gpu, &g, &[("x", random(&[7, 33, 5], 3, -5.0, 5.0))], tol(DType::F32, false), &[OpKind::Softmax]);
    }
    for dtype in [DType::F16, DType::BF16] {
        for n in [33, 4097] {
            let mut g = Graph::new();
            let x = f32_input(&mut g, "x", &[4, n]);
            let h = as_dtype(&mut g, x, dtype);
            let y = g.softmax(h, -1).unwrap();
            let y = back(&mut g, y);
            g.set_outputs(vec![y]).unwrap();
            agree_native(&gpu, &g, &[("x", random(&[4, n], 4, -6.0, 6.0))], tol(dtype, false), &[OpKind::Softmax]);
        }
    }
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F64, Shape::of(&[5, 300])));
    let y = g.softmax(x, 1).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let xs: Vec<f64> = uniform(1500, 5, -9.0, 9.0).into_iter().map(f64::from).collect();
    agree_native(&gpu, &g, &[("x", Tensor::from_vec(xs, &[5, 300]).unwrap())], tol(DType::F64, false), &[OpKind::Softmax]);
}

/// Which norm a test builds.
#[derive(Clone, Copy)]
enum Which {
    Layer,
    Rms,
    Layer2d,
}

/// `norm(x, gamma, beta)` over `axis` of `x [dims]` in `dtype`, `gamma`/`beta` of the axis's size.
fn norm_graph(which: Which, dims: &[usize], axis: i32, dtype: DType) -> (Graph, Vec<(&'static str, Tensor)>) {
    let d = dims[rlx_ir::norm_axis(axis as i64, dims.len()).unwrap()];
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", dims);
    let gamma = f32_input(&mut g, "gamma", &[d]);
    let beta = f32_input(&mut g, "beta", &[d]);
    let (x, gamma, beta) = (as_dtype(&mut g, x, dtype), as_dtype(&mut g, gamma, dtype), as_dtype(&mut g, beta, dtype));
    let y = match which {
        Which::Layer => g.layer_norm(x, gamma, beta, axis, 1e-5).unwrap(),
        Which::Rms => g.rms_norm(x, gamma, beta, axis, 1e-5).unwrap(),
        Which::Layer2d => g.layer_norm_2d(x, gamma, beta, 1e-5).unwrap(),
    };
    let y = back(&mut g, y);
    g.set_outputs(vec![y]).unwrap();
    let seed = dims.iter().product::<usize>() as u64;
    let inputs = vec![("x", random(dims, seed, -2.0, 3.0)), ("gamma", random(&[d], seed + 1, 0.5, 1.5)), ("beta", random(&[d], seed + 2, -0.5, 0.5))];
    (g, inputs)
}

#[test]
fn layer_and_rms_norms_over_odd_row_lengths() {
    let Some(gpu) = gpu() else { return };
    for n in LENGTHS {
        for (which, kind) in [(Which::Layer, OpKind::LayerNorm), (Which::Rms, OpKind::RmsNorm)] {
            let (g, inputs) = norm_graph(which, &[5, n], -1, DType::F32);
            agree_native(&gpu, &g, &inputs, tol(DType::F32, true), &[kind]);
        }
    }
}

#[test]
fn norms_over_inner_axes_in_two_d_and_in_halves() {
    let Some(gpu) = gpu() else { return };
    let (g, inputs) = norm_graph(Which::Layer, &[4, 33, 6], 1, DType::F32);
    agree_native(&gpu, &g, &inputs, tol(DType::F32, true), &[OpKind::LayerNorm]);
    let (g, inputs) = norm_graph(Which::Rms, &[9, 10], 0, DType::F32);
    agree_native(&gpu, &g, &inputs, tol(DType::F32, true), &[OpKind::RmsNorm]);
    let (g, inputs) = norm_graph(Which::Layer2d, &[2, 5, 3, 4], 1, DType::F32);
    agree_native(&gpu, &g, &inputs, tol(DType::F32, true), &[OpKind::LayerNorm2d]);
    for dtype in [DType::F16, DType::BF16] {
        for (which, kind) in [(Which::Layer, OpKind::LayerNorm), (Which::Rms, OpKind::RmsNorm)] {
            for n in [96, 4097] {
                let (g, inputs) = norm_graph(which, &[6, n], -1, dtype);
                agree_native(&gpu, &g, &inputs, tol(dtype, true), &[kind]);
            }
        }
    }
}

#[test]
fn fused_residual_norms_broadcast_the_residual() {
    let Some(gpu) = gpu() else { return };
    let cases: [(&[usize], &[usize], bool); 4] =
        [(&[2, 7, 96], &[7, 96], true), (&[2, 7, 96], &[2, 7, 96], false), (&[3, 2000], &[3, 1], true), (&[4, 33], &[33], false)];
    for dtype in [DType::F32, DType::F16] {
        for (x_dims, r_dims, with_bias) in cases {
            for rms in [false, true] {
                let dd = [*x_dims.last().unwrap()];
                let mut named: Vec<(&str, &[usize])> = vec![("x", x_dims), ("residual", r_dims)];
                if with_bias {
                    named.push(("bias", &dd));
                }
                named.extend([("gamma", &dd[..]), ("beta", &dd[..])]);
                let mut g = Graph::new();
                let v: Vec<ValueId> = named.iter().map(|(n, dims)| f32_input(&mut g, n, dims)).collect();
                let v: Vec<ValueId> = v.into_iter().map(|v| as_dtype(&mut g, v, dtype)).collect();
                let (bias, gamma, beta) = (with_bias.then_some(v[2]), v[v.len() - 2], v[v.len() - 1]);
                let y = if rms {
                    g.fused_residual_rms_norm(v[0], v[1], bias, gamma, beta, 1e-6).unwrap()
                } else {
                    g.fused_residual_ln(v[0], v[1], bias, gamma, beta, 1e-5).unwrap()
                };
                let y = back(&mut g, y);
                g.set_outputs(vec![y]).unwrap();
                let inputs: Vec<(&str, Tensor)> = named.iter().enumerate().map(|(i, (n, dims))| (*n, random(dims, 20 + i as u64, -1.5, 1.5))).collect();
                let kind = if rms { OpKind::FusedResidualRmsNorm } else { OpKind::FusedResidualLN };
                agree_native(&gpu, &g, &inputs, tol(dtype, true), &[kind]);
            }
        }
    }
}

#[test]
fn arg_extremes_take_the_first_of_ties_and_nans() {
    let Some(gpu) = gpu() else { return };
    // Values on a coarse grid (many ties) with NaNs here and there.
    let coarse = |dims: &[usize], seed| {
        let mut v: Vec<f32> = uniform(dims.iter().product(), seed, -3.0, 3.0).into_iter().map(|x| x.round()).collect();
        for i in (5..v.len()).step_by(97) {
            v[i] = f32::NAN;
        }
        Tensor::from_vec(v, dims).unwrap()
    };
    for (dims, axis) in [(vec![5, 33, 7], 0), (vec![5, 33, 7], 1), (vec![5, 33, 7], 2), (vec![2, 5000], 1), (vec![3, 1], 1)] {
        for keep in [false, true] {
            let mut g = Graph::new();
            let x = f32_input(&mut g, "x", &dims);
            let outs = vec![g.arg_max(x, axis, keep).unwrap(), g.arg_min(x, axis, keep).unwrap()];
            g.set_outputs(outs).unwrap();
            agree_native(&gpu, &g, &[("x", coarse(&dims, 7))], Tol::rel(0.0), &[OpKind::ArgMax, OpKind::ArgMin]);
        }
    }
    // Few long rows split over blocks: the first half of each row below 2, so that the largest
    // value first appears in a later block and again in the blocks after it; a NaN in the
    // last block of one case.
    for (dims, nan) in [(vec![1, 128_256], None), (vec![3, 50_001], Some(49_990)), (vec![2, 20_000], None)] {
        let n = dims[1];
        let mut v: Vec<f32> = uniform(dims.iter().product(), 11, -3.0, 3.0).into_iter().enumerate().map(|(i, x)| if i % n < n / 2 { x.round().min(1.0) } else { x.round() }).collect();
        if let Some(at) = nan {
            v[n + at] = f32::NAN;
        }
        for dtype in [DType::F32, DType::BF16] {
            let mut g = Graph::new();
            let x = f32_input(&mut g, "x", &dims);
            let x = as_dtype(&mut g, x, dtype);
            let outs = vec![g.arg_max(x, 1, false).unwrap(), g.arg_min(x, 1, false).unwrap()];
            g.set_outputs(outs).unwrap();
            agree_native(&gpu, &g, &[("x", Tensor::from_vec(v.clone(), &dims).unwrap())], Tol::rel(0.0), &[OpKind::ArgMax, OpKind::ArgMin]);
        }
    }
    for dtype in [DType::I32, DType::U8, DType::F16, DType::F64] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[6, 300]);
        let x = g.cast(x, dtype).unwrap();
        let outs = vec![g.arg_max(x, 1, false).unwrap(), g.arg_min(x, 0, false).unwrap()];
        g.set_outputs(outs).unwrap();
        let xs = Tensor::from_vec(uniform(1800, 8, 0.0, 40.0).into_iter().map(f32::round).collect(), &[6, 300]).unwrap();
        agree_native(&gpu, &g, &[("x", xs)], Tol::rel(0.0), &[OpKind::ArgMax, OpKind::ArgMin]);
    }
}

#[test]
fn running_scans_in_the_cpus_order() {
    let Some(gpu) = gpu() else { return };
    for axis in [0, 1, 2, -1] {
        for exclusive in [false, true] {
            let mut g = Graph::new();
            let x = f32_input(&mut g, "x", &[4, 37, 3]);
            let p = f32_input(&mut g, "p", &[4, 37, 3]);
            let outs = vec![
                g.cumsum(x, axis, exclusive).unwrap(),
                g.cumsum_backward(x, axis, exclusive).unwrap(),
                g.cum_prod(p, axis, exclusive).unwrap(),
                g.cum_max(x, axis, exclusive).unwrap(),
            ];
            g.set_outputs(outs).unwrap();
            let mut xs = uniform(444, 9, -2.0, 2.0);
            xs[50] = f32::NAN;
            let inputs = [("x", Tensor::from_vec(xs, &[4, 37, 3]).unwrap()), ("p", random(&[4, 37, 3], 10, 0.9, 1.1))];
            agree_native(&gpu, &g, &inputs, Tol::rel(0.0), &[OpKind::Cumsum, OpKind::CumsumBackward, OpKind::CumProd, OpKind::CumMax]);
        }
    }
    // Integers wrap as their dtype does; halves accumulate in f32.
    for dtype in [DType::I32, DType::I64, DType::U8, DType::F16, DType::F64] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, "x", &[3, 3000]);
        let x = g.cast(x, dtype).unwrap();
        let outs = vec![g.cumsum(x, 1, false).unwrap(), g.cum_prod(x, 1, true).unwrap(), g.cum_max(x, 0, false).unwrap()];
        let outs = outs.into_iter().map(|y| back(&mut g, y)).collect();
        g.set_outputs(outs).unwrap();
        let (lo, hi) = if dtype == DType::F16 { (-1.0, 1.0) } else { (-3.0e6, 3.0e6) };
        let xs = Tensor::from_vec(uniform(9000, 11, lo, hi).into_iter().map(|v| if dtype == DType::F16 { v } else { v.round() }).collect(), &[3, 3000]).unwrap();
        let t = if dtype == DType::F16 { Tol::rel(2e-2) } else { Tol::rel(0.0) };
        agree_native(&gpu, &g, &[("x", xs)], t, &[OpKind::Cumsum, OpKind::CumProd, OpKind::CumMax]);
    }
}

/// Per-row cross-entropy of `logits [rows, c]` (in `dtype`) against `labels` of `label_dtype`.
fn cross_entropy(rows: usize, c: usize, dtype: DType, label_dtype: DType, ignore: Option<i64>) -> Graph {
    let mut g = Graph::new();
    let logits = f32_input(&mut g, "logits", &[rows, c]);
    let logits = as_dtype(&mut g, logits, dtype);
    let labels = g.input("labels", TensorType::new(DType::I64, Shape::of(&[rows])));
    let labels = if label_dtype == DType::I64 { labels } else { g.cast(labels, label_dtype).unwrap() };
    let y = g.softmax_cross_entropy_with_logits(logits, labels, ignore).unwrap();
    let y = back(&mut g, y);
    g.set_outputs(vec![y]).unwrap();
    g
}

#[test]
fn sparse_cross_entropy_ignores_and_reports_labels() {
    let Some(gpu) = gpu() else { return };
    for c in [1, 7, 1000, 5000] {
        for (dtype, label_dtype) in [(DType::F32, DType::I64), (DType::F32, DType::I32), (DType::BF16, DType::I64)] {
            let g = cross_entropy(6, c, dtype, label_dtype, Some(-100));
            let mut labels: Vec<i64> = (0..6).map(|r| (r * 7 + 3) as i64 % c as i64).collect();
            labels[4] = -100;
            let inputs = [("logits", random(&[6, c], c as u64, -4.0, 4.0)), ("labels", Tensor::from_vec(labels, &[6]).unwrap())];
            agree_native(&gpu, &g, &inputs, tol(dtype, false), &[OpKind::SoftmaxCrossEntropyWithLogits]);
        }
    }
    let g = cross_entropy(4, 7, DType::F32, DType::I64, Some(-100));
    let mut c = gpu.compile(&g).unwrap();
    let logits = random(&[4, 7], 12, -4.0, 4.0);
    let bad = Tensor::from_vec(vec![0i64, 6, 7, -100], &[4]).unwrap();
    let e = c.run(&[("logits", &logits), ("labels", &bad)]).unwrap_err().to_string();
    assert!(e.contains("row 2: label 7 is outside the classes [0, 7) and is not ignore_index -100"), "{e}");
    let good = Tensor::from_vec(vec![0i64, 6, 1, -100], &[4]).unwrap();
    c.run(&[("logits", &logits), ("labels", &good)]).expect("the report clears after the error");
}

#[test]
fn sparse_cross_entropy_gradients_zero_ignored_and_outside_rows() {
    let Some(gpu) = gpu() else { return };
    // Rows per warp and per block, labels in range, ignored, negative and past the classes.
    for c in [1, 7, 1000, 20000] {
        for (dtype, label_dtype) in [(DType::F32, DType::I64), (DType::F32, DType::I32), (DType::BF16, DType::I64), (DType::F16, DType::I32), (DType::F64, DType::I64)] {
            let rows = 9;
            let mut g = Graph::new();
            let logits = f32_input(&mut g, "logits", &[rows, c]);
            let logits = as_dtype(&mut g, logits, dtype);
            let dl = f32_input(&mut g, "dl", &[rows]);
            let dl = as_dtype(&mut g, dl, dtype);
            let labels = g.input("labels", TensorType::new(DType::I64, Shape::of(&[rows])));
            let labels = if label_dtype == DType::I64 { labels } else { g.cast(labels, label_dtype).unwrap() };
            let y = g.softmax_cross_entropy_backward(logits, labels, dl, Some(-100)).unwrap();
            let y = back(&mut g, y);
            g.set_outputs(vec![y]).unwrap();
            let mut labels: Vec<i64> = (0..rows).map(|r| (r * 7 + 3) as i64 % c as i64).collect();
            labels[2] = -100;
            labels[5] = -3;
            labels[7] = c as i64;
            let inputs = [
                ("logits", random(&[rows, c], c as u64 + 1, -4.0, 4.0)),
                ("dl", random(&[rows], c as u64 + 2, -2.0, 2.0)),
                ("labels", Tensor::from_vec(labels, &[rows]).unwrap()),
            ];
            agree_native(&gpu, &g, &inputs, tol(dtype, false), &[OpKind::SoftmaxCrossEntropyBackward]);
        }
    }
}

/// The backward kinds of LayerNorm and RmsNorm along `axis` of `x [dims]` in `dtype`, with
/// `γ`, `β` and `ȳ`: every gradient as an output.
fn norm_backward_graph(dims: &[usize], axis: i32, dtype: DType) -> (Graph, Vec<(&'static str, Tensor)>) {
    use rlx_ir::ops::norm::*;
    let d = dims[rlx_ir::norm_axis(axis as i64, dims.len()).unwrap()];
    let mut g = Graph::new();
    let x = f32_input(&mut g, "x", dims);
    let gamma = f32_input(&mut g, "gamma", &[d]);
    let beta = f32_input(&mut g, "beta", &[d]);
    let dy = f32_input(&mut g, "dy", dims);
    let [x, gamma, beta, dy] = [x, gamma, beta, dy].map(|v| as_dtype(&mut g, v, dtype));
    let eps = 1e-5;
    let rms = [x, gamma, beta, dy];
    let outs = [
        g.add1(LayerNormBackwardInput { axis, eps }, &[x, gamma, dy]).unwrap(),
        g.add1(LayerNormBackwardGamma { axis, eps }, &[x, dy]).unwrap(),
        g.add1(RmsNormBackwardInput { axis, eps }, &rms).unwrap(),
        g.add1(RmsNormBackwardGamma { axis, eps }, &rms).unwrap(),
        g.add1(RmsNormBackwardBeta { axis, eps }, &rms).unwrap(),
    ];
    let outs = outs.map(|y| back(&mut g, y));
    g.set_outputs(outs.to_vec()).unwrap();
    let seed = dims.iter().product::<usize>() as u64 + 17;
    let inputs = vec![
        ("x", random(dims, seed, -2.0, 3.0)),
        ("gamma", random(&[d], seed + 1, 0.5, 1.5)),
        ("beta", random(&[d], seed + 2, -0.5, 0.5)),
        ("dy", random(dims, seed + 3, -1.0, 1.0)),
    ];
    (g, inputs)
}

const NORM_BACKWARD: [OpKind; 5] =
    [OpKind::LayerNormBackwardInput, OpKind::LayerNormBackwardGamma, OpKind::RmsNormBackwardInput, OpKind::RmsNormBackwardGamma, OpKind::RmsNormBackwardBeta];

#[test]
fn norm_gradients_over_rows_of_every_length_and_split_columns() {
    let Some(gpu) = gpu() else { return };
    // Rows per warp and per block; enough rows (3000) that the parameter sums split. Rows of
    // one or two elements are left out: their input gradients are all cancellation (zero for
    // LayerNorm, g·r·ε/(x² + ε) for RmsNorm), rounding noise in any order of operations.
    for dims in [[5, 3], [7, 33], [3, 1000], [2, 4097], [3000, 96]] {
        let (g, inputs) = norm_backward_graph(&dims, -1, DType::F32);
        agree_native(&gpu, &g, &inputs, tol(DType::F32, true), &NORM_BACKWARD);
    }
}

#[test]
fn norm_gradients_over_inner_axes_and_in_other_dtypes() {
    let Some(gpu) = gpu() else { return };
    let (g, inputs) = norm_backward_graph(&[4, 33, 6], 1, DType::F32);
    agree_native(&gpu, &g, &inputs, tol(DType::F32, true), &NORM_BACKWARD);
    for dtype in [DType::F16, DType::BF16, DType::F64] {
        let (g, inputs) = norm_backward_graph(&[700, 96], -1, dtype);
        // Halves round x̂ and the sums' operands the same way on both: normwise 2e-2.
        let tol = if dtype == DType::F64 { Tol::norm(1e-12) } else { Tol::norm(2e-2) };
        agree_native(&gpu, &g, &inputs, tol, &NORM_BACKWARD);
    }
}
