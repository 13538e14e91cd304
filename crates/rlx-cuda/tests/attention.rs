//! Attention, rotary embeddings and the KV-cache append against the CPU backend: every
//! layout, masks by position (causal, sliding window, more queries than keys), by key
//! (float and Bool padding masks, a fully masked batch item) and by bias (broadcast, with
//! −1e9 and −∞ entries), grouped KV heads, softcap and scale, wide values, heads large
//! enough to need more than 48 KiB of shared memory, decode-shaped attention of one query
//! against a cache, and f16/bf16; the tensor-core kernels (f16/bf16 heads of 32, 64, 96 and
//! 128) forward and backward, with lengths off their tiles. The cache append is checked over
//! several runs of a decode loop keeping its state, with its errors. Skips without a device.

mod common;

use common::{agree_native, compare, cpu, f32_input, gpu, random, uniform, Tol};
use rlx_ir::ops::attention::{Attention, AttentionBackward, AttentionBackwardAll, AttentionBwdWrt, MaskKind, Rope, RopeBackward, RopeStyle};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType};
use rlx_runtime::{CompiledGraph, Session, Tensor};

/// The dims of Q (or K/V with `heads` heads and `width` channels each) in `layout`: 4 is
/// `[B, H, S, D]`, 3 `[B, S, H·D]`, 2 `[S, H·D]`.
fn dims(layout: usize, b: usize, heads: usize, s: usize, width: usize) -> Vec<usize> {
    match layout {
        4 => vec![b, heads, s, width],
        3 => vec![b, s, heads * width],
        _ => vec![s, heads * width],
    }
}

/// One attention case.
#[derive(Clone)]
struct Case {
    layout: usize,
    b: usize,
    heads: usize,
    kv_heads: usize,
    s_q: usize,
    s_k: usize,
    d: usize,
    dv: usize,
    mask: MaskKind,
    /// The mask or bias input's dims and dtype, when the mask takes one.
    extra: Option<(Vec<usize>, DType)>,
    scale: Option<f32>,
    softcap: Option<f32>,
    dtype: DType,
}

impl Case {
    fn new(layout: usize, (b, heads, kv_heads): (usize, usize, usize), (s_q, s_k): (usize, usize), (d, dv): (usize, usize), mask: MaskKind) -> Case {
        Case { layout, b, heads, kv_heads, s_q, s_k, d, dv, mask, extra: None, scale: None, softcap: None, dtype: DType::F32 }
    }

    /// Runs the case on both backends and compares.
    fn check(&self, gpu: &Session) {
        let mut g = Graph::new();
        let qd = dims(self.layout, self.b, self.heads, self.s_q, self.d);
        let kd = dims(self.layout, self.b, self.kv_heads, self.s_k, self.d);
        let vd = dims(self.layout, self.b, self.kv_heads, self.s_k, self.dv);
        let mut vals = vec![f32_input(&mut g, "q", &qd), f32_input(&mut g, "k", &kd), f32_input(&mut g, "v", &vd)];
        if self.dtype != DType::F32 {
            vals = vals.into_iter().map(|v| g.cast(v, self.dtype).unwrap()).collect();
        }
        let seed = (self.s_q * 1000 + self.s_k * 10 + self.d) as u64;
        let mut inputs = vec![("q", random(&qd, seed, -2.0, 2.0)), ("k", random(&kd, seed + 1, -2.0, 2.0)), ("v", random(&vd, seed + 2, -1.0, 1.0))];
        let extra = self.extra.as_ref().map(|(ed, dtype)| {
            let m = f32_input(&mut g, "mask", ed);
            let n = ed.iter().product();
            let values: Vec<f32> = match self.mask {
                // Keep about two keys in three; batch item 0 keeps none (the mean of V).
                MaskKind::Custom => uniform(n, seed + 3, 0.0, 1.0)
                    .into_iter()
                    .enumerate()
                    .map(|(i, u)| if ed.len() == 2 && i < ed[1] { 0.0 } else { (u < 0.67) as u8 as f32 })
                    .collect(),
                // Small biases, some keys hidden by −1e9 or −∞.
                _ => uniform(n, seed + 4, -1.0, 1.0)
                    .into_iter()
                    .enumerate()
                    .map(|(i, u)| match i % 11 {
                        3 => -1e9,
                        7 => f32::NEG_INFINITY,
                        _ => u,
                    })
                    .collect(),
            };
            inputs.push(("mask", Tensor::from_vec(values, ed).unwrap()));
            if *dtype == DType::F32 {
                m
            } else {
                g.cast(m, *dtype).unwrap()
            }
        });
        let v_head_dim = (self.dv != self.d).then_some(self.dv);
        let attrs = Attention { num_heads: self.heads, head_dim: self.d, v_head_dim, mask_kind: self.mask, score_scale: self.scale, attn_logit_softcap: self.softcap };
        let y = g.attention(attrs, vals[0], vals[1], vals[2], extra).unwrap();
        let y = if self.dtype == DType::F32 { y } else { g.cast(y, DType::F32).unwrap() };
        g.set_outputs(vec![y]).unwrap();
        let tol = if self.dtype == DType::F32 { Tol::norm(1e-5) } else { Tol::norm(2e-2) };
        agree_native(gpu, &g, &inputs, tol, &[OpKind::Attention]);
    }
}

