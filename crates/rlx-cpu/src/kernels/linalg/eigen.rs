//! Symmetric eigendecomposition by cyclic Jacobi rotations: slow for large `n` but accurate
//! to working precision for small and clustered spectra, which is what the SPD-manifold ops
//! and their Daleckii–Krein gradients need.

/// Eigenvalues ascending and eigenvectors of a symmetric `n×n` row-major matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct SymEigen {
    pub n: usize,
    /// `λ`, ascending.
    pub values: Vec<f64>,
    /// `U` row-major; column `j` is the unit eigenvector of `values[j]`.
    pub vectors: Vec<f64>,
}

/// Sweeps after which a matrix that has not converged is reported (Jacobi converges
/// quadratically; well-formed inputs need fewer than 15).
const MAX_SWEEPS: usize = 60;

/// Decomposes the symmetric matrix whose lower triangle is `a` (row-major `n×n`; the upper
/// triangle is ignored). Each eigenvector's sign is fixed so that its largest-magnitude
/// entry (the first on ties) is positive. Non-finite input is an error.
pub fn sym_eigen(a: &[f64], n: usize) -> Result<SymEigen, String> {
    if let Some(i) = a.iter().take(n * n).position(|v| !v.is_finite()) {
        return Err(format!("matrix entry ({}, {}) is {}", i / n, i % n, a[i]));
    }
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            m[i * n + j] = a[i * n + j];
            m[j * n + i] = a[i * n + j];
        }
    }
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let scale = m.iter().map(|x| x * x).sum::<f64>().sqrt();
    let mut converged = n < 2 || scale == 0.0;
    for _ in 0..MAX_SWEEPS {
        if converged {
            break;
        }
        let off: f64 = (0..n).flat_map(|i| (0..i).map(move |j| (i, j))).map(|(i, j)| m[i * n + j] * m[i * n + j]).sum();
        if off.sqrt() <= f64::EPSILON * scale {
            converged = true;
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                rotate(&mut m, &mut v, n, p, q);
            }
        }
    }
    if !converged {
        return Err(format!("the Jacobi eigensolver did not converge in {MAX_SWEEPS} sweeps"));
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| m[x * n + x].total_cmp(&m[y * n + y]));
    let values = order.iter().map(|&k| m[k * n + k]).collect();
    let mut vectors = vec![0.0; n * n];
    for (j, &k) in order.iter().enumerate() {
        let col = (0..n).map(|i| v[i * n + k]);
        let lead = col.clone().fold(0.0f64, |best, x| if x.abs() > best.abs() { x } else { best });
        let sign = if lead < 0.0 { -1.0 } else { 1.0 };
        for (i, x) in col.enumerate() {
            vectors[i * n + j] = sign * x;
        }
    }
    Ok(SymEigen { n, values, vectors })
}

/// One Jacobi rotation zeroing `m[p][q]`, accumulated into the eigenvector matrix `v`.
fn rotate(m: &mut [f64], v: &mut [f64], n: usize, p: usize, q: usize) {
    let apq = m[p * n + q];
    if apq == 0.0 {
        return;
    }
    let theta = (m[q * n + q] - m[p * n + p]) / (2.0 * apq);
    let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
    let t = if theta == 0.0 { 1.0 } else { t };
    let c = 1.0 / (t * t + 1.0).sqrt();
    let s = t * c;
    for k in 0..n {
        let (mkp, mkq) = (m[k * n + p], m[k * n + q]);
        m[k * n + p] = c * mkp - s * mkq;
        m[k * n + q] = s * mkp + c * mkq;
    }
    for k in 0..n {
        let (mpk, mqk) = (m[p * n + k], m[q * n + k]);
        m[p * n + k] = c * mpk - s * mqk;
        m[q * n + k] = s * mpk + c * mqk;
    }
    for k in 0..n {
        let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
        v[k * n + p] = c * vkp - s * vkq;
        v[k * n + q] = s * vkp + c * vkq;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `U·diag(λ)·Uᵀ` rebuilt from the decomposition.
    fn rebuild(e: &SymEigen) -> Vec<f64> {
        let n = e.n;
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|k| e.vectors[i * n + k] * e.values[k] * e.vectors[j * n + k]).sum();
            }
        }
        a
    }

    #[test]
    fn reconstructs_a_symmetric_matrix_with_orthonormal_vectors() {
        let n = 7;
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let x = ((i * 31 + j * 17) % 13) as f64 / 3.0 - 2.0;
                a[i * n + j] = x;
                a[j * n + i] = x;
            }
        }
        let e = sym_eigen(&a, n).unwrap();
        assert!(e.values.windows(2).all(|w| w[0] <= w[1]));
        for (x, y) in rebuild(&e).iter().zip(&a) {
            assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        }
        for p in 0..n {
            for q in 0..n {
                let dot: f64 = (0..n).map(|i| e.vectors[i * n + p] * e.vectors[i * n + q]).sum();
                assert!((dot - f64::from(u8::from(p == q))).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn known_two_by_two_spectrum_and_sign_rule() {
        // [[2, 1], [1, 2]]: λ = 1, 3 with vectors (1, −1)/√2 and (1, 1)/√2.
        let e = sym_eigen(&[2.0, 0.0, 1.0, 2.0], 2).unwrap();
        assert!((e.values[0] - 1.0).abs() < 1e-15 && (e.values[1] - 3.0).abs() < 1e-15);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let expect = [h, h, -h, h];
        for (x, y) in e.vectors.iter().zip(expect) {
            assert!((x - y).abs() < 1e-15, "{:?}", e.vectors);
        }
    }

    #[test]
    fn non_finite_entries_are_an_error() {
        let err = sym_eigen(&[1.0, 0.0, f64::NAN, 1.0], 2).unwrap_err();
        assert!(err.contains("(1, 0)"), "{err}");
    }
}
