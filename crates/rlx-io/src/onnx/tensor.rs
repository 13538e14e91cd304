//! `TensorProto` payloads as rlx tensors: element types, the typed data fields, raw bytes and
//! external data files, each size checked against the dims before anything is copied.
//!
//! ONNX packs the 4-bit types two to a byte and the 2-bit types four (the first element in the
//! lowest bits); rlx holds one element per byte, so [`decode`] unpacks them (sign-extending
//! INT4/INT2) and [`pack`] packs them back.

use super::proto::TensorProto;
use rlx_ir::ops::quant::minifloat::{self, DTypeEncoder};
use rlx_ir::DType;
use std::path::Path;

/// Most elements one tensor (a constant, an initializer or a declared input) may have.
pub const MAX_ELEMENTS: u64 = 1 << 36;

/// The rlx dtype of an ONNX `TensorProto.DataType` code, if rlx has one.
pub fn dtype(code: i32) -> Option<DType> {
    Some(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        4 => DType::U16,
        14 => DType::C64,
        16 => DType::BF16,
        17 => DType::F8E4M3FN,
        18 => DType::F8E4M3FNUZ,
        19 => DType::F8E5M2,
        20 => DType::F8E5M2FNUZ,
        21 => DType::U4,
        22 => DType::I4,
        23 => DType::F4E2M1,
        24 => DType::F8E8M0,
        25 => DType::U2,
        26 => DType::I2,
        _ => return None,
    })
}

/// The ONNX code of an rlx dtype.
pub fn code(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::I16 => 5,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::U32 => 12,
        DType::U64 => 13,
        DType::U16 => 4,
        DType::C64 => 14,
        DType::BF16 => 16,
        DType::F8E4M3FN => 17,
        DType::F8E4M3FNUZ => 18,
        DType::F8E5M2 => 19,
        DType::F8E5M2FNUZ => 20,
        DType::U4 => 21,
        DType::I4 => 22,
        DType::F4E2M1 => 23,
        DType::F8E8M0 => 24,
        DType::U2 => 25,
        DType::I2 => 26,
    }
}

/// The ONNX name of a `DataType` code (`FLOAT`, `UINT16`, …) for messages.
pub fn type_name(code: i32) -> String {
    const NAMES: [&str; 29] = [
        "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL", "FLOAT16",
        "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2", "FLOAT6E2M3",
        "FLOAT6E3M2",
    ];
    usize::try_from(code).ok().and_then(|i| NAMES.get(i)).map_or_else(|| format!("type code {code}"), |s| s.to_string())
}

/// Dims of a tensor or declared shape as sizes, with the element count checked.
pub fn checked_dims(dims: &[i64]) -> Result<Vec<usize>, String> {
    let mut n: u64 = 1;
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = u64::try_from(d).map_err(|_| format!("negative dim {d} in {dims:?}"))?;
        n = n.checked_mul(d).filter(|&n| n <= MAX_ELEMENTS).ok_or_else(|| {
            format!("dims {dims:?} hold more than {MAX_ELEMENTS} elements")
        })?;
        out.push(d as usize);
    }
    Ok(out)
}

/// A decoded tensor: dtype, dims and little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorData {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl TensorData {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// Decodes `t`; external data is read relative to `base` (the model's folder).
pub fn decode(t: &TensorProto<'_>, base: Option<&Path>) -> Result<TensorData, String> {
    let dtype = dtype(t.data_type).ok_or_else(|| format!("element type {} is not supported", type_name(t.data_type)))?;
    if t.has_segment {
        return Err("segmented tensors are not supported".into());
    }
    let dims = checked_dims(&t.dims)?;
    let numel: usize = dims.iter().product();
    let nbytes = packed_len(dtype, numel);
    let bytes = if t.data_location == 1 {
        external(t, base, nbytes)?
    } else if let Some(raw) = t.raw_data {
        if raw.len() != nbytes {
            return Err(format!("raw_data has {} bytes, dims {:?} of {dtype} need {nbytes}", raw.len(), t.dims));
        }
        raw.to_vec()
    } else {
        typed_fields(t, dtype, numel)?
    };
    Ok(TensorData { dtype, dims, bytes: unpack(dtype, &bytes, numel) })
}

/// Bytes of `numel` elements of `dtype` in an ONNX tensor (sub-byte types packed).
pub fn packed_len(dtype: DType, numel: usize) -> usize {
    (numel * dtype.packed_bits()).div_ceil(8)
}

