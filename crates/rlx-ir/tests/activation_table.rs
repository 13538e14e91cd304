//! The activation table against float64 math written here independently (libm), its
//! derivatives against central differences of its own forward formulas, its `Expr` form
//! against its Rust form, and the shape of the CUDA C and WGSL it emits.

use rlx_ir::ops::elementwise::emit::{self, Target};
use rlx_ir::ops::elementwise::expr::Expr;
use rlx_ir::ops::elementwise::table::{derivative, derivative_expr, forward, forward_expr};
use rlx_ir::ops::elementwise::ActivationKind::{self, *};

/// Deterministic xorshift draws in `[0, 1)`.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Points in `[-10, 10]`, log-spaced out to ±1e5 and in to ±1e-300, and signed zeros.
fn points() -> Vec<f64> {
    let mut d = Draws(0x2545_f491_4f6c_dd1d);
    let mut xs: Vec<f64> = (0..4000).map(|_| 20.0 * d.next() - 10.0).collect();
    for _ in 0..1000 {
        let big = 10f64.powf(1.0 + 4.0 * d.next());
        let small = 10f64.powf(-300.0 + 298.0 * d.next());
        xs.extend([big, -big, small, -small]);
    }
    xs.extend([0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 0.5, -0.5, 2.5, -2.5, 700.0, -700.0]);
    xs
}

fn softplus(x: f64) -> f64 {
    if x < 30.0 {
        libm::log1p(libm::exp(x))
    } else {
        x + libm::log1p(libm::exp(-x))
    }
}

/// `f(x)` from libm, written without the table's forms where another one is exact.
fn reference(kind: ActivationKind, x: f64) -> f64 {
    let sigmoid = |x: f64| libm::exp(-softplus(-x));
    match kind {
        Gelu => 0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2),
        GeluApprox => {
            let k = libm::sqrt(2.0 / std::f64::consts::PI);
            0.5 * x * (1.0 + libm::tanh(k * (x + 0.044715 * libm::pow(x, 3.0))))
        }
        Silu => x * sigmoid(x),
        Relu => if x < 0.0 { 0.0 } else { x },
        Sigmoid => sigmoid(x),
        Tanh => libm::tanh(x),
        Exp => libm::exp(x),
        Log => libm::log(x),
        Sqrt => libm::sqrt(x),
        // IEEE rSqrt(±0) is ±∞; `pow` gives +∞ for both.
        Rsqrt => if x == 0.0 { 1.0 / x } else { libm::pow(x, -0.5) },
        Neg => -x,
        Abs => libm::fabs(x),
        Sin => libm::sin(x),
        Cos => libm::cos(x),
        Tan => libm::tan(x),
        Atan => libm::atan(x),
        Recip => libm::pow(x, -1.0),
        Round => libm::rint(x),
        Floor => libm::floor(x),
        Ceil => libm::ceil(x),
        Sign => if x == 0.0 || x.is_nan() { x } else { libm::copysign(1.0, x) },
        Softplus => softplus(x),
        Elu => if x > 0.0 { x } else { libm::expm1(x) },
        Erf => libm::erf(x),
        HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        HardSigmoid => ((x + 3.0) / 6.0).clamp(0.0, 1.0),
        Mish => x * libm::tanh(softplus(x)),
        Softsign => x / (1.0 + libm::fabs(x)),
        LogSigmoid => -softplus(-x),
    }
}

/// Kinds whose table form is accurate to `ε·max(1, |x|)` absolutely rather than relatively:
/// `1 + tanh` cancels in GELU-tanh's left tail, `eˣ − 1` and `x/6 + ½` near their zeros.
fn absolute_near_cancellation(kind: ActivationKind) -> bool {
    matches!(kind, GeluApprox | Elu | HardSigmoid)
}

/// `|x·f′(x)/f(x)|`: how much a relative error of the argument (as in `x/√2` rounded) grows.
fn condition(kind: ActivationKind, x: f64) -> f64 {
    let c = (x * derivative(kind, x) / forward(kind, x)).abs();
    if c.is_finite() { c } else { 0.0 }
}

