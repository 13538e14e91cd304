//! Dimensions, shapes and tensor types, including symbolic dims and NumPy broadcasting.

use crate::DType;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One dimension: a known extent, or a named symbol whose size is bound at run time.
///
/// Equal symbols denote equal (unknown) sizes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(usize),
    Sym(String),
}

impl Dim {
    /// The extent, if known.
    pub fn as_static(&self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    /// A symbolic dim with this name.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(name.to_string())
    }

    /// Replaces a symbol that `sizes` knows by its size.
    pub fn bind(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        if let Dim::Sym(s) = self {
            if let Some(n) = sizes(s) {
                *self = Dim::Static(n);
            }
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Static(n)
    }
}

impl From<&str> for Dim {
    fn from(s: &str) -> Self {
        Dim::Sym(s.to_string())
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// Static dims serialize as integers, symbolic dims as strings.
impl Serialize for Dim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Dim::Static(n) => s.serialize_u64(*n as u64),
            Dim::Sym(name) => s.serialize_str(name),
        }
    }
}

impl<'de> Deserialize<'de> for Dim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dim, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Dim;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer or a symbol name")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dim, E> {
                Ok(Dim::Static(v as usize))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dim, E> {
                usize::try_from(v)
                    .map(Dim::Static)
                    .map_err(|_| E::custom(format!("negative dim {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dim, E> {
                Ok(Dim::Sym(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// An ordered list of dims, outermost first (row-major).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn new(dims: Vec<Dim>) -> Shape {
        Shape(dims)
    }

    /// A fully static shape.
    pub fn of(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Static(d)).collect())
    }

    /// The rank-0 shape of a scalar.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    pub fn dim(&self, axis: usize) -> &Dim {
        &self.0[axis]
    }

    /// The extents, if every dim is static.
    pub fn as_static(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::as_static).collect()
    }

    /// Element count, if every dim is static.
    pub fn numel(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |acc, d| Some(acc * d.as_static()?))
    }

    /// Replaces every symbol that `sizes` knows by its size.
    pub fn bind(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.0.iter_mut().for_each(|d| d.bind(sizes));
    }

    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| d.as_static().is_some())
    }

    /// Names of the symbolic dims, in order of first appearance.
    pub fn symbols(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for d in &self.0 {
            if let Dim::Sym(s) = d {
                if !out.contains(&s.as_str()) {
                    out.push(s);
                }
            }
        }
        out
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Self {
        Shape(dims)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// NumPy broadcasting of two shapes (OPS.md §0).
///
/// Ranks are right-aligned; a size-1 dim stretches; two different static sizes above 1 are
/// an error; two different symbols keep the first (they are assumed equal at run time).
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let rank = a.rank().max(b.rank());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = (i + a.rank()).checked_sub(rank).map(|j| &a.0[j]);
        let db = (i + b.rank()).checked_sub(rank).map(|j| &b.0[j]);
        let d = match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) => match (x, y) {
                (Dim::Static(1), o) | (o, Dim::Static(1)) => o.clone(),
                (Dim::Static(p), Dim::Static(q)) if p == q => x.clone(),
                (Dim::Static(_), Dim::Static(_)) => {
                    return Err(format!("shapes {a} and {b} do not broadcast"))
                }
                (Dim::Sym(_), _) => x.clone(),
                (Dim::Static(_), Dim::Sym(_)) => x.clone(),
            },
            (None, None) => unreachable!("i < rank of at least one shape"),
        };
        out.push(d);
    }
    Ok(Shape(out))
}

/// Normalizes a Python-style axis (`axis < 0` counts from the end) against `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

/// The dtype and shape of one tensor value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    /// A fully static type.
    pub fn of(dtype: DType, dims: &[usize]) -> TensorType {
        TensorType::new(dtype, Shape::of(dims))
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> TensorType {
        TensorType::new(dtype, self.shape.clone())
    }

    /// The extent of `axis`, which must be static for the caller's rule.
    pub fn static_dim(&self, axis: usize) -> Result<usize, String> {
        match self.shape.0.get(axis) {
            Some(Dim::Static(n)) => Ok(*n),
            Some(Dim::Sym(s)) => Err(format!("axis {axis} of {self} is symbolic ({s}); a static size is required")),
            None => Err(format!("{self} has no axis {axis}")),
        }
    }

    /// Parses the text form `f32[2, B, 4]`.
    pub fn parse(text: &str) -> Result<TensorType, String> {
        let text = text.trim();
        let open = text.find('[').ok_or_else(|| format!("type `{text}` lacks `[`"))?;
        let dtype = DType::from_name(text[..open].trim())
            .ok_or_else(|| format!("unknown dtype `{}`", &text[..open]))?;
        let body = text[open + 1..]
            .strip_suffix(']')
            .ok_or_else(|| format!("type `{text}` lacks a closing `]`"))?;
        let mut dims = Vec::new();
        for part in body.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let dim = match part.parse::<usize>() {
                Ok(n) => Dim::Static(n),
                Err(_) if is_symbol(part) => Dim::Sym(part.to_string()),
                Err(_) => return Err(format!("bad dim `{part}` in `{text}`")),
            };
            dims.push(dim);
        }
        Ok(TensorType::new(dtype, Shape(dims)))
    }
}

fn is_symbol(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        let s = |d: &[usize]| Shape::of(d);
        assert_eq!(broadcast(&s(&[2, 1, 4]), &s(&[3, 1])).unwrap(), s(&[2, 3, 4]));
        assert_eq!(broadcast(&s(&[]), &s(&[5])).unwrap(), s(&[5]));
        assert!(broadcast(&s(&[2, 3]), &s(&[4, 3])).is_err());
        let b = Shape(vec![Dim::sym("B"), Dim::Static(1)]);
        assert_eq!(broadcast(&b, &s(&[7])).unwrap(), Shape(vec![Dim::sym("B"), Dim::Static(7)]));
    }

    #[test]
    fn type_text_round_trips() {
        let t = TensorType::new(DType::BF16, Shape(vec![Dim::sym("B"), Dim::Static(128)]));
        assert_eq!(t.to_string(), "bf16[B, 128]");
        assert_eq!(TensorType::parse(&t.to_string()).unwrap(), t);
        assert_eq!(TensorType::parse("f32[]").unwrap(), TensorType::of(DType::F32, &[]));
        assert!(TensorType::parse("f33[1]").is_err());
        assert!(TensorType::parse("f32[1, -2]").is_err());
    }

    #[test]
    fn axes_normalize() {
        assert_eq!(norm_axis(-1, 3), Ok(2));
        assert_eq!(norm_axis(2, 3), Ok(2));
        assert!(norm_axis(3, 3).is_err());
        assert!(norm_axis(-4, 3).is_err());
    }
}
