//! Weights packed once per compiled graph: `MatMul` and the fused matmul + bias + activation
//! against a float64 product written here, `Conv` and the fused conv + bias + activation
//! against a float64 cross-correlation, with the weight a parameter (before and after
//! `set_param` replaces it, and read back) and a constant; a GGUF table both gathered from and
//! multiplied by (a tied embedding), held once as Q8 panels.

mod common;

use common::{randn, session};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, Dim, Graph, Shape, TensorType};
use rlx_runtime::Tensor;

/// Rows of `x` (above the few-rows path), inner dimension (two packed blocks) and widths.
const ROWS: usize = 60;
const K: usize = 500;
const N: usize = 45;
const NC: usize = 33;

/// `x [m, k] · w [k, n]` in float64.
fn product(x: &[f32], w: &[f32], k: usize, n: usize) -> Vec<f64> {
    let m = x.len() / k;
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| f64::from(x[i * k + p]) * f64::from(w[p * n + j])).sum();
        }
    }
    out
}

fn assert_near(got: &Tensor, want: &[f64], what: &str) {
    let got = got.to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((f64::from(g) - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}: [{i}] = {g}, want {w}");
    }
}

#[test]
fn packed_weights_follow_set_param_and_constants() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[3, ROWS / 3, K]));
    // A second input, so that common-subexpression elimination keeps two products of `w`.
    let z = g.input("z", TensorType::of(DType::F32, &[ROWS, K]));
    let w = g.param("w", TensorType::of(DType::F32, &[K, N]));
    let b = g.param("b", TensorType::of(DType::F32, &[N]));
    let wc_values = randn(K * NC, 3);
    let wc = g.constant_f32(&[K, NC], &wc_values).unwrap();
    let plain = g.matmul(x, w).unwrap();
    let zw = g.matmul(z, w).unwrap();
    let biased = g.binary(BinaryOp::Add, zw, b).unwrap();
    let fused = g.activation(ActivationKind::Relu, biased).unwrap();
    let constant = g.matmul(x, wc).unwrap();
    g.set_outputs(vec![plain, fused, constant]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let bias = randn(N, 4);
    c.set_param("b", Tensor::from_vec(bias.clone(), &[N]).unwrap()).unwrap();
    let xs = randn(ROWS * K, 5);
    let xt = Tensor::from_vec(xs.clone(), &[3, ROWS / 3, K]).unwrap();
    let zs = randn(ROWS * K, 6);
    let zt = Tensor::from_vec(zs.clone(), &[ROWS, K]).unwrap();
    for round in 0..3u64 {
        // Rounds 0 and 1 share a weight (the packed one is reused); round 2 replaces it.
        let ws = randn(K * N, 10 + round / 2);
        if round != 1 {
            c.set_param("w", Tensor::from_vec(ws.clone(), &[K, N]).unwrap()).unwrap();
        }
        let out = c.run(&[("x", &xt), ("z", &zt)]).unwrap();
        assert_near(&out[0], &product(&xs, &ws, K, N), &format!("MatMul, round {round}"));
        let relu: Vec<f64> = product(&zs, &ws, K, N).iter().enumerate().map(|(i, &v)| (v + f64::from(bias[i % N])).max(0.0)).collect();
        assert_near(&out[1], &relu, &format!("MatMul + bias + ReLU, round {round}"));
        assert_near(&out[2], &product(&xs, &wc_values, K, NC), &format!("constant weight, round {round}"));
    }
}

#[test]
fn a_weight_held_only_packed_reads_back_and_serves_few_row_runs() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::Sym("m".into()), Dim::Static(K)])));
    let w = g.param("w", TensorType::of(DType::F32, &[K, N]));
    let y = g.matmul(x, w).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let ws = randn(K * N, 21);
    c.set_param("w", Tensor::from_vec(ws.clone(), &[K, N]).unwrap()).unwrap();
    // Many rows (packed, the unpacked copy released), then 2 rows (unpacked again), then many.
    for (round, rows) in [ROWS, 2, ROWS].into_iter().enumerate() {
        let xs = randn(rows * K, 30 + round as u64);
        let out = c.run(&[("x", &Tensor::from_vec(xs.clone(), &[rows, K]).unwrap())]).unwrap();
        assert_near(&out[0], &product(&xs, &ws, K, N), &format!("{rows} rows, round {round}"));
        assert_eq!(c.param("w").unwrap().to_vec::<f32>().unwrap(), ws, "the weight read back after round {round}");
    }
}

