//! Memory-mapped GGUF files (versions 2 and 3): header, metadata, tensor infos and the aligned
//! data section; tensors are borrowed as raw blocks or dequantised to f32 through rlx-ir's
//! ggml decoders.
//!
//! Every count is checked against the bytes left in the file before it sizes an allocation,
//! every offset and size is computed with checked arithmetic, and every tensor's extent is
//! validated when the file opens, so a malformed file yields an [`IoError`] and never a panic.

mod reader;
mod types;
mod value;

pub use types::GgmlType;
pub use value::{GgufArray, GgufValue, PackedStrings};

use crate::convert::floats_to_f32;
use crate::error::{IoError, Result};
use crate::mapped::Mapped;
use reader::Reader;
use rlx_ir::ops::quant::gguf::dequantize_row;
use rlx_ir::DType;
use rlx_runtime::Tensor;
use std::collections::HashMap;
use std::path::Path;

/// The alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// The fewest bytes of one metadata entry: key length, value type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The fewest bytes of one tensor info: name length, dim count, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// A tensor's entry in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// Row-major dims, outermost first: ggml's `ne` reversed (`ne[0]`, the contiguous
    /// dimension, is last).
    pub shape: Vec<usize>,
    /// Byte offset within the data section.
    pub offset: usize,
    /// Bytes the tensor takes.
    pub size: usize,
}

/// A tensor's raw bytes, borrowed from the map.
#[derive(Clone, Copy, Debug)]
pub struct GgufTensor<'a> {
    pub ty: GgmlType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// An open GGUF file.
pub struct GgufFile {
    file: Mapped,
    version: u32,
    alignment: u64,
    data_offset: usize,
    metadata: Vec<(String, GgufValue)>,
    keys: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    names: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps and parses `path` (the file must stay unchanged while open); the header's pages
    /// are released once parsed.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let file = Mapped::open(path.as_ref())?;
        let p = Parsed::read(&file.path, file.bytes())?;
        // The header is parsed into owned values; a vocabulary's pages need not stay resident.
        file.release(0..p.data_offset.min(file.bytes().len())).map_err(|source| IoError::Open { path: file.path.clone(), source })?;
        Ok(GgufFile {
            version: p.version,
            alignment: p.alignment,
            data_offset: p.data_offset,
            metadata: p.metadata,
            keys: p.keys,
            tensors: p.tensors,
            names: p.names,
            file,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of the data section and of every tensor in it.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.keys.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Keeps only the metadata entries `keep` accepts: a reader that has consumed the large
    /// arrays (a tokenizer's vocabulary and merges) drops them before the weights load.
    pub fn retain_metadata(&mut self, mut keep: impl FnMut(&str, &GgufValue) -> bool) {
        self.metadata.retain(|(k, v)| keep(k, v));
        self.metadata.shrink_to_fit();
        self.keys = self.metadata.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
    }

    /// Every tensor's header entry, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The header entry of `name`.
    pub fn info(&self, name: &str) -> Result<&GgufTensorInfo> {
        self.names
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| IoError::NoTensor { path: self.file.path.clone(), name: name.to_string() })
    }

    /// `name`'s raw bytes (whole blocks for quant types), borrowed from the map.
    pub fn tensor(&self, name: &str) -> Result<GgufTensor<'_>> {
        let t = self.info(name)?;
        let start = self.data_offset + t.offset;
        Ok(GgufTensor { ty: t.ty, shape: &t.shape, bytes: &self.file.bytes()[start..start + t.size] })
    }

    /// Drops the pages of `name`'s bytes, and those the kernel mapped around them, from the
    /// process's resident memory once they have been copied (into a backend's buffer): the
    /// file is read again if they are touched.
    pub fn release(&self, name: &str) -> Result<()> {
        let t = self.info(name)?;
        let start = self.data_offset + t.offset;
        self.file.release(start..start + t.size).map_err(|source| IoError::Release {
            path: self.file.path.clone(),
            tensor: name.to_string(),
            source,
        })
    }

    /// `name` decoded to an F32 [`Tensor`]: F32/F16/BF16/F64 widened or rounded, block types
    /// through [`dequantize_row`] (bit-exact with ggml); integer tensors are refused.
    pub fn dequantize(&self, name: &str) -> Result<Tensor> {
        let t = self.tensor(name)?;
        let mut out = Tensor::zeros(DType::F32, t.shape);
        let y = out.as_mut_slice::<f32>()?;
        let unsupported = |reason: String| IoError::Unsupported {
            path: self.file.path.clone(),
            tensor: name.to_string(),
            reason,
        };
        match t.ty {
            GgmlType::Plain(d) => {
                if !floats_to_f32(d, t.bytes, y) {
                    return Err(unsupported(format!("{} is an integer type, not a weight encoding", t.ty)));
                }
            }
            GgmlType::Block(q) => dequantize_row(q, t.bytes, y).map_err(unsupported)?,
        }
        Ok(out)
    }
}

/// The parsed header of a GGUF file.
struct Parsed {
    version: u32,
    alignment: u64,
    data_offset: usize,
    metadata: Vec<(String, GgufValue)>,
    keys: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    names: HashMap<String, usize>,
}

