//! Memory-mapped safetensors files: the header is parsed and validated by the `safetensors`
//! crate (offsets contiguous, sizes matching shapes, no overflow), tensor bytes are borrowed
//! from the map, and loading into a [`Tensor`] copies once.

use crate::convert::floats_to_f32;
use crate::error::{IoError, Result};
use crate::mapped::Mapped;
use rlx_ir::DType;
use rlx_runtime::{Element, Tensor};
use ::safetensors::tensor::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

/// An open safetensors file.
pub struct SafetensorsFile {
    file: Mapped,
    /// Where the data section starts (after the 8-byte length and the JSON header).
    data_start: usize,
    /// Sorted by name.
    tensors: Vec<Entry>,
    metadata: HashMap<String, String>,
}

struct Entry {
    name: String,
    stored: Dtype,
    shape: Vec<usize>,
    /// Byte range within the data section.
    range: (usize, usize),
}

/// A tensor's header entry.
#[derive(Clone, Copy, Debug)]
pub struct SafetensorsInfo<'a> {
    pub name: &'a str,
    /// The dtype as the file states it; [`rlx_dtype`] maps it to an rlx [`DType`].
    pub stored: Dtype,
    pub shape: &'a [usize],
}

/// A tensor's bytes, borrowed from the map.
#[derive(Clone, Copy, Debug)]
pub struct TensorBytes<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// The rlx dtype of a safetensors dtype (`F8_E4M3` is the finite-only E4M3FN that PyTorch
/// writes), if rlx has one.
pub fn rlx_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::I8 => DType::I8,
        Dtype::I16 => DType::I16,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::U16 => DType::U16,
        Dtype::U64 => DType::U64,
        Dtype::F8_E5M2 => DType::F8E5M2,
        Dtype::F8_E4M3 => DType::F8E4M3FN,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        _ => return None,
    })
}

impl SafetensorsFile {
    /// Maps and validates `path` (the file must stay unchanged while open).
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
        let file = Mapped::open(path.as_ref())?;
        let (header_len, meta) = SafeTensors::read_metadata(file.bytes())
            .map_err(|source| IoError::Safetensors { path: file.path.clone(), source })?;
        let mut tensors: Vec<Entry> = meta
            .tensors()
            .into_iter()
            .map(|(name, info)| Entry { name, stored: info.dtype, shape: info.shape.clone(), range: info.data_offsets })
            .collect();
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let metadata = meta.metadata().clone().unwrap_or_default();
        Ok(SafetensorsFile { data_start: 8 + header_len, tensors, metadata, file })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Every tensor, by name.
    pub fn tensors(&self) -> impl Iterator<Item = SafetensorsInfo<'_>> {
        self.tensors.iter().map(Entry::info)
    }

    /// The header's free-form `__metadata__` strings.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// The header entry of `name`.
    pub fn info(&self, name: &str) -> Result<SafetensorsInfo<'_>> {
        self.entry(name).map(Entry::info)
    }

    /// `name`'s bytes, borrowed from the map (no copy).
    pub fn bytes(&self, name: &str) -> Result<TensorBytes<'_>> {
        let e = self.entry(name)?;
        let dtype = rlx_dtype(e.stored).ok_or_else(|| IoError::Unsupported {
            path: self.file.path.clone(),
            tensor: e.name.clone(),
            reason: format!("dtype {:?} has no rlx dtype", e.stored),
        })?;
        let (start, end) = (self.data_start + e.range.0, self.data_start + e.range.1);
        Ok(TensorBytes { dtype, shape: &e.shape, bytes: &self.file.bytes()[start..end] })
    }

    /// `name`'s elements, borrowed from the map when its dtype is `T`'s (zero-copy); an error
    /// when the dtype differs or the data is not aligned for `T`.
    pub fn slice<T: Element>(&self, name: &str) -> Result<&[T]> {
        let t = self.bytes(name)?;
        if t.dtype != T::DTYPE {
            return Err(self.mismatch(name, t.dtype, T::DTYPE));
        }
        bytemuck::try_cast_slice(t.bytes).map_err(|e| IoError::Unsupported {
            path: self.file.path.clone(),
            tensor: name.to_string(),
            reason: format!("cannot borrow as {}: {e}", T::DTYPE),
        })
    }

    /// `name` copied into a [`Tensor`] of its stored dtype.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let t = self.bytes(name)?;
        Ok(Tensor::from_bytes(t.dtype, t.shape, t.bytes)?)
    }

    /// `name` as an F32 [`Tensor`], widening F16/BF16 exactly (F64 rounds); other dtypes are
    /// refused.
    pub fn load_f32(&self, name: &str) -> Result<Tensor> {
        let t = self.bytes(name)?;
        let mut out = Tensor::zeros(DType::F32, t.shape);
        if !floats_to_f32(t.dtype, t.bytes, out.as_mut_slice::<f32>()?) {
            return Err(self.mismatch(name, t.dtype, DType::F32));
        }
        Ok(out)
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .map(|i| &self.tensors[i])
            .map_err(|_| IoError::NoTensor { path: self.file.path.clone(), name: name.to_string() })
    }

    fn mismatch(&self, name: &str, stored: DType, requested: DType) -> IoError {
        IoError::DTypeMismatch {
            path: self.file.path.clone(),
            tensor: name.to_string(),
            stored: stored.to_string(),
            requested: requested.to_string(),
        }
    }
}

impl Entry {
    fn info(&self) -> SafetensorsInfo<'_> {
        SafetensorsInfo { name: &self.name, stored: self.stored, shape: &self.shape }
    }
}
