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
    /// Uniform in `±√(6/(fan_in + fan_out))` (Glorot), fans from the last two dims.
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
                let fan_out = shape.last().copied().unwrap_or(1);
                let fan_in = if shape.len() >= 2 { shape[shape.len() - 2] } else { fan_out };
                let bound = (6.0 / (fan_in + fan_out) as f64).sqrt();
                (0..n).map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32).collect()
            }
        };
        Tensor::from_vec(values, shape).expect("the values fill the shape")
    }
}
