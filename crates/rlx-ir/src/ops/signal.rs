//! Signal processing and complex numbers (OPS.md §17, backward ops §22).
//!
//! Real spectra use the 2N real-block layout along the last axis, `[re_0..re_{N−1},
//! im_0..im_{N−1}]`; `C64` tensors hold interleaved complex elements.

use super::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// Scale convention of `Fft`, with NumPy's / PyTorch's `norm=` meanings plus `Unscaled`.
///
/// Graphs from the original remap its names: `Backward → Unscaled`, `Forward → Backward`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FftNorm {
    /// `1` forward, `1/N` inverse (NumPy's default).
    #[default]
    Backward,
    /// `1/N` forward, `1` inverse.
    Forward,
    /// `1/√N` both ways.
    Ortho,
    /// No scaling either way.
    Unscaled,
}

/// DFT along the last axis: F32/F64 in the 2N real-block layout, or C64 elements.
/// Any length (Bluestein on the host path); output has the input's type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fft {
    pub inverse: bool,
    #[serde(default)]
    pub norm: FftNorm,
}

/// One radix-2 butterfly stage with ternary gates: inputs `(state [B, n_fft, 2], gate, rev,
/// tw_re, tw_im [n_fft/2])`; pairs `(i0, i1 = i0 + 2^stage)`, gated-off pairs copied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FftButterflyStage {
    pub stage: u32,
    pub n_fft: u32,
}

/// Whisper log-mel: inputs `(spectrum [.., T, 2·n_fft], filters [n_mels, n_fft/2 + 1])`,
/// output F32 `[.., T, n_mels]`. The `max − 8` floor uses each clip's maximum (over
/// `[T, n_mels]`), or each frame's with `per_frame_floor` (the original's behaviour).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogMel {
    #[serde(default)]
    pub per_frame_floor: bool,
}

/// Gradient of `LogMel` w.r.t. the spectrum; inputs `(spectrum, filters, ȳ)`, output the
/// spectrum's type (the floor is treated as a constant).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogMelBackward {
    #[serde(default)]
    pub per_frame_floor: bool,
}

/// Welch PSD peaks: input `spectrum [B·n_segments, 2·n_fft]`, output F32 `[B, 2k]` of
/// `(bin, power)` pairs by descending power; slots past the bin count are zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WelchPeaks {
    pub k: usize,
    pub n_segments: usize,
}

/// Full linear convolution `x [.., L] * ir [M] → [.., L + M − 1]` (`np.convolve` full),
/// computed by uniform-partitioned overlap-save with partitions of `block` samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionedConv {
    pub block: usize,
}

/// `|z|² = re² + im²`: C64 → F32 of the same shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ComplexNormSq {}

/// Gradient of `ComplexNormSq`: `2·g·z` (the real-pair gradient, PyTorch's convention);
/// inputs `(z C64, g F32)`, output C64.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ComplexNormSqBackward {}

/// Complex conjugate `re − i·im`, C64 → C64.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Conjugate {}

fn c64_only(name: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype == DType::C64 {
        Ok(())
    } else {
        Err(format!("{name} {t} must be c64"))
    }
}

fn float_only(name: &str, t: &TensorType) -> Result<(), String> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(format!("{name} {t} must be a float tensor"))
    }
}

fn same_dtype(name: &str, t: &TensorType, of: &str, base: &TensorType) -> Result<(), String> {
    if t.dtype == base.dtype {
        Ok(())
    } else {
        Err(format!("{name} {t} must have the dtype of {of} {base}"))
    }
}

/// `n_fft` of a real-block spectrum: its last axis `2·n_fft` must be static, even and non-zero.
fn block_n_fft(name: &str, t: &TensorType) -> Result<usize, String> {
    let last = t.rank().checked_sub(1).ok_or_else(|| format!("{name} {t} needs a frequency axis"))?;
    let len = t.static_dim(last)?;
    if len == 0 || len % 2 != 0 {
        return Err(format!("last axis of {name} {t} must be 2·n_fft re/im blocks (even, non-zero)"));
    }
    Ok(len / 2)
}

