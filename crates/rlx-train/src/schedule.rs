//! Learning-rate schedules, evaluated on the host once per step (the rate enters the step
//! graph as a scalar input, so changing it never recompiles).

/// The learning rate as a function of the step (0-based).
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    Constant(f32),
    /// Linear warm-up from 0 to `peak` over `warmup` steps, then a half-cosine down to
    /// `min` at step `total` (and `min` after it).
    WarmupCosine { peak: f32, min: f32, warmup: u64, total: u64 },
}

impl Schedule {
    pub fn lr(&self, step: u64) -> f32 {
        match *self {
            Schedule::Constant(lr) => lr,
            Schedule::WarmupCosine { peak, min, warmup, total } => {
                if step < warmup {
                    peak * (step + 1) as f32 / warmup as f32
                } else if step >= total {
                    min
                } else {
                    let t = (step - warmup) as f64 / (total - warmup).max(1) as f64;
                    min + (peak - min) * (0.5 * (1.0 + (std::f64::consts::PI * t).cos())) as f32
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_rises_linearly_then_cosine_falls_to_the_floor() {
        let s = Schedule::WarmupCosine { peak: 1.0, min: 0.1, warmup: 4, total: 14 };
        assert_eq!(s.lr(0), 0.25);
        assert_eq!(s.lr(3), 1.0);
        assert_eq!(s.lr(4), 1.0);
        assert!((s.lr(9) - 0.55).abs() < 1e-6);
        assert!((s.lr(14) - 0.1).abs() < 1e-7 && s.lr(100) == 0.1);
    }
}
