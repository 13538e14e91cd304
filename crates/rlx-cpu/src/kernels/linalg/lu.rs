//! LU factorization with partial pivoting (the algorithm of LAPACK's `getrf`) and what is
//! built on it: dense solves and determinants.

/// `P·A = L·U` of a row-major `n×n` matrix.
pub struct Lu {
    pub n: usize,
    /// `L` strictly below the diagonal (its unit diagonal implied), `U` on and above it.
    pub lu: Vec<f64>,
    /// Row `i` of `P·A` is row `perm[i]` of `A`.
    pub perm: Vec<usize>,
    /// The sign of the permutation, ±1.
    pub sign: f64,
    /// The first column whose pivot is exactly zero (then `A` is singular and `U` has a zero
    /// on its diagonal there); elimination skips that column and goes on, as `getrf` does.
    pub zero_pivot: Option<usize>,
}

/// Factorizes the row-major `n×n` matrix `a`, choosing as pivot the largest-magnitude entry
/// of the column on or below the diagonal (the first one on ties).
pub fn lu(a: &[f64], n: usize) -> Lu {
    let mut m = a[..n * n].to_vec();
    let mut perm: Vec<usize> = (0..n).collect();
    let mut sign = 1.0;
    let mut zero_pivot = None;
    for j in 0..n {
        let mut p = j;
        for i in j + 1..n {
            if m[i * n + j].abs() > m[p * n + j].abs() {
                p = i;
            }
        }
        if p != j {
            for k in 0..n {
                m.swap(p * n + k, j * n + k);
            }
            perm.swap(p, j);
            sign = -sign;
        }
        let pivot = m[j * n + j];
        if pivot == 0.0 {
            zero_pivot.get_or_insert(j);
            continue;
        }
        let (top, below) = m.split_at_mut((j + 1) * n);
        let pivot_row = &top[j * n..];
        for row in below.chunks_exact_mut(n) {
            let f = row[j] / pivot;
            row[j] = f;
            if f != 0.0 {
                for k in j + 1..n {
                    row[k] -= f * pivot_row[k];
                }
            }
        }
    }
    Lu { n, lu: m, perm, sign, zero_pivot }
}

impl Lu {
    /// `A⁻¹·B` for `B` row-major `[n, r]`; `A` must be non-singular.
    pub fn solve(&self, b: &[f64], r: usize) -> Vec<f64> {
        let n = self.n;
        let mut x = Vec::with_capacity(n * r);
        for &p in &self.perm {
            x.extend_from_slice(&b[p * r..(p + 1) * r]);
        }
        for i in 0..n {
            let (done, rest) = x.split_at_mut(i * r);
            let xi = &mut rest[..r];
            for k in 0..i {
                let l = self.lu[i * n + k];
                if l != 0.0 {
                    xi.iter_mut().zip(&done[k * r..(k + 1) * r]).for_each(|(x, &y)| *x -= l * y);
                }
            }
        }
        for i in (0..n).rev() {
            let (head, done) = x.split_at_mut((i + 1) * r);
            let xi = &mut head[i * r..];
            for k in i + 1..n {
                let u = self.lu[i * n + k];
                if u != 0.0 {
                    xi.iter_mut().zip(&done[(k - i - 1) * r..(k - i) * r]).for_each(|(x, &y)| *x -= u * y);
                }
            }
            let d = self.lu[i * n + i];
            xi.iter_mut().for_each(|x| *x /= d);
        }
        x
    }

    /// `det A = sign(P)·Π U_ii` (exactly 0 for a zero pivot).
    pub fn det(&self) -> f64 {
        if self.zero_pivot.is_some() {
            return 0.0;
        }
        (0..self.n).map(|i| self.lu[i * (self.n + 1)]).product::<f64>() * self.sign
    }

    /// `log|det A| = Σ log|U_ii|`: −∞ for a singular matrix.
    pub fn log_abs_det(&self) -> f64 {
        if self.zero_pivot.is_some() {
            return f64::NEG_INFINITY;
        }
        (0..self.n).map(|i| self.lu[i * (self.n + 1)].abs().ln()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_and_determinant_of_a_pivoting_system() {
        // The zero in the corner forces a row swap.
        let a = [0.0, 2.0, 1.0, 1.0, 1.0, 0.0, 3.0, 0.0, 1.0];
        let f = lu(&a, 3);
        assert_eq!(f.zero_pivot, None);
        let x = f.solve(&[3.0, 2.0, 4.0, 2.0, 1.0, 4.0], 2);
        for c in 0..2 {
            for i in 0..3 {
                let row: f64 = (0..3).map(|k| a[i * 3 + k] * x[k * 2 + c]).sum();
                let want = [[3.0, 2.0], [4.0, 2.0], [1.0, 4.0]][i][c];
                assert!((row - want).abs() < 1e-14, "{x:?}");
            }
        }
        // det = 0·(1·1 − 0·0) − 2·(1·1 − 0·3) + 1·(1·0 − 1·3) = −5
        assert!((f.det() + 5.0).abs() < 1e-14);
        assert!((f.log_abs_det() - 5f64.ln()).abs() < 1e-14);
    }

    #[test]
    fn a_zero_column_is_a_zero_pivot() {
        let f = lu(&[1.0, 0.0, 2.0, 3.0, 0.0, 4.0, 5.0, 0.0, 6.0], 3);
        assert_eq!(f.zero_pivot, Some(1));
        assert_eq!(f.det(), 0.0);
        assert_eq!(f.log_abs_det(), f64::NEG_INFINITY);
    }
}