#[test]
fn attention_in_every_layout_with_positional_masks() {
    let Some(gpu) = gpu() else { return };
    for layout in [4, 3, 2] {
        let b = if layout == 2 { 1 } else { 2 };
        for mask in [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(5)] {
            // Equal lengths over two key tiles; more keys than queries; more queries than keys
            // (the first rows of a causal mask keep no key).
            for (s_q, s_k) in [(37, 37), (5, 70), (20, 9)] {
                Case::new(layout, (b, 4, 4), (s_q, s_k), (16, 16), mask).check(&gpu);
            }
        }
    }
}

#[test]
fn grouped_heads_wide_values_softcap_and_scale() {
    let Some(gpu) = gpu() else { return };
    for layout in [4, 3] {
        Case::new(layout, (2, 8, 2), (19, 41), (16, 16), MaskKind::Causal).check(&gpu);
        Case::new(layout, (1, 6, 1), (8, 8), (24, 40), MaskKind::None).check(&gpu);
    }
    let mut c = Case::new(4, (1, 4, 2), (12, 50), (32, 32), MaskKind::Causal);
    c.softcap = Some(5.0);
    c.scale = Some(0.3);
    c.check(&gpu);
    // Odd head widths, one query per block.
    Case::new(3, (3, 3, 3), (1, 33), (7, 5), MaskKind::None).check(&gpu);
}

#[test]
fn key_masks_and_biases() {
    let Some(gpu) = gpu() else { return };
    for layout in [4, 3] {
        for dtype in [DType::F32, DType::Bool] {
            let mut c = Case::new(layout, (3, 4, 2), (9, 45), (16, 16), MaskKind::Custom);
            c.extra = Some((vec![3, 45], dtype));
            c.check(&gpu);
        }
        for bias in [vec![2, 4, 9, 45], vec![2, 1, 9, 45], vec![45], vec![9, 1]] {
            let mut c = Case::new(layout, (2, 4, 4), (9, 45), (16, 16), MaskKind::Bias);
            c.extra = Some((bias, DType::F32));
            c.check(&gpu);
        }
    }
    let mut c = Case::new(4, (1, 2, 2), (6, 40), (16, 16), MaskKind::Bias);
    c.extra = Some((vec![6, 40], DType::F16));
    c.check(&gpu);
}

