//! f32 GELU, `x·Φ(x) = ½x·(1 + erf(x/√2))`, and its gradient `ȳ·(Φ(x) + x·φ(x))`, as
//! branch-free arithmetic the compiler vectorises (16 lanes under AVX-512, 8 under AVX2 +
//! FMA, picked at run time), instead of libm `erff` and `expf` calls per element. Against rlx-ir's activation table in float64: absolute error
//! below 3e-7·max(1, |x|); relative error below 5e-7 + 6e-8·x² wherever GELU is a normal f32
//! (the second term from rounding `x²/2` in the exponent of the left tail).
//!
//! One formula covers every `x`: `Φ(−|x|) = ½·erfc(|x|/√2)` by the Chebyshev fit of Numerical
//! Recipes' `erfcc` (`t·e^(−z² + P(t))`, `t = 1/(1 + z/2)`, relative error 1.2e-7 for all
//! `z ≥ 0`), which is `Φ(x)` for negative `x` as is (so the left tail keeps its relative
//! accuracy instead of cancelling in `1 + erf`) and `1 − Φ(x)` for positive `x`.

use super::exp::exp_neg;

/// `P(t)`'s coefficients, constant term first: `erfc z ≈ t·e^(−z² + P(t))`.
const ERFC: [f32; 10] = [
    -1.265_512_2,
    1.000_023_7,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_204,
    1.488_515_9,
    -0.822_152_2,
    0.170_872_77,
];

/// `Φ(x)`, the standard normal distribution function, from `Φ(−|x|) = ½·erfc(|x|/√2)`.
#[inline(always)]
fn phi_cdf(x: f32) -> f32 {
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / z.mul_add(0.5, 1.0);
    let mut p = ERFC[9];
    for c in ERFC[..9].iter().rev() {
        p = p.mul_add(t, *c);
    }
    let left = 0.5 * t * exp_neg(p - 0.5 * x * x);
    if x >= 0.0 {
        1.0 - left
    } else {
        left
    }
}

#[inline(always)]
fn gelu_one(x: f32) -> f32 {
    x * phi_cdf(x)
}

/// `1/√(2π)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// GELU's derivative `Φ(x) + x·φ(x)`, `φ(x) = e^(−x²/2)/√(2π)`.
#[inline(always)]
fn gelu_grad_one(x: f32) -> f32 {
    let pdf = exp_neg(-0.5 * x * x) * FRAC_1_SQRT_2PI;
    x.mul_add(pdf, phi_cdf(x))
}

