//! Each native wgpu kernel against the CPU backend on fresh random inputs (f32 within 1e-5 of
//! the output's scale; data movement, integers and comparisons exactly; f16 within 1e-2;
//! products over GGUF blocks normwise),
//! and the typed errors of a missing adapter, a buffer beyond the adapter's limits and a bad
//! gather index. Every test skips, saying so, on a machine without an adapter; CI runs them
//! on Mesa's software Vulkan (lavapipe).

mod common;

use common::{agree, compare, cpu, gpu, input, random, uniform, Tol, EXACT, F32};
use half::f16;
use rlx_ir::ops::attention::{Attention, MaskKind, Rope, RopeBackward, RopeStyle};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::quant::{Activations, DequantMatMul, GgufType, QuantScheme};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, OpKind, Shape, TensorType};
use rlx_runtime::{CompileOptions, RuntimeError, Session, Tensor};

/// The session without fusion, so that each op runs its own kernel.
fn unfused(s: Session) -> Session {
    s.with_options(CompileOptions { fuse: false, ..CompileOptions::default() })
}

/// Seeded integers in `[lo, hi)` as a tensor of `dtype`.
fn ints(dtype: DType, dims: &[usize], seed: u64, lo: i64, hi: i64) -> Tensor {
    let v: Vec<i64> = uniform(dims.iter().product(), seed, 0.0, 1.0).into_iter().map(|u| lo + ((hi - lo) as f32 * u) as i64).collect();
    let bytes: Vec<u8> = match dtype {
        DType::I64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        DType::U32 => v.iter().flat_map(|&x| (x as u32).to_le_bytes()).collect(),
        DType::I16 => v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect(),
        DType::U16 => v.iter().flat_map(|&x| (x as u16).to_le_bytes()).collect(),
        DType::I8 => v.iter().map(|&x| x as i8 as u8).collect(),
        DType::U8 | DType::Bool => v.iter().map(|&x| x as u8).collect(),
        other => panic!("no integer data of {other}"),
    };
    Tensor::from_bytes(dtype, dims, &bytes).unwrap()
}

#[test]
fn activations_and_their_derivatives() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    for (i, &kind) in ActivationKind::ALL.iter().enumerate() {
        let positive = matches!(kind, ActivationKind::Log | ActivationKind::Sqrt | ActivationKind::Rsqrt | ActivationKind::Recip);
        // Tan away from its poles at ±π/2: near one the derivative reached -17 061 on the
        // H200, where an ulp of the driver's tan is more than the tolerance.
        let (lo, hi) = match kind {
            ActivationKind::Tan => (-1.4, 1.4),
            _ if positive => (0.1, 3.0),
            _ => (-3.0, 3.0),
        };
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[3, 129]);
        let dy = input(&mut g, "dy", DType::F32, &[3, 129]);
        let y = g.activation(kind, x).unwrap();
        let dx = g.activation_backward(kind, x, dy).unwrap();
        g.set_outputs(vec![y, dx]).unwrap();
        let inputs = [("x", random(&[3, 129], 10 + i as u64, lo, hi)), ("dy", random(&[3, 129], 50 + i as u64, -1.0, 1.0))];
        let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let mut c = gpu.compile(&g).unwrap();
        assert!(c.partition().is_none(), "{kind:?} ran on the host");
        let got = c.run(&named).unwrap();
        let want = cpu().compile(&g).unwrap().run(&named).unwrap();
        eprintln!("{kind:?}");
        compare(&got, &want, F32);
        compare(&got, &want, Tol { rtol: 1e-4, floor: 1e-3 });
    }
}

