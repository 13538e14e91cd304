//! `Real`: the float arithmetic kernels are written once over, for f32 and f64.

use std::ops::{Add, Div, Mul, Neg, Sub};

/// A float type with the math functions the kernels need.
pub trait Real:
    Copy + Send + Sync + PartialOrd + Default + bytemuck::Pod
    + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    fn of(v: f64) -> Self;
    fn f64(self) -> f64;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn atan(self) -> Self;
    fn atan2(self, o: Self) -> Self;
    fn powf(self, o: Self) -> Self;
    fn abs(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_even(self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn mul_add(self, a: Self, b: Self) -> Self;
    fn is_nan(self) -> bool;
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            Self::of(f64::NAN)
        } else if self >= o {
            self
        } else {
            o
        }
    }
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            Self::of(f64::NAN)
        } else if self <= o {
            self
        } else {
            o
        }
    }
}

macro_rules! real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn of(v: f64) -> Self { v as $t }
            fn f64(self) -> f64 { self as f64 }
            fn exp(self) -> Self { <$t>::exp(self) }
            fn ln(self) -> Self { <$t>::ln(self) }
            fn ln_1p(self) -> Self { <$t>::ln_1p(self) }
            fn sqrt(self) -> Self { <$t>::sqrt(self) }
            fn tanh(self) -> Self { <$t>::tanh(self) }
            fn erf(self) -> Self { $erf(self) }
            fn sin(self) -> Self { <$t>::sin(self) }
            fn cos(self) -> Self { <$t>::cos(self) }
            fn tan(self) -> Self { <$t>::tan(self) }
            fn atan(self) -> Self { <$t>::atan(self) }
            fn atan2(self, o: Self) -> Self { <$t>::atan2(self, o) }
            fn powf(self, o: Self) -> Self { <$t>::powf(self, o) }
            fn abs(self) -> Self { <$t>::abs(self) }
            fn floor(self) -> Self { <$t>::floor(self) }
            fn ceil(self) -> Self { <$t>::ceil(self) }
            fn round_even(self) -> Self { <$t>::round_ties_even(self) }
            fn rem(self, o: Self) -> Self { self % o }
            fn mul_add(self, a: Self, b: Self) -> Self { <$t>::mul_add(self, a, b) }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }
    };
}
real!(f32, libm::erff);
real!(f64, libm::erf);
