//! Shape manipulation: reshape, transpose, slicing, concatenation, broadcasting, reversal,
//! padding and the in-place KV-cache append (OPS.md §9).
//!
//! Bounds that involve a symbolic dim (a `Narrow` range, a `Slice` end) cannot be decided
//! here; they are checked when the symbol is bound at run time.

use super::{Arity, OpDef};
use crate::{DType, Dim, Shape, TensorType};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One entry of a `Reshape` or `Expand` target: a size (`-1` = inferred by `Reshape`, kept
/// from the input by `Expand`) or the name of a symbolic dim.
///
/// OPS.md types these targets `Vec<i64>`; sizes are exactly that. Symbols are an extension
/// so that targets can keep several symbolic dims (`[B, S, 768] → [B, S, 12, 64]`), which a
/// single `-1` cannot express. Prints as an integer or a quoted name: `[-1, "S", 64]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TargetDim {
    Size(i64),
    Sym(String),
}

/// Replaces symbol entries that `sizes` knows by their sizes.
fn bind_targets(targets: &mut [TargetDim], sizes: &dyn Fn(&str) -> Option<usize>) {
    for t in targets {
        if let TargetDim::Sym(s) = t {
            if let Some(n) = sizes(s) {
                *t = TargetDim::Size(n as i64);
            }
        }
    }
}

impl From<i64> for TargetDim {
    fn from(n: i64) -> Self {
        TargetDim::Size(n)
    }
}

impl From<&Dim> for TargetDim {
    fn from(d: &Dim) -> Self {
        match d {
            Dim::Static(n) => TargetDim::Size(*n as i64),
            Dim::Sym(s) => TargetDim::Sym(s.clone()),
        }
    }
}

impl fmt::Display for TargetDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetDim::Size(n) => write!(f, "{n}"),
            TargetDim::Sym(s) => f.write_str(s),
        }
    }
}

impl Serialize for TargetDim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TargetDim::Size(n) => s.serialize_i64(*n),
            TargetDim::Sym(name) => s.serialize_str(name),
        }
    }
}

impl<'de> Deserialize<'de> for TargetDim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TargetDim, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = TargetDim;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer size or a symbol name")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TargetDim, E> {
                Ok(TargetDim::Size(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TargetDim, E> {
                i64::try_from(v)
                    .map(TargetDim::Size)
                    .map_err(|_| E::custom(format!("size {v} is too large")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TargetDim, E> {
                Ok(TargetDim::Sym(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Checks that a symbol in an attribute is a name the text format can print and read back.
pub(crate) fn check_symbol(s: &str) -> Result<(), String> {
    let mut chars = s.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("`{s}` is not a symbol name (a letter or `_`, then letters, digits or `_`)"))
    }
}

/// `[a, b, c]` as error messages show a target.
fn show_target(t: &[TargetDim]) -> String {
    let parts: Vec<String> = t.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// How `Pad` fills the new cells (NumPy `pad` modes constant / reflect / edge / wrap).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PadMode {
    /// Fill with this value (cast to the tensor's dtype; it must be representable exactly).
    Constant(f64),
    /// Mirror excluding the edge: `abcd → cb|abcd|cb`; each pad must be below the extent.
    Reflect,
    /// Repeat the edge cell; the axis must not be empty.
    Replicate,
    /// Wrap around: `abcd → cd|abcd|ab`; each pad must not exceed the extent.
    Circular,
}

/// Row-major reinterpretation with the same element count (a zero-copy view).
///
/// `-1` (at most one) is inferred; `0` is a literal zero-size dim (NumPy, not ONNX's
/// "copy"). A `-1` over a symbolic input becomes the one symbol left unmatched when that
/// symbol alone accounts for it (`[B, 4, 8] → [-1, 32]` gives `[B, 32]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reshape {
    pub new_shape: Vec<TargetDim>,
}

/// Permutes axes: `out.dims[i] = in.dims[perm[i]]` (`jnp.transpose`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transpose {
    pub perm: Vec<usize>,
}

/// Contiguous slice `[start, start + len)` of one axis (`torch.narrow`, `lax.slice_in_dim`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Narrow {
    pub axis: usize,
    pub start: usize,
    pub len: usize,
}

/// Strided slice of one axis: `out[.., j, ..] = in[.., start + j·step, ..]` for `j < len`;
/// `step ≠ 0` and may be negative; every index read must lie in `[0, dim)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    pub axis: usize,
    pub start: usize,
    pub len: usize,
    pub step: i64,
}

/// Joins one or more tensors of one dtype along `axis`; every other dim must match.
///
/// Per OPS.md, an extent mixing static and symbolic parts is given the (first) symbol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Concat {
    pub axis: usize,
}

/// NumPy `broadcast_to(x, target_shape)`: rank may grow on the left; `-1` keeps the input
/// dim; a size-1 input dim stretches to any target (a symbol included).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expand {
    pub target_shape: Vec<TargetDim>,
}

