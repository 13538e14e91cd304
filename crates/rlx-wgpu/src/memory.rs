//! Device memory: storage buffers of whole words, checked against the adapter's limits
//! before they are created, and the bytes held through one opened adapter ([`Usage`]).

use crate::error::WgpuError;
use crate::gpu::Gpu;
use rlx_runtime::RuntimeError;
use std::sync::Arc;

pub use rlx_runtime::Usage;

/// `len` bytes of device memory in a storage buffer rounded up to whole words (at least one),
/// so that kernels read and write it a word at a time.
pub struct GpuMem {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) len: usize,
    gpu: Arc<Gpu>,
}

impl GpuMem {
    /// `bytes` of zeros (wgpu zero-fills new buffers): a size past the adapter's
    /// `max_buffer_size` is an error naming both, a failed allocation an out-of-memory error.
    pub(crate) fn zeroed(gpu: &Arc<Gpu>, bytes: usize) -> Result<GpuMem, RuntimeError> {
        let size = bytes.max(4).next_multiple_of(4) as u64;
        if size > gpu.limits.max_buffer_size {
            return Err(WgpuError::Limit { adapter: gpu.adapter.clone(), what: "a buffer".into(), bytes: bytes as u64, limit: "max_buffer_size", max: gpu.limits.max_buffer_size }.into());
        }
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if pollster::block_on(scope.pop()).is_some() {
            return Err(RuntimeError::OutOfMemory { what: format!("wgpu:{} `{}`", gpu.index(), gpu.adapter), bytes });
        }
        gpu.usage.add(size as usize);
        Ok(GpuMem { buf, len: bytes, gpu: gpu.clone() })
    }

    /// Bytes the buffer holds (a multiple of 4, at least `len`).
    pub(crate) fn size(&self) -> usize {
        self.buf.size() as usize
    }
}

impl Drop for GpuMem {
    /// wgpu keeps the buffer alive until the work submitted on it completes.
    fn drop(&mut self) {
        self.gpu.usage.sub(self.size());
    }
}