impl OpDef for Fft {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let Some(last) = x.shape.dims().last() else {
            return Err(format!("x {x} needs an axis to transform"));
        };
        match (x.dtype, last) {
            (DType::F32 | DType::F64, Dim::Static(n)) if *n == 0 || n % 2 != 0 => Err(format!(
                "last axis of {x} must hold 2N re/im blocks (even, non-zero)"
            )),
            (DType::C64, Dim::Static(0)) => Err(format!("last axis of {x} is empty")),
            (DType::F32 | DType::F64 | DType::C64, _) => Ok(vec![x.clone()]),
            (d, _) => Err(format!("Fft takes f32, f64 or c64, got {d}")),
        }
    }
}

impl OpDef for FftButterflyStage {
    fn arity(&self) -> Arity {
        Arity::Exact(5)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let n = self.n_fft as usize;
        if n < 2 || !n.is_power_of_two() {
            return Err(format!("n_fft {n} must be a power of two, at least 2"));
        }
        if self.stage >= n.trailing_zeros() {
            return Err(format!("stage {} must be below log2(n_fft) = {}", self.stage, n.trailing_zeros()));
        }
        let state = &inputs[0];
        float_only("state", state)?;
        if state.rank() != 3 || state.shape.dims()[1..] != [Dim::Static(n), Dim::Static(2)] {
            return Err(format!("state {state} must be [B, {n}, 2] (interleaved re/im)"));
        }
        let half = Shape::of(&[n / 2]);
        for (name, t) in ["gate", "rev", "tw_re", "tw_im"].iter().zip(&inputs[1..]) {
            same_dtype(name, t, "state", state)?;
            if t.shape != half {
                return Err(format!("{name} {t} must be {half} (one entry per butterfly)"));
            }
        }
        Ok(vec![state.clone()])
    }
}

/// Checks `(spectrum, filters)` of `LogMel`; returns the F32 output type.
fn log_mel_out(spectrum: &TensorType, filters: &TensorType) -> Result<TensorType, String> {
    float_only("spectrum", spectrum)?;
    same_dtype("filters", filters, "spectrum", spectrum)?;
    if spectrum.rank() < 2 {
        return Err(format!("spectrum {spectrum} must be [.., T, 2·n_fft]"));
    }
    let n_fft = block_n_fft("spectrum", spectrum)?;
    let n_bins = n_fft / 2 + 1;
    if filters.rank() != 2 || filters.shape.dim(1) != &Dim::Static(n_bins) {
        return Err(format!(
            "filters {filters} must be [n_mels, {n_bins}] for n_fft = {n_fft} (n_fft/2 + 1 bins)"
        ));
    }
    let mut dims = spectrum.shape.0.clone();
    let last = dims.len() - 1;
    dims[last] = filters.shape.dim(0).clone();
    Ok(TensorType::new(DType::F32, Shape(dims)))
}

impl OpDef for LogMel {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![log_mel_out(&inputs[0], &inputs[1])?])
    }
}

impl OpDef for LogMelBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let want = log_mel_out(&inputs[0], &inputs[1])?;
        let dy = &inputs[2];
        if *dy != want {
            return Err(format!("dy {dy} must be the LogMel output type {want}"));
        }
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for WelchPeaks {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        if self.k == 0 || self.n_segments == 0 {
            return Err(format!("k {} and n_segments {} must be at least 1", self.k, self.n_segments));
        }
        float_only("spectrum", x)?;
        if x.rank() != 2 {
            return Err(format!("spectrum {x} must be [B·n_segments, 2·n_fft]"));
        }
        block_n_fft("spectrum", x)?;
        let batch = match x.shape.dim(0) {
            d @ Dim::Sym(_) if self.n_segments == 1 => d.clone(),
            Dim::Static(rows) if rows % self.n_segments == 0 => Dim::Static(rows / self.n_segments),
            d => {
                return Err(format!(
                    "rows {d} of spectrum {x} must be a static multiple of n_segments {}",
                    self.n_segments
                ))
            }
        };
        let pairs = self.k.checked_mul(2).ok_or_else(|| format!("k {} overflows", self.k))?;
        Ok(vec![TensorType::new(DType::F32, Shape(vec![batch, Dim::Static(pairs)]))])
    }
}

