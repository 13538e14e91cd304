//! The activation table: `f(x)` and `f′(x)` of every [`ActivationKind`] (OPS.md §3), written
//! once over [`Scalar`]. Backends evaluate it at f32/f64 ([`forward`], [`derivative`]) or
//! generate kernels from its [`Expr`] form ([`forward_expr`], [`derivative_expr`]).
//!
//! The forms are the numerically careful ones: softplus and log-sigmoid as
//! `max(x, 0) ± log1p(e^−|x|)`, the sigmoid from `e^−x` or `e^x` by sign so neither overflows,
//! GELU's `Φ(x)` as `½·erfc(−x/√2)` so its left tail keeps relative accuracy (the CPU's
//! vector GELU computes the same). GELU-tanh keeps PyTorch's `½x·(1 + tanh(…))` and ELU its
//! `eˣ − 1`: both are accurate to `ε·max(1, |x|)` where they cancel.

use super::expr::{Expr, Scalar};
use super::{ActivationKind, CmpOp};
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

/// `√(2/π)`, GELU-tanh's inner scale.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// `1/√(2π)`, the standard normal density at 0.
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `f(x)` of `kind`. Always inlined: with a constant `kind` the caller's loop keeps just
/// that formula.
#[inline(always)]
pub fn forward<T: Scalar>(kind: ActivationKind, x: T) -> T {
    use ActivationKind::*;
    match kind {
        Gelu => T::of(0.5) * x.clone() * two_phi(x),
        GeluApprox => {
            let t = gelu_tanh_inner(x.clone());
            T::of(0.5) * x * (T::of(1.0) + t)
        }
        Silu => x.clone() / (T::of(1.0) + (-x).exp()),
        // NaN passes, as `max(x, 0)` propagates it (`jax.nn.relu`, `torch.relu`).
        Relu => x.select(CmpOp::Lt, &T::of(0.0), || T::of(0.0), || x.clone()),
        Sigmoid => sigmoid(x),
        Tanh => x.tanh(),
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => T::of(1.0) / x.sqrt(),
        Neg => -x,
        Abs => x.abs(),
        Sin => x.sin(),
        Cos => x.cos(),
        Tan => x.tan(),
        Atan => x.atan(),
        Recip => T::of(1.0) / x,
        Round => x.round_even(),
        Floor => x.floor(),
        Ceil => x.ceil(),
        Sign => sign(x),
        Softplus => softplus(x),
        Elu => x.select(CmpOp::Gt, &T::of(0.0), || x.clone(), || x.clone().exp() - T::of(1.0)),
        Erf => x.erf(),
        HardSwish => x.clone() * clamp(x + T::of(3.0), 0.0, 6.0) / T::of(6.0),
        HardSigmoid => clamp(x / T::of(6.0) + T::of(0.5), 0.0, 1.0),
        Mish => x.clone() * softplus(x).tanh(),
        Softsign => x.clone() / (T::of(1.0) + x.abs()),
        LogSigmoid => {
            let m = x.select(CmpOp::Lt, &T::of(0.0), || x.clone(), || T::of(0.0));
            m - (-x.abs()).exp().ln_1p()
        }
    }
}