#[test]
fn decode_against_a_long_cache_and_large_heads() {
    let Some(gpu) = gpu() else { return };
    // One query row against 300 cached keys, grouped; then a bias hiding the unwritten slots.
    Case::new(4, (2, 8, 2), (1, 300), (64, 64), MaskKind::Causal).check(&gpu);
    Case::new(3, (1, 4, 4), (1, 1000), (32, 32), MaskKind::None).check(&gpu);
    let mut c = Case::new(4, (1, 4, 4), (1, 257), (16, 16), MaskKind::Bias);
    c.extra = Some((vec![1, 1, 1, 257], DType::F32));
    c.check(&gpu);
    // Heads of 128 (under 48 KiB of shared memory) and 256 (over it).
    Case::new(4, (1, 2, 2), (40, 40), (128, 128), MaskKind::Causal).check(&gpu);
    Case::new(4, (1, 2, 1), (17, 70), (256, 256), MaskKind::Causal).check(&gpu);
}

#[test]
fn attention_in_halves() {
    let Some(gpu) = gpu() else { return };
    for dtype in [DType::F16, DType::BF16] {
        let mut c = Case::new(4, (2, 4, 2), (33, 33), (64, 64), MaskKind::Causal);
        c.dtype = dtype;
        c.check(&gpu);
        let mut c = Case::new(3, (1, 4, 4), (1, 129), (32, 32), MaskKind::None);
        c.dtype = dtype;
        c.check(&gpu);
    }
}

#[test]
fn tensor_core_attention_in_halves() {
    let Some(gpu) = gpu() else { return };
    // Heads of 32 to 128 in f16/bf16 masked by position or by key run the tensor-core kernels: lengths
    // off the 128-row and 64-key tiles, more keys than queries, grouped heads, every layout;
    // more queries than keys with a causal mask (rows keeping no key) take the scalar kernel.
    for dtype in [DType::BF16, DType::F16] {
        for d in [32, 64, 96, 128] {
            for mask in [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(37)] {
                for (layout, heads, s_q, s_k) in [(4, (2, 4, 4), 200, 200), (3, (2, 4, 2), 77, 301), (2, (1, 6, 3), 129, 129), (4, (1, 2, 1), 1, 90)] {
                    let mut c = Case::new(layout, heads, (s_q, s_k), (d, d), mask);
                    c.dtype = dtype;
                    c.check(&gpu);
                }
            }
            let mut c = Case::new(4, (1, 2, 2), (150, 60), (d, d), MaskKind::Causal);
            c.dtype = dtype;
            c.check(&gpu);
            // Key masks (BERT's padding), f32 or bool; batch item 0 keeps no key.
            for (layout, heads, s, mask_dtype) in [(4, (3, 4, 2), 130, DType::F32), (3, (2, 2, 2), 77, DType::Bool)] {
                let mut c = Case::new(layout, heads, (s, s), (d, d), MaskKind::Custom);
                c.extra = Some((vec![heads.0, s], mask_dtype));
                c.dtype = dtype;
                c.check(&gpu);
            }
        }
    }
    let mut c = Case::new(4, (2, 4, 2), (140, 140), (64, 64), MaskKind::Causal);
    c.dtype = DType::BF16;
    c.softcap = Some(5.0);
    c.scale = Some(0.3);
    c.check(&gpu);
}

/// `AttentionBackwardAll` (or `AttentionBackward` of input `wrt`) over f32 inputs cast to
/// `dtype`, on the GPU against the CPU.
fn check_backward(gpu: &Session, layout: usize, (b, heads): (usize, usize), (s_q, s_k, d): (usize, usize, usize), mask: MaskKind, dtype: DType, wrt: Option<AttentionBwdWrt>) {
    let mut g = Graph::new();
    let qd = dims(layout, b, heads, s_q, d);
    let kd = dims(layout, b, heads, s_k, d);
    let names = ["q", "k", "v", "dy"];
    let shapes = [&qd, &kd, &kd, &qd];
    let vals: Vec<_> = names.iter().zip(shapes).map(|(n, dims)| {
        let x = f32_input(&mut g, n, dims);
        g.cast(x, dtype).unwrap()
    }).collect();
    let grads = match wrt {
        None => g.attention_backward_all(AttentionBackwardAll { num_heads: heads, head_dim: d, mask_kind: mask }, vals[0], vals[1], vals[2], vals[3], None).unwrap(),
        Some(wrt) => vec![g.attention_backward(AttentionBackward { num_heads: heads, head_dim: d, mask_kind: mask, wrt }, vals[0], vals[1], vals[2], vals[3], None).unwrap()],
    };
    let outs = grads.into_iter().map(|v| g.cast(v, DType::F32).unwrap()).collect();
    g.set_outputs(outs).unwrap();
    let seed = (s_q * 1000 + s_k * 10 + d + layout) as u64;
    let inputs: Vec<(&str, Tensor)> = names.iter().zip(shapes).enumerate().map(|(i, (n, dims))| (*n, random(dims, seed + i as u64, -1.5, 1.5))).collect();
    let kind = if wrt.is_some() { OpKind::AttentionBackward } else { OpKind::AttentionBackwardAll };
    agree_native(gpu, &g, &inputs, Tol::norm(2e-2), &[kind]);
}

