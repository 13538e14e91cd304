//! Whisper `LogMel` with its gradient, and `WelchPeaks`, over real-block spectra.

use super::{each_row, narrow, widen};
use crate::view::{In, Out};
use rlx_ir::ops::signal::{LogMel, LogMelBackward, WelchPeaks};
use std::cmp::Ordering;

/// Smallest mel energy `log10` sees (Whisper's clamp).
const MIN_ENERGY: f64 = 1e-10;

/// The sizes of a `(spectrum [.., T, 2·n_fft], filters [n_mels, n_bins])` pair.
struct MelDims {
    n_fft: usize,
    n_bins: usize,
    n_mels: usize,
    frames: usize,
    /// Frames sharing one floor: `T` per clip, or 1 with `per_frame_floor`.
    group: usize,
}

impl MelDims {
    fn of(spectrum: &In, filters: &In, per_frame_floor: bool) -> Self {
        let rank = spectrum.dims.len();
        let n_fft = spectrum.dims[rank - 1] / 2;
        let t = spectrum.dims[rank - 2];
        let frames = spectrum.dims[..rank - 1].iter().product();
        let group = if per_frame_floor { 1 } else { t };
        MelDims { n_fft, n_bins: filters.dims[1], n_mels: filters.dims[0], frames, group }
    }
}

/// `log10(max(E, 1e−10))` (a NaN energy stays NaN).
fn log_energy(e: f64) -> f64 {
    if e < MIN_ENERGY { MIN_ENERGY } else { e }.log10()
}

/// Every frame's mel energies `E = filters·p`, `p_k = re_k² + im_k²` (k < n_bins), as
/// `[frames, n_mels]`.
fn energies(d: &MelDims, spec: &[f64], filters: &[f64]) -> Vec<f64> {
    let mut e = vec![0.0; d.frames * d.n_mels];
    let mut p = vec![0.0; d.frames * d.n_bins];
    each_row(&mut p, d.n_bins, d.frames * d.n_bins, |f, p| {
        let row = &spec[f * 2 * d.n_fft..][..2 * d.n_fft];
        for (k, p) in p.iter_mut().enumerate() {
            *p = row[k] * row[k] + row[d.n_fft + k] * row[d.n_fft + k];
        }
    });
    each_row(&mut e, d.n_mels, d.frames * d.n_mels * d.n_bins, |f, e| {
        let p = &p[f * d.n_bins..][..d.n_bins];
        for (e, w) in e.iter_mut().zip(filters.chunks_exact(d.n_bins)) {
            *e = w.iter().zip(p).map(|(w, p)| w * p).sum();
        }
    });
    e
}

/// The floor `M − 8` of each group of frames, `M` the largest log energy in the group (NaNs
/// skipped).
fn floors(d: &MelDims, e: &[f64]) -> Vec<f64> {
    let (group, per) = (d.group.max(1), d.group * d.n_mels);
    (0..d.frames / group)
        .map(|g| e[g * per..][..per].iter().map(|&e| log_energy(e)).fold(f64::NEG_INFINITY, |m, v| if v > m { v } else { m }) - 8.0)
        .collect()
}

/// `LogMel{per_frame_floor}`: `spectrum [.., T, 2·n_fft]` (real blocks), `filters [n_mels,
/// n_fft/2 + 1]`, both one float dtype → F32 `[.., T, n_mels]`,
/// `y = (max(log10(max(E, 1e−10)), M − 8) + 4)/4` with `M` the maximum over each clip's
/// `[T, n_mels]` (each frame's with `per_frame_floor`). Computed in f64.
pub fn log_mel(a: &LogMel, spectrum: In, filters: In, out: &mut Out) -> Result<(), String> {
    let d = MelDims::of(&spectrum, &filters, a.per_frame_floor);
    let e = energies(&d, &widen(&spectrum)?, &widen(&filters)?);
    let floor = floors(&d, &e);
    for (i, (y, &e)) in out.get::<f32>().iter_mut().zip(&e).enumerate() {
        let (m, f) = (log_energy(e), floor[i / (d.group * d.n_mels)]);
        *y = ((if m < f { f } else { m } + 4.0) / 4.0) as f32;
    }
    Ok(())
}