/// Flips each listed axis: `out[.., i, ..] = in[.., d−1−i, ..]` (`jnp.flip`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reverse {
    pub axes: Vec<usize>,
}

/// Grows each axis by `pads[axis] = [before, after]` cells filled per `mode`.
/// Negative pads do not exist (crop with `Narrow`); padded axes must be static.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pad {
    pub pads: Vec<[usize; 2]>,
    pub mode: PadMode,
}

/// Writes `row` into `cache` at `pos` along `axis` in place and returns the prefix
/// `cache[.., 0..pos+1, ..]`, a view aliasing the cache; inputs `(cache, row)`.
///
/// With a third input `at` (`[1]` I64, read at run time; `pos` must then be 0), `row` may
/// hold several steps along `axis`, which go to `at..at + steps`, and the output is the whole
/// cache: one compiled graph serves every position of a decode loop, and attention hides the
/// slots not yet written with a mask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvAppend {
    pub axis: usize,
    pub pos: usize,
}

/// Checks that `axis` (already normalized, per OPS.md's unsigned attributes) names an axis of `x`.
fn check_axis(axis: usize, x: &TensorType) -> Result<(), String> {
    if axis < x.rank() {
        Ok(())
    } else {
        Err(format!("axis {axis} is out of range for {x} (rank {})", x.rank()))
    }
}

/// Static product and symbol names (sorted, with repeats) of a list of dims.
fn factor(dims: &[Dim]) -> Result<(usize, Vec<&str>), String> {
    let mut product = 1usize;
    let mut syms = Vec::new();
    for d in dims {
        match d {
            Dim::Static(n) => {
                product = product
                    .checked_mul(*n)
                    .ok_or_else(|| format!("the element count of {} overflows", Shape(dims.to_vec())))?;
            }
            Dim::Sym(s) => syms.push(s.as_str()),
        }
    }
    syms.sort_unstable();
    Ok((product, syms))
}

/// `B·S·64`, the element count of a factored shape.
fn show_count(product: usize, syms: &[&str]) -> String {
    let mut parts: Vec<String> = syms.iter().map(|s| s.to_string()).collect();
    if product != 1 || parts.is_empty() {
        parts.push(product.to_string());
    }
    parts.join("·")
}

/// Removes each of `part` once from `whole` (both sorted); `None` if `part` is not contained.
fn sub_multiset<'a>(whole: &[&'a str], part: &[&str]) -> Option<Vec<&'a str>> {
    let mut rest = whole.to_vec();
    for p in part {
        let at = rest.iter().position(|r| r == p)?;
        rest.remove(at);
    }
    Some(rest)
}

impl OpDef for Reshape {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        bind_targets(&mut self.new_shape, sizes);
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let target = show_target(&self.new_shape);
        let mut infer_at = None;
        let mut dims = Vec::with_capacity(self.new_shape.len());
        for (i, t) in self.new_shape.iter().enumerate() {
            match t {
                TargetDim::Size(-1) => {
                    if infer_at.replace(i).is_some() {
                        return Err(format!("new_shape {target} has more than one -1"));
                    }
                    dims.push(Dim::Static(0)); // placeholder, set below
                }
                TargetDim::Size(n) if *n < -1 => {
                    return Err(format!("new_shape {target} has a negative size {n}"));
                }
                TargetDim::Size(n) => dims.push(Dim::Static(*n as usize)),
                TargetDim::Sym(s) => {
                    check_symbol(s)?;
                    dims.push(Dim::Sym(s.clone()));
                }
            }
        }
        let (p_in, s_in) = factor(x.shape.dims())?;
        let known: Vec<Dim> = dims.iter().enumerate().filter(|(i, _)| Some(*i) != infer_at).map(|(_, d)| d.clone()).collect();
        let (p_out, s_out) = factor(&known)?;
        let count_in = show_count(p_in, &s_in);
        let mismatch = || format!("cannot reshape {} ({count_in} elements) to {target}", x.shape);
        let Some(at) = infer_at else {
            // Zero-size on both sides matches whatever the symbols are.
            let same = (p_in == 0 && p_out == 0) || (p_in == p_out && s_in == s_out);
            return if same { Ok(vec![TensorType::new(x.dtype, Shape(dims))]) } else { Err(mismatch()) };
        };
        let inferred = if p_out == 0 {
            return Err(format!("new_shape {target} has a -1 beside a zero-size dim, so the -1 is ambiguous"));
        } else if p_in == 0 {
            Dim::Static(0)
        } else {
            let rest = sub_multiset(&s_in, &s_out).ok_or_else(|| {
                format!("{}: new_shape {target} names symbols that {} does not hold", mismatch(), x.shape)
            })?;
            if p_in % p_out != 0 {
                return Err(format!("{}: {p_in} is not a multiple of {p_out}", mismatch()));
            }
            let q = p_in / p_out;
            match rest.as_slice() {
                [] => Dim::Static(q),
                [s] if q == 1 => Dim::Sym(s.to_string()),
                _ => {
                    return Err(format!(
                        "{}: the -1 would be {}, which one dim cannot express; name the symbols in new_shape",
                        mismatch(),
                        show_count(q, &rest)
                    ))
                }
            }
        };
        dims[at] = inferred;
        Ok(vec![TensorType::new(x.dtype, Shape(dims))])
    }
}

