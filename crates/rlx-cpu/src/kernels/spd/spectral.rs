//! Spectral matrix functions `f(X) = U·f(Λ)·Uᵀ` and their Daleckii–Krein adjoint (OPS.md §16):
//! the two helpers every SPD kernel is built from.

use super::mat::Mat;
use crate::kernels::linalg::eigen::sym_eigen;

/// A scalar function applied to eigenvalues. Floors clamp `λ` to `max(λ, floor)` first; the
/// derivative is 0 where the floor is active (at `λ ≤ floor`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spectral {
    /// `max(λ, floor)` (`ReEig`).
    Floor(f64),
    /// `log max(λ, floor)`.
    Log(f64),
    Exp,
    /// `max(λ, floor)^{1/2}`.
    Sqrt(f64),
    /// `max(λ, floor)^{−1/2}`.
    InvSqrt(f64),
}

impl Spectral {
    fn floor(self) -> f64 {
        match self {
            Spectral::Floor(e) | Spectral::Log(e) | Spectral::Sqrt(e) | Spectral::InvSqrt(e) => e,
            Spectral::Exp => f64::NEG_INFINITY,
        }
    }

    pub fn f(self, l: f64) -> f64 {
        let l = l.max(self.floor());
        match self {
            Spectral::Floor(_) => l,
            Spectral::Log(_) => l.ln(),
            Spectral::Exp => l.exp(),
            Spectral::Sqrt(_) => l.sqrt(),
            Spectral::InvSqrt(_) => 1.0 / l.sqrt(),
        }
    }

    pub fn df(self, l: f64) -> f64 {
        if l <= self.floor() {
            return 0.0;
        }
        match self {
            Spectral::Floor(_) => 1.0,
            Spectral::Log(_) => 1.0 / l,
            Spectral::Exp => l.exp(),
            Spectral::Sqrt(_) => 0.5 / l.sqrt(),
            Spectral::InvSqrt(_) => -0.5 / (l * l.sqrt()),
        }
    }

    /// The divided difference `(f(a) − f(b))/(a − b)` (`f′(a)` at `a = b`). Where both points are
    /// above the floor it is evaluated in a closed form free of cancellation, so nearby
    /// eigenvalues need no threshold. Symmetric in `(a, b)` to the bit.
    pub fn divided(self, a: f64, b: f64) -> f64 {
        let (a, b) = if a >= b { (a, b) } else { (b, a) };
        if a == b {
            return self.df(a);
        }
        let floor = self.floor();
        if a <= floor || b <= floor {
            return (self.f(a) - self.f(b)) / (a - b);
        }
        let d = a - b;
        match self {
            Spectral::Floor(_) => 1.0,
            Spectral::Log(_) => 2.0 * (d / (a + b)).atanh() / d,
            Spectral::Exp => b.exp() * d.exp_m1() / d,
            Spectral::Sqrt(_) => 1.0 / (a.sqrt() + b.sqrt()),
            Spectral::InvSqrt(_) => {
                let (ra, rb) = (a.sqrt(), b.sqrt());
                -1.0 / (ra * rb * (ra + rb))
            }
        }
    }
}

/// Which eigenvalues an op accepts in a matrix it decomposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Any (finite) symmetric matrix.
    Symmetric,
    /// `λ ≥ 0`.
    Psd,
    /// `λ > 0` (SPD).
    Pd,
}

/// The eigendecomposition `X = U·Λ·Uᵀ` of one named matrix (the name is for errors).
pub struct Eig {
    pub label: String,
    /// `λ`, ascending.
    pub values: Vec<f64>,
    /// Column `j` is the eigenvector of `values[j]`.
    pub u: Mat,
}

impl Eig {
    /// Decomposes the symmetric part `½(X + Xᵀ)` of `x`, as `jnp.linalg.eigh` does, so that
    /// the (symmetric) Daleckii–Krein gradients are exact for any `x`.
    pub fn of(label: impl Into<String>, x: &Mat) -> Result<Eig, String> {
        let label = label.into();
        let e = sym_eigen(&x.sym().a, x.n).map_err(|e| format!("{label}: {e}"))?;
        Ok(Eig { label, values: e.values, u: Mat::new(x.n, e.vectors) })
    }

    /// A decomposition given by its parts (the saved `λ`, `U` of `ReEig`/`LogEig`).
    pub fn from_parts(label: impl Into<String>, values: Vec<f64>, u: Mat) -> Eig {
        Eig { label: label.into(), values, u }
    }

    /// Errors naming the first eigenvalue outside `domain`.
    pub fn require(self, domain: Domain) -> Result<Eig, String> {
        let (what, cmp, bad): (_, _, fn(f64) -> bool) = match domain {
            Domain::Symmetric => return Ok(self),
            Domain::Psd => ("positive semi-definite", "<", |l| l < 0.0),
            Domain::Pd => ("positive definite", "≤", |l| l <= 0.0),
        };
        match self.values.iter().find(|&&l| bad(l)) {
            None => Ok(self),
            Some(l) => Err(format!("{} is not {what}: eigenvalue {l:.3e} {cmp} 0", self.label)),
        }
    }