/// `f′(x)` of `kind` (`ActivationBackward` multiplies it by `ȳ`). Round's is the
/// straight-through 1; the other piecewise-constant kinds give 0.
#[inline(always)]
pub fn derivative<T: Scalar>(kind: ActivationKind, x: T) -> T {
    use ActivationKind::*;
    match kind {
        Gelu => {
            let cdf = T::of(0.5) * two_phi(x.clone());
            let pdf = (-(x.clone() * x.clone()) * T::of(0.5)).exp() * T::of(FRAC_1_SQRT_2PI);
            cdf + x * pdf
        }
        GeluApprox => {
            let t = gelu_tanh_inner(x.clone());
            let k = T::of(SQRT_2_OVER_PI);
            let dt = T::of(1.0) + T::of(0.134145) * x.clone() * x.clone();
            T::of(0.5) * (T::of(1.0) + t.clone()) + T::of(0.5) * x * (T::of(1.0) - t.clone() * t) * k * dt
        }
        Silu => {
            let s = sigmoid(x.clone());
            s.clone() * (T::of(1.0) + x * (T::of(1.0) - s))
        }
        Relu => x.select(CmpOp::Gt, &T::of(0.0), || T::of(1.0), || T::of(0.0)),
        Sigmoid => {
            let s = sigmoid(x);
            s.clone() * (T::of(1.0) - s)
        }
        Tanh => {
            let t = x.tanh();
            T::of(1.0) - t.clone() * t
        }
        Exp => x.exp(),
        Log => T::of(1.0) / x,
        Sqrt => T::of(0.5) / x.sqrt(),
        Rsqrt => T::of(-0.5) / (x.clone() * x.sqrt()),
        Neg => T::of(-1.0),
        Abs => sign(x),
        Sin => x.cos(),
        Cos => -x.sin(),
        Tan => {
            let t = x.tan();
            T::of(1.0) + t.clone() * t
        }
        Atan => T::of(1.0) / (T::of(1.0) + x.clone() * x),
        Recip => T::of(-1.0) / (x.clone() * x),
        Round => T::of(1.0),
        Floor | Ceil | Sign => T::of(0.0),
        Softplus => sigmoid(x),
        Elu => x.select(CmpOp::Gt, &T::of(0.0), || T::of(1.0), || x.clone().exp()),
        Erf => T::of(FRAC_2_SQRT_PI) * (-(x.clone() * x)).exp(),
        HardSwish => x.select(
            CmpOp::Lt,
            &T::of(-3.0),
            || T::of(0.0),
            || x.select(CmpOp::Gt, &T::of(3.0), || T::of(1.0), || (T::of(2.0) * x.clone() + T::of(3.0)) / T::of(6.0)),
        ),
        HardSigmoid => x.clone().abs().select(CmpOp::Lt, &T::of(3.0), || T::of(1.0) / T::of(6.0), || T::of(0.0)),
        Mish => {
            let t = softplus(x.clone()).tanh();
            t.clone() + x.clone() * sigmoid(x) * (T::of(1.0) - t.clone() * t)
        }
        Softsign => {
            let d = T::of(1.0) + x.abs();
            T::of(1.0) / (d.clone() * d)
        }
        LogSigmoid => sigmoid(-x),
    }
}

/// [`forward`] of `kind` as an expression in `x`.
pub fn forward_expr(kind: ActivationKind) -> Expr {
    forward(kind, Expr::X)
}

/// [`derivative`] of `kind` as an expression in `x`.
pub fn derivative_expr(kind: ActivationKind) -> Expr {
    derivative(kind, Expr::X)
}

/// `2Φ(x) = erfc(−x/√2)`.
#[inline(always)]
fn two_phi<T: Scalar>(x: T) -> T {
    (-x * T::of(FRAC_1_SQRT_2)).erfc()
}

/// `tanh(√(2/π)·(x + 0.044715·x³))`.
#[inline(always)]
fn gelu_tanh_inner<T: Scalar>(x: T) -> T {
    (T::of(SQRT_2_OVER_PI) * (x.clone() + T::of(0.044715) * x.clone() * x.clone() * x)).tanh()
}

/// `1/(1 + e^−x)` for `x ≥ 0`, `e^x/(1 + e^x)` below (NaN takes the second form).
#[inline(always)]
fn sigmoid<T: Scalar>(x: T) -> T {
    x.select(
        CmpOp::Ge,
        &T::of(0.0),
        || T::of(1.0) / (T::of(1.0) + (-x.clone()).exp()),
        || {
            let e = x.clone().exp();
            e.clone() / (T::of(1.0) + e)
        },
    )
}

/// `max(x, 0) + log1p(e^−|x|)`.
#[inline(always)]
fn softplus<T: Scalar>(x: T) -> T {
    let m = x.select(CmpOp::Gt, &T::of(0.0), || x.clone(), || T::of(0.0));
    m + (-x.abs()).exp().ln_1p()
}

/// `1`, `−1`, or `x·0` (±0 keeps its sign, NaN stays NaN).
#[inline(always)]
fn sign<T: Scalar>(x: T) -> T {
    x.select(
        CmpOp::Gt,
        &T::of(0.0),
        || T::of(1.0),
        || x.select(CmpOp::Lt, &T::of(0.0), || T::of(-1.0), || x.clone() * T::of(0.0)),
    )
}

/// `x` limited to `[lo, hi]`; NaN passes through.
#[inline(always)]
fn clamp<T: Scalar>(x: T, lo: f64, hi: f64) -> T {
    x.select(
        CmpOp::Lt,
        &T::of(lo),
        || T::of(lo),
        || x.select(CmpOp::Gt, &T::of(hi), || T::of(hi), || x.clone()),
    )
}