impl OpDef for Transpose {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let mut seen = vec![false; x.rank()];
        let is_perm = self.perm.len() == x.rank()
            && self.perm.iter().all(|&p| p < x.rank() && !std::mem::replace(&mut seen[p], true));
        if !is_perm {
            return Err(format!("perm {:?} is not a permutation of the {} axes of {x}", self.perm, x.rank()));
        }
        let dims = self.perm.iter().map(|&p| x.shape.dim(p).clone()).collect();
        Ok(vec![TensorType::new(x.dtype, Shape(dims))])
    }
}

/// `x` with the extent of `axis` replaced.
fn with_dim(x: &TensorType, axis: usize, d: Dim) -> TensorType {
    let mut dims = x.shape.0.clone();
    dims[axis] = d;
    TensorType::new(x.dtype, Shape(dims))
}

impl OpDef for Narrow {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        check_axis(self.axis, x)?;
        let end = self.start.checked_add(self.len);
        let extent = x.shape.dim(self.axis);
        if end.is_none() || extent.as_static().is_some_and(|d| end > Some(d)) {
            return Err(format!(
                "range [{}, {}+{}) exceeds extent {extent} of axis {} of {x}",
                self.start, self.start, self.len, self.axis
            ));
        }
        Ok(vec![with_dim(x, self.axis, Dim::Static(self.len))])
    }
}

impl OpDef for Slice {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        check_axis(self.axis, x)?;
        if self.step == 0 {
            return Err("step must not be 0".into());
        }
        if self.len > 0 {
            // The first and last index read; i128 cannot overflow for usize/i64 operands.
            let first = self.start as i128;
            let last = first + (self.len as i128 - 1) * self.step as i128;
            let (lo, hi) = (first.min(last), first.max(last));
            let extent = x.shape.dim(self.axis).as_static();
            if lo < 0 || extent.is_some_and(|d| hi >= d as i128) {
                let shown = extent.map_or_else(|| x.shape.dim(self.axis).to_string(), |d| d.to_string());
                return Err(format!(
                    "start {} with step {} and len {} reads index {} on axis {} of {x}, outside [0, {shown})",
                    self.start,
                    self.step,
                    self.len,
                    if lo < 0 { lo } else { hi },
                    self.axis
                ));
            }
        }
        Ok(vec![with_dim(x, self.axis, Dim::Static(self.len))])
    }
}

impl OpDef for Concat {
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let first = &inputs[0];
        check_axis(self.axis, first)?;
        let mut total = Some(0usize);
        let mut symbol = None;
        for (i, t) in inputs.iter().enumerate() {
            if t.dtype != first.dtype {
                return Err(format!("input {i} {t} has another dtype than input 0 {first}"));
            }
            let others_match = t.rank() == first.rank()
                && (0..t.rank()).all(|a| a == self.axis || t.shape.dim(a) == first.shape.dim(a));
            if !others_match {
                return Err(format!(
                    "input {i} {} does not match input 0 {} outside axis {}",
                    t.shape, first.shape, self.axis
                ));
            }
            match t.shape.dim(self.axis) {
                Dim::Static(n) => total = total.and_then(|s| s.checked_add(*n)),
                Dim::Sym(s) => {
                    symbol.get_or_insert_with(|| s.clone());
                }
            }
        }
        let extent = match (symbol, total) {
            (Some(s), _) => Dim::Sym(s),
            (None, Some(n)) => Dim::Static(n),
            (None, None) => return Err("the concatenated extent overflows".into()),
        };
        Ok(vec![with_dim(first, self.axis, extent)])
    }
}

