//! Bad data that kernels find (an index outside its extent, a KV-cache overflow, a label
//! outside the classes): the first kernel to find some writes a report to device memory, and
//! the engine turns it into an error at the next download or sync. The report travels back
//! on the stream with the work it follows, into pinned host memory, so a download costs one
//! wait.

use crate::gpu::{driver, error, Gpu};
use crate::memory::DevMem;
use cudarc::driver::{result as cu, sys};
use rlx_runtime::Result;
use std::sync::Arc;

/// The i64s of a report: `[code, …]` with code 1 an index outside its extent
/// (`value, extent`), 2 a KV-cache position where the rows do not fit (`position, steps,
/// capacity, axis`), 3 a class label outside the classes (`row, label, classes,
/// has_ignore, ignore_index`). The first kernel to claim the code (an atomic swap from 0)
/// writes the rest.
const REPORT: usize = 8;

/// The device's report and its host mirror.
pub(crate) struct Reports {
    dev: DevMem,
    /// Pinned host memory of [`REPORT`] i64s, written only by the stream's copies.
    host: *mut i64,
    gpu: Arc<Gpu>,
}

// SAFETY: the host mirror is written by copies ordered on the device's one stream and read
// only after waiting for that stream; the pointer itself may move between threads.
unsafe impl Send for Reports {}
unsafe impl Sync for Reports {}

impl Reports {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Reports> {
        let dev = DevMem::zeroed(gpu, REPORT * 8)?;
        let _no_capture = crate::gpu::device_wide();
        // SAFETY: the context is bound (by `zeroed`); freed once, in `drop`.
        let host = unsafe { cu::malloc_host(REPORT * 8, 0) }.map_err(driver("allocating pinned host memory for kernel reports"))?;
        // SAFETY: `host` holds REPORT i64s.
        unsafe { std::ptr::write_bytes(host as *mut i64, 0, REPORT) };
        Ok(Reports { dev, host: host as *mut i64, gpu: gpu.clone() })
    }

    /// Where kernels write their report.
    pub(crate) fn ptr(&self) -> u64 {
        self.dev.ptr
    }

    /// Queues the report's copy to the host behind the work issued so far.
    pub(crate) fn fetch(&self) -> Result<()> {
        // SAFETY: both ranges hold REPORT i64s; the host side is pinned, so the copy is
        // asynchronous and ordered on the stream.
        unsafe { sys::cuMemcpyDtoHAsync_v2(self.host as *mut _, self.dev.ptr, REPORT * 8, self.gpu.stream) }
            .result()
            .map_err(driver("reading kernel reports"))
    }

    /// Once the stream has passed a [`Reports::fetch`]: the first bad data reported since
    /// the last check, as an error (the report is then cleared).
    pub(crate) fn check(&self) -> Result<()> {
        // SAFETY: the copy into `host` has completed (the caller waited for the stream).
        let r: [i64; REPORT] = unsafe { std::ptr::read_volatile(self.host as *const [i64; REPORT]) };
        if r[0] == 0 {
            return Ok(());
        }
        // SAFETY: the stream is idle; clearing both sides readies them for the next report.
        unsafe {
            cu::memset_d8_sync(self.dev.ptr, 0, REPORT * 8).map_err(driver("clearing kernel reports"))?;
            std::ptr::write_bytes(self.host, 0, REPORT);
        }
        Err(error(match r[0] {
            1 => format!("an index operand held {}, outside [0, {})", r[1], r[2]),
            2 if r[1] < 0 => format!("the cache position {} is negative", r[1]),
            2 => format!("{} steps at position {} overflow the cache capacity {} along axis {}", r[2], r[1], r[3], r[4]),
            3 => {
                let ignore = if r[4] != 0 { format!(" and is not ignore_index {}", r[5]) } else { String::new() };
                format!("row {}: label {} is outside the classes [0, {}){ignore}", r[1], r[2], r[3])
            }
            code => format!("a kernel reported bad data (code {code})"),
        }))
    }
}

impl Drop for Reports {
    fn drop(&mut self) {
        let _no_capture = crate::gpu::device_wide();
        if self.gpu.bind().is_ok() {
            // SAFETY: allocated by `malloc_host` in `new`; a pending fetch has completed once
            // the stream is idle.
            unsafe {
                let _ = cu::stream::synchronize(self.gpu.stream);
                let _ = cu::free_host(self.host as *mut _);
            }
        }
    }
}
