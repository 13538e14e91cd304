//! `Real`: the float arithmetic kernels are written once over, for f32 and f64.

pub use rlx_ir::ops::elementwise::expr::Scalar;

/// A float type with the math functions the kernels need: rlx-ir's [`Scalar`] (what the
/// activation table is written over) and the rest.
pub trait Real: Scalar + Copy + Send + Sync + PartialOrd + Default + bytemuck::Pod {
    const ZERO: Self;
    const ONE: Self;
    fn f64(self) -> f64;
    fn atan2(self, o: Self) -> Self;
    fn powf(self, o: Self) -> Self;
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
    ($t:ty) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn f64(self) -> f64 { self as f64 }
            fn atan2(self, o: Self) -> Self { <$t>::atan2(self, o) }
            fn powf(self, o: Self) -> Self { <$t>::powf(self, o) }
            fn rem(self, o: Self) -> Self { self % o }
            fn mul_add(self, a: Self, b: Self) -> Self { <$t>::mul_add(self, a, b) }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }
    };
}
real!(f32);
real!(f64);