#[test]
fn binary_compare_select_and_fma_over_float_and_integer_dtypes() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    let dims = [5, 67];
    for (s, dtype) in [DType::F32, DType::I32, DType::U8, DType::I16, DType::F16].into_iter().enumerate() {
        let seed = 100 * s as u64;
        let shaped = |k: u64, dims: &[usize]| match dtype {
            DType::F32 => random(dims, seed + k, -4.0, 4.0),
            DType::F16 => Tensor::from_vec(uniform(dims.iter().product(), seed + k, -4.0, 4.0).into_iter().map(f16::from_f32).collect(), dims).unwrap(),
            DType::U8 => ints(dtype, dims, seed + k, 0, 256),
            _ => ints(dtype, dims, seed + k, -300, 300),
        };
        let data = |k: u64| shaped(k, &dims);
        for op in BinaryOp::ALL {
            let mut g = Graph::new();
            let a = input(&mut g, "a", dtype, &dims);
            let b = input(&mut g, "b", dtype, &[67]);
            let Ok(y) = g.binary(op, a, b) else { continue };
            g.set_outputs(vec![y]).unwrap();
            let mut c = gpu.compile(&g).unwrap();
            if c.partition().is_some() {
                continue;
            }
            let inputs = [("a", data(1)), ("b", shaped(2, &[67]))];
            let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
            let tol = match dtype {
                DType::F32 => F32,
                DType::F16 => Tol { rtol: 1e-3, floor: 1e-3 },
                _ => EXACT,
            };
            compare(&c.run(&named).unwrap(), &cpu().compile(&g).unwrap().run(&named).unwrap(), tol);
        }
        let mut g = Graph::new();
        let a = input(&mut g, "a", dtype, &dims);
        let b = input(&mut g, "b", dtype, &dims);
        let mut outs = Vec::new();
        for op in [CmpOp::Lt, CmpOp::Eq, CmpOp::Ge, CmpOp::Ne] {
            outs.push(g.compare(op, a, b).unwrap());
        }
        let picked = g.select(outs[0], a, b).unwrap();
        outs.push(picked);
        g.set_outputs(outs).unwrap();
        agree(&gpu, &g, &[("a", data(3)), ("b", data(4))], EXACT, &[OpKind::Compare, OpKind::Where]);
    }
    let mut g = Graph::new();
    let a = input(&mut g, "a", DType::F32, &dims);
    let b = input(&mut g, "b", DType::F32, &dims);
    let c = input(&mut g, "c", DType::F32, &[1, 67]);
    let y = g.fma(a, b, c).unwrap();
    g.set_outputs(vec![y]).unwrap();
    agree(&gpu, &g, &[("a", random(&dims, 7, -2.0, 2.0)), ("b", random(&dims, 8, -2.0, 2.0)), ("c", random(&[1, 67], 9, -2.0, 2.0))], F32, &[OpKind::Fma]);
}

#[test]
fn casts_between_every_dtype_the_kernels_take() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    let dtypes = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I16, DType::U16, DType::I8, DType::U8, DType::Bool];
    let mut values = uniform(301, 77, -400.0, 400.0);
    values.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -0.5, 70000.0, 1e10, -3e9, 255.5]);
    for from in dtypes {
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[310]);
        let x = g.cast(x, from).unwrap();
        let outs: Vec<_> = dtypes.iter().map(|&to| g.cast(x, to).unwrap()).collect();
        g.set_outputs(outs).unwrap();
        agree(&gpu, &g, &[("x", Tensor::from_vec(values.clone(), &[310]).unwrap())], EXACT, &[OpKind::Cast]);
    }
}

#[test]
fn data_movement_of_every_element_size() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    for (s, dtype) in [DType::F32, DType::U8, DType::F16, DType::I64].into_iter().enumerate() {
        let mut g = Graph::new();
        let x = input(&mut g, "x", dtype, &[3, 5, 7]);
        let t = g.transpose(x, &[2, 0, 1]).unwrap();
        let n = g.narrow(x, 2, 2, 4).unwrap();
        let sl = g.slice(x, 1, 4, 3, -2).unwrap();
        let r = g.reverse(x, &[0, 2]).unwrap();
        let e = g.expand(n, &[2, 3, 5, 4]).unwrap();
        let mut outs = vec![t, n, sl, r, e];
        if dtype.size() >= 4 {
            outs.push(g.concat(&[x, n, x], 2).unwrap());
        }
        g.set_outputs(outs).unwrap();
        let data = match dtype {
            DType::F32 => random(&[3, 5, 7], s as u64, -1.0, 1.0),
            DType::F16 => Tensor::from_vec(uniform(105, 5, -1.0, 1.0).into_iter().map(f16::from_f32).collect(), &[3, 5, 7]).unwrap(),
            _ => ints(dtype, &[3, 5, 7], 9 + s as u64, -1 << 20, 1 << 20),
        };
        let data = if dtype == DType::U8 { ints(dtype, &[3, 5, 7], 4, 0, 256) } else { data };
        agree(&gpu, &g, &[("x", data)], EXACT, &[OpKind::Transpose, OpKind::Narrow, OpKind::Slice, OpKind::Reverse, OpKind::Expand]);
    }
}