#[inline(always)]
fn gelu_backward_generic(x: &[f32], dy: &[f32], out: &mut [f32]) {
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(dy) {
        *o = g * gelu_grad_one(v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_backward_avx2(x: &[f32], dy: &[f32], out: &mut [f32]) {
    gelu_backward_generic(x, dy, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn gelu_backward_avx512(x: &[f32], dy: &[f32], out: &mut [f32]) {
    gelu_backward_generic(x, dy, out)
}

/// `out[i] = dy[i]·gelu′(x[i])`: `ActivationBackward` of exact GELU.
pub fn gelu_backward(x: &[f32], dy: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
        // Safety: the CPU has the features the function is compiled for.
        return unsafe { gelu_backward_avx512(x, dy, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // Safety: the CPU has the features the function is compiled for.
        return unsafe { gelu_backward_avx2(x, dy, out) };
    }
    gelu_backward_generic(x, dy, out)
}

#[inline(always)]
fn gelu_slice_generic(y: &mut [f32]) {
    for v in y.iter_mut() {
        *v = gelu_one(*v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_slice_avx2(y: &mut [f32]) {
    gelu_slice_generic(y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn gelu_slice_avx512(y: &mut [f32]) {
    gelu_slice_generic(y)
}

/// `y[i] ← gelu(y[i])` in place.
pub fn gelu_in_place(y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
        // Safety: the CPU has the features the function is compiled for.
        return unsafe { gelu_slice_avx512(y) };
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // Safety: the CPU has the features the function is compiled for.
        return unsafe { gelu_slice_avx2(y) };
    }
    gelu_slice_generic(y)
}

/// `out[i] = gelu(x[i])`.
pub fn gelu(x: &[f32], out: &mut [f32]) {
    out.copy_from_slice(x);
    gelu_in_place(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::elementwise::{table, ActivationKind};

    fn reference(x: f64) -> f64 {
        table::forward(ActivationKind::Gelu, x)
    }

    /// 20 011 points uniform over [−12, 12) from a seeded xorshift stream.
    fn points(seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..20_011)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 24.0
            })
            .collect()
    }

    fn relative_bound(x: f32) -> f64 {
        5e-7 + 6e-8 * (x as f64).powi(2)
    }

    #[test]
    fn matches_the_float64_formula_across_the_range() {
        let mut xs = points(0x9e37_79b9_7f4a_7c15);
        xs.extend([0.0, -0.0, 0.5 * std::f32::consts::SQRT_2, -0.707, 1e-30, -1e-30, 9.0, -9.0, 80.0, -80.0, -200.0]);
        let mut out = vec![0.0; xs.len()];
        gelu(&xs, &mut out);
        let mut plain = xs.clone();
        gelu_slice_generic(&mut plain);
        for ((&x, &y), &p) in xs.iter().zip(&out).zip(&plain) {
            let want = reference(x as f64);
            let err = (y as f64 - want).abs();
            assert!(err <= 3e-7 * (x as f64).abs().max(1.0), "gelu({x}) = {y}, want {want}");
            assert!(want.abs() < f32::MIN_POSITIVE as f64 || err <= relative_bound(x) * want.abs(), "gelu({x}) = {y}, want {want}");
            assert_eq!(y.to_bits(), p.to_bits(), "the vector path differs from the plain one at {x}");
        }
    }

    /// The gradient against rlx-ir's float64 derivative: within 1e-6·max(1, |x|), and within
    /// 1e-6 + 6e-8·x² of the magnitudes of its two terms `Φ(x)` and `x·φ(x)` (they cancel
    /// near its zero, x ≈ −0.75, where no f32 evaluation keeps a relative bound on the sum;
    /// the x² part from rounding `x²/2` in the exponent, as for the forward).
    #[test]
    fn gradient_matches_the_float64_derivative() {
        let mut xs = points(0x2545_f491_4f6c_dd1d);
        xs.extend([0.0, -0.0, -0.7518, 1e-30, 9.0, -9.0, 80.0, -80.0, -200.0]);
        let dy: Vec<f32> = xs.iter().enumerate().map(|(i, _)| 0.5 + (i % 7) as f32 * 0.25).collect();
        let mut out = vec![0.0; xs.len()];
        gelu_backward(&xs, &dy, &mut out);
        let mut plain = vec![0.0; xs.len()];
        gelu_backward_generic(&xs, &dy, &mut plain);
        for (((&x, &g), &got), &p) in xs.iter().zip(&dy).zip(&out).zip(&plain) {
            let want = g as f64 * table::derivative(ActivationKind::Gelu, x as f64);
            let err = (got as f64 - want).abs();
            assert!(err <= 1e-6 * (x as f64).abs().max(1.0) * g as f64, "gelu'({x})·{g} = {got}, want {want}");
            let (xf, cdf) = (x as f64, table::forward(ActivationKind::Gelu, x as f64) / x as f64);
            let terms = if x == 0.0 { 0.5 } else { cdf.abs() + (xf * xf * 0.5).exp().recip() * xf.abs() * 0.398_942_280_401_432_7 };
            // Below f32's normal range the tails stop at e^−87 (as the forward's do).
            let bound = if terms < f32::MIN_POSITIVE as f64 { 1e-35 } else { (1e-6 + 6e-8 * xf * xf) * terms * g as f64 };
            assert!(err <= bound, "gelu'({x})·{g} = {got}, want {want} (against the terms {terms})");
            assert_eq!(got.to_bits(), p.to_bits(), "the vector path differs from the plain one at {x}");
        }
        let mut nan = [0.0];
        gelu_backward(&[f32::NAN], &[1.0], &mut nan);
        assert!(nan[0].is_nan());
    }

    #[test]
    fn left_tail_keeps_relative_accuracy() {
        for x in [-3.0f32, -4.0, -5.0, -6.0, -7.0, -9.0, -12.0] {
            let mut y = [x];
            gelu_in_place(&mut y);
            let want = reference(x as f64);
            assert!(((y[0] as f64 - want) / want).abs() < relative_bound(x), "gelu({x}) = {}, want {want}", y[0]);
        }
    }
}
