//! The CUDA engine under the shared executor: device memory, copies ordered on the device's
//! stream, and one launch per step — generated kernels for elementwise, data movement,
//! gathers and reductions, cuBLAS for products; the row kernels ([`crate::rows`]),
//! attention and rotary embeddings ([`crate::attention`]) and the KV-cache append
//! ([`crate::kv`]) launch from their own modules.

use crate::cudnn::Cudnn;
use crate::gpu::{driver, error, Gpu};
use crate::launch::{broadcast, contiguous, elementwise, tiled, Param, Walk};
use crate::memory::DevMem;
use crate::report::Reports;
use crate::source::rows::{Norm, Scan};
use crate::{attention, decode, fuse, kv, matmul, products, quant, reduce, rows, saved, source};
use cudarc::driver::{result as cu, sys};
use rlx_ir::{DType, Op};
use rlx_runtime::layout::moves;
use rlx_runtime::{Arg, Engine, Result};
use std::sync::{Arc, OnceLock};

/// Launches on one device.
pub struct CudaEngine {
    pub(crate) gpu: Arc<Gpu>,
    /// Where kernels report bad data.
    err: Reports,
    /// The split-K scratch of the few-row products.
    pub(crate) split: matmul::Split,
    /// The scratch of decode's split attention.
    pub(crate) decode: decode::Scratch,
    /// cuDNN for fused attention, opened on first use (`None` where it does not load).
    cudnn: OnceLock<Option<Cudnn>>,
}

impl CudaEngine {
    pub fn new(gpu: Arc<Gpu>) -> Result<CudaEngine> {
        let err = Reports::new(&gpu)?;
        let split = matmul::Split::new(&gpu)?;
        let decode = decode::Scratch::new(&gpu)?;
        Ok(CudaEngine { gpu, err, split, decode, cudnn: OnceLock::new() })
    }

    /// cuDNN on this device, opened the first time attention asks (possibly inside a
    /// CUDA-graph capture, hence with the capture mode relaxed).
    pub(crate) fn cudnn(&self) -> Option<&Cudnn> {
        self.cudnn.get_or_init(|| crate::cudnn::relaxed(|| Cudnn::open(&self.gpu))).as_ref()
    }

    /// Where kernels write their report.
    pub(crate) fn reports(&self) -> u64 {
        self.err.ptr()
    }

    /// A generated kernel's function, compiled on first use.
    pub(crate) fn kernel(&self, source: Option<source::Source>, op: &Op, dtypes: &[DType]) -> std::result::Result<cudarc::driver::sys::CUfunction, String> {
        let source = source.ok_or_else(|| format!("no CUDA kernel for {} over {dtypes:?}", op.kind()))?;
        self.gpu.kernels.function(&self.gpu, &source).map_err(|e| e.to_string())
    }