#[test]
fn gathers_by_each_index_dtype_and_a_bad_index_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    // Its own adapter: the bad index's report must not reach the other tests' runs.
    let Ok(own) = rlx_wgpu::WgpuBackend::new(0) else { return };
    let own = unfused(Session::new(std::sync::Arc::new(own)));
    for (i, index) in [DType::I64, DType::I32, DType::U32].into_iter().enumerate() {
        for (table_dtype, axis) in [(DType::F32, 0), (DType::F32, 1), (DType::U8, 0), (DType::I64, 1)] {
            let mut g = Graph::new();
            let t = input(&mut g, "t", table_dtype, &[6, 9]);
            let idx = input(&mut g, "i", index, &[2, 5]);
            let y = g.gather(t, idx, axis).unwrap();
            g.set_outputs(vec![y]).unwrap();
            let table = if table_dtype == DType::F32 { random(&[6, 9], 3 + i as u64, -1.0, 1.0) } else { ints(table_dtype, &[6, 9], 4, 0, 200) };
            let extent = [6, 9][axis];
            agree(&gpu, &g, &[("t", table), ("i", ints(index, &[2, 5], 6 + i as u64, 0, extent))], EXACT, &[OpKind::Gather]);
        }
    }
    let mut g = Graph::new();
    let t = input(&mut g, "t", DType::F32, &[6, 4]);
    let idx = input(&mut g, "i", DType::I64, &[3]);
    let y = g.gather(t, idx, 0).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = own.compile(&g).unwrap();
    let bad = Tensor::from_vec(vec![1i64, 6, 0], &[3]).unwrap();
    let err = c.run(&[("t", &random(&[6, 4], 1, 0.0, 1.0)), ("i", &bad)]).expect_err("index 6 of 6 rows was read");
    assert!(err.to_string().contains("gather index 6 lies outside [0, 6)"), "{err}");
    let good = Tensor::from_vec(vec![5i64, 0, 2], &[3]).unwrap();
    assert!(c.run(&[("t", &random(&[6, 4], 1, 0.0, 1.0)), ("i", &good)]).is_ok(), "the report is cleared after the error");
}

#[test]
fn reductions_and_arg_extrema_over_any_axes() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    for (i, op) in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod].into_iter().enumerate() {
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[4, 6, 33]);
        let mut outs = vec![g.reduce(op, x, &[2], false).unwrap(), g.reduce(op, x, &[0, 2], true).unwrap(), g.reduce(op, x, &[1], false).unwrap()];
        outs.extend([g.arg_max(x, 1, false).unwrap(), g.arg_min(x, 2, true).unwrap()]);
        g.set_outputs(outs).unwrap();
        let (lo, hi) = if op == ReduceOp::Prod { (0.9, 1.1) } else { (-2.0, 2.0) };
        agree(&gpu, &g, &[("x", random(&[4, 6, 33], 20 + i as u64, lo, hi))], F32, &[OpKind::Reduce]);
    }
}

#[test]
fn tiled_products_with_batch_broadcasts_and_ragged_edges() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    for (i, (a, b)) in [(vec![70, 33], vec![33, 65]), (vec![2, 3, 19, 40], vec![40, 130]), (vec![2, 1, 5, 17], vec![3, 17, 9]), (vec![1, 1], vec![1, 200]), (vec![131, 75], vec![75, 257])].into_iter().enumerate() {
        let mut g = Graph::new();
        let x = input(&mut g, "a", DType::F32, &a);
        let w = input(&mut g, "b", DType::F32, &b);
        let y = g.matmul(x, w).unwrap();
        g.set_outputs(vec![y]).unwrap();
        agree(&gpu, &g, &[("a", random(&a, 30 + i as u64, -1.0, 1.0)), ("b", random(&b, 40 + i as u64, -1.0, 1.0))], F32, &[OpKind::MatMul]);
    }
}

