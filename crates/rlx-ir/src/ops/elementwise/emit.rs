//! [`Expr`] as source code for the GPU backends: a CUDA C (NVRTC) `__device__` function or a
//! WGSL function of one `f32`, each a list of single-assignment temporaries (equal subtrees
//! computed once) ending in a `return`.
//!
//! CUDA C maps every [`Func`] to its single-precision math function (`erff`, `log1pf`, `rintf`
//! for ties-to-even, …). WGSL has no `erf`, `erfc` or `log1p`: calls go to `rlx_erf`,
//! `rlx_erfc` and `rlx_log1p`, which [`prelude`] defines once per shader, generated from
//! [`erf_approx`], [`erfc_approx`] and [`ln_1p_approx`]: polynomials and Numerical Recipes'
//! erfc fit over the builtin `exp` and `log`. Their f32 relative error, measured with correctly
//! rounded `exp` and `log`, stays below 3e-7 (erf, log1p) and 5e-7 (erfc, down to where it
//! leaves the normal range); WGSL lets its builtins err by a few ulp more, and its `tanh`, `exp` and `log`
//! are the platform's. A select computes both branches on either target.

use super::expr::{Arith, Expr, Func, Scalar};
use super::CmpOp;
use std::collections::HashMap;
use std::f64::consts::FRAC_2_SQRT_PI;
use std::fmt::Write;

/// The source language of a GPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// CUDA C for NVRTC, in `float`.
    CudaC,
    /// WGSL, in `f32`.
    Wgsl,
}

impl Target {
    /// The name `f` is called by.
    pub fn func_name(self, f: Func) -> &'static str {
        use Func::*;
        match (self, f) {
            (_, Neg) => "-",
            (Target::CudaC, Abs) => "fabsf",
            (Target::CudaC, Exp) => "expf",
            (Target::CudaC, Ln) => "logf",
            (Target::CudaC, Ln1p) => "log1pf",
            (Target::CudaC, Sqrt) => "sqrtf",
            (Target::CudaC, Tanh) => "tanhf",
            (Target::CudaC, Erf) => "erff",
            (Target::CudaC, Erfc) => "erfcf",
            (Target::CudaC, Sin) => "sinf",
            (Target::CudaC, Cos) => "cosf",
            (Target::CudaC, Tan) => "tanf",
            (Target::CudaC, Atan) => "atanf",
            (Target::CudaC, Floor) => "floorf",
            (Target::CudaC, Ceil) => "ceilf",
            (Target::CudaC, RoundEven) => "rintf",
            (Target::Wgsl, Abs) => "abs",
            (Target::Wgsl, Exp) => "exp",
            (Target::Wgsl, Ln) => "log",
            (Target::Wgsl, Ln1p) => "rlx_log1p",
            (Target::Wgsl, Sqrt) => "sqrt",
            (Target::Wgsl, Tanh) => "tanh",
            (Target::Wgsl, Erf) => "rlx_erf",
            (Target::Wgsl, Erfc) => "rlx_erfc",
            (Target::Wgsl, Sin) => "sin",
            (Target::Wgsl, Cos) => "cos",
            (Target::Wgsl, Tan) => "tan",
            (Target::Wgsl, Atan) => "atan",
            (Target::Wgsl, Floor) => "floor",
            (Target::Wgsl, Ceil) => "ceil",
            (Target::Wgsl, RoundEven) => "round",
        }
    }

    /// An f32 literal of `v` (rounded to f32), parenthesised when negative.
    fn literal(self, v: f64) -> String {
        let v = v as f32;
        if !v.is_finite() {
            return match self {
                Target::CudaC => format!("__int_as_float({:#010x})", v.to_bits()),
                Target::Wgsl => format!("bitcast<f32>({:#010x}u)", v.to_bits()),
            };
        }
        let digits = format!("{:?}f", v.abs());
        if v.is_sign_negative() { format!("(-{digits})") } else { digits }
    }
}

/// The C-family operator of `op` (the same in CUDA C and WGSL).
pub fn cmp_symbol(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

/// Temporaries in order of definition, each right-hand side defined once.
struct Lines {
    target: Target,
    body: String,
    names: HashMap<String, String>,
}

impl Lines {
    /// The name or literal holding `e`'s value, defining temporaries as needed.
    fn atom(&mut self, e: &Expr) -> String {
        let rhs = match e {
            Expr::X => return "x".into(),
            Expr::Const(v) => return self.target.literal(*v),
            Expr::Unary(Func::Neg, a) => format!("-{}", self.atom(a)),
            Expr::Unary(f, a) => format!("{}({})", self.target.func_name(*f), self.atom(a)),
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.atom(a), self.atom(b));
                let sym = match op {
                    Arith::Add => "+",
                    Arith::Sub => "-",
                    Arith::Mul => "*",
                    Arith::Div => "/",
                };
                format!("{a} {sym} {b}")
            }
            Expr::Select { op, lhs, rhs, then, otherwise } => {
                let (l, r) = (self.atom(lhs), self.atom(rhs));
                let (t, o) = (self.atom(then), self.atom(otherwise));
                let c = cmp_symbol(*op);
                match self.target {
                    Target::CudaC => format!("({l} {c} {r}) ? {t} : {o}"),
                    Target::Wgsl => format!("select({o}, {t}, {l} {c} {r})"),
                }
            }
        };
        if let Some(name) = self.names.get(&rhs) {
            return name.clone();
        }
        let name = format!("t{}", self.names.len());
        match self.target {
            Target::CudaC => writeln!(self.body, "    const float {name} = {rhs};"),
            Target::Wgsl => writeln!(self.body, "    let {name} = {rhs};"),
        }
        .expect("writing to a String");
        self.names.insert(rhs, name.clone());
        name
    }
}