impl OpDef for PartitionedConv {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, ir) = (&inputs[0], &inputs[1]);
        if self.block == 0 {
            return Err("block must be at least 1".into());
        }
        float_only("x", x)?;
        same_dtype("ir", ir, "x", x)?;
        let Some(l) = x.shape.dims().last() else {
            return Err(format!("x {x} needs a time axis"));
        };
        if ir.rank() != 1 {
            return Err(format!("ir {ir} must be a 1-D impulse response [M]"));
        }
        let out = match (l, ir.shape.dim(0)) {
            (_, Dim::Static(0)) => return Err(format!("ir {ir} is empty")),
            (l, Dim::Static(1)) => l.clone(),
            (Dim::Static(0), _) => return Err(format!("x {x} has no samples")),
            (Dim::Static(l), Dim::Static(m)) => {
                Dim::Static(l.checked_add(m - 1).ok_or_else(|| format!("{l} + {m} − 1 overflows"))?)
            }
            _ => return Err(format!("x {x} and ir {ir} need static lengths for L + M − 1")),
        };
        let mut dims = x.shape.0.clone();
        let last = dims.len() - 1;
        dims[last] = out;
        Ok(vec![TensorType::new(x.dtype, Shape(dims))])
    }
}

impl OpDef for ComplexNormSq {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        c64_only("z", &inputs[0])?;
        Ok(vec![inputs[0].with_dtype(DType::F32)])
    }
}

impl OpDef for ComplexNormSqBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (z, g) = (&inputs[0], &inputs[1]);
        c64_only("z", z)?;
        if *g != z.with_dtype(DType::F32) {
            return Err(format!("g {g} must be {} (the f32 type of |z|²)", z.with_dtype(DType::F32)));
        }
        Ok(vec![z.clone()])
    }
}

impl OpDef for Conjugate {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        c64_only("z", &inputs[0])?;
        Ok(vec![inputs[0].clone()])
    }
}

/// Builders for the signal family.
impl crate::Graph {
    /// DFT of `x` along its last axis.
    pub fn fft(&mut self, x: crate::ValueId, inverse: bool, norm: FftNorm) -> crate::Result<crate::ValueId> {
        self.add1(Fft { inverse, norm }, &[x])
    }

    /// One gated radix-2 stage; `n_fft` is read from `state [B, n_fft, 2]`.
    pub fn fft_butterfly_stage(
        &mut self,
        stage: u32,
        state: crate::ValueId,
        gate: crate::ValueId,
        rev: crate::ValueId,
        tw_re: crate::ValueId,
        tw_im: crate::ValueId,
    ) -> crate::Result<crate::ValueId> {
        let n_fft = self.ty(state).shape.dims().get(1).and_then(Dim::as_static).unwrap_or(0) as u32;
        self.add1(FftButterflyStage { stage, n_fft }, &[state, gate, rev, tw_re, tw_im])
    }

    /// Whisper log-mel features of a real-block spectrum.
    pub fn log_mel(&mut self, spectrum: crate::ValueId, filters: crate::ValueId, per_frame_floor: bool) -> crate::Result<crate::ValueId> {
        self.add1(LogMel { per_frame_floor }, &[spectrum, filters])
    }

    /// Gradient of [`LogMel`] w.r.t. the spectrum.
    pub fn log_mel_backward(&mut self, spectrum: crate::ValueId, filters: crate::ValueId, dy: crate::ValueId, per_frame_floor: bool) -> crate::Result<crate::ValueId> {
        self.add1(LogMelBackward { per_frame_floor }, &[spectrum, filters, dy])
    }

    /// Top-`k` Welch PSD peaks per batch item of `n_segments` spectra.
    pub fn welch_peaks(&mut self, spectrum: crate::ValueId, k: usize, n_segments: usize) -> crate::Result<crate::ValueId> {
        self.add1(WelchPeaks { k, n_segments }, &[spectrum])
    }