#[test]
fn biased_products_take_their_activation_in_the_same_kernel() {
    let Some(gpu) = gpu() else { return };
    for activation in [None, Some(ActivationKind::Gelu), Some(ActivationKind::Relu), Some(ActivationKind::Silu)] {
        for (x_dims, n) in [(vec![70, 33], 65), (vec![2, 19, 40], 130)] {
            let k = *x_dims.last().unwrap();
            let mut g = Graph::new();
            let x = input(&mut g, "x", DType::F32, &x_dims);
            let w = input(&mut g, "w", DType::F32, &[k, n]);
            let b = input(&mut g, "b", DType::F32, &[n]);
            let y = g.matmul(x, w).unwrap();
            let mut y = g.binary(BinaryOp::Add, y, b).unwrap();
            if let Some(kind) = activation {
                y = g.activation(kind, y).unwrap();
            }
            g.set_outputs(vec![y]).unwrap();
            let seed = (k * n) as u64;
            let inputs = [("x", random(&x_dims, seed, -1.0, 1.0)), ("w", random(&[k, n], seed + 1, -0.5, 0.5)), ("b", random(&[n], seed + 2, -1.0, 1.0))];
            agree(&gpu, &g, &inputs, F32, &[OpKind::FusedMatMulBiasAct]);
        }
    }
}

#[test]
fn products_over_gguf_blocks_as_stored() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    for t in [GgufType::Q4_0, GgufType::Q4_1, GgufType::Q8_0] {
        for activations in [Activations::Exact, Activations::Q8Blocks] {
            for (m, n, k) in [(1, 37, 256), (3, 8, 96), (5, 70, 64)] {
                let mut g = Graph::new();
                let x = input(&mut g, "x", DType::F32, &[m, k]);
                let w = input(&mut g, "w", DType::U8, &[n, t.row_bytes(k).unwrap()]);
                let y = g.dequant_matmul(DequantMatMul { scheme: QuantScheme::Gguf(t), out_dim: None, activations }, x, &[w]).unwrap();
                g.set_outputs(vec![y]).unwrap();
                let seed = (m * n + k) as u64;
                let ws = rlx_models::llama::random_blocks(&[n, k], seed, 0.5, t).unwrap();
                agree(&gpu, &g, &[("x", random(&[m, k], seed + 1, -2.0, 2.0)), ("w", ws)], F32, &[OpKind::DequantMatMul]);
            }
        }
    }
}

#[test]
fn f16_products_run_in_f32_after_casts() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    let half = |dims: &[usize], seed| Tensor::from_vec(uniform(dims.iter().product(), seed, -1.0, 1.0).into_iter().map(f16::from_f32).collect(), dims).unwrap();
    let mut g = Graph::new();
    let x = input(&mut g, "a", DType::F16, &[9, 48]);
    let w = input(&mut g, "b", DType::F16, &[48, 20]);
    let y = g.matmul(x, w).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let c = gpu.compile(&g).unwrap();
    assert!(c.report().count(OpKind::MatMul, rlx_opt::Outcome::Cast) > 0, "{}", c.report());
    agree(&gpu, &g, &[("a", half(&[9, 48], 1)), ("b", half(&[48, 20], 2))], Tol { rtol: 1e-2, floor: 1e-2 }, &[]);
}

