//! Values in a backend's memory: what `submit` takes and returns, so that runs can feed each
//! other without host copies. A value knows the [`Memory`] it lives in, and a graph refuses
//! one from any other.

use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use rlx_ir::{DType, TensorType};
use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

/// The memory a backend's buffers live in: its name, its engine's [`Engine::memory`] and its
/// buffer type. Buffers of equal memories may be read by each other's engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    backend: &'static str,
    id: u64,
    buffer: TypeId,
}

impl Memory {
    /// The memory of `engine`'s buffers.
    pub(crate) fn of<E: Engine>(engine: &E) -> Memory {
        Memory { backend: engine.name(), id: engine.memory(), buffer: TypeId::of::<E::Buffer>() }
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} memory {}", self.backend, self.id)
    }
}

/// A tensor in a backend's memory: a dtype, dims and one buffer of the backend's holding the
/// row-major bytes from offset 0. Clones share the buffer; a value is never written after it
/// is made, so it stays valid however many runs read it. Only the executor makes them, so a
/// buffer always holds its value's bytes.
#[derive(Clone)]
pub struct DeviceTensor {
    dtype: DType,
    dims: Vec<usize>,
    memory: Memory,
    buf: Arc<dyn Any + Send + Sync>,
}

impl DeviceTensor {
    /// `buf` (of `memory`'s buffer type) holding a `dtype` tensor of `dims`.
    pub(crate) fn new<B: Send + Sync + 'static>(memory: Memory, dtype: DType, dims: &[usize], buf: B) -> DeviceTensor {
        DeviceTensor { dtype, dims: dims.to_vec(), memory, buf: Arc::new(buf) }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.dims
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// The size of its bytes.
    pub fn byte_len(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    /// The static tensor type of this value.
    pub fn ty(&self) -> TensorType {
        TensorType::of(self.dtype, &self.dims)
    }

    /// The memory it lives in.
    pub fn memory(&self) -> Memory {
        self.memory
    }

    /// Its buffer, when it lives in `memory` (whose buffers are `B`s); `what` names the value
    /// in the error otherwise.
    pub(crate) fn buffer<B: 'static>(&self, memory: Memory, what: &str) -> Result<&B> {
        let foreign = || RuntimeError::ForeignValue { what: what.into(), expected: memory.to_string(), got: self.memory.to_string() };
        if self.memory != memory {
            return Err(foreign());
        }
        self.buf.downcast_ref::<B>().ok_or_else(foreign)
    }
}

impl fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceTensor({}{:?} in {})", self.dtype, self.dims, self.memory)
    }
}
