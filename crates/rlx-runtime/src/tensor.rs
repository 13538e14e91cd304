//! Host tensors: a dtype, static dims and 64-byte-aligned row-major data.

use crate::error::{Result, RuntimeError};
use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use num_complex::Complex32;
use rlx_ir::ops::quant::minifloat;
use rlx_ir::{DType, TensorType};
use std::fmt;

/// Rust element types that map one-to-one onto a [`DType`] (`Bool`, `U4`, `U2` and the
/// minifloat codes are read as `u8`, `I4` and `I2` as `i8`).
pub trait Element: Pod {
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}
elements!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, u8 => U8, i16 => I16,
    i32 => I32, i64 => I64, u32 => U32, u16 => U16, u64 => U64, Complex32 => C64);

/// One cache line of storage; tensors are built from these so data is 64-byte aligned.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A host tensor.
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    len: usize,
    data: Vec<Line>,
}

impl Tensor {
    /// A zero-filled tensor (false for Bool).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let len = shape.iter().product::<usize>() * dtype.size();
        Tensor {
            dtype,
            shape: shape.to_vec(),
            len,
            data: vec![Line([0; 64]); len.div_ceil(64)],
        }
    }

    /// A tensor from raw little-endian bytes.
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
        let mut t = Tensor::zeros(dtype, shape);
        if bytes.len() != t.len {
            return Err(RuntimeError::DataLength {
                shape: shape.to_vec(),
                expected: t.numel(),
                got: bytes.len() / dtype.size().max(1),
            });
        }
        t.bytes_mut().copy_from_slice(bytes);
        Ok(t)
    }

    /// A tensor holding `data` with `shape`.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if data.len() != numel {
            return Err(RuntimeError::DataLength { shape: shape.to_vec(), expected: numel, got: data.len() });
        }
        Tensor::from_bytes(T::DTYPE, shape, bytemuck::cast_slice(data))
    }

    /// Like [`Tensor::from_slice`], taking the vector.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        Tensor::from_slice(&data, shape)
    }

    /// A Bool tensor.
    pub fn from_bools(data: &[bool], shape: &[usize]) -> Result<Tensor> {
        let bytes: Vec<u8> = data.iter().map(|&b| b as u8).collect();
        let mut t = Tensor::from_slice(&bytes, shape)?;
        t.dtype = DType::Bool;
        Ok(t)
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        Tensor::from_slice(&[v], &[]).expect("one element fits the scalar shape")
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The static tensor type of this tensor.
    pub fn ty(&self) -> TensorType {
        TensorType::of(self.dtype, &self.shape)
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.data)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.data)[..self.len]
    }

    /// The elements as `T`, which must match the dtype (`u8` for Bool).
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check::<T>()?;
        Ok(bytemuck::cast_slice(self.bytes()))
    }

    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T]> {
        self.check::<T>()?;
        Ok(bytemuck::cast_slice_mut(self.bytes_mut()))
    }

    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.as_slice::<T>()?.to_vec())
    }

    /// Every element widened to f64 (C64 gives the real part); for tests and printing.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let b = self.bytes();
        match self.dtype {
            DType::F32 => cast::<f32>(b).iter().map(|&v| v as f64).collect(),
            DType::F64 => cast::<f64>(b).to_vec(),
            DType::F16 => cast::<f16>(b).iter().map(|v| v.to_f64()).collect(),
            DType::BF16 => cast::<bf16>(b).iter().map(|v| v.to_f64()).collect(),
            DType::I8 | DType::I4 | DType::I2 => cast::<i8>(b).iter().map(|&v| v as f64).collect(),
            DType::U8 | DType::Bool | DType::U4 | DType::U2 => b.iter().map(|&v| v as f64).collect(),
            DType::U16 => cast::<u16>(b).iter().map(|&v| v as f64).collect(),
            DType::U64 => cast::<u64>(b).iter().map(|&v| v as f64).collect(),
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 | DType::F4E2M1 => {
                let table = minifloat::dtype_table(self.dtype).unwrap_or_default();
                b.iter().map(|&c| table.get(usize::from(c)).map_or(f64::NAN, |&v| f64::from(v))).collect()
            }
            DType::I16 => cast::<i16>(b).iter().map(|&v| v as f64).collect(),
            DType::I32 => cast::<i32>(b).iter().map(|&v| v as f64).collect(),
            DType::I64 => cast::<i64>(b).iter().map(|&v| v as f64).collect(),
            DType::U32 => cast::<u32>(b).iter().map(|&v| v as f64).collect(),
            DType::C64 => cast::<Complex32>(b).iter().map(|v| v.re as f64).collect(),
        }
    }

    fn check<T: Element>(&self) -> Result<()> {
        let actual = match self.dtype {
            DType::I4 | DType::I2 => DType::I8,
            d if d == DType::Bool || d.is_minifloat() || d.is_narrow_int() => DType::U8,
            d => d,
        };
        if actual != T::DTYPE {
            return Err(RuntimeError::DTypeMismatch { requested: T::DTYPE, actual: self.dtype });
        }
        Ok(())
    }
}