#[test]
fn softmax_and_norms_along_any_axis() {
    let Some(gpu) = gpu() else { return };
    let gpu = unfused(gpu);
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[3, 300, 5]);
    let gamma = input(&mut g, "gamma", DType::F32, &[300]);
    let beta = input(&mut g, "beta", DType::F32, &[300]);
    let g5 = input(&mut g, "g5", DType::F32, &[5]);
    let b5 = input(&mut g, "b5", DType::F32, &[5]);
    let outs = vec![
        g.softmax(x, -1).unwrap(),
        g.softmax(x, 1).unwrap(),
        g.layer_norm(x, gamma, beta, 1, 1e-5).unwrap(),
        g.rms_norm(x, g5, b5, -1, 1e-6).unwrap(),
        g.layer_norm(x, g5, b5, 2, 1e-5).unwrap(),
    ];
    g.set_outputs(outs).unwrap();
    let inputs = [
        ("x", random(&[3, 300, 5], 1, -3.0, 3.0)),
        ("gamma", random(&[300], 2, 0.5, 1.5)),
        ("beta", random(&[300], 3, -0.5, 0.5)),
        ("g5", random(&[5], 4, 0.5, 1.5)),
        ("b5", random(&[5], 5, -0.5, 0.5)),
    ];
    agree(&gpu, &g, &inputs, F32, &[OpKind::Softmax, OpKind::LayerNorm, OpKind::RmsNorm]);
}

#[test]
fn fused_regions_and_residual_norms_form_and_match() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[4, 7, 96]);
    let r = input(&mut g, "r", DType::F32, &[7, 96]);
    let bias = input(&mut g, "bias", DType::F32, &[96]);
    let gamma = input(&mut g, "gamma", DType::F32, &[96]);
    let beta = input(&mut g, "beta", DType::F32, &[96]);
    let h = g.binary(BinaryOp::Add, x, bias).unwrap();
    let h = g.activation(ActivationKind::Gelu, h).unwrap();
    let h = g.binary(BinaryOp::Mul, h, x).unwrap();
    let sum = g.binary(BinaryOp::Add, h, r).unwrap();
    let ln = g.layer_norm(sum, gamma, beta, -1, 1e-5).unwrap();
    let sum2 = g.binary(BinaryOp::Add, ln, x).unwrap();
    let rms = g.rms_norm(sum2, gamma, beta, -1, 1e-6).unwrap();
    let low = g.cast(rms, DType::F16).unwrap();
    let back = g.cast(low, DType::F32).unwrap();
    let y = g.activation(ActivationKind::Silu, back).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let inputs = [
        ("x", random(&[4, 7, 96], 1, -2.0, 2.0)),
        ("r", random(&[7, 96], 2, -1.0, 1.0)),
        ("bias", random(&[96], 3, -1.0, 1.0)),
        ("gamma", random(&[96], 4, 0.5, 1.5)),
        ("beta", random(&[96], 5, -0.5, 0.5)),
    ];
    agree(&gpu, &g, &inputs, Tol { rtol: 1e-5, floor: 1.0 }, &[OpKind::ElementwiseRegion, OpKind::FusedResidualLN, OpKind::FusedResidualRmsNorm]);
}

#[test]
fn rotary_embeddings_of_both_styles_and_their_backward() {
    let Some(gpu) = gpu() else { return };
    for (i, style) in [RopeStyle::NeoX, RopeStyle::GptJ].into_iter().enumerate() {
        let mut g = Graph::new();
        let x = input(&mut g, "x", DType::F32, &[2, 6, 3 * 16]);
        let x4 = input(&mut g, "x4", DType::F32, &[2, 6, 3, 16]);
        let cos = input(&mut g, "cos", DType::F32, &[6, 16]);
        let sin = input(&mut g, "sin", DType::F32, &[6, 16]);
        let y = g.rope(Rope { head_dim: 16, n_rot: 12, style }, x, cos, sin).unwrap();
        let y4 = g.rope(Rope { head_dim: 16, n_rot: 16, style }, x4, cos, sin).unwrap();
        let dx = g.rope_backward(RopeBackward { head_dim: 16, n_rot: 12, style }, x, cos, sin).unwrap();
        g.set_outputs(vec![y, y4, dx]).unwrap();
        let inputs = [
            ("x", random(&[2, 6, 48], 1 + i as u64, -1.0, 1.0)),
            ("x4", random(&[2, 6, 3, 16], 2 + i as u64, -1.0, 1.0)),
            ("cos", random(&[6, 16], 3, -1.0, 1.0)),
            ("sin", random(&[6, 16], 4, -1.0, 1.0)),
        ];
        agree(&gpu, &g, &inputs, F32, &[OpKind::Rope, OpKind::RopeBackward]);
    }
}