#[test]
fn copies_share_the_packed_weight_and_own_what_they_set() {
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::Sym("m".into()), Dim::Static(K)])));
    let w = g.param("w", TensorType::of(DType::F32, &[K, N]));
    let y = g.matmul(x, w).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut first = session().compile(&g).unwrap();
    let ws = randn(K * N, 41);
    first.set_param("w", Tensor::from_vec(ws.clone(), &[K, N]).unwrap()).unwrap();
    let xs = randn(ROWS * K, 42);
    let xt = Tensor::from_vec(xs.clone(), &[ROWS, K]).unwrap();
    let want = first.run(&[("x", &xt)]).unwrap();
    assert_near(&want[0], &product(&xs, &ws, K, N), "before sharing");
    let mut copy = first.share().unwrap();
    assert_eq!(copy.run(&[("x", &xt)]).unwrap()[0].bytes(), want[0].bytes(), "the copy, bit for bit");
    // A shape neither has run, on the few-rows path that reads the weight as given.
    let few = randn(2 * K, 43);
    let out = copy.run(&[("x", &Tensor::from_vec(few.clone(), &[2, K]).unwrap())]).unwrap();
    assert_near(&out[0], &product(&few, &ws, K, N), "the copy, 2 rows");
    // Setting the weight in the copy leaves the original's.
    let other = randn(K * N, 44);
    copy.set_param("w", Tensor::from_vec(other.clone(), &[K, N]).unwrap()).unwrap();
    assert_near(&copy.run(&[("x", &xt)]).unwrap()[0], &product(&xs, &other, K, N), "the copy after set_param");
    assert_eq!(first.run(&[("x", &xt)]).unwrap()[0].bytes(), want[0].bytes(), "the original after the copy's set_param");
    assert_eq!(first.param("w").unwrap().to_vec::<f32>().unwrap(), ws, "the original's weight read back");
}

/// Cross-correlation of `x [c_in, h, w]` with `w [c_out, c_in, k, k]` at `stride`, padding
/// `k / 2`, in float64: `[c_out, h_o, w_o]`.
fn conv(x: &[f32], [c_in, h, wd]: [usize; 3], w: &[f32], [c_out, k]: [usize; 2], stride: usize) -> Vec<f64> {
    let (p, o) = (k / 2, |e: usize| (e + 2 * (k / 2) - k) / stride + 1);
    let (ho, wo) = (o(h), o(wd));
    let mut out = vec![0.0; c_out * ho * wo];
    for oc in 0..c_out {
        for i in 0..ho {
            for j in 0..wo {
                let mut acc = 0.0;
                for ci in 0..c_in {
                    for (di, dj) in (0..k).flat_map(|di| (0..k).map(move |dj| (di, dj))) {
                        let (y, x_) = ((i * stride + di).wrapping_sub(p), (j * stride + dj).wrapping_sub(p));
                        if y < h && x_ < wd {
                            acc += f64::from(x[(ci * h + y) * wd + x_]) * f64::from(w[((oc * c_in + ci) * k + di) * k + dj]);
                        }
                    }
                }
                out[(oc * ho + i) * wo + j] = acc;
            }
        }
    }
    out
}