#[test]
fn forward_matches_independent_float64_math() {
    for kind in ActivationKind::ALL {
        let mut worst = 0.0f64;
        for x in points() {
            let (got, want) = (forward(kind, x), reference(kind, x));
            // Equal, both NaN, or apart by less than the normal range; Silu's `x/(1 + e^−x)` is
            // 0 once `e^−x` overflows, below 1e-306.
            let silu_overflow = kind == Silu && -x > f64::MAX.ln();
            if got == want || (got.is_nan() && want.is_nan()) || (got - want).abs() < f64::MIN_POSITIVE || silu_overflow {
                continue;
            }
            let scale = if absolute_near_cancellation(kind) { want.abs().max(x.abs().max(1.0)) } else { want.abs() };
            let err = (got - want).abs() / scale / (1.0 + condition(kind, x));
            worst = worst.max(err);
            assert!(err < 1e-14, "{kind:?}({x:e}) = {got:e}, libm gives {want:e}");
        }
        assert!(worst < 1e-14, "{kind:?}: {worst:e}");
    }
}

/// Points where `kind`'s derivative is defined and its forward formula smooth nearby.
fn smooth_at(kind: ActivationKind, x: f64, h: f64) -> bool {
    let near = |k: f64| (x - k).abs() < 4.0 * h;
    match kind {
        Relu | Abs | Sign | Elu => !near(0.0),
        HardSwish | HardSigmoid => !near(3.0) && !near(-3.0),
        Floor | Ceil => (x - x.round()).abs() > 4.0 * h,
        _ => true,
    }
}

#[test]
fn derivatives_match_central_differences_of_the_forward_formulas() {
    let mut d = Draws(0x9e37_79b9_7f4a_7c15);
    let mut xs: Vec<f64> = (0..3000).map(|_| 16.0 * d.next() - 8.0).collect();
    xs.extend((0..500).flat_map(|_| {
        let (big, small) = (8.0 + 32.0 * d.next(), 10f64.powf(-3.0 + 2.0 * d.next()));
        [big, -big, small, -small]
    }));
    for kind in ActivationKind::ALL {
        if kind == Round {
            // Straight-through: the derivative is 1 by definition, not the step's 0.
            assert!(xs.iter().all(|&x| derivative(kind, x) == 1.0));
            continue;
        }
        for &x in &xs {
            let x = match kind {
                Log | Sqrt | Rsqrt => x.abs(),
                Tan => x % 1.4,
                _ => x,
            };
            let h = 1e-6 * x.abs().max(1e-2);
            if !smooth_at(kind, x, h) {
                continue;
            }
            let (up, down) = (forward(kind, x + h), forward(kind, x - h));
            let fd = (up - down) / (2.0 * h);
            let want = derivative(kind, x);
            let size = if absolute_near_cancellation(kind) { x.abs().max(1.0) } else { up.abs() + down.abs() };
            let tol = 1e-6 * want.abs() + 8.0 * f64::EPSILON * size / h + 1e-300;
            assert!((fd - want).abs() <= tol, "{kind:?}′({x:e}) = {want:e}, central difference {fd:e}");
        }
    }
}

#[test]
fn expressions_evaluate_bit_for_bit_as_the_rust_formulas() {
    let mut xs: Vec<f64> = points();
    xs.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-40, -1e-40, 88.0, -88.0, 1e30, -1e30]);
    for kind in ActivationKind::ALL {
        let (f, df) = (forward_expr(kind), derivative_expr(kind));
        for &x in &xs {
            let x32 = x as f32;
            let pairs = [
                (f.eval(x), forward(kind, x)),
                (df.eval(x), derivative(kind, x)),
                (f.eval(x32) as f64, forward(kind, x32) as f64),
                (df.eval(x32) as f64, derivative(kind, x32) as f64),
            ];
            for (expr, rust) in pairs {
                // Bit for bit, but for the sign and payload of NaN, which Rust leaves open.
                assert!(expr.to_bits() == rust.to_bits() || (expr.is_nan() && rust.is_nan()), "{kind:?} at {x:e}: {expr:e} vs {rust:e}");
            }
        }
    }
}

