//! One CUDA device as the engine uses it: its context, the one stream every launch, copy and
//! allocation is ordered on, cuBLAS and cuBLASLt handles working on that stream (sharing one
//! workspace, as the stream orders their calls), and the kernels compiled for it.

use crate::kernels::Kernels;
use crate::lt::Lt;
use crate::memory::Usage;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result as cu, sys, CudaContext, DriverError};
use rlx_runtime::{Result, RuntimeError};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use parking_lot::{ReentrantMutex, ReentrantMutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::Arc;

/// A device opened for rlx.
pub struct Gpu {
    /// Declared first so that it goes before the context.
    pub(crate) lt: Lt,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: sys::CUstream,
    pub(crate) blas: blas_sys::cublasHandle_t,
    pub(crate) workspace: sys::CUdeviceptr,
    pub(crate) kernels: Kernels,
    /// `sm_XY` of the device, what NVRTC compiles for.
    pub(crate) arch: String,
    /// Whether kernels launch as programmatic dependents of the one before (sm_90 and later,
    /// with `RLX_CUDA_PDL=1`): each launch may overlap the previous kernel's tail. Off by
    /// default: on the H200 a decode step ran 6% slower with it (docs/BENCHMARKS.md).
    pub(crate) chained: bool,
    ordinal: usize,
    /// Tells this opening's memory from others' (each has its own stream).
    pub(crate) id: u64,
    /// The device memory held through this opening.
    pub(crate) usage: Usage,
    /// Scratch bytes a staged product may hold ([`crate::stage`]); per opening, so that
    /// openings on other threads (tests) do not share it through the environment.
    pub(crate) stage_budget: AtomicUsize,
    /// Held by whatever submits to the stream from one thread — a whole run, an upload, a
    /// download, an allocation or free — so that another thread's work never falls into a
    /// CUDA graph being captured on it ([`Gpu::hold`]).
    turn: ReentrantMutex<()>,
}

/// Bytes of cuBLAS's workspace (what it asks for on Hopper).
pub(crate) const BLAS_WORKSPACE: usize = 32 << 20;

/// Opening and closing a device (a context, cuBLAS's handles and workspace, modules, pinned
/// memory) may synchronise the whole device, which invalidates a CUDA-graph capture running
/// on another thread (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`): such calls hold this for
/// writing ([`device_wide`]), captures for reading ([`Gpu::capturing`]).
static CAPTURES: RwLock<()> = RwLock::new(());

/// Waits for every capture in the process to end and keeps new ones from starting.
pub(crate) fn device_wide() -> RwLockWriteGuard<'static, ()> {
    CAPTURES.write()
}

/// Openings so far, numbering each.
static OPENED: AtomicU64 = AtomicU64::new(1);

// SAFETY: the stream and cuBLAS handle are used only with the context bound ([`Gpu::bind`]),
// and every use is ordered on the one stream; CUDA handles may move between threads.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

/// The backend's name in errors.
pub(crate) const NAME: &str = "cuda";

/// A backend error naming the device.
pub(crate) fn error(msg: impl Into<String>) -> RuntimeError {
    RuntimeError::Backend { backend: NAME.into(), msg: msg.into() }
}

/// A driver call's error, saying what was being done.
pub(crate) fn driver(what: &str) -> impl FnOnce(DriverError) -> RuntimeError + '_ {
    move |e| error(format!("{what}: {e:?}"))
}

impl Gpu {
    /// Opens device `ordinal`: a typed error when there is no driver, no such device, or the
    /// device cannot be set up; never a panic.
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        let _no_capture = device_wide();
        // SAFETY: only probes whether the driver library loads.
        if !unsafe { sys::is_culib_present() } {
            return Err(error(format!("cuda:{ordinal} was asked for, but no CUDA driver (libcuda) is installed on this machine")));
        }
        // SAFETY: only probe whether the libraries load.
        let (blas_present, lt_present) = unsafe { (blas_sys::is_culib_present(), cudarc::cublaslt::sys::is_culib_present()) };
        if !blas_present || !lt_present {
            return Err(error(format!("cuda:{ordinal} was asked for, but cuBLAS (libcublas, libcublasLt) is not on the loader path")));
        }
        cu::init().map_err(driver("initialising the CUDA driver"))?;
        let count = cu::device::get_count().map_err(driver("counting CUDA devices"))?;
        if ordinal >= count.max(0) as usize {
            return Err(error(format!("cuda:{ordinal} was asked for, but this machine has {count} CUDA device(s)")));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("creating a context"))?;
        let (major, minor) = ctx.compute_capability().map_err(driver("reading the compute capability"))?;
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(driver("creating a stream"))?;
        let blas = blas::create_handle().map_err(|e| error(format!("creating a cuBLAS handle: {e:?}")))?;
        // SAFETY: both handles were just created in this context.
        unsafe { blas::set_stream(blas, stream as _) }.map_err(|e| error(format!("binding cuBLAS to the stream: {e:?}")))?;
        // A workspace of its own, so that cuBLAS allocates nothing inside a captured graph.
        // SAFETY: the handle is valid; the workspace lives as long as the handle (freed after it).
        let workspace = unsafe { cu::malloc_sync(BLAS_WORKSPACE) }.map_err(driver("allocating cuBLAS's workspace"))?;
        unsafe { blas_sys::cublasSetWorkspace_v2(blas, workspace as _, BLAS_WORKSPACE) }
            .result()
            .map_err(|e| error(format!("setting cuBLAS's workspace: {e:?}")))?;
        let usage = Usage::default();
        usage.add(BLAS_WORKSPACE);
        Ok(Arc::new(Gpu {
            usage,
            lt: Lt::new()?,
            ctx,
            stream,
            blas,
            workspace,
            kernels: Kernels::new(),
            arch: format!("sm_{major}{minor}"),
            chained: major >= 9 && std::env::var("RLX_CUDA_PDL").is_ok_and(|v| v == "1"),
            ordinal,
            id: OPENED.fetch_add(1, Ordering::Relaxed),
            stage_budget: AtomicUsize::new(crate::stage::budget()),
            turn: ReentrantMutex::new(()),
        }))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Keeps devices from opening or closing until the guard drops: held through a capture.
    pub(crate) fn capturing(&self) -> RwLockReadGuard<'static, ()> {
        CAPTURES.read_recursive()
    }

    /// The stream to this thread until the guard drops (again on a thread that holds it).
    pub(crate) fn hold(&self) -> ReentrantMutexGuard<'_, ()> {
        self.turn.lock()
    }

    /// Makes the device's context current on this thread (cheap when it already is).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(driver("binding the context"))
    }

    /// Waits for everything on the stream.
    pub(crate) fn sync(&self) -> Result<()> {
        let _turn = self.hold();
        self.bind()?;
        // SAFETY: the stream belongs to this context, which is bound.
        unsafe { cu::stream::synchronize(self.stream) }.map_err(driver("waiting for the stream"))
    }

    /// `(free, total)` device memory in bytes.
    pub(crate) fn memory(&self) -> (usize, usize) {
        self.ctx.mem_get_info().unwrap_or((0, 0))
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _no_capture = device_wide();
        if self.bind().is_ok() {
            // SAFETY: the handles were created in this context and nothing uses them after.
            unsafe {
                let _ = cu::stream::synchronize(self.stream);
                let _ = blas::destroy_handle(self.blas);
                let _ = cu::free_sync(self.workspace);
                let _ = cu::stream::destroy(self.stream);
            }
        }
        self.kernels.unload();
    }
}
