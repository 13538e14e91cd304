//! Thin Householder QR with LAPACK's reflector signs (`geqrf` + `orgqr`), so `Q` and `R`
//! match NumPy's and PyTorch's `mode='reduced'` factors column for column.

/// `‖x‖₂` without overflow or underflow of the squares.
pub(super) fn norm2(x: impl Iterator<Item = f64> + Clone) -> f64 {
    let scale = x.clone().fold(0.0f64, |m, v| m.max(v.abs()));
    if scale == 0.0 {
        return 0.0;
    }
    scale * x.map(|v| (v / scale) * (v / scale)).sum::<f64>().sqrt()
}

/// `(Q [m,k], R [k,n])`, row-major, `k = min(m, n)`, of the row-major `m×n` `a`. Step `j`
/// reflects column `j` with pivot `α = A_jj` and `x` the entries below it: `R_jj = −sign(α)·
/// ‖(α, x)‖` (`sign(±0) = +`), or `R_jj = α` with the identity reflector when `x = 0`.
pub fn qr(a: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let k = m.min(n);
    let mut w = a[..m * n].to_vec();
    // Reflector j is `I − τ·v·vᵀ` on rows j.., with v[0] = 1.
    let mut reflectors: Vec<(Vec<f64>, f64)> = Vec::with_capacity(k);
    for j in 0..k {
        let alpha = w[j * n + j];
        let below = (j + 1..m).map(|i| w[i * n + j]);
        let xnorm = norm2(below);
        if xnorm == 0.0 {
            reflectors.push((Vec::new(), 0.0));
            continue;
        }
        let h = norm2([alpha, xnorm].into_iter());
        let beta = if alpha >= 0.0 { -h } else { h };
        let tau = (beta - alpha) / beta;
        let scale = 1.0 / (alpha - beta);
        let mut v = Vec::with_capacity(m - j);
        v.push(1.0);
        v.extend((j + 1..m).map(|i| w[i * n + j] * scale));
        w[j * n + j] = beta;
        for i in j + 1..m {
            w[i * n + j] = 0.0;
        }
        for c in j + 1..n {
            let s: f64 = v.iter().enumerate().map(|(t, vt)| vt * w[(j + t) * n + c]).sum::<f64>() * tau;
            v.iter().enumerate().for_each(|(t, vt)| w[(j + t) * n + c] -= s * vt);
        }
        reflectors.push((v, tau));
    }
    let r: Vec<f64> = (0..k)
        .flat_map(|i| (0..n).map(move |c| (i, c)))
        .map(|(i, c)| if c < i { 0.0 } else { w[i * n + c] })
        .collect();
    let mut q = vec![0.0; m * k];
    for i in 0..k {
        q[i * k + i] = 1.0;
    }
    for (j, (v, tau)) in reflectors.iter().enumerate().rev() {
        if *tau == 0.0 {
            continue;
        }
        for c in j..k {
            let s: f64 = v.iter().enumerate().map(|(t, vt)| vt * q[(j + t) * k + c]).sum::<f64>() * tau;
            v.iter().enumerate().for_each(|(t, vt)| q[(j + t) * k + c] -= s * vt);
        }
    }
    (q, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lapack_signs_on_a_small_matrix() {
        // Column 0 = (3, 4): α = 3 > 0 so R_00 = −5; the last pivot (0.4) is kept by the identity reflector.
        let a = [3.0, 1.0, 4.0, 2.0];
        let (q, r) = qr(&a, 2, 2);
        let want_q = [-0.6, -0.8, -0.8, 0.6];
        let want_r = [-5.0, -2.2, 0.0, 0.4];
        for (x, y) in q.iter().zip(want_q).chain(r.iter().zip(want_r)) {
            assert!((x - y).abs() < 1e-15, "{q:?} {r:?}");
        }
    }

    #[test]
    fn wide_matrix_has_square_q() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let (q, r) = qr(&a, 2, 3);
        for i in 0..2 {
            for c in 0..3 {
                let x: f64 = (0..2).map(|t| q[i * 2 + t] * r[t * 3 + c]).sum();
                assert!((x - a[i * 3 + c]).abs() < 1e-14);
            }
        }
        assert_eq!(r[3], 0.0);
    }
}
