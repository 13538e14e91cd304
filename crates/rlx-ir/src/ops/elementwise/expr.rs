//! A scalar expression language in one variable, and [`Scalar`]: the arithmetic the
//! activation table is written over, so one formula runs on f32 or f64 or records an [`Expr`].

use super::CmpOp;
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::rc::Rc;

/// The one-argument functions of [`Expr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    Neg,
    Abs,
    Exp,
    /// Natural logarithm.
    Ln,
    /// `ln(1 + x)`, accurate for small `x`.
    Ln1p,
    Sqrt,
    Tanh,
    Erf,
    /// `1 − erf x`, accurate where that is small.
    Erfc,
    Sin,
    Cos,
    Tan,
    Atan,
    Floor,
    Ceil,
    /// Nearest integer, ties to even.
    RoundEven,
}

/// The two-operand arithmetic of [`Expr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

/// A pure function of the variable `x`; subtrees are shared, so cloning is cheap.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    X,
    /// A constant, rounded to the evaluating type (as `Scalar::of`).
    Const(f64),
    Unary(Func, Rc<Expr>),
    Binary(Arith, Rc<Expr>, Rc<Expr>),
    /// `if lhs op rhs { then } else { otherwise }`; a comparison with NaN is false but for `Ne`.
    Select { op: CmpOp, lhs: Rc<Expr>, rhs: Rc<Expr>, then: Rc<Expr>, otherwise: Rc<Expr> },
}

impl Expr {
    /// The value at `x`, in `T`'s arithmetic (operation for operation what the generic
    /// formula that recorded this expression computes for `T`).
    pub fn eval<T: Scalar>(&self, x: T) -> T {
        match self {
            Expr::X => x,
            Expr::Const(v) => T::of(*v),
            Expr::Unary(f, a) => f.apply(a.eval(x)),
            Expr::Binary(op, a, b) => {
                let (a, b) = (a.eval(x.clone()), b.eval(x));
                match op {
                    Arith::Add => a + b,
                    Arith::Sub => a - b,
                    Arith::Mul => a * b,
                    Arith::Div => a / b,
                }
            }
            Expr::Select { op, lhs, rhs, then, otherwise } => {
                let (l, r) = (lhs.eval(x.clone()), rhs.eval(x.clone()));
                l.select(*op, &r, || then.eval(x.clone()), || otherwise.eval(x.clone()))
            }
        }
    }
}

impl Func {
    /// `self(x)` in `T`'s arithmetic.
    pub fn apply<T: Scalar>(self, x: T) -> T {
        match self {
            Func::Neg => -x,
            Func::Abs => x.abs(),
            Func::Exp => x.exp(),
            Func::Ln => x.ln(),
            Func::Ln1p => x.ln_1p(),
            Func::Sqrt => x.sqrt(),
            Func::Tanh => x.tanh(),
            Func::Erf => x.erf(),
            Func::Erfc => x.erfc(),
            Func::Sin => x.sin(),
            Func::Cos => x.cos(),
            Func::Tan => x.tan(),
            Func::Atan => x.atan(),
            Func::Floor => x.floor(),
            Func::Ceil => x.ceil(),
            Func::RoundEven => x.round_even(),
        }
    }
}

