//! Thin SVD by one-sided (Hestenes) Jacobi: rotations of column pairs until every pair is
//! orthogonal to working precision. Slower than bidiagonalization for large matrices, but
//! short and accurate to a few ulps relative for well-conditioned inputs.

use super::qr::norm2;

/// Sweeps after which a matrix that has not converged is reported (one-sided Jacobi
/// converges quadratically; well-formed inputs need well under 20).
const MAX_SWEEPS: usize = 60;

/// `A = U·diag(S)·Vt` with `U [m,k]`, `S [k]` descending, `Vt [k,n]` (row-major,
/// `k = min(m,n)`). Each pair `(u_i, v_i)` is negated together where needed so that the
/// largest-magnitude entry of `u_i` (the first on ties) is positive.
pub struct Svd {
    pub u: Vec<f64>,
    pub s: Vec<f64>,
    pub vt: Vec<f64>,
}

/// Thin SVD of the row-major `m×n` `a` (finite entries).
pub fn svd(a: &[f64], m: usize, n: usize) -> Result<Svd, String> {
    let k = m.min(n);
    // Orthogonalize the columns of the tall one of A and Aᵀ (column-major working copy).
    let (rows, cols) = (m.max(n), k);
    let w: Vec<f64> = if m >= n {
        (0..n).flat_map(|j| (0..m).map(move |i| a[i * n + j])).collect()
    } else {
        a[..m * n].to_vec()
    };
    let Sided { left, s, right } = one_sided(w, rows, cols)?;
    // For Aᵀ = L·S·Rᵀ, A = R·S·Lᵀ: the factors swap roles.
    let (uc, vc) = if m >= n { (left, right) } else { (right, left) };
    let mut out = Svd { u: vec![0.0; m * k], s, vt: vec![0.0; k * n] };
    for j in 0..k {
        let u = &uc[j * m..(j + 1) * m];
        let lead = u.iter().fold(0.0f64, |best, &x| if x.abs() > best.abs() { x } else { best });
        let sign = if lead < 0.0 { -1.0 } else { 1.0 };
        for (i, x) in u.iter().enumerate() {
            out.u[i * k + j] = sign * x;
        }
        for i in 0..n {
            out.vt[j * n + i] = sign * vc[j * n + i];
        }
    }
    Ok(out)
}

/// The SVD of a `rows×cols` matrix, `rows ≥ cols`, with column-major factors.
struct Sided {
    /// Left singular vectors, `rows×cols`.
    left: Vec<f64>,
    /// Singular values, descending.
    s: Vec<f64>,
    /// Right singular vectors, `cols×cols`.
    right: Vec<f64>,
}

/// One-sided Jacobi on the `cols` columns (each `rows` long, `rows ≥ cols`, stored one after
/// another) of `w`.
fn one_sided(mut w: Vec<f64>, rows: usize, cols: usize) -> Result<Sided, String> {
    let mut v = vec![0.0; cols * cols];
    for j in 0..cols {
        v[j * cols + j] = 1.0;
    }
    let mut converged = cols < 2;
    for _ in 0..MAX_SWEEPS {
        if converged {
            break;
        }
        let mut rotated = false;
        for p in 0..cols {
            for q in p + 1..cols {
                if let Some((c, s)) = rotate(&mut w, rows, p, q) {
                    apply(&mut v, cols, p, q, c, s);
                    rotated = true;
                }
            }
        }
        converged = !rotated;
    }
    if !converged {
        return Err(format!("the Jacobi SVD did not converge in {MAX_SWEEPS} sweeps"));
    }
    let norms: Vec<f64> = (0..cols).map(|j| norm2(w[j * rows..(j + 1) * rows].iter().copied())).collect();
    let mut order: Vec<usize> = (0..cols).collect();
    order.sort_by(|&x, &y| norms[y].total_cmp(&norms[x]));
    let s: Vec<f64> = order.iter().map(|&j| norms[j]).collect();
    // Columns whose norm is at the rounding level of the largest carry no direction: their
    // left vectors are completed to an orthonormal set instead.
    let tiny = s.first().map_or(0.0, |&top| top * rows as f64 * f64::EPSILON);
    let mut u = Vec::with_capacity(rows * cols);
    let mut vs = Vec::with_capacity(cols * cols);
    for (t, &j) in order.iter().enumerate() {
        if s[t] > tiny {
            u.extend(w[j * rows..(j + 1) * rows].iter().map(|x| x / s[t]));
        } else {
            let fill = complete(&u, rows, t);
            u.extend(fill);
        }
        vs.extend_from_slice(&v[j * cols..(j + 1) * cols]);
    }
    Ok(Sided { left: u, s, right: vs })
}