/// One byte per element from ONNX's packing of the sub-byte types; other dtypes as they are.
fn unpack(dtype: DType, packed: &[u8], numel: usize) -> Vec<u8> {
    let bits = dtype.packed_bits();
    if bits >= 8 {
        return packed.to_vec();
    }
    let per = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let shift = 8 - bits as u32;
    (0..numel)
        .map(|i| {
            let v = (packed[i / per] >> ((i % per) * bits)) & mask;
            match dtype {
                DType::I4 | DType::I2 => (((v << shift) as i8) >> shift) as u8,
                _ => v,
            }
        })
        .collect()
}

/// ONNX's packing of one-byte-per-element `bytes` of `dtype` (the inverse of [`decode`]'s
/// unpacking; the bits of each element above its width are dropped).
pub fn pack(dtype: DType, bytes: &[u8]) -> Vec<u8> {
    let bits = dtype.packed_bits();
    if bits >= 8 {
        return bytes.to_vec();
    }
    let per = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let mut out = vec![0u8; packed_len(dtype, bytes.len())];
    for (i, &v) in bytes.iter().enumerate() {
        out[i / per] |= (v & mask) << ((i % per) * bits);
    }
    out
}

/// The payload of the typed repeated fields, in the field ONNX assigns to `dtype`.
fn typed_fields(t: &TensorProto<'_>, dtype: DType, numel: usize) -> Result<Vec<u8>, String> {
    let check = |field: &str, got: usize, per: usize| {
        if got == numel * per {
            Ok(())
        } else {
            Err(format!("{field} has {got} values, dims {:?} of {dtype} need {}", t.dims, numel * per))
        }
    };
    let mut out = Vec::with_capacity(numel * dtype.size());
    let packed = packed_len(dtype, numel);
    match dtype {
        DType::F32 | DType::C64 => {
            let per = if dtype == DType::C64 { 2 } else { 1 };
            check("float_data", t.float_data.len(), per)?;
            t.float_data.iter().for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::F64 => {
            check("double_data", t.double_data.len(), 1)?;
            t.double_data.iter().for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::I64 => {
            check("int64_data", t.int64_data.len(), 1)?;
            t.int64_data.iter().for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::U32 => {
            check("uint64_data", t.uint64_data.len(), 1)?;
            t.uint64_data.iter().for_each(|&v| out.extend((v as u32).to_le_bytes()));
        }
        DType::U64 => {
            check("uint64_data", t.uint64_data.len(), 1)?;
            t.uint64_data.iter().for_each(|&v| out.extend(v.to_le_bytes()));
        }
        // One packed byte per int32_data entry.
        DType::I4 | DType::U4 | DType::F4E2M1 | DType::I2 | DType::U2 => {
            if t.int32_data.len() != packed {
                return Err(format!("int32_data has {} values, dims {:?} of {dtype} need {packed} packed bytes", t.int32_data.len(), t.dims));
            }
            t.int32_data.iter().for_each(|&v| out.push(v as u8));
        }
        DType::I32
        | DType::I16
        | DType::U16
        | DType::I8
        | DType::U8
        | DType::Bool
        | DType::F16
        | DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0 => {
            check("int32_data", t.int32_data.len(), 1)?;
            let size = dtype.size();
            t.int32_data.iter().for_each(|&v| out.extend(&(v as i32).to_le_bytes()[..size]));
        }
    }
    Ok(out)
}

/// Reads `nbytes` from the external file named by `t.external_data`.
fn external(t: &TensorProto<'_>, base: Option<&Path>, nbytes: usize) -> Result<Vec<u8>, String> {
    let key = |k: &str| t.external_data.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let location = key("location").ok_or("external data without a `location`")?;
    let rel = Path::new(location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("external data location `{location}` must be a path inside the model's folder"));
    }
    let number = |k: &str| -> Result<Option<u64>, String> {
        key(k).map(|v| v.parse::<u64>().map_err(|_| format!("external data `{k}` = `{v}` is not a size"))).transpose()
    };
    let offset = number("offset")?.unwrap_or(0);
    let length = number("length")?;
    if length.is_some_and(|l| l != nbytes as u64) {
        return Err(format!("external data length {} differs from the {nbytes} bytes the dims need", length.unwrap_or(0)));
    }
    let path = base.unwrap_or(Path::new(".")).join(rel);
    let data = std::fs::read(&path).map_err(|e| format!("external data {}: {e}", path.display()))?;
    let end = offset.checked_add(nbytes as u64).filter(|&e| e <= data.len() as u64).ok_or_else(|| {
        format!("external data {} has {} bytes, the tensor needs {offset}..{offset}+{nbytes}", path.display(), data.len())
    })?;
    Ok(data[offset as usize..end as usize].to_vec())
}

/// The elements of little-endian `bytes` of `dtype` (one byte per narrow element) as f64
/// (C64: the real parts).
pub fn to_f64s(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    fn each<const N: usize>(b: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        b.chunks_exact(N)
            .map(|c| {
                let mut a = [0; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    match dtype {
        DType::F32 => each(bytes, |b: [u8; 4]| f32::from_le_bytes(b) as f64),
        DType::F16 => each(bytes, |b: [u8; 2]| half::f16::from_le_bytes(b).to_f64()),
        DType::BF16 => each(bytes, |b: [u8; 2]| half::bf16::from_le_bytes(b).to_f64()),
        DType::F64 => each(bytes, f64::from_le_bytes),
        DType::I8 | DType::I4 | DType::I2 => each(bytes, |b: [u8; 1]| i8::from_le_bytes(b) as f64),
        DType::U8 | DType::Bool | DType::U4 | DType::U2 => each(bytes, |b: [u8; 1]| b[0] as f64),
        DType::U16 => each(bytes, |b: [u8; 2]| u16::from_le_bytes(b) as f64),
        DType::U64 => each(bytes, |b: [u8; 8]| u64::from_le_bytes(b) as f64),
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1 => {
            let table = minifloat::dtype_table(dtype).unwrap_or_default();
            bytes.iter().map(|&c| table.get(usize::from(c)).map_or(f64::NAN, |&v| f64::from(v))).collect()
        }
        DType::I16 => each(bytes, |b: [u8; 2]| i16::from_le_bytes(b) as f64),
        DType::I32 => each(bytes, |b: [u8; 4]| i32::from_le_bytes(b) as f64),
        DType::U32 => each(bytes, |b: [u8; 4]| u32::from_le_bytes(b) as f64),
        DType::I64 => each(bytes, |b: [u8; 8]| i64::from_le_bytes(b) as f64),
        DType::C64 => each(bytes, |b: [u8; 8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
    }
}

/// The elements of an integer or Bool tensor as i64 exactly; `None` for float dtypes.
pub fn to_i64s(dtype: DType, bytes: &[u8]) -> Option<Vec<i64>> {
    if dtype == DType::I64 {
        return Some(bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect());
    }
    if dtype == DType::U64 {
        return Some(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as i64).collect());
    }
    (dtype.is_int() || dtype.is_narrow_int() || dtype == DType::Bool)
        .then(|| to_f64s(dtype, bytes).into_iter().map(|v| v as i64).collect())
}

/// `values` as little-endian elements of `dtype` (Rust `as` conversion, saturating to the
/// narrow integers' ranges; minifloats round as `Cast` does; C64 gets zero imaginary parts).
pub fn from_f64s(dtype: DType, values: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size());
    let encoder = DTypeEncoder::new(dtype);
    for &v in values {
        match dtype {
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
            DType::F64 => out.extend(v.to_le_bytes()),
            DType::I8 => out.extend((v as i8).to_le_bytes()),
            DType::U8 => out.push(v as u8),
            DType::Bool => out.push(u8::from(v != 0.0)),
            DType::I16 => out.extend((v as i16).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::U32 => out.extend((v as u32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::U16 => out.extend((v as u16).to_le_bytes()),
            DType::U64 => out.extend((v as u64).to_le_bytes()),
            DType::I4 => out.push((v as i8).clamp(-8, 7) as u8),
            DType::U4 => out.push((v as u8).min(15)),
            DType::I2 => out.push((v as i8).clamp(-2, 1) as u8),
            DType::U2 => out.push((v as u8).min(3)),
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1 => {
                out.push(encoder.as_ref().map_or(0, |e| e.encode(v)))
            }
            DType::C64 => {
                out.extend((v as f32).to_le_bytes());
                out.extend(0f32.to_le_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_fields_and_raw_bytes_decode_alike() {
        let mut t = TensorProto { dims: vec![2], data_type: 6, int32_data: vec![-3, 7], ..Default::default() };
        let a = decode(&t, None).unwrap();
        let raw: Vec<u8> = [-3i32, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        t.int32_data.clear();
        t.raw_data = Some(&raw);
        assert_eq!(decode(&t, None).unwrap(), a);
    }

    #[test]
    fn sizes_are_checked() {
        let raw = [0u8; 7];
        let t = TensorProto { dims: vec![2], data_type: 1, raw_data: Some(&raw), ..Default::default() };
        assert!(decode(&t, None).unwrap_err().contains("raw_data has 7 bytes"));
        let t = TensorProto { dims: vec![1 << 40, 1 << 40], data_type: 1, ..Default::default() };
        assert!(decode(&t, None).unwrap_err().contains("more than"));
        let t = TensorProto { dims: vec![-1], data_type: 1, ..Default::default() };
        assert!(decode(&t, None).is_err());
    }
}