/// A number the activation formulas are written over: f32 and f64 compute, [`Expr`] records.
pub trait Scalar:
    Clone + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    /// The constant `v`, rounded to the type.
    fn of(v: f64) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn erfc(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn atan(self) -> Self;
    fn abs(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_even(self) -> Self;
    /// `if self op rhs { then() } else { otherwise() }`: numbers run one branch, an [`Expr`]
    /// records both.
    fn select(&self, op: CmpOp, rhs: &Self, then: impl FnOnce() -> Self, otherwise: impl FnOnce() -> Self) -> Self;
}

macro_rules! float_scalar {
    ($t:ty, $erf:path, $erfc:path) => {
        impl Scalar for $t {
            #[inline]
            fn of(v: f64) -> Self { v as $t }
            #[inline]
            fn exp(self) -> Self { <$t>::exp(self) }
            #[inline]
            fn ln(self) -> Self { <$t>::ln(self) }
            #[inline]
            fn ln_1p(self) -> Self { <$t>::ln_1p(self) }
            #[inline]
            fn sqrt(self) -> Self { <$t>::sqrt(self) }
            #[inline]
            fn tanh(self) -> Self { <$t>::tanh(self) }
            #[inline]
            fn erf(self) -> Self { $erf(self) }
            #[inline]
            fn erfc(self) -> Self { $erfc(self) }
            #[inline]
            fn sin(self) -> Self { <$t>::sin(self) }
            #[inline]
            fn cos(self) -> Self { <$t>::cos(self) }
            #[inline]
            fn tan(self) -> Self { <$t>::tan(self) }
            #[inline]
            fn atan(self) -> Self { <$t>::atan(self) }
            #[inline]
            fn abs(self) -> Self { <$t>::abs(self) }
            #[inline]
            fn floor(self) -> Self { <$t>::floor(self) }
            #[inline]
            fn ceil(self) -> Self { <$t>::ceil(self) }
            #[inline]
            fn round_even(self) -> Self { <$t>::round_ties_even(self) }
            #[inline(always)]
            fn select(&self, op: CmpOp, rhs: &Self, then: impl FnOnce() -> Self, otherwise: impl FnOnce() -> Self) -> Self {
                let holds = match op {
                    CmpOp::Eq => self == rhs,
                    CmpOp::Ne => self != rhs,
                    CmpOp::Lt => self < rhs,
                    CmpOp::Le => self <= rhs,
                    CmpOp::Gt => self > rhs,
                    CmpOp::Ge => self >= rhs,
                };
                if holds { then() } else { otherwise() }
            }
        }
    };
}
float_scalar!(f32, libm::erff, libm::erfcf);
float_scalar!(f64, libm::erf, libm::erfc);

impl Expr {
    fn unary(f: Func, a: Expr) -> Expr {
        Expr::Unary(f, Rc::new(a))
    }

    fn binary(op: Arith, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Rc::new(a), Rc::new(b))
    }
}

impl Scalar for Expr {
    fn of(v: f64) -> Self {
        Expr::Const(v)
    }
    fn exp(self) -> Self {
        Expr::unary(Func::Exp, self)
    }
    fn ln(self) -> Self {
        Expr::unary(Func::Ln, self)
    }
    fn ln_1p(self) -> Self {
        Expr::unary(Func::Ln1p, self)
    }
    fn sqrt(self) -> Self {
        Expr::unary(Func::Sqrt, self)
    }
    fn tanh(self) -> Self {
        Expr::unary(Func::Tanh, self)
    }
    fn erf(self) -> Self {
        Expr::unary(Func::Erf, self)
    }
    fn erfc(self) -> Self {
        Expr::unary(Func::Erfc, self)
    }
    fn sin(self) -> Self {
        Expr::unary(Func::Sin, self)
    }
    fn cos(self) -> Self {
        Expr::unary(Func::Cos, self)
    }
    fn tan(self) -> Self {
        Expr::unary(Func::Tan, self)
    }
    fn atan(self) -> Self {
        Expr::unary(Func::Atan, self)
    }
    fn abs(self) -> Self {
        Expr::unary(Func::Abs, self)
    }
    fn floor(self) -> Self {
        Expr::unary(Func::Floor, self)
    }
    fn ceil(self) -> Self {
        Expr::unary(Func::Ceil, self)
    }
    fn round_even(self) -> Self {
        Expr::unary(Func::RoundEven, self)
    }
    fn select(&self, op: CmpOp, rhs: &Self, then: impl FnOnce() -> Self, otherwise: impl FnOnce() -> Self) -> Self {
        Expr::Select {
            op,
            lhs: Rc::new(self.clone()),
            rhs: Rc::new(rhs.clone()),
            then: Rc::new(then()),
            otherwise: Rc::new(otherwise()),
        }
    }
}

macro_rules! expr_arith {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl $trait for Expr {
            type Output = Expr;
            fn $method(self, rhs: Expr) -> Expr {
                Expr::binary(Arith::$op, self, rhs)
            }
        }
    )*};
}
expr_arith!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div);

impl Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::unary(Func::Neg, self)
    }
}
