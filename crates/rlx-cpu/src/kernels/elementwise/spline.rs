//! `SplineActivation` (KAN Gaussian-RBF activation per channel, OPS.md §3) and its two
//! gradients (§22). The channel is the last axis of `x`; `coeff` is `[C, G]`.

use crate::kernels::{by_float, real::{Real, Scalar}, PAR_MIN};
use crate::view::{In, Out};
use rayon::prelude::*;

/// The RBF grid: centres `μ_g = grid_min + g·h`, width `h = (grid_max − grid_min)/(G − 1)`
/// (`h = 1` for a single basis).
struct Grid {
    centres: Vec<f64>,
    h: f64,
}

/// A spline's `(num_basis, grid_min, grid_max)` attributes.
pub type SplineAttrs = (u32, f32, f32);

impl Grid {
    fn new((num_basis, grid_min, grid_max): SplineAttrs) -> Grid {
        let g = num_basis as usize;
        let (lo, hi) = (f64::from(grid_min), f64::from(grid_max));
        let h = if g > 1 { (hi - lo) / (g - 1) as f64 } else { 1.0 };
        Grid { centres: (0..g).map(|i| lo + i as f64 * h).collect(), h }
    }

    /// `φ_g(x) = exp(−((x − μ_g)/h)²)` for every `g`, passed with `(x − μ_g)` to `f`.
    fn each<T: Real>(&self, x: T, mut f: impl FnMut(usize, T, T)) {
        let inv_h = T::of(1.0 / self.h);
        for (g, &mu) in self.centres.iter().enumerate() {
            let d = x - T::of(mu);
            let z = d * inv_h;
            f(g, (-(z * z)).exp(), d);
        }
    }
}

/// Splits `out` into rows of `c` channels, in parallel when the work is large.
fn rows<T: Send>(out: &mut [T], c: usize, work: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if work < PAR_MIN {
        out.chunks_mut(c).enumerate().for_each(|(r, o)| f(r, o));
    } else {
        out.par_chunks_mut(c).enumerate().for_each(|(r, o)| f(r, o));
    }
}

/// `y[.., c] = Σ_g coeff[c, g]·φ_g(x[.., c])`.
pub fn spline(attrs: SplineAttrs, x: In, coeff: In, out: &mut Out) -> Result<(), String> {
    let grid = Grid::new(attrs);
    let (c, nb) = (coeff.dims[0], grid.centres.len());
    by_float!(x.dtype, T => {
        let (xs, cs) = (x.get::<T>(), coeff.get::<T>());
        rows(out.get::<T>(), c, xs.len() * nb, |r, o| {
            for (ch, y) in o.iter_mut().enumerate() {
                let mut acc = T::ZERO;
                grid.each(xs[r * c + ch], |g, phi, _| acc += cs[ch * nb + g] * phi);
                *y = acc;
            }
        })
    })
}

/// `x̄ = ȳ·Σ_g coeff[c, g]·φ_g(x)·(−2(x − μ_g)/h²)`.
pub fn spline_backward_x(attrs: SplineAttrs, x: In, coeff: In, dy: In, out: &mut Out) -> Result<(), String> {
    let grid = Grid::new(attrs);
    let (c, nb) = (coeff.dims[0], grid.centres.len());
    let k = -2.0 / (grid.h * grid.h);
    by_float!(x.dtype, T => {
        let (xs, cs, dys) = (x.get::<T>(), coeff.get::<T>(), dy.get::<T>());
        rows(out.get::<T>(), c, xs.len() * nb, |r, o| {
            for (ch, dx) in o.iter_mut().enumerate() {
                let mut acc = T::ZERO;
                grid.each(xs[r * c + ch], |g, phi, d| acc += cs[ch * nb + g] * phi * d);
                *dx = dys[r * c + ch] * acc * T::of(k);
            }
        })
    })
}

/// `coeff̄[c, g] = Σ_leading ȳ[.., c]·φ_g(x[.., c])`, accumulated in f64.
pub fn spline_backward_coeff(attrs: SplineAttrs, x: In, dy: In, out: &mut Out) -> Result<(), String> {
    let grid = Grid::new(attrs);
    let (c, nb) = (out.dims[0], grid.centres.len());
    by_float!(x.dtype, T => {
        let (xs, dys) = (x.get::<T>(), dy.get::<T>());
        let mut acc = vec![0.0f64; c * nb];
        for (i, (&v, &d)) in xs.iter().zip(dys).enumerate() {
            let ch = i % c;
            grid.each(v.f64(), |g, phi, _| acc[ch * nb + g] += d.f64() * phi);
        }
        out.get::<T>().iter_mut().zip(&acc).for_each(|(o, &a)| *o = T::of(a));
    })
}
