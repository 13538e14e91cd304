//! Device memory: stream-ordered allocations from the device's default pool, freed on the
//! same stream, so that a freed range is reused only after the work reading it; the bytes
//! held and their peak counted per opened device ([`Usage`]).

use crate::gpu::{driver, Gpu};
use cudarc::driver::{result as cu, sys};
use rlx_runtime::{Result, RuntimeError};
use std::sync::Arc;

pub use rlx_runtime::Usage;

/// `len` bytes of device memory (no allocation when `len` is 0).
pub struct DevMem {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) len: usize,
    gpu: Arc<Gpu>,
}

impl DevMem {
    /// `bytes` of zeros: an out-of-memory error names the request and what the device has.
    pub(crate) fn zeroed(gpu: &Arc<Gpu>, bytes: usize) -> Result<DevMem> {
        let _turn = gpu.hold();
        let mem = DevMem::uninit(gpu, bytes)?;
        if bytes > 0 {
            // SAFETY: `ptr` holds `bytes` bytes, allocated on this stream.
            unsafe { cu::memset_d8_async(mem.ptr, 0, bytes, gpu.stream) }.map_err(driver("zeroing device memory"))?;
        }
        Ok(mem)
    }

    /// `bytes` whose contents are whatever the pool held: scratch that is written before it is read.
    pub(crate) fn uninit(gpu: &Arc<Gpu>, bytes: usize) -> Result<DevMem> {
        let _turn = gpu.hold();
        gpu.bind()?;
        if bytes == 0 {
            return Ok(DevMem { ptr: 0, len: 0, gpu: gpu.clone() });
        }
        // SAFETY: the stream belongs to the bound context; the caller writes before reading.
        let ptr = match unsafe { cu::malloc_async(gpu.stream, bytes) } {
            Ok(ptr) => ptr,
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                let (free, total) = gpu.memory();
                return Err(RuntimeError::OutOfMemory {
                    what: format!("cuda:{} (free {free} of {total} bytes)", gpu.ordinal()),
                    bytes,
                });
            }
            Err(e) => return Err(driver("allocating device memory")(e)),
        };
        gpu.usage.add(bytes);
        Ok(DevMem { ptr, len: bytes, gpu: gpu.clone() })
    }

    /// The device address `offset` bytes in.
    pub(crate) fn at(&self, offset: usize) -> sys::CUdeviceptr {
        self.ptr + offset as u64
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        if self.len > 0 {
            self.gpu.usage.sub(self.len);
        }
        let _turn = self.gpu.hold();
        if self.len > 0 && self.gpu.bind().is_ok() {
            // SAFETY: allocated on this stream and dropped once; later work on the stream may
            // reuse the range only after every launch submitted before this point.
            unsafe {
                let _ = cu::free_async(self.ptr, self.gpu.stream);
            }
        }
    }
}