impl OpDef for Expand {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        bind_targets(&mut self.target_shape, sizes);
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        let target = show_target(&self.target_shape);
        let Some(lead) = self.target_shape.len().checked_sub(x.rank()) else {
            return Err(format!("target {target} has a lower rank than {}", x.shape));
        };
        let mut dims = Vec::with_capacity(self.target_shape.len());
        for (i, t) in self.target_shape.iter().enumerate() {
            match t {
                TargetDim::Size(n) if *n < -1 => return Err(format!("target {target} has a negative size {n}")),
                TargetDim::Sym(s) => check_symbol(s)?,
                TargetDim::Size(_) => {}
            }
            let Some(d) = i.checked_sub(lead).map(|j| x.shape.dim(j)) else {
                match t {
                    TargetDim::Size(-1) => {
                        return Err(format!("target {target}: the -1 at new axis {i} has no input dim to keep"))
                    }
                    TargetDim::Size(n) => dims.push(Dim::Static(*n as usize)),
                    TargetDim::Sym(s) => dims.push(Dim::Sym(s.clone())),
                }
                continue;
            };
            let out = match (d, t) {
                (_, TargetDim::Size(-1)) => d.clone(),
                (Dim::Static(a), TargetDim::Size(n)) if *a as i64 == *n || *a == 1 => Dim::Static(*n as usize),
                (Dim::Sym(a), TargetDim::Sym(b)) if a == b => d.clone(),
                (Dim::Static(1), TargetDim::Sym(b)) => Dim::Sym(b.clone()),
                _ => {
                    return Err(format!(
                        "cannot expand {} to {target}: axis {i} has {d}, which is neither 1 nor {t} (use -1 to keep a dim)",
                        x.shape
                    ))
                }
            };
            dims.push(out);
        }
        Ok(vec![TensorType::new(x.dtype, Shape(dims))])
    }
}

impl OpDef for Reverse {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        for (i, &a) in self.axes.iter().enumerate() {
            check_axis(a, x)?;
            if self.axes[..i].contains(&a) {
                return Err(format!("axes {:?} list axis {a} twice", self.axes));
            }
        }
        Ok(vec![x.clone()])
    }
}

/// Whether `v` is exactly representable in `dtype` (so a `Constant` fill loses nothing).
fn fill_fits(v: f64, dtype: DType) -> bool {
    let whole_in = |lo: f64, hi: f64| v.fract() == 0.0 && (lo..=hi).contains(&v);
    match dtype {
        DType::Bool => v == 0.0 || v == 1.0,
        DType::I8 => whole_in(i8::MIN as f64, i8::MAX as f64),
        DType::U8 => whole_in(0.0, u8::MAX as f64),
        DType::I16 => whole_in(i16::MIN as f64, i16::MAX as f64),
        DType::I32 => whole_in(i32::MIN as f64, i32::MAX as f64),
        DType::U32 => whole_in(0.0, u32::MAX as f64),
        DType::I64 => whole_in(-(2f64.powi(63)), 2f64.powi(63) - 1.0),
        DType::U16 => whole_in(0.0, u16::MAX as f64),
        DType::U64 => whole_in(0.0, 2f64.powi(64) - 1.0),
        DType::I4 => whole_in(-8.0, 7.0),
        DType::U4 => whole_in(0.0, 15.0),
        DType::I2 => whole_in(-2.0, 1.0),
        DType::U2 => whole_in(0.0, 3.0),
        // The minifloats are storage types: only their zero fills (E8M0 has none).
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F4E2M1 => v == 0.0,
        DType::F8E8M0 => false,
        // Floats round to nearest (as `Cast` does); NaN and ±inf are valid fills.
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 | DType::C64 => true,
    }
}

impl OpDef for Pad {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        if self.pads.len() != x.rank() {
            return Err(format!("pads has {} entries for the {} axes of {x}", self.pads.len(), x.rank()));
        }
        if let PadMode::Constant(v) = self.mode {
            if !fill_fits(v, x.dtype) {
                return Err(format!("fill value {v} is not exactly representable in {}", x.dtype));
            }
        }
        let mut dims = Vec::with_capacity(x.rank());
        for (axis, &[before, after]) in self.pads.iter().enumerate() {
            if before == 0 && after == 0 {
                dims.push(x.shape.dim(axis).clone());
                continue;
            }
            let d = x.static_dim(axis).map_err(|e| format!("cannot pad {e}"))?;
            let pad = before.max(after);
            let bad = match self.mode {
                PadMode::Constant(_) => None,
                PadMode::Reflect if pad >= d => Some("Reflect needs each pad below the extent"),
                PadMode::Replicate if d == 0 => Some("Replicate needs a non-empty axis"),
                PadMode::Circular if pad > d => Some("Circular needs each pad at most the extent"),
                _ => None,
            };
            if let Some(why) = bad {
                return Err(format!("{why}: pads [{before}, {after}] on axis {axis} of extent {d} in {x}"));
            }
            let grown = d
                .checked_add(before)
                .and_then(|n| n.checked_add(after))
                .ok_or_else(|| format!("padded extent of axis {axis} overflows"))?;
            dims.push(Dim::Static(grown));
        }
        Ok(vec![TensorType::new(x.dtype, Shape(dims))])
    }
}