impl Parsed {
    fn read(path: &Path, bytes: &[u8]) -> Result<Parsed> {
        let mut r = Reader::new(path, bytes);
        let magic: [u8; 4] = r.array(&|| "the magic".into())?;
        if &magic != b"GGUF" {
            return Err(IoError::BadMagic { path: path.to_path_buf(), found: magic.to_vec() });
        }
        let version = r.u32(&|| "the version".into())?;
        if !(2..=3).contains(&version) {
            return Err(IoError::UnsupportedVersion { path: path.to_path_buf(), version });
        }
        let n_tensors = r.count("tensors", MIN_TENSOR_INFO_BYTES)?;
        let n_kv = r.count("metadata entries", MIN_KV_BYTES)?;

        let mut metadata = Vec::with_capacity(n_kv);
        let mut keys = HashMap::with_capacity(n_kv);
        for i in 0..n_kv {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let code = r.u32(&|| format!("the value type of `{key}`"))?;
            let v = value::read_value(&mut r, &key, code)?;
            if keys.insert(key.clone(), i).is_some() {
                return Err(IoError::Duplicate { path: path.to_path_buf(), what: "metadata key", name: key });
            }
            metadata.push((key, v));
        }
        let alignment = match keys.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => match metadata[i].1.as_u64() {
                Some(a) if a.is_power_of_two() => a,
                _ => {
                    return Err(IoError::BadMetadata {
                        path: path.to_path_buf(),
                        key: "general.alignment".into(),
                        expected: format!("a power of two, found {:?}", metadata[i].1),
                    })
                }
            },
        };

        let mut infos = Vec::with_capacity(n_tensors);
        for i in 0..n_tensors {
            infos.push(read_tensor_info(&mut r, i)?);
        }

        let overflow = |what: &str| IoError::Overflow { path: path.to_path_buf(), what: what.to_string() };
        let data_offset = (r.pos() as u64)
            .checked_next_multiple_of(alignment)
            .and_then(|o| usize::try_from(o).ok())
            .ok_or_else(|| overflow("the data offset"))?;
        let data_len = bytes.len().saturating_sub(data_offset) as u64;
        if data_offset > bytes.len() && !infos.is_empty() {
            return Err(IoError::Truncated {
                path: path.to_path_buf(),
                what: "the padding before the data section".into(),
                at: r.pos() as u64,
                need: (data_offset - r.pos()) as u64,
                len: bytes.len() as u64,
            });
        }

        let mut tensors = Vec::with_capacity(n_tensors);
        let mut names = HashMap::with_capacity(n_tensors);
        for (i, raw) in infos.into_iter().enumerate() {
            let info = raw.check(path, alignment, data_len)?;
            if names.insert(info.name.clone(), i).is_some() {
                return Err(IoError::Duplicate { path: path.to_path_buf(), what: "tensor", name: info.name });
            }
            tensors.push(info);
        }
        Ok(Parsed { version, alignment, data_offset, metadata, keys, tensors, names })
    }
}

/// A tensor info as stored, before its extent is checked against the data section.
struct RawInfo {
    name: String,
    /// ggml's `ne`, contiguous dimension first.
    ne: Vec<u64>,
    code: u32,
    offset: u64,
}

fn read_tensor_info(r: &mut Reader<'_>, i: usize) -> Result<RawInfo> {
    let name = r.string(&|| format!("the name of tensor {i}"))?;
    let n_dims = r.u32(&|| format!("the dim count of `{name}`"))?;
    if n_dims > MAX_DIMS {
        return Err(IoError::TooMany {
            path: r.path().to_path_buf(),
            what: "dimensions",
            count: n_dims.into(),
            limit: MAX_DIMS.into(),
        });
    }
    let ne = (0..n_dims).map(|d| r.u64(&|| format!("dim {d} of `{name}`"))).collect::<Result<_>>()?;
    let code = r.u32(&|| format!("the type of `{name}`"))?;
    let offset = r.u64(&|| format!("the offset of `{name}`"))?;
    Ok(RawInfo { name, ne, code, offset })
}

impl RawInfo {
    /// The info with its type known, its size computed without overflow, and its extent
    /// aligned and within the `data_len` bytes of the data section.
    fn check(self, path: &Path, alignment: u64, data_len: u64) -> Result<GgufTensorInfo> {
        let RawInfo { name, ne, code, offset } = self;
        let ty = GgmlType::from_code(code)
            .ok_or_else(|| IoError::UnknownType { path: path.to_path_buf(), tensor: name.clone(), code })?;
        let bad_shape = |reason: String| IoError::BadShape { path: path.to_path_buf(), tensor: name.clone(), reason };
        // Nonzero dims must multiply without overflow too, so no consumer's product of the
        // shape can overflow when another dim is 0.
        if ne.iter().try_fold(1u64, |n, &d| n.checked_mul(d.max(1))).is_none() {
            return Err(bad_shape(format!("dims {ne:?} overflow")));
        }
        let numel: u64 = ne.iter().product();
        let (bs, bb) = (ty.block_size() as u64, ty.block_bytes() as u64);
        let ne0 = ne.first().copied().unwrap_or(1);
        if ne0 % bs != 0 {
            return Err(bad_shape(format!("ne[0] = {ne0} is not a multiple of the {ty} block size {bs}")));
        }
        let size = (numel / bs).checked_mul(bb).ok_or_else(|| bad_shape(format!("dims {ne:?} overflow")))?;
        let end = offset.checked_add(size);
        if end.is_none_or(|e| e > data_len) {
            return Err(IoError::OffsetPastEnd {
                path: path.to_path_buf(),
                tensor: name,
                start: offset,
                end: end.unwrap_or(u64::MAX),
                len: data_len,
            });
        }
        if offset % alignment != 0 {
            return Err(IoError::Misaligned { path: path.to_path_buf(), tensor: name, offset, alignment });
        }
        let shape = ne.iter().rev().map(|&d| d as usize).collect();
        Ok(GgufTensorInfo { name, ty, shape, offset: offset as usize, size: size as usize })
    }
}
