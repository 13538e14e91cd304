//! Elementwise kernels: activations, casts, binary arithmetic, comparisons, select, fma,
//! and the pointwise backward ops (OPS.md §3, §22).

mod cast;
mod exp;
mod gelu;
mod silu;
mod spline;

pub use cast::cast;
pub(crate) use exp::exp_neg;
pub use gelu::{gelu, gelu_backward, gelu_in_place};
pub use silu::silu;
pub use spline::{spline, spline_backward_coeff, spline_backward_x};

use super::real::Real;
use super::{by_float, par_chunks, par_chunks2, par_map, par_map2};
use crate::view::{broadcast_strides, for_each_broadcast, In, Out};
use half::{bf16, f16};
use num_complex::Complex32;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::DType;

/// `f(x)` and `f′(x)` of an activation kind: rlx-ir's activation table, the one definition
/// every backend computes (generic over f32 and f64; a constant kind inlines to its formula).
pub use rlx_ir::ops::elementwise::table::{derivative as act_grad, forward as act};

/// Expands `$body` once per activation kind with `$k` bound to it as a constant, so that
/// `act($k, x)` inlines to that kind's formula inside the loop the body holds.
macro_rules! per_act {
    ($kind:expr, $k:ident => $body:expr) => {{
        use rlx_ir::ops::elementwise::ActivationKind as A;
        per_act!(@arms $kind, $k, $body, [Gelu, GeluApprox, Silu, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt,
            Neg, Abs, Sin, Cos, Tan, Atan, Recip, Round, Floor, Ceil, Sign, Softplus, Elu, Erf, HardSwish,
            HardSigmoid, Mish, Softsign, LogSigmoid])
    }};
    (@arms $kind:expr, $k:ident, $body:expr, [$($name:ident),*]) => {
        match $kind {
            $(A::$name => {
                const $k: A = A::$name;
                $body
            })*
        }
    };
}
pub(crate) use per_act;

pub fn activation(kind: ActivationKind, x: In, out: &mut Out) -> Result<(), String> {
    match x.dtype {
        DType::I8 => int_act::<i8>(kind, x, out),
        DType::I16 => int_act::<i16>(kind, x, out),
        DType::I32 => int_act::<i32>(kind, x, out),
        DType::I64 => int_act::<i64>(kind, x, out),
        DType::C64 if kind == ActivationKind::Neg => {
            par_map(x.get::<Complex32>(), out.get::<Complex32>(), |v| -v);
            Ok(())
        }
        DType::F32 if kind == ActivationKind::Gelu => {
            par_chunks(x.get::<f32>(), out.get::<f32>(), gelu);
            Ok(())
        }
        DType::F32 if kind == ActivationKind::Silu => {
            par_chunks(x.get::<f32>(), out.get::<f32>(), silu);
            Ok(())
        }
        DType::F16 => {
            per_act!(kind, K => par_map(x.get::<f16>(), out.get::<f16>(), |v| f16::from_f32(act(K, v.to_f32()))));
            Ok(())
        }
        DType::BF16 => {
            per_act!(kind, K => par_map(x.get::<bf16>(), out.get::<bf16>(), |v| bf16::from_f32(act(K, v.to_f32()))));
            Ok(())
        }
        _ => by_float!(x.dtype, T => per_act!(kind, K => par_map(x.get::<T>(), out.get::<T>(), |v| act(K, v)))),
    }
}

fn int_act<T>(kind: ActivationKind, x: In, out: &mut Out) -> Result<(), String>
where
    T: bytemuck::Pod + Send + Sync + Ord + Default + num_int::WrappingNeg,
{
    let zero = T::default();
    let f = |v: T| -> T {
        match kind {
            ActivationKind::Neg => v.wrapping_neg(),
            ActivationKind::Abs => if v < zero { v.wrapping_neg() } else { v },
            ActivationKind::Relu => v.max(zero),
            _ => v.signum_like(),
        }
    };
    par_map(x.get::<T>(), out.get::<T>(), f);
    Ok(())
}

