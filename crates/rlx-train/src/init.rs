//! Parameter initialisers, drawn on the host from a seeded generator so that a training run
//! is reproducible.

use rlx_runtime::Tensor;

/// How to fill a new parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Zeros,
    Ones,
    /// Normal with this standard deviation.
    Normal(f32),
    /// Uniform in `±√(6/(fan_in + fan_out))` (Glorot). A matrix `[in, out]` (rlx's `x·W`
    /// layout) has fans `in` and `out`; a convolution kernel `[out, in, k…]` (OIHW, as
    /// PyTorch) has `in·∏k` and `out·∏k`; a vector has its length for both.
    XavierUniform,
}

/// SplitMix64: small, fast and good enough for initial weights.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(f64::MIN_POSITIVE), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

impl Init {
    /// An f32 tensor of `shape` filled by this rule.
    pub fn tensor(self, shape: &[usize], rng: &mut Rng) -> Tensor {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = match self {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal(std) => (0..n).map(|_| (rng.normal() * f64::from(std)) as f32).collect(),
            Init::XavierUniform => {
                let (fan_in, fan_out) = fans(shape);
                let bound = (6.0 / (fan_in + fan_out) as f64).sqrt();
                (0..n).map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32).collect()
            }
        };
        Tensor::from_vec(values, shape).expect("the values fill the shape")
    }
}

/// `(fan_in, fan_out)` of a weight of `shape`, as [`Init::XavierUniform`] reads it.
fn fans(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (*n, *n),
        [rows, cols] => (*rows, *cols),
        [out, inp, kernel @ ..] => {
            let k: usize = kernel.iter().product();
            (inp * k, out * k)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xavier_fans_follow_the_weight_layout() {
        assert_eq!(fans(&[784, 10]), (784, 10));
        assert_eq!(fans(&[32, 16, 3, 3]), (16 * 9, 32 * 9));
        assert_eq!(fans(&[7]), (7, 7));
        let bound = (6.0f64 / (16.0 * 9.0 + 32.0 * 9.0)).sqrt() as f32;
        let w = Init::XavierUniform.tensor(&[32, 16, 3, 3], &mut Rng::new(3)).to_vec::<f32>().unwrap();
        assert!(w.iter().all(|v| v.abs() <= bound));
        assert!(w.iter().map(|v| v.abs()).fold(0.0f32, f32::max) > 0.9 * bound, "draws should reach near the bound");
    }
}