    /// Full convolution of `x` with the impulse response `ir`, partitioned by `block`.
    pub fn partitioned_conv(&mut self, x: crate::ValueId, ir: crate::ValueId, block: usize) -> crate::Result<crate::ValueId> {
        self.add1(PartitionedConv { block }, &[x, ir])
    }

    /// `|z|²` of a C64 tensor, as F32.
    pub fn complex_norm_sq(&mut self, z: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(ComplexNormSq {}, &[z])
    }

    /// `2·g·z`, the gradient of [`ComplexNormSq`].
    pub fn complex_norm_sq_backward(&mut self, z: crate::ValueId, g: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(ComplexNormSqBackward {}, &[z, g])
    }

    /// Complex conjugate of a C64 tensor.
    pub fn conjugate(&mut self, z: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(Conjugate {}, &[z])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    #[test]
    fn fft_checks_the_block_layout() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[4, 802]));
        assert!(g.fft(x, false, FftNorm::Backward).is_ok());
        let odd = g.input("odd", f32s(&[4, 401]));
        assert!(g.fft(odd, false, FftNorm::Ortho).unwrap_err().to_string().contains("2N re/im blocks"));
        let z = g.input("z", TensorType::of(DType::C64, &[4, 401]));
        assert!(g.fft(z, true, FftNorm::Forward).is_ok());
        let h = g.input("h", TensorType::of(DType::F16, &[4, 8]));
        assert!(g.fft(h, false, FftNorm::Backward).unwrap_err().to_string().contains("got f16"));
        // `norm` may be left out of the text form and defaults to Backward.
        let op = crate::text::parse_op("Fft(inverse:true)").unwrap();
        assert_eq!(op, crate::Op::Fft(Fft { inverse: true, norm: FftNorm::Backward }));
    }

    #[test]
    fn log_mel_whisper_shapes() {
        let mut g = Graph::new();
        let spec = g.input("spec", f32s(&[2, 3000, 800]));
        let filters = g.param("mel", f32s(&[80, 201]));
        let y = g.log_mel(spec, filters, false).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 3000, 80]));
        let dx = g.log_mel_backward(spec, filters, y, false).unwrap();
        assert_eq!(g.ty(dx), g.ty(spec));
        let bad = g.param("bad", f32s(&[80, 200]));
        let e = g.log_mel(spec, bad, false).unwrap_err().to_string();
        assert!(e.contains("must be [n_mels, 201] for n_fft = 400"), "{e}");
    }

    #[test]
    fn welch_and_partitioned_conv() {
        let mut g = Graph::new();
        let s = g.input("s", f32s(&[12, 512]));
        let p = g.welch_peaks(s, 5, 4).unwrap();
        assert_eq!(g.ty(p), &f32s(&[3, 10]));
        assert!(g.welch_peaks(s, 5, 5).unwrap_err().to_string().contains("multiple of n_segments 5"));
        let x = g.input("x", TensorType::new(DType::F32, Shape(vec!["B".into(), 48000.into()])));
        let ir = g.param("ir", f32s(&[4800]));
        let y = g.partitioned_conv(x, ir, 1024).unwrap();
        assert_eq!(g.ty(y).to_string(), "f32[B, 52799]");
    }

    #[test]
    fn butterfly_and_complex_ops() {
        let mut g = Graph::new();
        let st = g.input("st", f32s(&[2, 16, 2]));
        let v = g.param("v", f32s(&[8]));
        assert!(g.fft_butterfly_stage(3, st, v, v, v, v).is_ok());
        let e = g.fft_butterfly_stage(4, st, v, v, v, v).unwrap_err().to_string();
        assert!(e.contains("stage 4 must be below log2(n_fft) = 4"), "{e}");
        let z = g.input("z", TensorType::of(DType::C64, &[3, 5]));
        let n = g.complex_norm_sq(z).unwrap();
        assert_eq!(g.ty(n), &f32s(&[3, 5]));
        let dz = g.complex_norm_sq_backward(z, n).unwrap();
        assert_eq!(g.ty(dz), g.ty(z));
        assert!(g.conjugate(n).unwrap_err().to_string().contains("must be c64"));
    }
}