/// Integer negation and sign for the integer activations.
mod num_int {
    pub trait WrappingNeg: Copy {
        fn wrapping_neg(self) -> Self;
        fn signum_like(self) -> Self;
    }
    macro_rules! wn {
        ($($t:ty),*) => {$(impl WrappingNeg for $t {
            fn wrapping_neg(self) -> Self { <$t>::wrapping_neg(self) }
            fn signum_like(self) -> Self { <$t>::signum(self) }
        })*};
    }
    wn!(i8, i16, i32, i64);
}

pub fn activation_backward(kind: ActivationKind, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    if x.dtype == DType::F32 && kind == ActivationKind::Gelu {
        par_chunks2(x.get::<f32>(), dy.get::<f32>(), out.get::<f32>(), gelu_backward);
        return Ok(());
    }
    by_float!(x.dtype, T => per_act!(kind, K => par_map2(x.get::<T>(), dy.get::<T>(), out.get::<T>(), |v, g| g * act_grad(K, v))))
}

pub fn relu_backward(x: In, dy: In, out: &mut Out) -> Result<(), String> {
    activation_backward(ActivationKind::Relu, x, dy, out)
}

/// Element-size copy of `src` into `out` (StopGradient, Reshape).
pub fn copy(src: In, out: &mut Out) -> Result<(), String> {
    out.bytes.copy_from_slice(src.bytes);
    Ok(())
}

/// Applies `f` over two broadcast operands of one element type.
fn zip_broadcast<A: bytemuck::Pod + Send + Sync, O: bytemuck::Pod + Send + Sync>(
    a: In,
    b: In,
    out: &mut Out,
    f: impl Fn(A, A) -> O + Sync,
) {
    let (xa, xb) = (a.get::<A>(), b.get::<A>());
    let dims = out.dims;
    let o = out.get::<O>();
    if a.dims == dims && b.dims == dims {
        par_map2(xa, xb, o, f);
    } else if b.numel() == 1 && a.dims == dims {
        let s = xb[0];
        par_map(xa, o, |v| f(v, s));
    } else if a.numel() == 1 && b.dims == dims {
        let s = xa[0];
        par_map(xb, o, |v| f(s, v));
    } else {
        let (sa, sb) = (broadcast_strides(a.dims, dims), broadcast_strides(b.dims, dims));
        for_each_broadcast(dims, [&sa, &sb], |i, [ia, ib]| o[i] = f(xa[ia], xb[ib]));
    }
}

/// [`zip_broadcast`] of a float op, the arithmetic ones each as a loop of its own (a match per
/// element kept the loop from vector registers: a residual add of `[8, 576]` took 5 µs).
fn float_zip<T: Real + bytemuck::Pod + Send + Sync>(op: BinaryOp, a: In, b: In, out: &mut Out) {
    match op {
        BinaryOp::Add => zip_broadcast(a, b, out, |x: T, y: T| x + y),
        BinaryOp::Sub => zip_broadcast(a, b, out, |x: T, y: T| x - y),
        BinaryOp::Mul => zip_broadcast(a, b, out, |x: T, y: T| x * y),
        BinaryOp::Div => zip_broadcast(a, b, out, |x: T, y: T| x / y),
        _ => zip_broadcast(a, b, out, float_binary::<T>(op)),
    }
}

fn float_binary<T: Real>(op: BinaryOp) -> impl Fn(T, T) -> T + Sync {
    move |a: T, b: T| match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => a.max_nan(b),
        BinaryOp::Min => a.min_nan(b),
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Mod => a.rem(b),
        BinaryOp::Atan2 => a.atan2(b),
        _ => unreachable!("inference rejects bitwise ops on floats"),
    }
}