#[test]
fn attention_with_each_mask_grouped_heads_and_softcap() {
    let Some(gpu) = gpu() else { return };
    let cases: [(MaskKind, usize, usize, usize, Option<f32>); 5] = [
        (MaskKind::None, 4, 4, 70, None),
        (MaskKind::Causal, 4, 2, 70, None),
        (MaskKind::SlidingWindow(9), 4, 1, 33, Some(20.0)),
        (MaskKind::Custom, 2, 2, 130, None),
        (MaskKind::Causal, 2, 2, 1, None),
    ];
    for (i, (mask, heads, kv, s_k, cap)) in cases.into_iter().enumerate() {
        let (b, s_q, d) = (2, if s_k == 1 { 1 } else { 5 }, 24);
        let mut g = Graph::new();
        let q = input(&mut g, "q", DType::F32, &[b, heads, s_q, d]);
        let k = input(&mut g, "k", DType::F32, &[b, kv, s_k, d]);
        let v = input(&mut g, "v", DType::F32, &[b, kv, s_k, d]);
        let m = (mask == MaskKind::Custom).then(|| input(&mut g, "m", DType::F32, &[b, s_k]));
        let mut attrs = Attention::new(heads, d, mask);
        attrs.attn_logit_softcap = cap;
        let y = g.attention(attrs, q, k, v, m).unwrap();
        g.set_outputs(vec![y]).unwrap();
        let seed = 10 * i as u64;
        let mut inputs = vec![
            ("q", random(&[b, heads, s_q, d], seed + 1, -1.0, 1.0)),
            ("k", random(&[b, kv, s_k, d], seed + 2, -1.0, 1.0)),
            ("v", random(&[b, kv, s_k, d], seed + 3, -1.0, 1.0)),
        ];
        if m.is_some() {
            inputs.push(("m", random(&[b, s_k], seed + 4, 0.0, 1.0)));
        }
        agree(&gpu, &g, &inputs, F32, &[OpKind::Attention]);
    }
    let mut g = Graph::new();
    let q = input(&mut g, "q", DType::F32, &[2, 7, 4 * 16]);
    let k = input(&mut g, "k", DType::F32, &[2, 7, 2 * 16]);
    let v = input(&mut g, "v", DType::F32, &[2, 7, 2 * 16]);
    let y = g.attention(Attention::new(4, 16, MaskKind::Causal), q, k, v, None).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let inputs = [("q", random(&[2, 7, 64], 1, -1.0, 1.0)), ("k", random(&[2, 7, 32], 2, -1.0, 1.0)), ("v", random(&[2, 7, 32], 3, -1.0, 1.0))];
    agree(&gpu, &g, &inputs, F32, &[OpKind::Attention]);
}

#[test]
fn device_values_chain_without_the_host() {
    let Some(gpu) = gpu() else { return };
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("n"), Dim::Static(3)])));
    let y = g.activation(ActivationKind::Tanh, x).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let mut c = gpu.compile(&g).unwrap();
    let host = random(&[5, 3], 1, -1.0, 1.0);
    let on = c.upload(&host).unwrap();
    let once = c.submit(&[("x", &on)]).unwrap();
    let twice = c.submit(&[("x", &once[0])]).unwrap();
    let got = c.download(&twice[0]).unwrap();
    let want: Vec<f32> = host.to_vec::<f32>().unwrap().iter().map(|v| v.tanh().tanh()).collect();
    for (a, b) in got.to_vec::<f32>().unwrap().iter().zip(&want) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
}

#[test]
fn a_missing_adapter_is_a_typed_error() {
    let Err(e) = rlx_wgpu::WgpuBackend::new(99) else { panic!("wgpu:99 opened") };
    assert!(matches!(e, RuntimeError::Backend { .. }), "{e:?}");
    assert!(e.to_string().contains("wgpu:99 was asked for"), "{e}");
}