#[test]
fn f32_formulas_stay_close_to_float64() {
    // The f32 evaluation (the CPU's scalar path) within a few f32 rounding steps of the f64
    // one, relative to max(|f|, 1e-30) or, for the cancelling forms, to max(1, |x|), and
    // magnified by the condition number as the formulas round their inner arguments.
    for kind in ActivationKind::ALL {
        for x in points().into_iter().filter(|x| x.abs() < 80.0) {
            let x32 = x as f32;
            let (got, want) = (forward(kind, x32) as f64, forward(kind, x32 as f64));
            if got == want || (got.is_nan() && want.is_nan()) || want.abs() > f32::MAX as f64 {
                continue;
            }
            let scale = if absolute_near_cancellation(kind) { want.abs().max(x.abs().max(1.0)) } else { want.abs().max(1e-30) };
            let bound = 16.0 * f32::EPSILON as f64 * (1.0 + condition(kind, x32 as f64));
            assert!((got - want).abs() <= bound * scale, "{kind:?}({x32:e}): f32 {got:e}, f64 {want:e}");
        }
    }
}

/// Identifiers immediately followed by `(`.
fn called_names(src: &str) -> Vec<String> {
    let bytes = src.as_bytes();
    let mut names = Vec::new();
    let mut start = None;
    for (i, &b) in bytes.iter().enumerate() {
        let ident = b.is_ascii_alphanumeric() || b == b'_';
        match (ident, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                if b == b'(' && !bytes[s].is_ascii_digit() {
                    names.push(src[s..i].to_string());
                }
                start = None;
            }
            _ => {}
        }
    }
    names
}

fn balanced(src: &str) -> bool {
    let mut stack = Vec::new();
    for c in src.chars() {
        match c {
            '(' | '{' | '[' => stack.push(c),
            ')' | '}' | ']' => {
                let open = stack.pop();
                if open != Some(match c {
                    ')' => '(',
                    '}' => '{',
                    _ => '[',
                }) {
                    return false;
                }
            }
            _ => {}
        }
    }
    stack.is_empty()
}

/// Checks one emitted function: balanced brackets, only known calls, every temporary
/// defined once before its use, one `return`.
fn check_source(target: Target, name: &str, src: &str) {
    assert!(balanced(src), "unbalanced:\n{src}");
    let known: &[&str] = match target {
        Target::CudaC => &[
            "fabsf", "expf", "logf", "log1pf", "sqrtf", "tanhf", "erff", "erfcf", "sinf", "cosf", "tanf", "atanf", "floorf",
            "ceilf", "rintf",
        ],
        Target::Wgsl => &[
            "abs", "exp", "log", "rlx_log1p", "sqrt", "tanh", "rlx_erf", "rlx_erfc", "sin", "cos", "tan", "atan", "floor", "ceil",
            "round", "select",
        ],
    };
    for called in called_names(src) {
        assert!(called == name || known.contains(&called.as_str()), "unknown function {called} in\n{src}");
    }
    let mut defined = Vec::new();
    for line in src.lines().skip(1) {
        let line = line.trim();
        let rhs = match line.split_once(" = ") {
            Some((lhs, rhs)) => {
                let t = lhs.rsplit(' ').next().unwrap().to_string();
                assert!(t.starts_with('t') && !defined.contains(&t), "{line}");
                defined.push(t);
                rhs
            }
            None => line,
        };
        for word in rhs.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with('t') && word[1..].parse::<u32>().is_ok() {
                assert!(defined.iter().any(|d| d == word), "{word} used before its definition in\n{src}");
            }
        }
    }
    assert_eq!(src.matches("return ").count(), 1, "{src}");
}