/// Integer arithmetic: wrapping, division and remainder by zero give 0, shifts take the
/// amount modulo the bit width, `Pow` with a negative exponent gives 0 unless the base is ±1.
macro_rules! int_binary {
    ($t:ty, $op:expr) => {
        move |a: $t, b: $t| -> $t {
            match $op {
                BinaryOp::Add => a.wrapping_add(b),
                BinaryOp::Sub => a.wrapping_sub(b),
                BinaryOp::Mul => a.wrapping_mul(b),
                BinaryOp::Div => if b == 0 { 0 } else { a.wrapping_div(b) },
                BinaryOp::Mod => if b == 0 { 0 } else { a.wrapping_rem(b) },
                BinaryOp::Max => a.max(b),
                BinaryOp::Min => a.min(b),
                BinaryOp::BitAnd => a & b,
                BinaryOp::BitOr => a | b,
                BinaryOp::BitXor => a ^ b,
                BinaryOp::Shl => a.wrapping_shl(b as u32),
                BinaryOp::Shr => a.wrapping_shr(b as u32),
                #[allow(unused_comparisons)]
                BinaryOp::Pow => {
                    if b >= 0 {
                        a.wrapping_pow(b as u32)
                    } else if a == 1 {
                        1
                    } else if a as i64 == -1 {
                        if (b as i64) % 2 == 0 { 1 } else { a }
                    } else {
                        0
                    }
                }
                BinaryOp::Atan2 => unreachable!("inference rejects Atan2 on integers"),
            }
        }
    };
}

pub fn binary(op: BinaryOp, a: In, b: In, out: &mut Out) -> Result<(), String> {
    match a.dtype {
        DType::F32 => float_zip::<f32>(op, a, b, out),
        DType::F64 => float_zip::<f64>(op, a, b, out),
        DType::F16 => {
            let f = float_binary::<f32>(op);
            zip_broadcast(a, b, out, |x: f16, y: f16| f16::from_f32(f(x.to_f32(), y.to_f32())))
        }
        DType::BF16 => {
            let f = float_binary::<f32>(op);
            zip_broadcast(a, b, out, |x: bf16, y: bf16| bf16::from_f32(f(x.to_f32(), y.to_f32())))
        }
        DType::I8 => zip_broadcast(a, b, out, int_binary!(i8, op)),
        DType::U8 => zip_broadcast(a, b, out, int_binary!(u8, op)),
        DType::I16 => zip_broadcast(a, b, out, int_binary!(i16, op)),
        DType::I32 => zip_broadcast(a, b, out, int_binary!(i32, op)),
        DType::I64 => zip_broadcast(a, b, out, int_binary!(i64, op)),
        DType::U32 => zip_broadcast(a, b, out, int_binary!(u32, op)),
        DType::U16 => zip_broadcast(a, b, out, int_binary!(u16, op)),
        DType::U64 => zip_broadcast(a, b, out, int_binary!(u64, op)),
        DType::Bool => {
            let f = int_binary!(u8, op);
            zip_broadcast(a, b, out, move |x: u8, y: u8| (f((x != 0) as u8, (y != 0) as u8) != 0) as u8)
        }
        DType::C64 => zip_broadcast(a, b, out, move |x: Complex32, y: Complex32| match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            _ => x / y,
        }),
        d => return Err(format!("{op:?} does not run on {d} (cast it first)")),
    }
    Ok(())
}

fn cmp<T: PartialOrd>(op: CmpOp) -> impl Fn(T, T) -> u8 + Sync {
    move |a: T, b: T| {
        (match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }) as u8
    }
}

