//! GGUF metadata values: the twelve scalar types, strings and (nested) typed arrays.

use super::reader::Reader;
use crate::error::{IoError, Result};
use std::ops::Index;

/// Arrays nested deeper than this are refused (the format allows nesting; real files use one
/// level, and a bound keeps a crafted file from exhausting the stack).
const MAX_ARRAY_DEPTH: u64 = 8;

/// A metadata value (GGUF value types 0–12).
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: its elements share one type, so they are stored unboxed.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(PackedStrings),
    Array(Vec<GgufArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl GgufValue {
    /// An integer value as `u64`, when it is one and is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float value (or an integer one, rounded) as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// A bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl GgufArray {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::Array(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements of a string array.
    pub fn as_strings(&self) -> Option<&PackedStrings> {
        match self {
            GgufArray::String(v) => Some(v),
            _ => None,
        }
    }
}

/// Strings in one buffer, each found by where it ends: a vocabulary of fifty thousand tokens
/// in two allocations rather than fifty thousand.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PackedStrings {
    text: String,
    ends: Vec<usize>,
}

impl PackedStrings {
    /// Appends `s`.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }

    /// The number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| &self[i])
    }
}

impl Index<usize> for PackedStrings {
    type Output = str;

    /// String `i`; panics past the end, as a slice does.
    fn index(&self, i: usize) -> &str {
        match self.get(i) {
            Some(s) => s,
            None => panic!("string {i} of {}", self.len()),
        }
    }
}

impl<'a> FromIterator<&'a str> for PackedStrings {
    fn from_iter<I: IntoIterator<Item = &'a str>>(iter: I) -> PackedStrings {
        let mut p = PackedStrings::default();
        iter.into_iter().for_each(|s| p.push(s));
        p
    }
}

/// The fewest bytes a value of type `code` takes in a file, or `None` for an unknown code.
fn min_bytes(code: u32) -> Option<u64> {
    Some(match code {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

fn unknown(r: &Reader<'_>, key: &str, code: u32) -> IoError {
    IoError::UnknownValueType { path: r.path().to_path_buf(), key: key.to_string(), code }
}

fn bool_of(r: &Reader<'_>, key: &str, byte: u8) -> Result<bool> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(IoError::BadMetadata {
            path: r.path().to_path_buf(),
            key: key.to_string(),
            expected: format!("a bool (byte 0 or 1), found byte {byte}"),
        }),
    }
}

/// A value of type `code` for metadata `key`.
pub(super) fn read_value(r: &mut Reader<'_>, key: &str, code: u32) -> Result<GgufValue> {
    let what = || format!("the value of `{key}`");
    Ok(match code {
        0 => GgufValue::U8(u8::from_le_bytes(r.array(&what)?)),
        1 => GgufValue::I8(i8::from_le_bytes(r.array(&what)?)),
        2 => GgufValue::U16(u16::from_le_bytes(r.array(&what)?)),
        3 => GgufValue::I16(i16::from_le_bytes(r.array(&what)?)),
        4 => GgufValue::U32(u32::from_le_bytes(r.array(&what)?)),
        5 => GgufValue::I32(i32::from_le_bytes(r.array(&what)?)),
        6 => GgufValue::F32(f32::from_le_bytes(r.array(&what)?)),
        7 => {
            let [b] = r.array(&what)?;
            GgufValue::Bool(bool_of(r, key, b)?)
        }
        8 => GgufValue::String(r.string(&what)?),
        9 => GgufValue::Array(read_array(r, key, 1)?),
        10 => GgufValue::U64(u64::from_le_bytes(r.array(&what)?)),
        11 => GgufValue::I64(i64::from_le_bytes(r.array(&what)?)),
        12 => GgufValue::F64(f64::from_le_bytes(r.array(&what)?)),
        _ => return Err(unknown(r, key, code)),
    })
}

/// `n` fixed-size elements decoded by `f`.
fn numbers<T, const N: usize>(
    r: &mut Reader<'_>,
    n: usize,
    what: &dyn Fn() -> String,
    f: fn([u8; N]) -> T,
) -> Result<Vec<T>> {
    let bytes = r.take((n * N) as u64, what)?;
    Ok(bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect())
}

/// An array (element type, count, elements) at nesting level `depth` (1 for a top-level value).
fn read_array(r: &mut Reader<'_>, key: &str, depth: u64) -> Result<GgufArray> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(IoError::TooMany {
            path: r.path().to_path_buf(),
            what: "levels of nested arrays",
            count: depth,
            limit: MAX_ARRAY_DEPTH,
        });
    }
    let code = r.u32(&|| format!("the element type of `{key}`"))?;
    let min = min_bytes(code).ok_or_else(|| unknown(r, key, code))?;
    let n = r.count("array elements", min)?;
    let what = || format!("the elements of `{key}`");
    Ok(match code {
        0 => GgufArray::U8(numbers(r, n, &what, u8::from_le_bytes)?),
        1 => GgufArray::I8(numbers(r, n, &what, i8::from_le_bytes)?),
        2 => GgufArray::U16(numbers(r, n, &what, u16::from_le_bytes)?),
        3 => GgufArray::I16(numbers(r, n, &what, i16::from_le_bytes)?),
        4 => GgufArray::U32(numbers(r, n, &what, u32::from_le_bytes)?),
        5 => GgufArray::I32(numbers(r, n, &what, i32::from_le_bytes)?),
        6 => GgufArray::F32(numbers(r, n, &what, f32::from_le_bytes)?),
        7 => {
            let bytes = numbers(r, n, &what, |[b]: [u8; 1]| b)?;
            GgufArray::Bool(bytes.into_iter().map(|b| bool_of(r, key, b)).collect::<Result<_>>()?)
        }
        8 => {
            let mut strings = PackedStrings::default();
            for i in 0..n {
                strings.push(r.str(&|| format!("element {i} of `{key}`"))?);
            }
            GgufArray::String(strings)
        }
        9 => GgufArray::Array((0..n).map(|_| read_array(r, key, depth + 1)).collect::<Result<_>>()?),
        10 => GgufArray::U64(numbers(r, n, &what, u64::from_le_bytes)?),
        11 => GgufArray::I64(numbers(r, n, &what, i64::from_le_bytes)?),
        12 => GgufArray::F64(numbers(r, n, &what, f64::from_le_bytes)?),
        _ => return Err(unknown(r, key, code)),
    })
}