/// Rotates columns `p`, `q` of `w` to make them orthogonal; `None` when they already are.
fn rotate(w: &mut [f64], rows: usize, p: usize, q: usize) -> Option<(f64, f64)> {
    let (wp, wq) = (&w[p * rows..(p + 1) * rows], &w[q * rows..(q + 1) * rows]);
    let alpha: f64 = wp.iter().map(|x| x * x).sum();
    let beta: f64 = wq.iter().map(|x| x * x).sum();
    let gamma: f64 = wp.iter().zip(wq).map(|(x, y)| x * y).sum();
    if gamma == 0.0 || gamma.abs() <= f64::EPSILON * (alpha.sqrt() * beta.sqrt()) {
        return None;
    }
    let zeta = (beta - alpha) / (2.0 * gamma);
    let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
    let c = 1.0 / (1.0 + t * t).sqrt();
    let s = c * t;
    apply(w, rows, p, q, c, s);
    Some((c, s))
}

/// `(col_p, col_q) ← (c·col_p − s·col_q, s·col_p + c·col_q)`.
fn apply(w: &mut [f64], rows: usize, p: usize, q: usize, c: f64, s: f64) {
    let (head, tail) = w.split_at_mut(q * rows);
    let (wp, wq) = (&mut head[p * rows..(p + 1) * rows], &mut tail[..rows]);
    for (x, y) in wp.iter_mut().zip(wq) {
        let (a, b) = (*x, *y);
        *x = c * a - s * b;
        *y = s * a + c * b;
    }
}

/// A unit vector orthogonal to the first `have` columns of `u` (orthonormal, each `rows`
/// long): the standard basis vector with the largest residual, projected twice.
fn complete(u: &[f64], rows: usize, have: usize) -> Vec<f64> {
    let project = |mut x: Vec<f64>| {
        for _ in 0..2 {
            for c in 0..have {
                let col = &u[c * rows..(c + 1) * rows];
                let d: f64 = col.iter().zip(&x).map(|(a, b)| a * b).sum();
                x.iter_mut().zip(col).for_each(|(x, a)| *x -= d * a);
            }
        }
        x
    };
    let best = (0..rows)
        .map(|e| {
            let mut x = vec![0.0; rows];
            x[e] = 1.0;
            project(x)
        })
        .max_by(|a, b| norm2(a.iter().copied()).total_cmp(&norm2(b.iter().copied())))
        .unwrap_or_default();
    let nrm = norm2(best.iter().copied());
    best.into_iter().map(|x| x / nrm).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reconstruct(f: &Svd, m: usize, n: usize) -> Vec<f64> {
        let k = m.min(n);
        (0..m * n).map(|e| (0..k).map(|t| f.u[(e / n) * k + t] * f.s[t] * f.vt[t * n + e % n]).sum()).collect()
    }

    #[test]
    fn tall_and_wide_reconstruct_with_descending_values() {
        let a: Vec<f64> = (0..15).map(|i| ((i * 7 + 3) % 11) as f64 - 5.0).collect();
        for (m, n) in [(5, 3), (3, 5)] {
            let f = svd(&a, m, n).unwrap();
            assert!(f.s.windows(2).all(|w| w[0] >= w[1]));
            for (x, y) in reconstruct(&f, m, n).iter().zip(&a) {
                assert!((x - y).abs() < 1e-13, "{m}x{n}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn rank_deficient_matrix_gets_an_orthonormal_u() {
        // Rank 1: every row is a multiple of (1, 2, 2).
        let a = [1.0, 2.0, 2.0, 2.0, 4.0, 4.0, -1.0, -2.0, -2.0, 0.5, 1.0, 1.0];
        let f = svd(&a, 4, 3).unwrap();
        assert!((f.s[0] - 3.0 * 6.25f64.sqrt()).abs() < 1e-14);
        for p in 0..3 {
            for q in 0..3 {
                let d: f64 = (0..4).map(|i| f.u[i * 3 + p] * f.u[i * 3 + q]).sum();
                assert!((d - f64::from(u8::from(p == q))).abs() < 1e-14, "{:?}", f.u);
            }
        }
        for (x, y) in reconstruct(&f, 4, 3).iter().zip(&a) {
            assert!((x - y).abs() < 1e-14);
        }
    }
}
