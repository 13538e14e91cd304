//! The small interface a backend implements to run on the shared executor
//! ([`crate::Executor`]): memory it owns, weights it lays out ahead of time, and kernel
//! launches. Everything else — plans per input shape, liveness, hoisting, graph state,
//! weight lifecycle, profiling — is the executor's, the same for every backend.

use crate::error::Result;
use crate::tensor::Tensor;
use rlx_ir::{DType, Op};

/// One operand of a launch: `len` bytes at `offset` of `buf`, holding a `dtype` tensor of
/// `dims` (row-major, contiguous).
pub struct Arg<'a, B> {
    pub dtype: DType,
    pub dims: &'a [usize],
    pub buf: &'a B,
    pub offset: usize,
    pub len: usize,
}

impl<B> Clone for Arg<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Arg<'_, B> {}

/// A backend's memory and kernels.
///
/// Buffers are shared (`&Buffer`) even when written: the executor guarantees that a launch's
/// outputs and in-place state never overlap each other or its inputs (see [`Engine::launch`]),
/// as device memory is addressed by pointers, not borrows.
///
/// # Ordering
/// An engine whose work is asynchronous (a CUDA stream, a wgpu queue) may return from
/// `alloc`, `upload`, `copy`, `prepare`, `unprepare` and `launch` before the work is done, but
/// the work must take effect in the order it was issued, as if each piece finished before the
/// next began: a launch sees every earlier upload, copy and launch, and an upload or copy into
/// memory that an earlier launch reads waits for it. `upload` has finished reading `src` when
/// it returns (it may stage the bytes); `download` returns once `dst` holds the bytes, so after
/// all earlier work; `sync` returns once everything issued so far has completed. A buffer
/// dropped while issued work still uses it stays valid until that work completes (a
/// stream-ordered free). The executor's `submit` issues a whole run without waiting, so runs
/// queue back to back; its `run` waits only in its downloads.
pub trait Engine: Send + Sync + 'static {
    /// Memory the backend owns (host memory for the CPU, device memory for a GPU).
    type Buffer: Send + Sync + 'static;
    /// A weight laid out for its kernel (packed panels, a transformed convolution weight).
    type Prepared: Send + Sync + 'static;
    /// A plan's launches recorded once and submitted again as one (a CUDA graph); `()` for an
    /// engine that launches each step every run.
    type Recording: Send + Sync + 'static;

    /// The backend's name, for errors.
    fn name(&self) -> &'static str;

    /// Which memory the buffers live in: engines with the same `Buffer` type and `memory` read
    /// each other's buffers, so values pass between graphs compiled for the same device. The
    /// default suits memory that every engine of the type reads (host memory); an engine per
    /// device or context gives each its own number.
    fn memory(&self) -> u64 {
        0
    }

    /// Alignment in bytes of every arena offset (a power of two).
    fn align(&self) -> usize;

    /// A buffer of `bytes` bytes, zero-filled.
    fn alloc(&self, bytes: usize) -> Result<Self::Buffer>;

    /// Writes `src` at `offset` of `dst`.
    fn upload(&self, dst: &Self::Buffer, offset: usize, src: &[u8]) -> Result<()>;

    /// Reads `dst.len()` bytes at `offset` of `src`.
    fn download(&self, src: &Self::Buffer, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies `src`'s bytes into `dst` (the same length, not overlapping).
    fn copy(&self, src: Arg<'_, Self::Buffer>, dst: Arg<'_, Self::Buffer>) -> Result<()>;

    /// A buffer holding `t`'s bytes; a host backend may take the tensor's memory as it is.
    fn adopt(&self, t: Tensor) -> Result<Self::Buffer> {
        let buf = self.alloc(t.bytes().len())?;
        self.upload(&buf, 0, t.bytes())?;
        Ok(buf)
    }

    /// The operand of `op` (given each operand's dtype and dims) that its kernel takes laid
    /// out by [`Engine::prepare`] when it is a parameter or constant.
    fn prepared_operand(&self, _op: &Op, _operands: &[(DType, &[usize])]) -> Option<usize> {
        None
    }

    /// `weight` laid out for `op`'s kernel (`out_dims`: the dims of `op`'s first output), or
    /// `None` when the kernel would reject it (it then says why at launch).
    fn prepare(&self, _op: &Op, _weight: Arg<'_, Self::Buffer>, _out_dims: &[usize]) -> Result<Option<Self::Prepared>> {
        Ok(None)
    }

    /// [`Engine::prepare`] for a parameter whose buffer as given is dropped once it is
    /// prepared: the engine may lay the weight out in that buffer's own memory, so that
    /// preparing takes no second copy of it. `Err` gives the buffer back when there is no
    /// prepared form. By default the form is made by `prepare` and the buffer dropped.
    fn prepare_owned(
        &self,
        op: &Op,
        weight: Self::Buffer,
        dtype: DType,
        dims: &[usize],
        out_dims: &[usize],
    ) -> Result<std::result::Result<Self::Prepared, Self::Buffer>> {
        let len = dims.iter().product::<usize>() * dtype.size();
        let form = self.prepare(op, Arg { dtype, dims, buf: &weight, offset: 0, len }, out_dims)?;
        Ok(form.ok_or(weight))
    }

    /// The weight a prepared form was made from, as it was given (bytes, in a new buffer).
    fn unprepare(&self, prepared: &Self::Prepared) -> Result<Self::Buffer>;

    /// Runs `op`. `ins` are its operands in order, except the one `state` names, which the
    /// kernel updates in place; `outs` its outputs, except those aliased to the state;
    /// `prepared` the laid-out form of [`Engine::prepared_operand`], read instead of that
    /// operand's view in `ins` (which may then be empty). Errors name what the data broke.
    ///
    /// # Safety
    /// No two of `outs` and `state` overlap, and none overlaps an input; nothing else reads
    /// or writes them until the launch completes.
    unsafe fn launch(
        &self,
        op: &Op,
        ins: &[Arg<'_, Self::Buffer>],
        outs: &[Arg<'_, Self::Buffer>],
        state: Option<(usize, Arg<'_, Self::Buffer>)>,
        prepared: Option<&Self::Prepared>,
    ) -> std::result::Result<(), String>;

    /// Runs `steps` — every launch of one run of a plan — and, where the engine can, records
    /// them for [`Engine::replay`]. The executor replays a recording only while every buffer
    /// the steps touch is the one they were recorded with, so a launch must depend on nothing
    /// but its op, its operands' places and dims, and the data in device memory. By default
    /// the steps run and nothing is recorded.
    fn record(&self, steps: &mut dyn FnMut() -> Result<()>) -> Result<Option<Self::Recording>> {
        steps()?;
        Ok(None)
    }

    /// Submits a recording's launches again, over the memory they were recorded with.
    fn replay(&self, _recording: &Self::Recording) -> Result<()> {
        Err(crate::RuntimeError::Backend { backend: self.name().into(), msg: "this engine records nothing to replay".into() })
    }

    /// Waits until everything issued so far has completed.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// Runs `f`, one whole run of a plan, in whatever context the backend's launches want
    /// (the CPU keeps its worker threads awake through it).
    fn scope<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }

    /// Whether a run whose steps read and write `elements` elements in all needs
    /// [`Engine::scope`]; when not, the executor runs it on the caller's thread. The CPU's
    /// scope hands the run to its pool, which costs more than a run too small to split.
    fn needs_scope(&self, _elements: usize) -> bool {
        true
    }
}
