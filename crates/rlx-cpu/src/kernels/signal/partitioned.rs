//! `PartitionedConv`: full linear convolution with a long impulse response.

use super::fft::{plan, transform_rows};
use super::{each_row, narrow, widen};
use crate::view::{In, Out};
use num_complex::Complex64;
use rlx_ir::ops::signal::PartitionedConv;

/// Impulse responses up to this many taps are convolved directly (cheaper than the FFTs).
const DIRECT_MAX_TAPS: usize = 32;

/// `PartitionedConv{block}`: `x [.., L]`, `ir [M]` of one float dtype → `[.., L + M − 1]`,
/// `y[n] = Σ_m ir[m]·x[n − m]` (`np.convolve(mode='full')`), in f64.
///
/// Uniform-partitioned overlap-save: with `P = next_pow2(block)` (at most the output length
/// rounded up to a power of two), the IR is cut into `⌈M/P⌉` partitions whose `2P`-point
/// spectra multiply a delay line of input-block spectra; each output block of `P` samples is
/// the second half of one inverse FFT. IRs of at most 32 taps are convolved directly.
pub fn partitioned_conv(a: &PartitionedConv, x: In, ir: In, out: &mut Out) -> Result<(), String> {
    let l = x.dims.last().copied().unwrap_or(0);
    let (xs, h) = (widen(&x)?, widen(&ir)?);
    let n_out = l + h.len() - 1;
    let total = out.numel();
    let mut y = vec![0.0; total];
    if h.len() <= DIRECT_MAX_TAPS {
        each_row(&mut y, n_out, total * h.len(), |r, y| direct(&xs[r * l..][..l], &h, y));
    } else {
        let conv = Partitioned::new(&h, a.block.min(n_out).next_power_of_two());
        let work = total * 2 * conv.parts.len();
        each_row(&mut y, n_out, work, |r, y| conv.run(&xs[r * l..][..l], y));
    }
    narrow(&y, out)
}

fn direct(x: &[f64], h: &[f64], y: &mut [f64]) {
    for (i, &xv) in x.iter().enumerate() {
        for (y, &hv) in y[i..].iter_mut().zip(h) {
            *y += hv * xv;
        }
    }
}

/// The IR's partition spectra for one partition size `p`.
struct Partitioned {
    p: usize,
    /// `2p`-point spectra of `ir[i·p .. (i+1)·p]`, zero-padded.
    parts: Vec<Vec<Complex64>>,
}

impl Partitioned {
    fn new(h: &[f64], p: usize) -> Self {
        let forward = plan(2 * p, false);
        let parts = h
            .chunks(p)
            .map(|c| {
                let mut s = vec![Complex64::ZERO; 2 * p];
                s.iter_mut().zip(c).for_each(|(s, &v)| s.re = v);
                transform_rows(forward.as_ref(), &mut s, 2 * p);
                s
            })
            .collect();
        Partitioned { p, parts }
    }

    /// Convolves one row `x` into `y` (`len(x) + M − 1` samples).
    fn run(&self, x: &[f64], y: &mut [f64]) {
        let (p, n) = (self.p, 2 * self.p);
        let (forward, inverse) = (plan(n, false), plan(n, true));
        let mut scratch = vec![Complex64::ZERO; forward.get_inplace_scratch_len().max(inverse.get_inplace_scratch_len())];
        let k = self.parts.len();
        let mut delay = vec![vec![Complex64::ZERO; n]; k];
        let mut acc = vec![Complex64::ZERO; n];
        for (j, y) in y.chunks_mut(p).enumerate() {
            // Input frame x[(j−1)p .. (j+1)p], zero outside the signal.
            let frame = &mut delay[j % k];
            for (t, f) in frame.iter_mut().enumerate() {
                let i = (j * p + t).checked_sub(p);
                *f = Complex64::new(i.and_then(|i| x.get(i)).copied().unwrap_or(0.0), 0.0);
            }
            forward.process_with_scratch(frame, &mut scratch);
            acc.fill(Complex64::ZERO);
            for (i, h) in self.parts.iter().enumerate().take(j + 1) {
                let xs = &delay[(j - i) % k];
                acc.iter_mut().zip(xs).zip(h).for_each(|((a, x), h)| *a += x * h);
            }
            inverse.process_with_scratch(&mut acc, &mut scratch);
            for (y, a) in y.iter_mut().zip(&acc[p..]) {
                *y = a.re / n as f64;
            }
        }
    }
}