#[test]
fn tensor_core_attention_gradients() {
    let Some(gpu) = gpu() else { return };
    // Lengths off the 64-row tiles, more keys than queries, and more queries than keys
    // (under a causal mask the first rows keep no key: uniform weights, dV only).
    for dtype in [DType::BF16, DType::F16] {
        for d in [32, 64, 96, 128] {
            for mask in [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(29)] {
                for (layout, s_q, s_k) in [(4, 150, 150), (3, 70, 133), (4, 133, 70), (2, 1, 65)] {
                    let b = if layout == 2 { 1 } else { 2 };
                    check_backward(&gpu, layout, (b, 3), (s_q, s_k, d), mask, dtype, None);
                }
            }
        }
    }
    for wrt in [AttentionBwdWrt::Query, AttentionBwdWrt::Key, AttentionBwdWrt::Value] {
        check_backward(&gpu, 4, (1, 2), (96, 96, 64), MaskKind::Causal, DType::BF16, Some(wrt));
    }
}

/// Attention and its gradients over the same inputs in one graph, as a training step runs
/// them: where cuDNN takes the pair, compiling makes the backward read the forward's output and
/// log-sum-exp (`saved`); either way every output agrees with the CPU.
#[test]
fn attention_and_its_gradients_in_one_graph() {
    let Some(gpu) = gpu() else { return };
    for (layout, b, heads, s, d, mask) in [(4, 2, 3, 150, 64, MaskKind::Causal), (3, 2, 2, 77, 128, MaskKind::None), (2, 1, 4, 96, 32, MaskKind::Causal)] {
        let mut g = Graph::new();
        let xd = dims(layout, b, heads, s, d);
        let names = ["q", "k", "v", "dy"];
        let vals: Vec<_> = names.iter().map(|n| {
            let x = f32_input(&mut g, n, &xd);
            g.cast(x, DType::BF16).unwrap()
        }).collect();
        let y = g.attention(Attention::new(heads, d, mask), vals[0], vals[1], vals[2], None).unwrap();
        let grads = g.attention_backward_all(AttentionBackwardAll { num_heads: heads, head_dim: d, mask_kind: mask }, vals[0], vals[1], vals[2], vals[3], None).unwrap();
        let outs = [vec![y], grads].concat().into_iter().map(|v| g.cast(v, DType::F32).unwrap()).collect();
        g.set_outputs(outs).unwrap();
        let inputs: Vec<(&str, Tensor)> = names.iter().enumerate().map(|(i, n)| (*n, random(&xd, 77 + i as u64, -1.5, 1.5))).collect();
        agree_native(&gpu, &g, &inputs, Tol::norm(2e-2), &[OpKind::Attention, OpKind::AttentionBackwardAll]);
    }
}

/// `cos`/`sin` tables `[s, w]` (or flat, `w` per row) of angles `p·θ_i` for the first
/// `w` (at most `n_rot/2` distinct) frequencies.
fn tables(s: usize, w: usize, flat: bool) -> (Tensor, Tensor) {
    let angle = |p: usize, i: usize| p as f64 * 10000f64.powf(-(2.0 * (i % w) as f64) / (2 * w) as f64);
    let cos: Vec<f32> = (0..s * w).map(|e| angle(e / w, e % w).cos() as f32).collect();
    let sin: Vec<f32> = (0..s * w).map(|e| angle(e / w, e % w).sin() as f32).collect();
    let d: Vec<usize> = if flat { vec![s * w] } else { vec![s, w] };
    (Tensor::from_vec(cos, &d).unwrap(), Tensor::from_vec(sin, &d).unwrap())
}

