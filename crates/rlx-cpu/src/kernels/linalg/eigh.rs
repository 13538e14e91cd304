//! Reverse mode of the symmetric eigendecomposition (OPS.md §22 `EighBackward`).

/// `Ā = sym(U·(diag(λ̄) + F∘(Uᵀ·Ū))·Uᵀ)` for one `n×n` problem (row-major, column `j` of `U`
/// the eigenvector of `λ_j`), `sym(M) = ½(M + Mᵀ)`, `F_ij = 1/(λ_j − λ_i)` off the diagonal.
/// Pairs closer than `n·eps·max|λ|` (`eps` the rounding unit of the tensors' dtype) count as
/// degenerate and get `F_ij = 0`: their eigenvectors are not determined by `A`.
pub fn eigh_backward(lam: &[f64], u: &[f64], dlam: &[f64], du: &[f64], n: usize, eps: f64) -> Vec<f64> {
    let tol = n as f64 * eps * lam.iter().fold(0.0f64, |m, l| m.max(l.abs()));
    let mut g = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let gap = lam[j] - lam[i];
            g[i * n + j] = if i == j {
                dlam[i]
            } else if gap.abs() <= tol {
                0.0
            } else {
                (0..n).map(|k| u[k * n + i] * du[k * n + j]).sum::<f64>() / gap
            };
        }
    }
    let mut ug = vec![0.0; n * n];
    for a in 0..n {
        for j in 0..n {
            ug[a * n + j] = (0..n).map(|i| u[a * n + i] * g[i * n + j]).sum();
        }
    }
    let full: Vec<f64> = (0..n * n).map(|e| (0..n).map(|j| ug[(e / n) * n + j] * u[(e % n) * n + j]).sum()).collect();
    (0..n * n).map(|e| 0.5 * (full[e] + full[(e % n) * n + e / n])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::linalg::eigen::sym_eigen;

    /// `⟨λ̄, λ(A)⟩ + ⟨Ū, U(A)⟩` for a symmetric `A`.
    fn loss(a: &[f64], n: usize, dlam: &[f64], du: &[f64]) -> f64 {
        let e = sym_eigen(a, n).unwrap();
        e.values.iter().zip(dlam).map(|(x, y)| x * y).sum::<f64>() + e.vectors.iter().zip(du).map(|(x, y)| x * y).sum::<f64>()
    }

    #[test]
    fn matches_central_differences_on_a_separated_spectrum() {
        let n = 3;
        let a = [2.0, 0.3, -0.4, 0.3, -1.0, 0.2, -0.4, 0.2, 0.5];
        let dlam = [0.7, -0.2, 1.1];
        let du = [0.3, -0.5, 0.2, 0.9, 0.1, -0.4, -0.6, 0.8, 0.25];
        let e = sym_eigen(&a, n).unwrap();
        let grad = eigh_backward(&e.values, &e.vectors, &dlam, &du, n, f64::EPSILON);
        let h = 1e-6;
        for p in 0..n {
            for q in 0..=p {
                // Symmetric direction E = e_p·e_qᵀ + e_q·e_pᵀ (halved on the diagonal).
                let mut plus = a;
                let mut minus = a;
                for (x, y) in [(p, q), (q, p)] {
                    let step = if p == q { h / 2.0 } else { h };
                    plus[x * n + y] += step;
                    minus[x * n + y] -= step;
                }
                let fd = (loss(&plus, n, &dlam, &du) - loss(&minus, n, &dlam, &du)) / (2.0 * h);
                let an = if p == q { grad[p * n + p] } else { grad[p * n + q] + grad[q * n + p] };
                assert!((fd - an).abs() < 1e-7, "({p}, {q}): {fd} vs {an}");
            }
        }
    }
}