impl OpDef for KvAppend {
    fn arity(&self) -> Arity {
        Arity::Between(2, 3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (cache, row) = (&inputs[0], &inputs[1]);
        check_axis(self.axis, cache)?;
        if row.dtype != cache.dtype {
            return Err(format!("row {row} must have the dtype of the cache {cache}"));
        }
        let dynamic = inputs.len() == 3;
        let fits = row.rank() == cache.rank()
            && (0..row.rank()).all(|a| {
                if a == self.axis {
                    dynamic || row.shape.dim(a) == &Dim::Static(1)
                } else {
                    row.shape.dim(a) == cache.shape.dim(a)
                }
            });
        if dynamic {
            let at = &inputs[2];
            if at.dtype != DType::I64 || at.shape != Shape(vec![Dim::Static(1)]) {
                return Err(format!("the position input {at} must be i64[1]"));
            }
            if self.pos != 0 {
                return Err(format!("pos {} must be 0 when the position is an input", self.pos));
            }
            if !fits {
                return Err(format!("rows {} must match the cache {} except along axis {}", row.shape, cache.shape, self.axis));
            }
            return Ok(vec![cache.clone()]);
        }
        if !fits {
            let mut want = cache.shape.clone();
            want.0[self.axis] = Dim::Static(1);
            return Err(format!("row {} must be {want}, one step of the cache {} along axis {}", row.shape, cache.shape, self.axis));
        }
        let capacity = cache.static_dim(self.axis).map_err(|e| format!("the cache capacity must be static: {e}"))?;
        if self.pos >= capacity {
            return Err(format!("pos {} is past the capacity {capacity} of axis {} of the cache {cache}", self.pos, self.axis));
        }
        Ok(vec![with_dim(cache, self.axis, Dim::Static(self.pos + 1))])
    }
    fn mutated_inputs(&self) -> Vec<usize> {
        vec![0]
    }
    fn aliased_outputs(&self, inputs: usize) -> Vec<(usize, usize)> {
        if inputs == 3 {
            vec![(0, 0)]
        } else {
            Vec::new()
        }
    }
}

/// Builders for the shape family.
impl crate::Graph {
    /// Reshapes `x` to `new_shape` (`-1` inferred, `0` a literal zero-size dim).
    pub fn reshape(&mut self, x: crate::ValueId, new_shape: &[i64]) -> crate::Result<crate::ValueId> {
        let new_shape = new_shape.iter().map(|&n| TargetDim::Size(n)).collect();
        self.add1(Reshape { new_shape }, &[x])
    }

    /// Reshapes `x` to a shape that may name symbolic dims.
    pub fn reshape_to(&mut self, x: crate::ValueId, shape: &Shape) -> crate::Result<crate::ValueId> {
        let new_shape = shape.dims().iter().map(TargetDim::from).collect();
        self.add1(Reshape { new_shape }, &[x])
    }

    /// Permutes the axes of `x`: output axis `i` is input axis `perm[i]`.
    pub fn transpose(&mut self, x: crate::ValueId, perm: &[usize]) -> crate::Result<crate::ValueId> {
        self.add1(Transpose { perm: perm.to_vec() }, &[x])
    }

    /// `x[.., start..start+len, ..]` on `axis`.
    pub fn narrow(&mut self, x: crate::ValueId, axis: usize, start: usize, len: usize) -> crate::Result<crate::ValueId> {
        self.add1(Narrow { axis, start, len }, &[x])
    }

    /// `len` elements of `axis` read from `start` in steps of `step`.
    pub fn slice(&mut self, x: crate::ValueId, axis: usize, start: usize, len: usize, step: i64) -> crate::Result<crate::ValueId> {
        self.add1(Slice { axis, start, len, step }, &[x])
    }

    /// Joins `xs` along `axis`.
    pub fn concat(&mut self, xs: &[crate::ValueId], axis: usize) -> crate::Result<crate::ValueId> {
        self.add1(Concat { axis }, xs)
    }

    /// Broadcasts `x` to `target_shape` (`-1` keeps the input dim).
    pub fn expand(&mut self, x: crate::ValueId, target_shape: &[i64]) -> crate::Result<crate::ValueId> {
        let target_shape = target_shape.iter().map(|&n| TargetDim::Size(n)).collect();
        self.add1(Expand { target_shape }, &[x])
    }