    /// An elementwise op from its operands (broadcast to the output) into `out`.
    pub(crate) fn map(&self, source: Option<source::Source>, op: &Op, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> std::result::Result<(), String> {
        let dtypes: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
        let f = self.kernel(source, op, &dtypes)?;
        let mut strides = Vec::with_capacity(ins.len());
        let mut plain = 0;
        for (i, a) in ins.iter().enumerate() {
            if a.dims == out.dims {
                plain |= 1 << i;
                strides.push(contiguous(out.dims));
            } else {
                strides.push(broadcast(a.dims, out.dims));
            }
        }
        let walk = Walk::new(out.dims, &strides)?;
        let mut params = vec![Param::Ptr(out.buf.at(out.offset))];
        params.extend(ins.iter().map(|a| Param::Ptr(a.buf.at(a.offset))));
        params.extend([Param::I64(numel(out.dims) as i64), Param::Walk(Box::new(walk)), Param::I32(plain)]);
        tiled(&self.gpu, f, numel(out.dims), &mut params)
    }

    /// Moves `dims` elements of `input` into `out`: element `i` of the walk reads
    /// `in_base + walk(0)` and writes `out_base + walk(1)`.
    pub(crate) fn strided(&self, op: &Op, input: Arg<'_, DevMem>, out: Arg<'_, DevMem>, dims: &[usize], strides: [Vec<i64>; 2], bases: [i64; 2]) -> std::result::Result<(), String> {
        let f = self.kernel(source::copy(input.dtype.size()), op, &[input.dtype])?;
        let walk = Walk::new(dims, &strides)?;
        let mut params = vec![
            Param::Ptr(out.buf.at(out.offset)),
            Param::Ptr(input.buf.at(input.offset)),
            Param::I64(numel(dims) as i64),
            Param::Walk(Box::new(walk)),
            Param::I64(bases[1]),
            Param::I64(bases[0]),
        ];
        tiled(&self.gpu, f, numel(dims), &mut params)
    }

    /// `x` with its axes reordered (output axis `i` is `x`'s axis `perm[i]`) in scratch of its
    /// own, which is freed on the stream once dropped (after the launches that read it).
    pub(crate) fn permuted(&self, op: &Op, x: Arg<'_, DevMem>, perm: &[usize]) -> std::result::Result<DevMem, String> {
        let scratch = DevMem::zeroed(&self.gpu, x.len).map_err(|e| e.to_string())?;
        let dims: Vec<usize> = perm.iter().map(|&p| x.dims[p]).collect();
        let own = contiguous(x.dims);
        let into = Arg { dtype: x.dtype, dims: &dims, buf: &scratch, offset: 0, len: x.len };
        self.strided(op, x, into, &dims, [perm.iter().map(|&p| own[p]).collect(), contiguous(&dims)], [0, 0])?;
        Ok(scratch)
    }

    /// Copies `src`'s bytes into `dst` on the stream.
    fn copy_bytes(&self, src: Arg<'_, DevMem>, dst: Arg<'_, DevMem>) -> std::result::Result<(), String> {
        if src.len != dst.len {
            return Err(format!("copying {} bytes into {}", src.len, dst.len));
        }
        if src.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie in live allocations (the executor's slots) and do not
        // overlap; the copy is ordered on the stream.
        unsafe { cu::memcpy_dtod_async(dst.buf.at(dst.offset), src.buf.at(src.offset), src.len, self.gpu.stream) }.map_err(|e| format!("copying on the device: {e:?}"))
    }

    /// Runs one claimed op.
    fn run(&self, op: &Op, ins: &[Arg<'_, DevMem>], outs: &[Arg<'_, DevMem>]) -> std::result::Result<(), String> {
        let d = |i: usize| ins[i].dtype;
        let out = *outs.first().ok_or_else(|| format!("{} was launched without an output", op.kind()))?;
        match op {
            Op::Activation(a) => self.map(source::activation(a.kind, d(0)), op, ins, out),
            Op::ActivationBackward(a) => self.map(source::activation_backward(a.kind, d(0)), op, ins, out),
            Op::ReluBackward(_) => self.map(source::relu_backward(d(0)), op, ins, out),
            Op::Binary(b) => self.map(source::binary(b.op, d(0)), op, ins, out),
            Op::Compare(c) => self.map(source::compare(c.op, d(0)), op, ins, out),
            Op::Where(_) => self.map(source::select(d(0), d(1)), op, ins, out),
            Op::Fma(_) => self.map(source::fma(d(0)), op, ins, out),
            Op::Cast(c) => self.map(source::cast(d(0), c.to), op, ins, out),
            Op::Reshape(_) | Op::StopGradient(_) => self.copy_bytes(ins[0], out),
            Op::Transpose(_) | Op::Expand(_) | Op::Narrow(_) | Op::Slice(_) | Op::Reverse(_) | Op::Concat(_) => {
                let dims: Vec<&[usize]> = ins.iter().map(|a| a.dims).collect();
                for m in moves(op, &dims, out.dims).unwrap_or_default() {
                    self.strided(op, ins[m.input], out, &m.dims, m.strides, m.bases)?;
                }
                Ok(())
            }
            Op::Gather(g) => {
                let (table, idx) = (ins[0], ins[1]);
                let inner: usize = table.dims[g.axis + 1..].iter().product();
                let bytes = inner * table.dtype.size();
                let (to, from) = (out.buf.at(out.offset), table.buf.at(table.offset));
                if bytes >= 256 && bytes % 16 == 0 && to % 16 == 0 && from % 16 == 0 {
                    let f = self.kernel(source::gather_rows(idx.dtype), op, &[table.dtype, idx.dtype])?;
                    let rows = numel(out.dims) / inner;
                    if rows == 0 {
                        return Ok(());
                    }
                    let mut params = vec![
                        Param::Ptr(to),
                        Param::Ptr(from),
                        Param::Ptr(idx.buf.at(idx.offset)),
                        Param::I64(rows as i64),
                        Param::I64((bytes / 16) as i64),
                        Param::I64(numel(idx.dims) as i64),
                        Param::I64(table.dims[g.axis] as i64),
                        Param::Ptr(self.err.ptr()),
                    ];
                    let blocks = rows.div_ceil(8).min(1 << 20) as u32;
                    return crate::launch::grid(&self.gpu, f, (blocks, 1, 1), (256, 1, 1), 0, &mut params);
                }
                let f = self.kernel(source::gather(table.dtype.size(), idx.dtype), op, &[table.dtype, idx.dtype])?;
                let mut params = vec![
                    Param::Ptr(out.buf.at(out.offset)),
                    Param::Ptr(table.buf.at(table.offset)),
                    Param::Ptr(idx.buf.at(idx.offset)),
                    Param::I64(numel(out.dims) as i64),
                    Param::I64(inner as i64),
                    Param::I64(numel(idx.dims) as i64),
                    Param::I64(table.dims[g.axis] as i64),
                    Param::Ptr(self.err.ptr()),
                ];
                elementwise(&self.gpu, f, numel(out.dims), &mut params)
            }
            Op::GatherBackward(gb) => {
                let (dy, idx) = (ins[0], ins[1]);
                let f = self.kernel(source::gather_backward(dy.dtype, idx.dtype), op, &[dy.dtype, idx.dtype])?;
                let rank = out.dims.len() as i32;
                let axis = if gb.axis < 0 { gb.axis + rank } else { gb.axis };
                let axis = usize::try_from(axis).ok().filter(|&a| a < out.dims.len()).ok_or_else(|| format!("axis {} of a rank-{rank} table", gb.axis))?;
                // SAFETY: `out` is this launch's own range; the adds below follow on the stream.
                unsafe { cu::memset_d8_async(out.buf.at(out.offset), 0, out.len, self.gpu.stream) }.map_err(|e| format!("zeroing the table gradient: {e:?}"))?;
                let mut params = vec![
                    Param::Ptr(out.buf.at(out.offset)),
                    Param::Ptr(dy.buf.at(dy.offset)),
                    Param::Ptr(idx.buf.at(idx.offset)),
                    Param::I64(numel(dy.dims) as i64),
                    Param::I64(numel(&out.dims[axis + 1..]) as i64),
                    Param::I64(numel(idx.dims) as i64),
                    Param::I64(out.dims[axis] as i64),
                    Param::Ptr(self.err.ptr()),
                ];
                elementwise(&self.gpu, f, numel(dy.dims), &mut params)
            }
            Op::Reduce(r) => reduce::reduce(self, op, r, ins[0], out),
            Op::MatMul(_) => matmul::matmul(self, op, ins[0], ins[1], out),
            Op::DotGeneral(d) => matmul::dot_general(self, op, d, ins[0], ins[1], out),
            Op::FusedMatMulBiasAct(f) => matmul::bias_act(self, op, f.activation, ins, out),
            Op::DequantMatMul(q) => quant::dequant_matmul(self, op, q, ins, out),
            Op::Softmax(s) => rows::softmax(self, op, s.axis, ins[0], out),
            Op::LayerNorm(n) => rows::norm(self, op, Norm::Layer, n.axis, n.eps, ins, out),
            Op::LayerNorm2d(n) => rows::norm(self, op, Norm::Layer, 1, n.eps, ins, out),
            Op::RmsNorm(n) => rows::norm(self, op, Norm::Rms, n.axis, n.eps, ins, out),
            Op::FusedResidualLN(n) => rows::residual_norm(self, op, Norm::Layer, n.has_bias, n.eps, ins, out),
            Op::FusedResidualRmsNorm(n) => rows::residual_norm(self, op, Norm::Rms, n.has_bias, n.eps, ins, out),
            Op::LayerNormBackwardInput(n) => rows::norm_backward_input(self, op, Norm::Layer, n.axis, n.eps, [ins[0], ins[1], ins[2]], out),
            Op::RmsNormBackwardInput(n) => rows::norm_backward_input(self, op, Norm::Rms, n.axis, n.eps, [ins[0], ins[1], ins[3]], out),
            Op::LayerNormBackwardGamma(n) => rows::norm_backward_params(self, op, Some(Norm::Layer), n.axis, n.eps, ins[0], ins[1], out),
            Op::RmsNormBackwardGamma(n) => rows::norm_backward_params(self, op, Some(Norm::Rms), n.axis, n.eps, ins[0], ins[3], out),
            Op::RmsNormBackwardBeta(n) => rows::norm_backward_params(self, op, None, n.axis, n.eps, ins[0], ins[3], out),
            Op::ArgMax(a) => rows::arg_extreme(self, op, true, a.axis, ins[0], out),
            Op::ArgMin(a) => rows::arg_extreme(self, op, false, a.axis, ins[0], out),
            Op::Cumsum(c) => rows::scan(self, op, Scan::Sum, c.axis, c.exclusive, false, ins[0], out),
            Op::CumsumBackward(c) => rows::scan(self, op, Scan::Sum, c.axis, c.exclusive, true, ins[0], out),
            Op::CumProd(c) => rows::scan(self, op, Scan::Prod, c.axis, c.exclusive, false, ins[0], out),
            Op::CumMax(c) => rows::scan(self, op, Scan::Max, c.axis, c.exclusive, false, ins[0], out),
            Op::SoftmaxCrossEntropyWithLogits(x) => rows::sparse_cross_entropy(self, op, x.ignore_index, ins[0], ins[1], out),
            Op::SoftmaxCrossEntropyBackward(x) => rows::sparse_cross_entropy_backward(self, op, x.ignore_index, ins, out),
            Op::Rope(r) => attention::rope(self, op, r.head_dim, r.n_rot, r.style, false, ins, out),
            Op::RopeBackward(r) => attention::rope(self, op, r.head_dim, r.n_rot, r.style, true, ins, out),
            Op::Attention(a) => decode::attention(self, op, a, ins, out).unwrap_or_else(|| attention::attention(self, op, a, ins, out)),
            Op::Custom(c) if c.name == saved::FORWARD => attention::saving_forward(self, saved::parse(c)?, ins, outs),
            Op::Custom(c) if c.name == saved::BACKWARD => attention::saved_backward(self, saved::parse(c)?, ins, outs),
            Op::Custom(c) if c.name == products::NAME => products::run(self, op, c, ins, outs),
            Op::AttentionBackward(a) => attention::backward(self, op, a.num_heads, a.head_dim, a.mask_kind, Some(a.wrt as usize), ins, outs),
            Op::AttentionBackwardAll(a) => attention::backward(self, op, a.num_heads, a.head_dim, a.mask_kind, None, ins, outs),
            Op::KvAppend(a) => kv::append(self, op, a, ins, out),
            Op::ElementwiseRegion(r) => fuse::region(self, op, r, ins, out),
            _ => Err(format!("{} has no CUDA kernel", op.kind())),
        }
    }
}

/// A plan's steps captured as an instantiated CUDA graph.
pub struct Recording {
    exec: sys::CUgraphExec,
    gpu: Arc<Gpu>,
}

// SAFETY: an executable graph may be launched from any thread with its context bound.
unsafe impl Send for Recording {}
unsafe impl Sync for Recording {}

impl Drop for Recording {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: launched only on the device's stream; destroying waits for nothing, and
            // the driver keeps a graph alive until its launches finish.
            unsafe {
                let _ = cu::graph::exec_destroy(self.exec);
            }
        }
    }
}