#[test]
fn conv_weights_pack_once_and_read_back() {
    use rlx_ir::ops::conv::Conv;
    use rlx_ir::ops::fused::FusedConvBiasAct;
    let ([c_in, h, wd], [c_out, k]) = ([65, 11, 9], [13, 3]);
    let mut g = Graph::new();
    let x = g.input("x", TensorType::of(DType::F32, &[1, c_in, h, wd]));
    let w = g.param("w", TensorType::of(DType::F32, &[c_out, c_in, k, k]));
    let b = g.param("b", TensorType::of(DType::F32, &[c_out]));
    let wc_values = randn(7 * c_in, 3);
    let wc = g.constant_f32(&[7, c_in, 1, 1], &wc_values).unwrap();
    let window = |k: usize, stride: usize| (vec![k, k], vec![stride, stride], vec![k / 2, k / 2], vec![1, 1]);
    let (kernel_size, stride, padding, dilation) = window(k, 1);
    let attrs = FusedConvBiasAct { kernel_size, stride, padding, dilation, groups: 1, activation: Some(ActivationKind::Relu), has_residual: false };
    let fused = g.fused_conv_bias_act(attrs, x, w, b, None).unwrap();
    let (kernel_size, stride, padding, dilation) = window(1, 2);
    let plain = g.conv(x, wc, Conv { kernel_size, stride, padding, dilation, groups: 1 }).unwrap();
    g.set_outputs(vec![fused, plain]).unwrap();
    let mut c = session().compile(&g).unwrap();
    let bias = randn(c_out, 4);
    c.set_param("b", Tensor::from_vec(bias.clone(), &[c_out]).unwrap()).unwrap();
    let xs = randn(c_in * h * wd, 5);
    let xt = Tensor::from_vec(xs.clone(), &[1, c_in, h, wd]).unwrap();
    for round in 0..3u64 {
        // Rounds 0 and 1 share a weight (the packed one is reused); round 2 replaces it.
        let ws = randn(c_out * c_in * k * k, 10 + round / 2);
        if round != 1 {
            c.set_param("w", Tensor::from_vec(ws.clone(), &[c_out, c_in, k, k]).unwrap()).unwrap();
        }
        let out = c.run(&[("x", &xt)]).unwrap();
        let o = h * wd;
        let relu: Vec<f64> = conv(&xs, [c_in, h, wd], &ws, [c_out, k], 1).iter().enumerate().map(|(i, &v)| (v + f64::from(bias[i / o])).max(0.0)).collect();
        assert_near(&out[0], &relu, &format!("conv + bias + ReLU, round {round}"));
        assert_near(&out[1], &conv(&xs, [c_in, h, wd], &wc_values, [7, 1], 2), &format!("constant 1×1 weight, stride 2, round {round}"));
        let back = c.param("w").unwrap();
        assert_eq!((back.shape(), back.to_vec::<f32>().unwrap()), (&[c_out, c_in, k, k][..], ws), "the weight read back after round {round}");
    }
}

/// `rows` GGUF `Q8_0` rows of `k` weights: f16 scales in ±1, codes from a fixed stream.
fn q8_0_rows(rows: usize, k: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let mut out = Vec::new();
    for _ in 0..rows * k / 32 {
        out.extend(half::f16::from_f32((next() % 2000) as f32 / 1000.0 - 1.0).to_le_bytes());
        out.extend((0..32).map(|_| next() as u8));
    }
    out
}

#[test]
fn a_table_gathered_and_multiplied_by_reads_its_rows_from_the_product_panels() {
    use rlx_ir::ops::quant::{Activations, DequantMatMul, GgufType, QuantScheme};
    let k = 64;
    let row = k / 32 * 34;
    for n in [16, 12] {
        let mut g = Graph::new();
        let ids = g.input("ids", TensorType::new(DType::I64, Shape(vec![Dim::Sym("S".into())])));
        let x = g.input("x", TensorType::of(DType::F32, &[5, k]));
        let table = g.param("table", TensorType::of(DType::U8, &[n, row]));
        let copy = g.param("copy", TensorType::of(DType::U8, &[n, row]));
        let rows = g.gather(table, ids, 0).unwrap();
        let attrs = DequantMatMul { scheme: QuantScheme::Gguf(GgufType::Q8_0), out_dim: None, activations: Activations::Q8Blocks };
        let tied = g.dequant_matmul(attrs.clone(), x, &[table]).unwrap();
        let apart = g.dequant_matmul(attrs, x, &[copy]).unwrap();
        g.set_outputs(vec![rows, tied, apart]).unwrap();
        let mut c = session().compile(&g).unwrap();
        let bytes = q8_0_rows(n, k, n as u32);
        c.set_param_bytes("table", DType::U8, &[n, row], &bytes).unwrap();
        c.set_param_bytes("copy", DType::U8, &[n, row], &bytes).unwrap();
        let xt = Tensor::from_vec(randn(5 * k, 8), &[5, k]).unwrap();
        for picks in [vec![3i64, 0, 3, 11], vec![n as i64 - 1]] {
            let it = Tensor::from_vec(picks.clone(), &[picks.len()]).unwrap();
            let out = c.run(&[("ids", &it), ("x", &xt)]).unwrap();
            let want: Vec<u8> = picks.iter().flat_map(|&i| bytes[i as usize * row..(i as usize + 1) * row].to_vec()).collect();
            assert_eq!(out[0].bytes(), want.as_slice(), "{n} rows: gathered {picks:?}");
            assert_eq!(out[1], out[2], "{n} rows: the product of the gathered table");
        }
        assert_eq!(c.param("table").unwrap().bytes(), bytes.as_slice(), "{n} rows: read back");
        let bad = Tensor::from_vec(vec![n as i64], &[1]).unwrap();
        assert!(c.run(&[("ids", &bad), ("x", &xt)]).unwrap_err().to_string().contains(&n.to_string()));
    }
}