/// `LogMelBackward{per_frame_floor}`: `(spectrum, filters, ȳ)` as in [`log_mel`] → the
/// spectrum's type. The floor is a constant: `dm = ȳ/4` where `m − floor > 1e−6`, else 0;
/// `dE = dm/(E·ln 10)` where `E > 1e−10`, else 0; `dp = filtersᵀ·dE`; `d re_k = 2·re_k·dp_k`,
/// `d im_k = 2·im_k·dp_k`; bins from `n_bins` up get 0.
pub fn log_mel_backward(a: &LogMelBackward, spectrum: In, filters: In, dy: In, out: &mut Out) -> Result<(), String> {
    let d = MelDims::of(&spectrum, &filters, a.per_frame_floor);
    let (spec, w) = (widen(&spectrum)?, widen(&filters)?);
    let e = energies(&d, &spec, &w);
    let floor = floors(&d, &e);
    let dy = widen(&dy)?;
    let mut dx = vec![0.0; spec.len()];
    each_row(&mut dx, 2 * d.n_fft, d.frames * d.n_mels * d.n_bins, |f, dx| {
        let (e, dy) = (&e[f * d.n_mels..][..d.n_mels], &dy[f * d.n_mels..][..d.n_mels]);
        let floor = floor[f / d.group];
        let mut dp = vec![0.0; d.n_bins];
        for ((&e, &dy), w) in e.iter().zip(dy).zip(w.chunks_exact(d.n_bins)) {
            if log_energy(e) - floor > 1e-6 && e > MIN_ENERGY {
                let de = dy / 4.0 / (e * std::f64::consts::LN_10);
                dp.iter_mut().zip(w).for_each(|(dp, w)| *dp += de * w);
            }
        }
        let row = &spec[f * 2 * d.n_fft..][..2 * d.n_fft];
        for (k, dp) in dp.iter().enumerate() {
            dx[k] = 2.0 * row[k] * dp;
            dx[d.n_fft + k] = 2.0 * row[d.n_fft + k] * dp;
        }
    });
    narrow(&dx, out)
}

/// `WelchPeaks{k, n_segments}`: `spectrum [B·n_segments, 2·n_fft]` (real blocks, segments of
/// one item adjacent) → F32 `[B, 2k]` of `(bin, power)` pairs, power descending, ties to the
/// lower bin, NaN powers first. One-sided PSD averaged over segments: `|X_0|²`, interior bins
/// `2·|X_k|²`, the last bin (`n_fft/2`) `|X|²`. Slots past `n_bins` are zero.
pub fn welch_peaks(a: &WelchPeaks, spectrum: In, out: &mut Out) -> Result<(), String> {
    let n_fft = spectrum.dims[1] / 2;
    let n_bins = n_fft / 2 + 1;
    let spec = widen(&spectrum)?;
    let segments = a.n_segments;
    let mut pairs = vec![0.0; out.numel()];
    each_row(&mut pairs, 2 * a.k, spec.len(), |b, pairs| {
        let psd: Vec<f64> = (0..n_bins)
            .map(|k| {
                let sum: f64 = (0..segments)
                    .map(|s| {
                        let row = &spec[(b * segments + s) * 2 * n_fft..][..2 * n_fft];
                        row[k] * row[k] + row[n_fft + k] * row[n_fft + k]
                    })
                    .sum();
                let one_sided = if k == 0 || k == n_bins - 1 { 1.0 } else { 2.0 };
                one_sided * sum / segments as f64
            })
            .collect();
        let mut bins: Vec<usize> = (0..n_bins).collect();
        bins.sort_unstable_by(|&i, &j| descending(psd[i], psd[j]).then(i.cmp(&j)));
        for (slot, &bin) in pairs.chunks_exact_mut(2).zip(&bins) {
            slot[0] = bin as f64;
            slot[1] = psd[bin];
        }
    });
    narrow(&pairs, out)
}

/// Orders larger powers first, NaN before any number.
fn descending(a: f64, b: f64) -> Ordering {
    b.partial_cmp(&a).unwrap_or_else(|| b.is_nan().cmp(&a.is_nan()))
}