/// Elements of a tensor of `dims`.
pub(crate) fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// Checks that `len` bytes at `offset` lie in a buffer of `size`.
fn within(offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(error(format!("{len} bytes at offset {offset} overrun a device buffer of {size} bytes"))),
    }
}

impl Engine for CudaEngine {
    type Buffer = DevMem;
    type Prepared = DevMem;
    type Recording = Recording;

    fn name(&self) -> &'static str {
        crate::gpu::NAME
    }

    fn align(&self) -> usize {
        256
    }

    /// Values pass between graphs of one opened device, ordered on its stream.
    fn memory(&self) -> u64 {
        self.gpu.id
    }

    fn alloc(&self, bytes: usize) -> Result<DevMem> {
        DevMem::zeroed(&self.gpu, bytes)
    }

    fn upload(&self, dst: &DevMem, offset: usize, src: &[u8]) -> Result<()> {
        let _turn = self.gpu.hold();
        within(offset, src.len(), dst.len)?;
        if src.is_empty() {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: the range lies in `dst`; from pageable memory the call returns once `src`
        // has been staged, so the caller may reuse it.
        unsafe { cu::memcpy_htod_async(dst.at(offset), src, self.gpu.stream) }.map_err(driver("copying to the device"))
    }

    fn download(&self, src: &DevMem, offset: usize, dst: &mut [u8]) -> Result<()> {
        let _turn = self.gpu.hold();
        within(offset, dst.len(), src.len)?;
        self.gpu.bind()?;
        self.err.fetch()?;
        if !dst.is_empty() {
            // SAFETY: the range lies in `src`; the stream orders the copy after every launch.
            unsafe { cu::memcpy_dtoh_async(dst, src.at(offset), self.gpu.stream) }.map_err(driver("copying from the device"))?;
        }
        self.gpu.sync()?;
        self.err.check()
    }

    fn copy(&self, src: Arg<'_, DevMem>, dst: Arg<'_, DevMem>) -> Result<()> {
        let _turn = self.gpu.hold();
        within(src.offset, src.len, src.buf.len)?;
        within(dst.offset, dst.len, dst.buf.len)?;
        self.gpu.bind()?;
        self.copy_bytes(src, dst).map_err(error)
    }

    fn unprepare(&self, prepared: &DevMem) -> Result<DevMem> {
        let copy = self.alloc(prepared.len)?;
        let whole = |b| Arg { dtype: DType::U8, dims: &[], buf: b, offset: 0, len: prepared.len };
        self.copy(whole(prepared), whole(&copy))?;
        Ok(copy)
    }

    unsafe fn launch(
        &self,
        op: &Op,
        ins: &[Arg<'_, DevMem>],
        outs: &[Arg<'_, DevMem>],
        state: Option<(usize, Arg<'_, DevMem>)>,
        _prepared: Option<&DevMem>,
    ) -> std::result::Result<(), String> {
        self.gpu.bind().map_err(|e| e.to_string())?;
        match (op, state) {
            (Op::KvAppend(a), Some((_, cache))) => kv::append_in_place(self, op, a, cache, ins, outs),
            // Another op that mutates an operand reads its state as an ordinary operand.
            (_, Some((i, s))) => {
                let mut all = ins.to_vec();
                all.insert(i, s);
                self.run(op, &all, outs)
            }
            (_, None) => self.run(op, ins, outs),
        }
    }

    /// Captures the steps on the stream into a CUDA graph: a repeated run (a decode or
    /// training step) is then one launch.
    fn record(&self, steps: &mut dyn FnMut() -> Result<()>) -> Result<Option<Recording>> {
        self.gpu.bind()?;
        let stream = self.gpu.stream;
        let (_turn, _capturing) = (self.gpu.hold(), self.gpu.capturing());
        // SAFETY: the stream belongs to the bound context; nothing else submits to it while
        // the steps run (this thread holds it), and capture always ends below.
        unsafe { cu::stream::begin_capture(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) }.map_err(driver("starting a CUDA graph capture"))?;
        let ran = steps();
        // SAFETY: ends the capture begun above.
        let graph = unsafe { cu::stream::end_capture(stream) };
        ran?;
        let graph = graph.map_err(driver("ending a CUDA graph capture"))?;
        // SAFETY: `graph` was just captured; the instantiated form keeps what it needs.
        let exec = unsafe { cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
        // SAFETY: the graph is not used after its instantiation.
        unsafe {
            let _ = cu::graph::destroy(graph);
        }
        let exec = exec.map_err(driver("instantiating a CUDA graph"))?;
        let recording = Recording { exec, gpu: self.gpu.clone() };
        self.replay(&recording)?;
        Ok(Some(recording))
    }

    fn replay(&self, recording: &Recording) -> Result<()> {
        let _turn = self.gpu.hold();
        self.gpu.bind()?;
        // SAFETY: the graph was instantiated on this device; the executor replays it only
        // over the memory it was captured with.
        unsafe { cu::graph::launch(recording.exec, self.gpu.stream) }.map_err(driver("launching a CUDA graph"))
    }

    fn sync(&self) -> Result<()> {
        let _turn = self.gpu.hold();
        self.gpu.bind()?;
        self.err.fetch()?;
        self.gpu.sync()?;
        self.err.check()
    }

    /// Runs a whole plan holding the stream ([`Gpu::hold`]).
    fn scope<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let _turn = self.gpu.hold();
        // A failure to bind surfaces from the first call inside, which binds again.
        let _ = self.gpu.bind();
        f()
    }
}