#[test]
fn emitted_sources_are_well_formed() {
    for target in [Target::CudaC, Target::Wgsl] {
        for kind in ActivationKind::ALL {
            for (what, e) in [("f", forward_expr(kind)), ("df", derivative_expr(kind))] {
                let name = format!("rlx_{what}_{kind:?}").to_lowercase();
                check_source(target, &name, &emit::function(target, &name, &e));
            }
        }
        for f in emit::prelude(target).split_inclusive("}\n") {
            let name = f.split(['(', ' ']).nth(1).unwrap();
            check_source(target, name, f);
        }
    }
    assert_eq!(emit::prelude(Target::CudaC), "");
}

#[test]
fn emitted_sources_read_as_expected() {
    assert_eq!(
        emit::function(Target::CudaC, "relu", &forward_expr(Relu)),
        "__device__ __forceinline__ float relu(float x) {\n    const float t0 = (x < 0.0f) ? 0.0f : x;\n    return t0;\n}\n"
    );
    assert_eq!(
        emit::function(Target::Wgsl, "elu", &forward_expr(Elu)),
        "fn elu(x: f32) -> f32 {\n    let t0 = exp(x);\n    let t1 = t0 - 1.0f;\n    let t2 = select(t1, x, x > 0.0f);\n    return t2;\n}\n"
    );
    let gelu = emit::function(Target::CudaC, "gelu", &forward_expr(Gelu));
    assert!(gelu.contains("erfcf(t") && gelu.contains("0.70710677f"), "{gelu}");
    let softplus = emit::function(Target::Wgsl, "softplus", &forward_expr(Softplus));
    assert!(softplus.contains("rlx_log1p(") && softplus.contains("abs(x)"), "{softplus}");
    // Equal subtrees are computed once: GELU-tanh's derivative evaluates tanh a single time.
    let d = emit::function(Target::CudaC, "d", &derivative_expr(GeluApprox));
    assert_eq!(d.matches("tanhf(").count(), 1, "{d}");
    assert!(emit::function(Target::CudaC, "c", &Expr::Const(-f64::INFINITY)).contains("__int_as_float(0xff800000)"));
}

#[test]
fn wgsl_erf_erfc_and_log1p_stay_within_their_stated_error() {
    let mut d = Draws(0x1234_5678_9abc_def1);
    let mut worst = [0.0f64; 3];
    let mut err = |i: usize, got: f32, want: f64| {
        if want.abs() >= f32::MIN_POSITIVE as f64 {
            worst[i] = worst[i].max((got as f64 - want).abs() / want.abs());
        }
    };
    for i in 0..200_000 {
        let x = match i % 3 {
            0 => 20.0 * d.next() - 8.0,
            1 => (if d.next() < 0.5 { -1.0 } else { 1.0 }) * 10f64.powf(-30.0 + 30.0 * d.next()),
            _ => 2.4 * d.next() - 1.2,
        } as f32;
        err(0, emit::erf_approx(x), libm::erf(x as f64));
        err(1, emit::erfc_approx(x), libm::erfc(x as f64));
        let u = match i % 3 {
            0 => 0.999 * d.next() - 0.5,
            1 => 10f64.powf(-30.0 + 30.0 * d.next()),
            _ => -0.99 + 20.0 * d.next(),
        } as f32;
        err(2, emit::ln_1p_approx(u), libm::log1p(u as f64));
    }
    assert!(worst[0] < 3e-7, "erf: {:e}", worst[0]);
    assert!(worst[1] < 5e-7, "erfc: {:e}", worst[1]);
    assert!(worst[2] < 3e-7, "log1p: {:e}", worst[2]);
    for (x, erf, erfc) in [(f32::INFINITY, 1.0, 0.0), (f32::NEG_INFINITY, -1.0, 2.0), (0.0, 0.0, 1.0), (20.0, 1.0, 0.0)] {
        assert_eq!((emit::erf_approx(x), emit::erfc_approx(x)), (erf, erfc), "at {x}");
    }
    assert!(emit::erf_approx(f32::NAN).is_nan() && emit::erfc_approx(f32::NAN).is_nan());
    assert_eq!(emit::ln_1p_approx(0.0f32), 0.0);
}