pub fn compare(op: CmpOp, a: In, b: In, out: &mut Out) -> Result<(), String> {
    match a.dtype {
        DType::F32 => zip_broadcast(a, b, out, cmp::<f32>(op)),
        DType::F64 => zip_broadcast(a, b, out, cmp::<f64>(op)),
        DType::F16 => zip_broadcast(a, b, out, move |x: f16, y: f16| cmp::<f32>(op)(x.to_f32(), y.to_f32())),
        DType::BF16 => zip_broadcast(a, b, out, move |x: bf16, y: bf16| cmp::<f32>(op)(x.to_f32(), y.to_f32())),
        DType::I8 => zip_broadcast(a, b, out, cmp::<i8>(op)),
        DType::U8 => zip_broadcast(a, b, out, cmp::<u8>(op)),
        DType::Bool => zip_broadcast(a, b, out, move |x: u8, y: u8| cmp::<bool>(op)(x != 0, y != 0)),
        DType::I16 => zip_broadcast(a, b, out, cmp::<i16>(op)),
        DType::I32 => zip_broadcast(a, b, out, cmp::<i32>(op)),
        DType::I64 => zip_broadcast(a, b, out, cmp::<i64>(op)),
        DType::U32 => zip_broadcast(a, b, out, cmp::<u32>(op)),
        DType::U16 => zip_broadcast(a, b, out, cmp::<u16>(op)),
        DType::U64 => zip_broadcast(a, b, out, cmp::<u64>(op)),
        DType::I4 | DType::I2 => zip_broadcast(a, b, out, cmp::<i8>(op)),
        DType::U4 | DType::U2 => zip_broadcast(a, b, out, cmp::<u8>(op)),
        d @ (DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1) => {
            let table = rlx_ir::ops::quant::minifloat::dtype_table(d).ok_or_else(|| format!("compare: no decoder for {d}"))?;
            let f = cmp::<f32>(op);
            zip_broadcast(a, b, out, move |x: u8, y: u8| f(table[usize::from(x)], table[usize::from(y)]))
        }
        DType::C64 => zip_broadcast(a, b, out, move |x: Complex32, y: Complex32| {
            ((x == y) == (op == CmpOp::Eq)) as u8
        }),
    }
    Ok(())
}

/// Whether each element of `c` is non-zero (NaN counts as true, −0.0 as false).
fn truthy(c: In) -> Vec<u8> {
    let mut out = vec![0u8; c.numel()];
    let dims = c.dims;
    let mut o = Out { dtype: DType::Bool, dims, bytes: &mut out };
    let zero = crate::kernels::zero_of(c.dtype);
    compare(CmpOp::Ne, c, In { dtype: c.dtype, dims: &[], bytes: &zero }, &mut o).expect("compare supports every dtype");
    out
}

pub fn select(cond: In, t: In, f: In, out: &mut Out) -> Result<(), String> {
    let owned;
    let c = if matches!(cond.dtype, DType::Bool | DType::U8) {
        cond.bytes
    } else {
        owned = truthy(cond);
        &owned
    };
    let dims = out.dims;
    let (sc, st, sf) = (broadcast_strides(cond.dims, dims), broadcast_strides(t.dims, dims), broadcast_strides(f.dims, dims));
    let size = t.dtype.size();
    let (tb, fb) = (t.bytes, f.bytes);
    let o = &mut *out.bytes;
    for_each_broadcast(dims, [&sc, &st, &sf], |i, [ic, it, jf]| {
        let src = if c[ic] != 0 { &tb[it * size..(it + 1) * size] } else { &fb[jf * size..(jf + 1) * size] };
        o[i * size..(i + 1) * size].copy_from_slice(src);
    });
    Ok(())
}

pub fn fma(a: In, b: In, c: In, out: &mut Out) -> Result<(), String> {
    let dims = out.dims;
    let (sa, sb, sc) = (broadcast_strides(a.dims, dims), broadcast_strides(b.dims, dims), broadcast_strides(c.dims, dims));
    macro_rules! run {
        ($t:ty, $load:expr, $store:expr) => {{
            let (xa, xb, xc) = (a.get::<$t>(), b.get::<$t>(), c.get::<$t>());
            let o = out.get::<$t>();
            for_each_broadcast(dims, [&sa, &sb, &sc], |i, [ia, ib, ic]| {
                o[i] = $store(Real::mul_add($load(xa[ia]), $load(xb[ib]), $load(xc[ic])))
            });
        }};
    }
    match a.dtype {
        DType::F32 => run!(f32, |v: f32| v, |v: f32| v),
        DType::F64 => run!(f64, |v: f64| v, |v: f64| v),
        DType::F16 => run!(f16, |v: f16| v.to_f64(), f16::from_f64),
        DType::BF16 => run!(bf16, |v: bf16| v.to_f64(), bf16::from_f64),
        d => return Err(format!("Fma does not run on {d}")),
    }
    Ok(())
}