/// Host memory owned by a host engine (the CPU's arena, parameters and constants):
/// 64-byte-aligned bytes that kernels write through shared references, as device memory is
/// written through pointers. The executor keeps the ranges that one launch writes apart from
/// everything else it touches.
pub struct HostBuffer {
    data: std::cell::UnsafeCell<Vec<Line>>,
    len: usize,
}

// SAFETY: shared access only hands out byte ranges under `bytes`/`bytes_mut`'s contracts.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> HostBuffer {
        HostBuffer { data: std::cell::UnsafeCell::new(vec![Line([0; 64]); len.div_ceil(64)]), len }
    }

    /// `len` zero bytes, or `None` when the memory cannot be had.
    pub fn try_zeroed(len: usize) -> Option<HostBuffer> {
        let mut data = Vec::new();
        data.try_reserve_exact(len.div_ceil(64)).ok()?;
        data.resize(len.div_ceil(64), Line([0; 64]));
        Some(HostBuffer { data: std::cell::UnsafeCell::new(data), len })
    }

    /// The tensor's bytes, without a copy.
    pub fn from_tensor(t: Tensor) -> HostBuffer {
        HostBuffer { data: std::cell::UnsafeCell::new(t.data), len: t.len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `offset..offset + len`.
    ///
    /// # Safety
    /// Nothing writes them while the slice lives.
    pub unsafe fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset + len <= self.len, "host buffer range {offset}+{len} past its {} bytes", self.len);
        std::slice::from_raw_parts((*self.data.get()).as_ptr().cast::<u8>().add(offset), len)
    }

    /// The bytes `offset..offset + len`, to write.
    ///
    /// # Safety
    /// Nothing else reads or writes them while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset + len <= self.len, "host buffer range {offset}+{len} past its {} bytes", self.len);
        std::slice::from_raw_parts_mut((*self.data.get()).as_mut_ptr().cast::<u8>().add(offset), len)
    }

    /// The whole buffer as a tensor, without a copy (`dtype` and `dims` must cover its bytes).
    pub fn into_tensor(self, dtype: DType, dims: &[usize]) -> Result<Tensor> {
        let expected = dims.iter().product::<usize>() * dtype.size();
        if expected != self.len {
            return Err(RuntimeError::DataLength { shape: dims.to_vec(), expected: dims.iter().product(), got: self.len / dtype.size().max(1) });
        }
        Ok(Tensor { dtype, shape: dims.to_vec(), len: self.len, data: self.data.into_inner() })
    }
}

fn cast<T: Pod>(b: &[u8]) -> &[T] {
    bytemuck::cast_slice(b)
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_f64_vec();
        let shown: Vec<String> = v.iter().take(8).map(|x| format!("{x:.4}")).collect();
        write!(f, "Tensor({}{:?}, [{}{}])", self.dtype, self.shape, shown.join(", "), if v.len() > 8 { ", …" } else { "" })
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.bytes() == other.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_dtype() {
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(t.bytes().as_ptr() as usize % 64, 0);
        assert!(matches!(t.as_slice::<i32>(), Err(RuntimeError::DTypeMismatch { .. })));
        assert!(matches!(Tensor::from_vec(vec![1i64; 5], &[2, 3]), Err(RuntimeError::DataLength { expected: 6, got: 5, .. })));
        let b = Tensor::from_bools(&[true, false], &[2]).unwrap();
        assert_eq!(b.dtype(), DType::Bool);
        assert_eq!(b.to_f64_vec(), vec![1.0, 0.0]);
    }
}
