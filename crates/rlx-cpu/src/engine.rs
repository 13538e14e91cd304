//! The CPU's [`Engine`]: host buffers, weights packed for their kernels ([`dispatch::Packed`]),
//! and launches through [`dispatch`]. The schedule, arena, hoisting, graph state and weight
//! lifecycle are the shared [`rlx_runtime::Executor`]'s.

use crate::dispatch::{self, Packed};
use crate::Products;
use crate::kernels::PAR_MIN;
use crate::view::{In, Out};
use rlx_ir::{DType, Op};
use rlx_runtime::{Arg, Engine, HostBuffer, Result, RuntimeError, Tensor};

/// Host memory and the CPU kernels, computing products of prepared weights as `products` says.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuEngine {
    pub products: Products,
}

/// The bytes of a launch operand.
///
/// # Safety
/// Nothing writes them while the view lives.
unsafe fn read(a: Arg<'_, HostBuffer>) -> In<'_> {
    In { dtype: a.dtype, dims: a.dims, bytes: a.buf.bytes(a.offset, a.len) }
}

/// The bytes of a launch output.
///
/// # Safety
/// Nothing else reads or writes them while the view lives.
unsafe fn write(a: Arg<'_, HostBuffer>) -> Out<'_> {
    Out { dtype: a.dtype, dims: a.dims, bytes: a.buf.bytes_mut(a.offset, a.len) }
}

impl Engine for CpuEngine {
    type Buffer = HostBuffer;
    type Prepared = Packed;
    type Recording = ();

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// A cache line: enough for any SIMD load.
    fn align(&self) -> usize {
        64
    }

    fn alloc(&self, bytes: usize) -> Result<HostBuffer> {
        HostBuffer::try_zeroed(bytes).ok_or_else(|| RuntimeError::OutOfMemory { what: "host buffer".into(), bytes })
    }

    fn upload(&self, dst: &HostBuffer, offset: usize, src: &[u8]) -> Result<()> {
        // SAFETY: the executor uploads only while no launch runs.
        unsafe { dst.bytes_mut(offset, src.len()) }.copy_from_slice(src);
        Ok(())
    }

    fn download(&self, src: &HostBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        // SAFETY: the executor downloads only while no launch runs.
        dst.copy_from_slice(unsafe { src.bytes(offset, dst.len()) });
        Ok(())
    }

    fn copy(&self, src: Arg<'_, HostBuffer>, dst: Arg<'_, HostBuffer>) -> Result<()> {
        // SAFETY: the two ranges do not overlap (the contract of `Engine::copy`).
        unsafe { write(dst).bytes.copy_from_slice(read(src).bytes) };
        Ok(())
    }

    /// The tensor's memory, kept as it is.
    fn adopt(&self, t: Tensor) -> Result<HostBuffer> {
        Ok(HostBuffer::from_tensor(t))
    }

    fn prepared_operand(&self, op: &Op, operands: &[(DType, &[usize])]) -> Option<usize> {
        let i = dispatch::packable_operand(op)?;
        let (a, b) = (*operands.first()?, *operands.get(i)?);
        let rounds = self.products != Products::F32 && dispatch::rounds(op, a, b);
        (rounds || dispatch::packs(op, a, b)).then_some(i)
    }

    fn prepare(&self, op: &Op, weight: Arg<'_, HostBuffer>, out_dims: &[usize]) -> Result<Option<Packed>> {
        // SAFETY: preparing reads the weight while no launch runs.
        let b = unsafe { read(weight) };
        Ok(dispatch::prepack_rounded(self.products, op, b).or_else(|| dispatch::prepack(op, b, out_dims)))
    }

    /// Q8 panels are laid out in the weight's own buffer when whole panels fill it.
    fn prepare_owned(&self, op: &Op, weight: HostBuffer, dtype: DType, dims: &[usize], out_dims: &[usize]) -> Result<std::result::Result<Packed, HostBuffer>> {
        // SAFETY: preparing reads the weight while no launch runs.
        let bytes = unsafe { weight.bytes(0, dims.iter().product::<usize>() * dtype.size()) };
        if let Some(rounded) = dispatch::prepack_rounded(self.products, op, In { dtype, dims, bytes }) {
            return Ok(Ok(rounded));
        }
        let t = weight.into_tensor(dtype, dims)?;
        Ok(dispatch::prepack_owned(op, t, out_dims).map_err(HostBuffer::from_tensor))
    }

    fn unprepare(&self, prepared: &Packed) -> Result<HostBuffer> {
        let bytes = prepared.unpack();
        let buf = self.alloc(bytes.len())?;
        self.upload(&buf, 0, &bytes)?;
        Ok(buf)
    }

    /// Ops with an in-place kernel ([`dispatch::run_in_place`]) update their state there;
    /// others read it as an ordinary operand (their functional form).
    unsafe fn launch(
        &self,
        op: &Op,
        ins: &[Arg<'_, HostBuffer>],
        outs: &[Arg<'_, HostBuffer>],
        state: Option<(usize, Arg<'_, HostBuffer>)>,
        prepared: Option<&Packed>,
    ) -> std::result::Result<(), String> {
        let mut in_views: Vec<In> = ins.iter().map(|&a| read(a)).collect();
        let mut out_views: Vec<Out> = outs.iter().map(|&a| write(a)).collect();
        match (state, prepared) {
            (Some((_, s)), _) if dispatch::updates_state(op) => dispatch::run_in_place(op, &mut write(s), &in_views, &mut out_views),
            (Some((i, s)), _) => {
                in_views.insert(i, read(s));
                dispatch::run(op, &in_views, &mut out_views)
            }
            (None, Some(p)) => dispatch::run_prepacked(op, &in_views, p, &mut out_views),
            (None, None) => dispatch::run(op, &in_views, &mut out_views),
        }
    }

    /// The pool's other workers spin for the run's jobs ([`crate::awake`]): a kernel splits
    /// its work and joins inside the pool instead of waking a sleeping worker per call
    /// (measured: a quarter of a decode step went to those hand-offs).
    fn scope<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        crate::awake::run(f)
    }

    /// A run of fewer elements than one kernel would split ([`PAR_MIN`]) takes a few
    /// microseconds on the caller's thread; handing it to a pool worker and back costs about
    /// as much again (two thread wake-ups).
    fn needs_scope(&self, elements: usize) -> bool {
        elements >= PAR_MIN
    }
}