/// A function `name` of one float `x` returning `e` (CUDA C: `__device__ __forceinline__ float
/// name(float x)`; WGSL: `fn name(x: f32) -> f32`, which needs [`prelude`] once in its shader).
pub fn function(target: Target, name: &str, e: &Expr) -> String {
    let mut lines = Lines { target, body: String::new(), names: HashMap::new() };
    let result = lines.atom(e);
    let head = match target {
        Target::CudaC => format!("__device__ __forceinline__ float {name}(float x) {{\n"),
        Target::Wgsl => format!("fn {name}(x: f32) -> f32 {{\n"),
    };
    format!("{head}{}    return {result};\n}}\n", lines.body)
}

/// What a shader needs once before any [`function`]: nothing for CUDA C; WGSL's `rlx_erf`,
/// `rlx_erfc` and `rlx_log1p`.
pub fn prelude(target: Target) -> String {
    match target {
        Target::CudaC => String::new(),
        Target::Wgsl => [
            ("rlx_erf", erf_approx(Expr::X)),
            ("rlx_erfc", erfc_approx(Expr::X)),
            ("rlx_log1p", ln_1p_approx(Expr::X)),
        ]
        .iter()
        .map(|(name, e)| function(target, name, e))
        .collect(),
    }
}

/// erf's Taylor series to `x²¹`, `2/√π · Σ (−1)ⁿ x²ⁿ⁺¹ / (n!(2n + 1))`: for `|x| ≤ 1`.
fn erf_series<T: Scalar>(x: T) -> T {
    const C: [f64; 11] = [
        FRAC_2_SQRT_PI,
        -0.376_126_389_031_837_54,
        0.112_837_916_709_551_26,
        -0.026_866_170_645_131_252,
        0.005_223_977_625_442_188,
        -8.548_327_023_450_852e-4,
        1.205_533_298_178_966_4e-4,
        -1.492_565_035_840_625e-5,
        1.646_211_436_588_924_6e-6,
        -1.636_584_469_123_492_4e-7,
        1.480_719_281_587_921_8e-8,
    ];
    x.clone() * horner(&C, x.clone() * x)
}

/// `erfc z` for `z ≥ 0` by the Chebyshev fit `t·e^(−z² + Q(t))`, `t = 1/(1 + z/2)`
/// (Numerical Recipes' `erfcc`, relative error 1.2e-7), with `z` capped at 16 where erfc has long
/// underflowed f32. `e^(−z²)` is taken as `e^(−s²/2)²·e^((s − z)(s + z))` with `s = ⌊256z⌋/256`,
/// whose square is exact: `z²` itself would round by up to 2⁻²⁴z², an error `e^−z²` magnifies.
fn erfc_tail<T: Scalar>(z: T) -> T {
    const Q: [f64; 10] = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ];
    let z = z.select(CmpOp::Gt, &T::of(16.0), || T::of(16.0), || z.clone());
    let t = T::of(1.0) / (T::of(1.0) + T::of(0.5) * z.clone());
    let s = (z.clone() * T::of(256.0)).floor() / T::of(256.0);
    let half = (T::of(-0.5) * s.clone() * s.clone()).exp();
    let rest = (horner(&Q, t.clone()) + (s.clone() - z.clone()) * (s + z)).exp();
    half.clone() * (half * (t * rest))
}

/// `erf x` from `exp` alone: the series for `|x| < 1`, else `±(1 − erfc|x|)`.
pub fn erf_approx<T: Scalar>(x: T) -> T {
    let z = x.clone().abs();
    z.select(
        CmpOp::Lt,
        &T::of(1.0),
        || erf_series(x.clone()),
        || {
            let e = T::of(1.0) - erfc_tail(z.clone());
            x.select(CmpOp::Lt, &T::of(0.0), || -e.clone(), || e.clone())
        },
    )
}

/// `erfc x` from `exp` alone: `1 − series` for `|x| < ½`, else the fit at `|x|` (`2 −` it
/// for negative `x`).
pub fn erfc_approx<T: Scalar>(x: T) -> T {
    let z = x.clone().abs();
    z.select(
        CmpOp::Lt,
        &T::of(0.5),
        || T::of(1.0) - erf_series(x.clone()),
        || x.select(CmpOp::Lt, &T::of(0.0), || T::of(2.0) - erfc_tail(z.clone()), || erfc_tail(z.clone())),
    )
}

/// `ln(1 + u)` from `log` alone: `2·atanh s = 2s·(1 + s²/3 + s⁴/5 + …)` to `s¹⁵`, `s = u/(2 + u)`,
/// while `|s| < 0.34` (`u` in about `(−0.5, 1.03)`, covering softplus's `e^−|x|`); else `log(1 + u)`.
pub fn ln_1p_approx<T: Scalar>(u: T) -> T {
    const ATANH: [f64; 8] = [2.0, 2.0 / 3.0, 2.0 / 5.0, 2.0 / 7.0, 2.0 / 9.0, 2.0 / 11.0, 2.0 / 13.0, 2.0 / 15.0];
    let s = u.clone() / (T::of(2.0) + u.clone());
    s.clone().abs().select(
        CmpOp::Lt,
        &T::of(0.34),
        || s.clone() * horner(&ATANH, s.clone() * s.clone()),
        || (T::of(1.0) + u.clone()).ln(),
    )
}

/// `c[0] + v·(c[1] + v·(…))`.
fn horner<T: Scalar>(c: &[f64], v: T) -> T {
    let (last, rest) = c.split_last().expect("a polynomial has a coefficient");
    rest.iter().rev().fold(T::of(*last), |p, &k| p * v.clone() + T::of(k))
}