#[test]
fn rope_in_both_styles_partial_and_inverse() {
    let Some(gpu) = gpu() else { return };
    // (x dims, head_dim, n_rot, table width, flat table)
    let cases: [(&[usize], usize, usize, usize, bool); 5] = [
        (&[2, 7, 4 * 16], 16, 16, 8, false),
        (&[2, 7, 4, 16], 16, 8, 16, false),
        (&[9, 3 * 12], 12, 12, 6, true),
        (&[1, 5, 2 * 10], 10, 6, 3, false),
        (&[3, 40, 8 * 64], 64, 64, 64, false),
    ];
    for (x_dims, head_dim, n_rot, w, flat) in cases {
        let s = if x_dims.len() == 2 { x_dims[0] } else { x_dims[1] };
        for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
            for dtype in [DType::F32, DType::BF16] {
                let (cos, sin) = tables(s + 2, w, flat);
                let mut g = Graph::new();
                let x = f32_input(&mut g, "x", x_dims);
                let c = f32_input(&mut g, "cos", cos.shape());
                let sn = f32_input(&mut g, "sin", sin.shape());
                let x = if dtype == DType::F32 { x } else { g.cast(x, dtype).unwrap() };
                let y = g.rope(Rope { head_dim, n_rot, style }, x, c, sn).unwrap();
                let dx = g.rope_backward(RopeBackward { head_dim, n_rot, style }, y, c, sn).unwrap();
                let outs = [y, dx].map(|v| if dtype == DType::F32 { v } else { g.cast(v, DType::F32).unwrap() });
                g.set_outputs(outs.to_vec()).unwrap();
                let inputs = [("x", random(x_dims, 30, -2.0, 2.0)), ("cos", cos), ("sin", sin)];
                // A bf16 rotation undone from its rounded result errs by the rounding of its
                // input's magnitude, not of a small result: normwise.
                let tol = if dtype == DType::F32 { Tol::rel(1e-6) } else { Tol::norm(2e-2) };
                agree_native(&gpu, &g, &inputs, tol, &[OpKind::Rope, OpKind::RopeBackward]);
            }
        }
    }
}

/// Cache `[2, CAP, 3]` (heads, capacity, width), appended along axis 1.
const CAP: usize = 8;

/// `KvAppend(cache, rows, at)` with the cache a parameter, and a sum reading the cache it
/// aliases, compiled on `session`.
fn decode_step(session: &Session) -> CompiledGraph {
    let mut g = Graph::new();
    let cache = g.param("cache", TensorType::of(DType::F32, &[2, CAP, 3]));
    let rows = g.input("rows", TensorType::new(DType::F32, Shape(vec![2.into(), rlx_ir::Dim::sym("S"), 3.into()])));
    let at = g.input("at", TensorType::of(DType::I64, &[1]));
    let all = g.kv_append_at(cache, rows, at, 1).unwrap();
    let total = g.reduce(ReduceOp::Sum, all, &[0, 1, 2], false).unwrap();
    g.set_outputs(vec![all, total]).unwrap();
    let mut c = session.compile(&g).unwrap();
    c.set_param("cache", Tensor::zeros(DType::F32, &[2, CAP, 3])).unwrap();
    c
}

