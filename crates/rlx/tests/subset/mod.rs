//! A test-only device backend: it claims a chosen subset of kinds, keeps its values in
//! buffers of its own type (never host tensors), each backend in a memory of its own as each
//! GPU has, and counts every byte that crosses between them and the host. Its kernels are the CPU's, so its results must equal the CPU backend's
//! bit for bit; the host runs the rest ([`rlx_runtime::Session::with_host`]).

use rlx_cpu::{CpuBackend, CpuEngine};
use rlx_ir::{DType, Graph, Op, OpKind};
use rlx_opt::{Claim, Claims};
use rlx_runtime::{Arg, Backend, Device, Engine, Executable, Executor, HostBuffer, Result, Session, Tensor};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes moved host → device and device → host.
#[derive(Debug, Default)]
pub struct Traffic {
    up: AtomicUsize,
    down: AtomicUsize,
}

impl Traffic {
    /// `(up, down)` so far.
    pub fn bytes(&self) -> (usize, usize) {
        (self.up.load(Ordering::Relaxed), self.down.load(Ordering::Relaxed))
    }
}

/// Device memory: host bytes behind a type of its own, so none can pass for a host tensor.
pub struct DevBuf(HostBuffer);

/// The engine: the CPU's kernels over [`DevBuf`]s, every transfer counted.
pub struct SubsetEngine {
    cpu: CpuEngine,
    traffic: Arc<Traffic>,
    memory: u64,
}

fn host<'a>(a: Arg<'a, DevBuf>) -> Arg<'a, HostBuffer> {
    Arg { dtype: a.dtype, dims: a.dims, buf: &a.buf.0, offset: a.offset, len: a.len }
}

impl Engine for SubsetEngine {
    type Buffer = DevBuf;
    type Prepared = <CpuEngine as Engine>::Prepared;
    type Recording = ();

    fn name(&self) -> &'static str {
        "subset"
    }

    /// Its backend's: graphs of one session share values, other sessions' are refused.
    fn memory(&self) -> u64 {
        self.memory
    }

    /// As the GPU backends will: 256 bytes.
    fn align(&self) -> usize {
        256
    }

    fn alloc(&self, bytes: usize) -> Result<DevBuf> {
        Ok(DevBuf(self.cpu.alloc(bytes)?))
    }

    fn upload(&self, dst: &DevBuf, offset: usize, src: &[u8]) -> Result<()> {
        self.traffic.up.fetch_add(src.len(), Ordering::Relaxed);
        self.cpu.upload(&dst.0, offset, src)
    }

    fn download(&self, src: &DevBuf, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.traffic.down.fetch_add(dst.len(), Ordering::Relaxed);
        self.cpu.download(&src.0, offset, dst)
    }

    fn copy(&self, src: Arg<'_, DevBuf>, dst: Arg<'_, DevBuf>) -> Result<()> {
        self.cpu.copy(host(src), host(dst))
    }

    fn prepared_operand(&self, op: &Op, operands: &[(DType, &[usize])]) -> Option<usize> {
        self.cpu.prepared_operand(op, operands)
    }

    fn prepare(&self, op: &Op, weight: Arg<'_, DevBuf>, out_dims: &[usize]) -> Result<Option<Self::Prepared>> {
        self.cpu.prepare(op, host(weight), out_dims)
    }

    fn prepare_owned(&self, op: &Op, weight: DevBuf, dtype: DType, dims: &[usize], out_dims: &[usize]) -> Result<std::result::Result<Self::Prepared, DevBuf>> {
        Ok(self.cpu.prepare_owned(op, weight.0, dtype, dims, out_dims)?.map_err(DevBuf))
    }

    fn unprepare(&self, prepared: &Self::Prepared) -> Result<DevBuf> {
        Ok(DevBuf(self.cpu.unprepare(prepared)?))
    }

    unsafe fn launch(
        &self,
        op: &Op,
        ins: &[Arg<'_, DevBuf>],
        outs: &[Arg<'_, DevBuf>],
        state: Option<(usize, Arg<'_, DevBuf>)>,
        prepared: Option<&Self::Prepared>,
    ) -> std::result::Result<(), String> {
        let ins: Vec<_> = ins.iter().map(|&a| host(a)).collect();
        let outs: Vec<_> = outs.iter().map(|&a| host(a)).collect();
        self.cpu.launch(op, &ins, &outs, state.map(|(i, a)| (i, host(a))), prepared)
    }
}

/// The backend: claims `kinds` and runs them on a [`SubsetEngine`].
pub struct Subset {
    kinds: &'static [OpKind],
    pub traffic: Arc<Traffic>,
    memory: u64,
}

impl Backend for Subset {
    fn name(&self) -> &'static str {
        "subset"
    }

    /// Its memory is host memory in disguise; the session tells it from the host by name.
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn claims(&self) -> &dyn Claims {
        self
    }

    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>> {
        let engine = SubsetEngine { cpu: CpuEngine::default(), traffic: self.traffic.clone(), memory: self.memory };
        Ok(Box::new(Executor::new(Arc::new(engine), graph.clone())?))
    }
}

/// The CPU's claims, narrowed to the chosen kinds.
impl Claims for Subset {
    fn kinds(&self) -> &[OpKind] {
        self.kinds
    }

    fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
        match self.kinds.contains(&op.kind()) {
            true => CpuBackend::new().claims().claim(op, inputs),
            false => Claim::No,
        }
    }
}

/// A session on a subset backend claiming `kinds` (which list the sources too), with the CPU
/// as host; and its byte counter.
pub fn session(kinds: &'static [OpKind]) -> (Session, Arc<Traffic>) {
    static MEMORIES: AtomicU64 = AtomicU64::new(1);
    let backend = Subset { kinds, traffic: Arc::default(), memory: MEMORIES.fetch_add(1, Ordering::Relaxed) };
    let traffic = backend.traffic.clone();
    (Session::new(Arc::new(backend)).with_host(Arc::new(CpuBackend::new())), traffic)
}

/// What a transformer runs, leaving the host the rest (casts): with comparisons and running
/// sums, a decoder computes its positions and masks on the device.
pub const TRANSFORMER: &[OpKind] = {
    use OpKind::*;
    &[
        Input, Param, Constant, MatMul, FusedMatMulBiasAct, DequantMatMul, Binary, Activation, ElementwiseRegion, Softmax, LayerNorm, RmsNorm,
        FusedResidualLN, FusedResidualRmsNorm, FusedSwiGLU, Attention, Rope, Reshape, Transpose, Narrow, Slice, Concat,
        Expand, Gather, KvAppend, Reduce, Where, Compare, Cumsum,
    ]
};

/// A host tensor's equal, for comparing results across backends.
pub fn same(a: &[Tensor], b: &[Tensor]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}
