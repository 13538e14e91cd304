//! Element types as the reduce, scan, sort and softmax kernels see them.
//!
//! Each dtype loads into an accumulator type and stores back from it: halves accumulate in
//! f32 (OPS.md §0), f32/f64 in themselves, integers in their own type with wrapping
//! arithmetic (the same result as accumulating wider and truncating), Bool as `bool` (Sum is
//! OR, Prod is AND), C64 as `Complex32`.

use half::{bf16, f16};
use num_complex::Complex32;

/// A Bool element: one byte, non-zero is true.
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Bool(pub u8);

/// An accumulator: the arithmetic the reductions and scans combine with.
pub trait Acc: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `self / n` (the mean of a sum of `n` terms); `0/0` is NaN for floats.
    fn div_count(self, n: usize) -> Self;
}

/// An accumulator with an order, where NaN (the only unordered value) is the extreme of
/// both ends: `max`/`min` propagate it and the sorts place it last.
pub trait OrdAcc: Acc + PartialOrd {
    /// The identity of `max`: −inf, the type's minimum, false.
    const LOWEST: Self;
    /// The identity of `min`: +inf, the type's maximum, true.
    const HIGHEST: Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn is_nan(self) -> bool;

    /// A total order: the usual one, with NaN above everything and NaNs equal.
    fn total_cmp(self, o: Self) -> std::cmp::Ordering {
        match (self.is_nan(), o.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            (false, false) => self.partial_cmp(&o).unwrap_or(std::cmp::Ordering::Equal),
        }
    }
}

/// A stored element and the accumulator it computes in.
pub trait Elem: bytemuck::Pod + Send + Sync {
    type Acc: Acc;
    fn load(self) -> Self::Acc;
    fn store(a: Self::Acc) -> Self;
}

macro_rules! float_acc {
    ($($t:ty),*) => {$(
        impl Acc for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
            fn div_count(self, n: usize) -> Self { self / n as $t }
        }
        impl OrdAcc for $t {
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            // One compare-and-select each (vectorizes): NaN in either operand wins.
            fn max(self, o: Self) -> Self { if o > self || o.is_nan() { o } else { self } }
            fn min(self, o: Self) -> Self { if o < self || o.is_nan() { o } else { self } }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
        }
        impl Elem for $t {
            type Acc = $t;
            fn load(self) -> $t { self }
            fn store(a: $t) -> $t { a }
        }
    )*};
}
float_acc!(f32, f64);

macro_rules! half_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = f32;
            fn load(self) -> f32 { self.to_f32() }
            fn store(a: f32) -> $t { <$t>::from_f32(a) }
        }
    )*};
}
half_elem!(f16, bf16);

macro_rules! int_acc {
    ($($t:ty),*) => {$(
        impl Acc for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn div_count(self, n: usize) -> Self {
                // Inference rejects integer means; this is only a defined answer.
                if n == 0 { 0 } else { self.wrapping_div(n as $t) }
            }
        }
        impl OrdAcc for $t {
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            fn max(self, o: Self) -> Self { Ord::max(self, o) }
            fn min(self, o: Self) -> Self { Ord::min(self, o) }
            fn is_nan(self) -> bool { false }
        }
        impl Elem for $t {
            type Acc = $t;
            fn load(self) -> $t { self }
            fn store(a: $t) -> $t { a }
        }
    )*};
}
int_acc!(i8, u8, i16, i32, i64, u32, u16, u64);

impl Acc for bool {
    const ZERO: Self = false;
    const ONE: Self = true;
    fn add(self, o: Self) -> Self {
        self | o
    }
    fn mul(self, o: Self) -> Self {
        self & o
    }
    fn div_count(self, _: usize) -> Self {
        self
    }
}

impl OrdAcc for bool {
    const LOWEST: Self = false;
    const HIGHEST: Self = true;
    fn max(self, o: Self) -> Self {
        self | o
    }
    fn min(self, o: Self) -> Self {
        self & o
    }
    fn is_nan(self) -> bool {
        false
    }
}

impl Elem for Bool {
    type Acc = bool;
    fn load(self) -> bool {
        self.0 != 0
    }
    fn store(a: bool) -> Bool {
        Bool(a as u8)
    }
}

impl Acc for Complex32 {
    const ZERO: Self = Complex32::new(0.0, 0.0);
    const ONE: Self = Complex32::new(1.0, 0.0);
    fn add(self, o: Self) -> Self {
        self + o
    }
    fn mul(self, o: Self) -> Self {
        self * o
    }
    fn div_count(self, n: usize) -> Self {
        self / n as f32
    }
}

impl Elem for Complex32 {
    type Acc = Complex32;
    fn load(self) -> Complex32 {
        self
    }
    fn store(a: Complex32) -> Complex32 {
        a
    }
}

/// Runs `$body` with `$E` bound to the element type of an ordered dtype (every dtype but
/// C64); `$c64` is the arm for C64.
macro_rules! by_dtype {
    ($dtype:expr, $E:ident => $body:expr, C64 => $c64:expr) => {
        match $dtype {
            rlx_ir::DType::F32 => {
                type $E = f32;
                $body
            }
            rlx_ir::DType::F64 => {
                type $E = f64;
                $body
            }
            rlx_ir::DType::F16 => {
                type $E = half::f16;
                $body
            }
            rlx_ir::DType::BF16 => {
                type $E = half::bf16;
                $body
            }
            rlx_ir::DType::I8 => {
                type $E = i8;
                $body
            }
            rlx_ir::DType::U8 => {
                type $E = u8;
                $body
            }
            rlx_ir::DType::I16 => {
                type $E = i16;
                $body
            }
            rlx_ir::DType::I32 => {
                type $E = i32;
                $body
            }
            rlx_ir::DType::I64 => {
                type $E = i64;
                $body
            }
            rlx_ir::DType::U32 => {
                type $E = u32;
                $body
            }
            rlx_ir::DType::U16 => {
                type $E = u16;
                $body
            }
            rlx_ir::DType::U64 => {
                type $E = u64;
                $body
            }
            rlx_ir::DType::Bool => {
                type $E = $crate::kernels::reduce::elem::Bool;
                $body
            }
            rlx_ir::DType::C64 => $c64,
            d => Err(format!("this kernel does not run on {d} (cast it first)").into()),
        }
    };
}
pub(crate) use by_dtype;

/// The extents before, along and after `axis` of `dims`: every lane along `axis` is
/// `inner`-strided, and there are `outer·inner` of them.
pub fn lanes(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = dims[..axis].iter().product();
    let inner = dims[axis + 1..].iter().product();
    (outer, dims[axis], inner)
}