#[test]
fn kv_append_keeps_its_state_across_runs() {
    let Some(gpu) = gpu() else { return };
    let (mut on_gpu, mut on_cpu) = (decode_step(&gpu), decode_step(&cpu()));
    assert!(on_gpu.partition().is_none(), "part of the decode step ran on the host");
    assert!(on_gpu.report().count(OpKind::KvAppend, rlx_opt::Outcome::Native) > 0);
    for (step, (at, s)) in [(0usize, 3usize), (3, 1), (4, 2), (2, 1), (6, 2)].into_iter().enumerate() {
        let rows = random(&[2, s, 3], step as u64 + 40, -1.0, 1.0);
        let at = Tensor::from_vec(vec![at as i64], &[1]).unwrap();
        let inputs = [("rows", &rows), ("at", &at)];
        let (got, want) = (on_gpu.run(&inputs).unwrap(), on_cpu.run(&inputs).unwrap());
        assert_eq!(got[0], want[0], "the cache after step {step}");
        compare(&got[1..], &want[1..], Tol::rel(1e-5));
        assert_eq!(on_gpu.param("cache").unwrap(), on_cpu.param("cache").unwrap(), "the state after step {step}");
    }
    // Rows that do not fit, or a negative position, fail and leave the state.
    let before = on_gpu.param("cache").unwrap();
    let two = random(&[2, 2, 3], 50, -1.0, 1.0);
    let e = on_gpu.run(&[("rows", &two), ("at", &Tensor::from_vec(vec![CAP as i64 - 1], &[1]).unwrap())]).unwrap_err().to_string();
    assert!(e.contains("2 steps at position 7 overflow the cache capacity 8"), "{e}");
    let one = random(&[2, 1, 3], 51, -1.0, 1.0);
    let e = on_gpu.run(&[("rows", &one), ("at", &Tensor::from_vec(vec![-1i64], &[1]).unwrap())]).unwrap_err().to_string();
    assert!(e.contains("the cache position -1 is negative"), "{e}");
    assert_eq!(on_gpu.param("cache").unwrap(), before);
    on_gpu.run(&[("rows", &one), ("at", &Tensor::from_vec(vec![7i64], &[1]).unwrap())]).expect("the report clears after the error");
}

#[test]
fn kv_append_at_a_fixed_position_and_into_an_input_cache() {
    let Some(gpu) = gpu() else { return };
    // A parameter cache written at pos 5, returning the prefix ..6.
    let mut g = Graph::new();
    let cache = g.param("cache", TensorType::of(DType::F32, &[2, CAP, 3]));
    let row = f32_input(&mut g, "row", &[2, 1, 3]);
    let y = g.kv_append(cache, row, 1, 5).unwrap();
    g.set_outputs(vec![y]).unwrap();
    let (mut on_gpu, mut on_cpu) = (gpu.compile(&g).unwrap(), cpu().compile(&g).unwrap());
    let init = random(&[2, CAP, 3], 60, -1.0, 1.0);
    on_gpu.set_param("cache", init.clone()).unwrap();
    on_cpu.set_param("cache", init).unwrap();
    let row = random(&[2, 1, 3], 61, -1.0, 1.0);
    let (got, want) = (on_gpu.run(&[("row", &row)]).unwrap(), on_cpu.run(&[("row", &row)]).unwrap());
    assert_eq!(got, want);
    assert_eq!(on_gpu.param("cache").unwrap(), on_cpu.param("cache").unwrap());
    // Caches that are inputs: written into the output, at a run-time or a fixed position.
    let mut g = Graph::new();
    let cache = f32_input(&mut g, "cache", &[3, CAP, 2, 4]);
    let rows = f32_input(&mut g, "rows", &[3, 2, 2, 4]);
    let row = f32_input(&mut g, "row", &[3, 1, 2, 4]);
    let at = g.input("at", TensorType::of(DType::I64, &[1]));
    let outs = vec![g.kv_append_at(cache, rows, at, 1).unwrap(), g.kv_append(cache, row, 1, 3).unwrap()];
    g.set_outputs(outs).unwrap();
    let inputs = [
        ("cache", random(&[3, CAP, 2, 4], 62, -1.0, 1.0)),
        ("rows", random(&[3, 2, 2, 4], 63, -1.0, 1.0)),
        ("row", random(&[3, 1, 2, 4], 64, -1.0, 1.0)),
        ("at", Tensor::from_vec(vec![5i64], &[1]).unwrap()),
    ];
    agree_native(&gpu, &g, &inputs, Tol::rel(0.0), &[OpKind::KvAppend]);
}
