//! Time per element of the elementwise activation kernels, their backward kernels and
//! `ElementwiseRegion` chains over 1M f32 (and f64) values, run on the calling thread.
//!
//! `cargo bench -p rlx-cpu --bench activation [-- REPEATS]` prints the median of REPEATS
//! (default 15) runs per case in ns/element; `RAYON_NUM_THREADS=1` keeps it to one core.

use rlx_cpu::kernels::elementwise::{activation, activation_backward};
use rlx_cpu::kernels::fused::elementwise_region;
use rlx_cpu::view::{In, Out};
use rlx_ir::ops::elementwise::{ActivationKind as A, BinaryOp};
use rlx_ir::ops::fused::{ChainStep, ElementwiseRegion, Operand, RegionPrologue, MAX_REGION_INPUTS};
use rlx_ir::DType;
use std::time::Instant;

const N: usize = 1 << 20;

/// Deterministic values in ±`scale`.
fn values(seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn median_ns_per_element(repeats: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..repeats)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e9 / N as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[repeats / 2]
}

fn region(chain: Vec<ChainStep>, num_inputs: u32) -> ElementwiseRegion {
    ElementwiseRegion {
        chain,
        num_inputs,
        scalar_input_mask: 0,
        input_modulus: [0; MAX_REGION_INPUTS],
        prologue: RegionPrologue::None,
        prologue_input: 0,
    }
}

fn main() {
    let repeats = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(15);
    let dims = [N];
    let x64 = values(1, 6.0);
    let g64 = values(2, 1.0);
    let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
    let g32: Vec<f32> = g64.iter().map(|&v| v as f32).collect();
    let mut y32 = vec![0f32; N];
    let mut y64 = vec![0f64; N];
    let f32_in = |v: &[f32]| -> Vec<u8> { bytemuck::cast_slice(v).to_vec() };
    let (xb, gb) = (f32_in(&x32), f32_in(&g32));
    let (xb64, gb64): (Vec<u8>, Vec<u8>) = (bytemuck::cast_slice(&x64).to_vec(), bytemuck::cast_slice(&g64).to_vec());
    let x = In { dtype: DType::F32, dims: &dims, bytes: &xb };
    let g = In { dtype: DType::F32, dims: &dims, bytes: &gb };
    let x_64 = In { dtype: DType::F64, dims: &dims, bytes: &xb64 };
    let g_64 = In { dtype: DType::F64, dims: &dims, bytes: &gb64 };

    for kind in [A::Gelu, A::Silu, A::Tanh, A::Sigmoid, A::GeluApprox, A::Relu, A::Softplus, A::Mish, A::Elu, A::LogSigmoid] {
        let t = median_ns_per_element(repeats, || {
            let mut out = Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut y32) };
            activation(kind, x, &mut out).expect("activation");
        });
        println!("f32 {kind:?}: {t:.3} ns/elem");
    }
    for kind in [A::Gelu, A::Tanh, A::Sigmoid] {
        let t = median_ns_per_element(repeats, || {
            let mut out = Out { dtype: DType::F64, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut y64) };
            activation(kind, x_64, &mut out).expect("activation");
        });
        println!("f64 {kind:?}: {t:.3} ns/elem");
    }
    for kind in [A::Gelu, A::GeluApprox, A::Silu, A::Tanh, A::Mish] {
        let t = median_ns_per_element(repeats, || {
            let mut out = Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut y32) };
            activation_backward(kind, x, g, &mut out).expect("backward");
        });
        println!("f32 backward {kind:?}: {t:.3} ns/elem");
    }
    let t = median_ns_per_element(repeats, || {
        let mut out = Out { dtype: DType::F64, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut y64) };
        activation_backward(A::Gelu, x_64, g_64, &mut out).expect("backward");
    });
    println!("f64 backward Gelu: {t:.3} ns/elem");

    let (i0, i1, s0, s1) = (Operand::Input(0), Operand::Input(1), Operand::Step(0), Operand::Step(1));
    let chains = [
        ("x*g -> Tanh", vec![ChainStep::Binary(BinaryOp::Mul, i0, i1), ChainStep::Activation(A::Tanh, s0)]),
        (
            "x+g -> Sigmoid -> *x",
            vec![ChainStep::Binary(BinaryOp::Add, i0, i1), ChainStep::Activation(A::Sigmoid, s0), ChainStep::Binary(BinaryOp::Mul, s1, i0)],
        ),
        ("x+g -> GeluApprox", vec![ChainStep::Binary(BinaryOp::Add, i0, i1), ChainStep::Activation(A::GeluApprox, s0)]),
        ("x+g -> Gelu", vec![ChainStep::Binary(BinaryOp::Add, i0, i1), ChainStep::Activation(A::Gelu, s0)]),
        ("x*g -> Relu", vec![ChainStep::Binary(BinaryOp::Mul, i0, i1), ChainStep::Activation(A::Relu, s0)]),
    ];
    for (name, chain) in chains {
        let r = region(chain, 2);
        let t = median_ns_per_element(repeats, || {
            let mut out = Out { dtype: DType::F32, dims: &dims, bytes: bytemuck::cast_slice_mut(&mut y32) };
            elementwise_region(&r, &[x, g], &mut out).expect("region");
        });
        println!("region {name}: {t:.3} ns/elem");
    }
}
