//! Small dense square matrices in f64, row-major: the arithmetic the SPD kernels are written in.

/// An `n×n` row-major f64 matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Mat {
    pub n: usize,
    pub a: Vec<f64>,
}

impl Mat {
    pub fn zeros(n: usize) -> Mat {
        Mat { n, a: vec![0.0; n * n] }
    }

    /// The matrix whose entries are `a` (length `n²`).
    pub fn new(n: usize, a: Vec<f64>) -> Mat {
        debug_assert_eq!(a.len(), n * n);
        Mat { n, a }
    }

    pub fn at(&self, i: usize, j: usize) -> f64 {
        self.a[i * self.n + j]
    }

    pub fn t(&self) -> Mat {
        let n = self.n;
        Mat { n, a: (0..n * n).map(|k| self.a[(k % n) * n + k / n]).collect() }
    }

    /// `½(A + Aᵀ)`.
    pub fn sym(&self) -> Mat {
        let n = self.n;
        Mat { n, a: (0..n * n).map(|k| 0.5 * (self.a[k] + self.a[(k % n) * n + k / n])).collect() }
    }

    /// `A·B`.
    pub fn dot(&self, b: &Mat) -> Mat {
        let n = self.n;
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for k in 0..n {
                let aik = self.a[i * n + k];
                for j in 0..n {
                    c[i * n + j] += aik * b.a[k * n + j];
                }
            }
        }
        Mat { n, a: c }
    }

    pub fn add(&self, b: &Mat) -> Mat {
        self.zip(b, |x, y| x + y)
    }

    pub fn scale(&self, s: f64) -> Mat {
        Mat { n: self.n, a: self.a.iter().map(|x| s * x).collect() }
    }

    /// `A ∘ B` (elementwise).
    pub fn hadamard(&self, b: &Mat) -> Mat {
        self.zip(b, |x, y| x * y)
    }

    /// `‖A‖_F`.
    pub fn frobenius(&self) -> f64 {
        self.a.iter().map(|x| x * x).sum::<f64>().sqrt()
    }

    fn zip(&self, b: &Mat, f: impl Fn(f64, f64) -> f64) -> Mat {
        Mat { n: self.n, a: self.a.iter().zip(&b.a).map(|(&x, &y)| f(x, y)).collect() }
    }
}

/// The product of `ms` left to right (at least one factor).
pub fn prod(ms: &[&Mat]) -> Mat {
    let (first, rest) = ms.split_first().expect("a product of at least one matrix");
    rest.iter().fold((*first).clone(), |acc, m| acc.dot(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_transpose_and_symmetric_part() {
        let a = Mat::new(2, vec![1.0, 2.0, 3.0, 4.0]);
        let b = Mat::new(2, vec![0.0, 1.0, -1.0, 2.0]);
        assert_eq!(a.dot(&b).a, vec![-2.0, 5.0, -4.0, 11.0]);
        assert_eq!(prod(&[&a, &b, &a.t()]).a, a.dot(&b).dot(&a.t()).a);
        assert_eq!(a.t().a, vec![1.0, 3.0, 2.0, 4.0]);
        assert_eq!(a.sym().a, vec![1.0, 2.5, 2.5, 4.0]);
        assert_eq!(a.hadamard(&b).add(&a.scale(2.0)).a, vec![2.0, 6.0, 3.0, 16.0]);
        assert!((a.frobenius() - 30f64.sqrt()).abs() < 1e-15);
    }
}