/// A value larger than the adapter's `max_buffer_size` (sized by a symbolic dim, so the
/// arena is planned at run time) fails with an error naming the adapter and the limit, and
/// the same compiled graph then runs inputs that fit.
#[test]
fn a_buffer_beyond_the_adapters_limits_is_a_typed_error() {
    let Some(b) = common::backend() else { return };
    let Some(gpu) = gpu() else { return };
    let side = 1usize << 16;
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape(vec![Dim::sym("n"), Dim::Static(1)])));
    let wide = g.expand_to(x, &Shape(vec![Dim::sym("n"), Dim::Static(side)])).unwrap();
    let wide = g.activation(ActivationKind::Tanh, wide).unwrap();
    let total = g.reduce(ReduceOp::Sum, wide, &[0, 1], false).unwrap();
    g.set_outputs(vec![total]).unwrap();
    let mut c = gpu.compile(&g).unwrap();
    let huge = Tensor::from_vec(uniform(side, 3, -1.0, 1.0), &[side, 1]).unwrap();
    let err = c.run(&[("x", &huge)]).expect_err("a 16 GiB arena was planned");
    let msg = err.to_string();
    assert!(msg.contains(b.adapter()) && (msg.contains("max_buffer_size") || msg.contains("max_storage_buffer_binding_size")), "{msg}");
    let small = Tensor::from_vec(vec![0.5f32, -0.25], &[2, 1]).unwrap();
    let got = c.run(&[("x", &small)]).unwrap().remove(0).to_vec::<f32>().unwrap()[0];
    let want = side as f32 * (0.5f32.tanh() + (-0.25f32).tanh());
    assert!((got - want).abs() <= 1e-5 * want.abs(), "{got} vs {want}");
}

#[test]
fn kv_appends_in_place_at_a_run_time_position_and_a_bad_one_is_an_error() {
    if common::backend().is_none() {
        return;
    }
    let Ok(own) = rlx_wgpu::WgpuBackend::new(0) else { return };
    let own = Session::new(std::sync::Arc::new(own));
    let mut g = Graph::new();
    let cache = g.param("cache", TensorType::new(DType::F32, Shape::of(&[2, 8, 4])));
    let rows = input(&mut g, "rows", DType::F32, &[2, 2, 4]);
    let at = input(&mut g, "at", DType::I64, &[1]);
    let y = g.kv_append_at(cache, rows, at, 1).unwrap();
    let s = g.activation(ActivationKind::Tanh, y).unwrap();
    g.set_outputs(vec![s]).unwrap();
    let mut on_cpu = cpu().compile(&g).unwrap();
    let mut on_gpu = own.compile(&g).unwrap();
    assert!(on_gpu.partition().is_none(), "{}", on_gpu.partition().unwrap());
    let c0 = random(&[2, 8, 4], 1, -1.0, 1.0);
    on_cpu.set_param("cache", c0.clone()).unwrap();
    on_gpu.set_param("cache", c0).unwrap();
    for (i, pos) in [0i64, 3, 6].into_iter().enumerate() {
        let r = random(&[2, 2, 4], 10 + i as u64, -1.0, 1.0);
        let p = Tensor::from_vec(vec![pos], &[1]).unwrap();
        let inputs = [("rows", &r), ("at", &p)];
        compare(&on_gpu.run(&inputs).unwrap(), &on_cpu.run(&inputs).unwrap(), F32);
    }
    assert_eq!(on_gpu.param("cache").unwrap().to_vec::<f32>().unwrap(), on_cpu.param("cache").unwrap().to_vec::<f32>().unwrap());
    let r = random(&[2, 2, 4], 20, -1.0, 1.0);
    let p = Tensor::from_vec(vec![7i64], &[1]).unwrap();
    let err = on_gpu.run(&[("rows", &r), ("at", &p)]).expect_err("two rows were written at slot 7 of 8");
    assert!(err.to_string().contains("do not fit at position 7 of a cache of 8"), "{err}");
}
