//! f32 `e^x` for `x ≤ 0` as branch-free arithmetic the compiler vectorises (GELU's tail and
//! the softmax weights of attention); it inlines into callers compiled for AVX2 + FMA.

/// `1.5·2^23`: adding it to a float below `2^22` in magnitude rounds that to an integer
/// (ties to even), which then sits in the low mantissa bits of the sum.
const ROUNDER: f32 = 12_582_912.0;

/// `e^x` for `x ≤ 0`: `2^n · e^r` with `|r| ≤ ln2/2` and a degree-6 Taylor polynomial
/// (relative error below 3e-7 against the activation table's float64 `Exp`); arguments below
/// −87 give `e^−87`, −∞ gives 0, NaN stays NaN.
/// `n` is rounded and turned into `2^n` with float and integer lane arithmetic only (a float
/// to int `as` cast saturates, which compiles to a scalar conversion per element).
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    let y = if x < -87.0 { -87.0 } else { x };
    let k = y.mul_add(std::f32::consts::LOG2_E, ROUNDER);
    let n = k - ROUNDER;
    let r = n.mul_add(-0.693_145_75, y);
    let r = n.mul_add(-1.428_606_8e-6, r);
    let p = r.mul_add(1.0 / 720.0, 1.0 / 120.0);
    let p = p.mul_add(r, 1.0 / 24.0);
    let p = p.mul_add(r, 1.0 / 6.0);
    let p = p.mul_add(r, 0.5);
    let p = p.mul_add(r, 1.0);
    let p = p.mul_add(r, 1.0);
    let two_n = f32::from_bits((k.to_bits() << 23).wrapping_add(127 << 23));
    let e = p * two_n;
    if x == f32::NEG_INFINITY { 0.0 } else { e }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::elementwise::{table, ActivationKind};

    #[test]
    fn matches_the_float64_table_over_the_negative_range() {
        for i in 0..=20_000 {
            let x = -90.0 * i as f32 / 20_000.0;
            let want = table::forward(ActivationKind::Exp, x as f64).max((-87.0f64).exp());
            let got = exp_neg(x) as f64;
            assert!((got - want).abs() <= 3e-7 * want, "e^{x}: {got} vs {want}");
        }
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert!(exp_neg(f32::NAN).is_nan());
    }
}