    /// Broadcasts `x` to a shape that may name symbolic dims.
    pub fn expand_to(&mut self, x: crate::ValueId, shape: &Shape) -> crate::Result<crate::ValueId> {
        let target_shape = shape.dims().iter().map(TargetDim::from).collect();
        self.add1(Expand { target_shape }, &[x])
    }

    /// Flips `x` along each of `axes`.
    pub fn reverse(&mut self, x: crate::ValueId, axes: &[usize]) -> crate::Result<crate::ValueId> {
        self.add1(Reverse { axes: axes.to_vec() }, &[x])
    }

    /// Pads every axis of `x` by `[before, after]` cells.
    pub fn pad(&mut self, x: crate::ValueId, pads: &[[usize; 2]], mode: PadMode) -> crate::Result<crate::ValueId> {
        self.add1(Pad { pads: pads.to_vec(), mode }, &[x])
    }

    /// Writes `row` into `cache` at `pos` along `axis` (in place); returns the filled prefix.
    pub fn kv_append(&mut self, cache: crate::ValueId, row: crate::ValueId, axis: usize, pos: usize) -> crate::Result<crate::ValueId> {
        self.add1(KvAppend { axis, pos }, &[cache, row])
    }

    /// Writes the steps `rows` into `cache` along `axis` at the run-time position `at`
    /// (`[1]` I64), in place; returns the whole cache.
    pub fn kv_append_at(&mut self, cache: crate::ValueId, rows: crate::ValueId, at: crate::ValueId, axis: usize) -> crate::Result<crate::ValueId> {
        self.add1(KvAppend { axis, pos: 0 }, &[cache, rows, at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn ty(text: &str) -> TensorType {
        TensorType::parse(text).unwrap()
    }

    fn infer(op: impl OpDef, inputs: &[&str]) -> Result<String, String> {
        let types: Vec<TensorType> = inputs.iter().map(|t| ty(t)).collect();
        op.infer(&types).map(|out| out.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
    }

    fn reshape(dims: &[TargetDim]) -> Reshape {
        Reshape { new_shape: dims.to_vec() }
    }

    fn s(n: i64) -> TargetDim {
        TargetDim::Size(n)
    }

    fn sym(name: &str) -> TargetDim {
        TargetDim::Sym(name.into())
    }

    #[test]
    fn reshape_static_rules() {
        assert_eq!(infer(reshape(&[s(3), s(-1)]), &["f32[2, 6]"]).unwrap(), "f32[3, 4]");
        assert_eq!(infer(reshape(&[]), &["f32[1, 1]"]).unwrap(), "f32[]");
        assert_eq!(infer(reshape(&[s(0), s(5)]), &["f32[3, 0]"]).unwrap(), "f32[0, 5]");
        assert_eq!(infer(reshape(&[s(-1)]), &["f32[3, 0]"]).unwrap(), "f32[0]");
        let e = infer(reshape(&[s(5)]), &["f32[2, 3]"]).unwrap_err();
        assert_eq!(e, "cannot reshape [2, 3] (6 elements) to [5]");
        assert!(infer(reshape(&[s(-1), s(-1)]), &["f32[4]"]).unwrap_err().contains("more than one -1"));
        assert!(infer(reshape(&[s(-2), s(-2)]), &["f32[4]"]).unwrap_err().contains("negative size -2"));
        assert!(infer(reshape(&[s(4), s(-1)]), &["f32[6]"]).unwrap_err().contains("not a multiple"));
        assert!(infer(reshape(&[s(0), s(-1)]), &["f32[0]"]).unwrap_err().contains("ambiguous"));
    }

    #[test]
    fn reshape_symbolic_rules() {
        // -1 takes the single unmatched symbol.
        assert_eq!(infer(reshape(&[s(-1), s(32)]), &["f32[B, 4, 8]"]).unwrap(), "f32[B, 32]");
        // Named symbols pass through; several at once.
        let heads = reshape(&[sym("B"), sym("S"), s(12), s(-1)]);
        assert_eq!(infer(heads, &["bf16[B, S, 768]"]).unwrap(), "bf16[B, S, 12, 64]");
        assert_eq!(infer(reshape(&[s(-1), s(64)]), &["f32[B, S, 64]"]).unwrap_err(),
            "cannot reshape [B, S, 64] (B·S·64 elements) to [-1, 64]: the -1 would be B·S, which one dim cannot express; name the symbols in new_shape");
        assert!(infer(reshape(&[sym("B x"), s(-1)]), &["f32[B, 4]"]).unwrap_err().contains("not a symbol name"));
        assert!(infer(Expand { target_shape: vec![sym("")] }, &["f32[1]"]).unwrap_err().contains("not a symbol name"));
        assert!(infer(reshape(&[s(-1), s(8)]), &["f32[B, 32]"]).unwrap_err().contains("would be B·4"));
        assert!(infer(reshape(&[s(8)]), &["f32[B, 4]"]).unwrap_err().contains("B·4 elements"));
        assert!(infer(reshape(&[sym("S"), s(-1)]), &["f32[B, 4]"]).unwrap_err().contains("does not hold"));
        assert_eq!(infer(reshape(&[s(4), sym("B")]), &["f32[B, 4]"]).unwrap(), "f32[4, B]");
    }

    #[test]
    fn transpose_narrow_slice() {
        assert_eq!(infer(Transpose { perm: vec![2, 0, 1] }, &["f32[B, 3, 4]"]).unwrap(), "f32[4, B, 3]");
        assert!(infer(Transpose { perm: vec![0, 0, 1] }, &["f32[2, 3, 4]"]).unwrap_err().contains("not a permutation"));
        assert!(infer(Transpose { perm: vec![1, 0] }, &["f32[2, 3, 4]"]).is_err());
        assert_eq!(infer(Narrow { axis: 1, start: 0, len: 1 }, &["f32[B, S, 8]"]).unwrap(), "f32[B, 1, 8]");
        assert!(infer(Narrow { axis: 1, start: 3, len: 2 }, &["f32[2, 4]"]).unwrap_err().contains("exceeds extent 4"));
        assert!(infer(Narrow { axis: 0, start: usize::MAX, len: 2 }, &["f32[S]"]).is_err());
        let sl = |start, len, step| Slice { axis: 0, start, len, step };
        assert_eq!(infer(sl(1, 3, 2), &["f32[7]"]).unwrap(), "f32[3]");
        assert!(infer(sl(1, 4, 2), &["f32[7]"]).unwrap_err().contains("reads index 7"));
        assert_eq!(infer(sl(6, 7, -1), &["f32[7]"]).unwrap(), "f32[7]");
        assert!(infer(sl(5, 7, -1), &["f32[7]"]).unwrap_err().contains("reads index -1"));
        assert_eq!(infer(sl(9, 0, 1), &["f32[7]"]).unwrap(), "f32[0]");
        assert!(infer(sl(0, 1, 0), &["f32[7]"]).unwrap_err().contains("step must not be 0"));
        assert_eq!(infer(sl(0, 4, 3), &["f32[S]"]).unwrap(), "f32[4]");
        assert!(infer(sl(2, 4, -1), &["f32[S]"]).unwrap_err().contains("outside [0, S)"));
    }

    #[test]
    fn concat_rules() {
        let c = || Concat { axis: 1 };
        assert_eq!(infer(c(), &["f32[B, 2]", "f32[B, 3]", "f32[B, 0]"]).unwrap(), "f32[B, 5]");
        assert_eq!(infer(c(), &["f32[B, 2]", "f32[B, S]"]).unwrap(), "f32[B, S]");
        assert!(infer(c(), &["f32[B, 2]", "f32[C, 3]"]).unwrap_err().contains("outside axis 1"));
        assert!(infer(c(), &["f32[2, 2]", "f32[2, 2, 1]"]).is_err());
        assert!(infer(c(), &["f32[2, 2]", "f16[2, 2]"]).unwrap_err().contains("dtype"));
        assert!(infer(Concat { axis: 0 }, &["f32[]"]).unwrap_err().contains("out of range"));
    }

    #[test]
    fn expand_rules() {
        let e = |t: &[TargetDim]| Expand { target_shape: t.to_vec() };
        assert_eq!(infer(e(&[s(2), s(-1), s(4)]), &["f32[B, 1]"]).unwrap(), "f32[2, B, 4]");
        assert_eq!(infer(e(&[sym("B"), sym("S"), s(8)]), &["f32[B, 1, 8]"]).unwrap(), "f32[B, S, 8]");
        assert_eq!(infer(e(&[s(0)]), &["f32[1]"]).unwrap(), "f32[0]");
        assert!(infer(e(&[s(4)]), &["f32[3]"]).unwrap_err().contains("neither 1 nor 4"));
        assert!(infer(e(&[s(4)]), &["f32[B]"]).unwrap_err().contains("use -1"));
        assert!(infer(e(&[s(-1), s(3)]), &["f32[3]"]).unwrap_err().contains("no input dim to keep"));
        assert!(infer(e(&[s(3)]), &["f32[1, 3]"]).unwrap_err().contains("lower rank"));
    }

    #[test]
    fn reverse_pad_kv_append() {
        assert_eq!(infer(Reverse { axes: vec![0, 2] }, &["f32[B, 3, 4]"]).unwrap(), "f32[B, 3, 4]");
        assert!(infer(Reverse { axes: vec![1, 1] }, &["f32[2, 3]"]).unwrap_err().contains("twice"));
        let pad = |pads: &[[usize; 2]], mode| Pad { pads: pads.to_vec(), mode };
        assert_eq!(infer(pad(&[[0, 0], [2, 1]], PadMode::Reflect), &["f32[B, 4]"]).unwrap(), "f32[B, 7]");
        assert!(infer(pad(&[[1, 0], [0, 0]], PadMode::Replicate), &["f32[B, 4]"]).unwrap_err().contains("symbolic"));
        assert!(infer(pad(&[[4, 0]], PadMode::Reflect), &["f32[4]"]).unwrap_err().contains("below the extent"));
        assert_eq!(infer(pad(&[[4, 4]], PadMode::Circular), &["f32[4]"]).unwrap(), "f32[12]");
        assert!(infer(pad(&[[5, 0]], PadMode::Circular), &["f32[4]"]).is_err());
        assert!(infer(pad(&[[1, 0]], PadMode::Replicate), &["f32[0]"]).is_err());
        assert!(infer(pad(&[[1, 0]], PadMode::Constant(0.5)), &["i32[3]"]).unwrap_err().contains("0.5"));
        assert_eq!(infer(pad(&[[1, 0]], PadMode::Constant(-1.0)), &["i8[3]"]).unwrap(), "i8[4]");
        assert!(infer(pad(&[[1, 0]], PadMode::Constant(0.0)), &["f32[3, 2]"]).unwrap_err().contains("entries"));
        let kv = KvAppend { axis: 2, pos: 5 };
        assert_eq!(kv.mutated_inputs(), vec![0]);
        assert_eq!(infer(kv.clone(), &["f16[B, 8, 128, 64]", "f16[B, 8, 1, 64]"]).unwrap(), "f16[B, 8, 6, 64]");
        assert!(infer(kv.clone(), &["f16[B, 8, 128, 64]", "f16[B, 8, 64]"]).unwrap_err().contains("one step"));
        assert!(infer(kv.clone(), &["f16[B, 8, 128, 64]", "f32[B, 8, 1, 64]"]).unwrap_err().contains("dtype"));
        assert!(infer(kv.clone(), &["f16[B, 8, T, 64]", "f16[B, 8, 1, 64]"]).unwrap_err().contains("static"));
        assert!(infer(kv, &["f16[B, 8, 5, 64]", "f16[B, 8, 1, 64]"]).unwrap_err().contains("capacity 5"));
        let at = KvAppend { axis: 2, pos: 0 };
        assert_eq!(infer(at.clone(), &["f32[1, 8, 128, 64]", "f32[1, 8, S, 64]", "i64[1]"]).unwrap(), "f32[1, 8, 128, 64]");
        assert!(infer(at.clone(), &["f32[1, 8, 128, 64]", "f32[1, 4, S, 64]", "i64[1]"]).unwrap_err().contains("except along axis 2"));
        assert!(infer(at.clone(), &["f32[1, 8, 128, 64]", "f32[1, 8, S, 64]", "i32[1]"]).unwrap_err().contains("i64[1]"));
        assert!(infer(KvAppend { axis: 2, pos: 3 }, &["f32[1, 8, 128, 64]", "f32[1, 8, 1, 64]", "i64[1]"]).unwrap_err().contains("must be 0"));
    }

    #[test]
    fn builders_print_and_parse_back() {
        let mut g = Graph::new();
        let x = g.input("x", ty("f32[B, S, 768]"));
        let h = g.reshape_to(x, &Shape(vec!["B".into(), "S".into(), 12.into(), 64.into()])).unwrap();
        let p = g.pad(h, &[[0, 0], [0, 0], [1, 1], [0, 0]], PadMode::Constant(0.0)).unwrap();
        g.set_outputs(vec![p]).unwrap();
        let text = g.to_string();
        assert!(text.contains("Reshape(new_shape:[\"B\",\"S\",12,64])(%0)"), "{text}");
        assert!(text.contains("Pad(pads:[(0,0),(0,0),(1,1),(0,0)],mode:Constant(0.0))(%1)"), "{text}");
        assert_eq!(crate::text::parse(&text).unwrap(), g);
        let e = g.reshape(x, &[5]).unwrap_err().to_string();
        assert!(e.starts_with("Reshape(%0: f32[B, S, 768]): cannot reshape"), "{e}");
    }
}
