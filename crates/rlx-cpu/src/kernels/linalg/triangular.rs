//! Cholesky factorization and triangular solves (LAPACK `potrf` / `trtrs` semantics).

/// The lower Cholesky factor `L` (`A = L·Lᵀ`, strict upper triangle zero) of the SPD matrix
/// whose lower triangle is the row-major `n×n` `a` (the upper triangle is not read). A pivot
/// that is not positive (the leading minor of that order is not positive definite) is an
/// error naming its column.
pub fn cholesky(a: &[f64], n: usize) -> Result<Vec<f64>, String> {
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let d = a[j * n + j] - (0..j).map(|k| l[j * n + k] * l[j * n + k]).sum::<f64>();
        if d.is_nan() || d <= 0.0 {
            return Err(format!(
                "A is not positive definite: the pivot of column {j} is {d} (the leading {0}×{0} minor is not positive definite)",
                j + 1
            ));
        }
        let djj = d.sqrt();
        l[j * n + j] = djj;
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum::<f64>();
            l[i * n + j] = s / djj;
        }
    }
    Ok(l)
}

/// Solves `op(A)·X = B` for `X`, `B` row-major `[n, r]`, `op(A) = Aᵀ` if `transpose`; only the
/// `lower` (else upper) triangle of the row-major `n×n` `a` is read, with its diagonal
/// (non-unit). A zero on the diagonal (a singular `A`) is an error naming it.
pub fn triangular_solve(a: &[f64], n: usize, lower: bool, transpose: bool, b: &[f64], r: usize) -> Result<Vec<f64>, String> {
    if let Some(j) = (0..n).find(|&j| a[j * n + j] == 0.0) {
        return Err(format!("A is singular: its diagonal entry ({j}, {j}) is zero"));
    }
    let at = |i: usize, k: usize| if transpose { a[k * n + i] } else { a[i * n + k] };
    let mut x = b[..n * r].to_vec();
    let forward = lower != transpose;
    for step in 0..n {
        let i = if forward { step } else { n - 1 - step };
        let mut row = x[i * r..(i + 1) * r].to_vec();
        let solved = if forward { 0..i } else { i + 1..n };
        for k in solved {
            let c = at(i, k);
            if c != 0.0 {
                row.iter_mut().zip(&x[k * r..(k + 1) * r]).for_each(|(v, &y)| *v -= c * y);
            }
        }
        let d = a[i * n + i];
        for (dst, v) in x[i * r..(i + 1) * r].iter_mut().zip(row) {
            *dst = v / d;
        }
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_of_a_known_factor() {
        // L = [[2, 0, 0], [1, 3, 0], [−1, 2, 1]]; A = L·Lᵀ, with garbage in the upper triangle.
        let a = [4.0, 99.0, 99.0, 2.0, 10.0, 99.0, -2.0, 5.0, 6.0];
        let l = cholesky(&a, 3).unwrap();
        assert_eq!(l, vec![2.0, 0.0, 0.0, 1.0, 3.0, 0.0, -1.0, 2.0, 1.0]);
        let e = cholesky(&[1.0, 0.0, 2.0, 1.0], 2).unwrap_err();
        assert!(e.contains("pivot of column 1 is -3"), "{e}");
    }

    #[test]
    fn four_triangular_cases_against_substitution() {
        // Upper triangle of `a` is [[2, 1], [·, 4]]; lower is [[2, ·], [3, 4]].
        let a = [2.0, 1.0, 3.0, 4.0];
        let b = [2.0, 8.0];
        let solve = |lower, transpose| triangular_solve(&a, 2, lower, transpose, &b, 1).unwrap();
        assert_eq!(solve(true, false), vec![1.0, 1.25]); // [[2,0],[3,4]]
        assert_eq!(solve(true, true), vec![-2.0, 2.0]); // [[2,3],[0,4]]
        assert_eq!(solve(false, false), vec![0.0, 2.0]); // [[2,1],[0,4]]
        assert_eq!(solve(false, true), vec![1.0, 1.75]); // [[2,0],[1,4]]
        let e = triangular_solve(&[1.0, 0.0, 5.0, 0.0], 2, true, false, &b, 1).unwrap_err();
        assert!(e.contains("(1, 1) is zero"), "{e}");
    }
}