    /// `U·f(Λ)·Uᵀ`; an infinite `f(λ)` (exp overflow) is an error.
    pub fn apply(&self, f: Spectral) -> Result<Mat, String> {
        let fl: Vec<f64> = self.values.iter().map(|&l| f.f(l)).collect();
        if let Some(i) = fl.iter().position(|v| !v.is_finite()) {
            return Err(format!("{}: {f:?} of eigenvalue {:.3e} is {}", self.label, self.values[i], fl[i]));
        }
        let n = self.u.n;
        let mut y = Mat::zeros(n);
        for i in 0..n {
            for j in 0..n {
                y.a[i * n + j] = (0..n).map(|k| self.u.at(i, k) * fl[k] * self.u.at(j, k)).sum();
            }
        }
        Ok(y)
    }

    /// Daleckii–Krein adjoint of `X ↦ f(X)` at this `X`: `X̄ = U·(L ∘ (Uᵀ·S·U))·Uᵀ` with
    /// `S = ½(Ȳ + Ȳᵀ)` and `L_ij` the divided difference of `f` at `(λ_i, λ_j)`.
    pub fn adjoint(&self, f: Spectral, ybar: &Mat) -> Mat {
        let n = self.u.n;
        let l = Mat::new(n, (0..n * n).map(|k| f.divided(self.values[k / n], self.values[k % n])).collect());
        let inner = self.u.t().dot(&ybar.sym()).dot(&self.u);
        self.u.dot(&l.hadamard(&inner)).dot(&self.u.t())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Spectral; 5] = [Spectral::Floor(0.5), Spectral::Log(0.0), Spectral::Exp, Spectral::Sqrt(0.0), Spectral::InvSqrt(0.0)];

    #[test]
    fn divided_differences_match_the_naive_quotient_and_the_derivative_at_ties() {
        for f in ALL {
            for (a, b) in [(1.3, 0.7), (2.0, 2.5), (0.2, 3.0)] {
                let naive = (f.f(a) - f.f(b)) / (a - b);
                assert!((f.divided(a, b) - naive).abs() < 1e-12 * naive.abs().max(1.0), "{f:?} at {a}, {b}");
                assert_eq!(f.divided(a, b), f.divided(b, a), "{f:?} is symmetric");
            }
            let (a, h) = (1.7, 1e-9);
            let near = f.divided(a + h, a);
            assert!((near - f.df(a + h / 2.0)).abs() < 1e-12 * f.df(a).abs().max(1.0), "{f:?}: {near}");
        }
    }

    #[test]
    fn floors_cut_the_function_and_its_derivative() {
        let f = Spectral::Log(0.1);
        assert_eq!(f.f(-3.0), 0.1f64.ln());
        assert_eq!(f.df(0.05), 0.0);
        assert_eq!(f.divided(-1.0, 0.05), 0.0);
        assert!((f.divided(-1.0, 1.0) - (0.0 - 0.1f64.ln()) / 2.0).abs() < 1e-15);
    }

    #[test]
    fn adjoint_matches_a_finite_difference() {
        let x = Mat::new(3, vec![4.0, 1.0, 0.5, 1.0, 3.0, -0.2, 0.5, -0.2, 2.0]);
        let ybar = Mat::new(3, vec![0.3, -1.0, 0.2, 0.7, 1.1, -0.4, 0.0, 0.9, -0.6]);
        let dir = Mat::new(3, vec![0.1, 0.4, -0.3, 0.2, -0.5, 0.6, 0.8, -0.1, 0.3]);
        for f in ALL {
            let e = Eig::of("X", &x).unwrap();
            let grad = e.adjoint(f, &ybar);
            let h = 1e-6;
            let at = |s: f64| Eig::of("X", &x.add(&dir.scale(s))).unwrap().apply(f).unwrap();
            let (p, m) = (at(h), at(-h));
            let fd: f64 = (0..9).map(|k| ybar.a[k] * (p.a[k] - m.a[k]) / (2.0 * h)).sum();
            let an: f64 = grad.hadamard(&dir).a.iter().sum();
            assert!((fd - an).abs() < 1e-7 * an.abs().max(1.0), "{f:?}: {fd} vs {an}");
        }
    }

    #[test]
    fn positivity_errors_name_the_matrix_and_eigenvalue() {
        let e = Eig::of("M", &Mat::new(2, vec![1.0, 0.0, 0.0, -0.25])).unwrap();
        assert_eq!(e.require(Domain::Pd).err().unwrap(), "M is not positive definite: eigenvalue -2.500e-1 ≤ 0");
        let z = || Eig::of("X[1]", &Mat::new(1, vec![0.0])).unwrap();
        assert!(z().require(Domain::Psd).is_ok());
        assert_eq!(z().require(Domain::Pd).err().unwrap(), "X[1] is not positive definite: eigenvalue 0.000e0 ≤ 0");
        let big = Eig::of("V", &Mat::new(1, vec![800.0])).unwrap();
        assert_eq!(big.apply(Spectral::Exp).err().unwrap(), "V: Exp of eigenvalue 8.000e2 is inf");
    }
}
