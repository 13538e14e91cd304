//! The wgpu engine under the shared executor: storage buffers, copies and launches recorded
//! in order into one command encoder (submitted in batches, and before every upload,
//! download and sync, so work takes effect in the order issued), and one launch per step of
//! a generated WGSL kernel ([`crate::shader`]).

use crate::gpu::Gpu;
use crate::launch::{broadcast, contiguous, grid, launch, threads, walk, word, WALK_WORDS};
use crate::memory::GpuMem;
use crate::shader::{self, attention::MAX_HEAD, ty, Kernel};
use rlx_ir::ops::attention::{Attention, MaskKind};
use rlx_ir::ops::quant::DequantMatMul;
use rlx_ir::{DType, Op};
use rlx_runtime::layout::moves;
use rlx_runtime::{Arg, Engine, Result, RuntimeError};
use std::sync::Arc;

type Res = std::result::Result<(), String>;

/// Launches on one adapter.
pub struct WgpuEngine {
    pub(crate) gpu: Arc<Gpu>,
}

/// Elements of a tensor of `dims`.
fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// `dims` around `axis`: `(outer, n, inner)`.
fn lanes(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
}

/// An f32 kernel parameter.
fn f32_word(v: f32) -> u32 {
    v.to_bits()
}

impl WgpuEngine {
    pub fn new(gpu: Arc<Gpu>) -> WgpuEngine {
        WgpuEngine { gpu }
    }

    /// A generated kernel, or the error saying which op and dtypes have none.
    fn kernel(k: Option<Kernel>, op: &Op, dtypes: &[DType]) -> std::result::Result<Kernel, String> {
        k.ok_or_else(|| format!("no wgpu kernel for {} over {dtypes:?}", op.kind()))
    }

    /// An elementwise op from its operands (broadcast to the output) into `out`, a word of
    /// the output per invocation.
    fn map(&self, k: Option<Kernel>, op: &Op, ins: &[Arg<'_, GpuMem>], out: Arg<'_, GpuMem>) -> Res {
        let dtypes: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
        let k = Self::kernel(k, op, &dtypes)?;
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
        let n = numel(out.dims);
        let params = walk(n, out.dims, &strides, plain)?;
        let per = ty(out.dtype).map_or(1, |t| t.per_word());
        let mut operands = vec![out];
        operands.extend_from_slice(ins);
        launch(&self.gpu, &k, &operands, &params, threads(n.div_ceil(per))?)
    }

    /// Moves the `dims` elements of `input` into `out`: element `i` of the walk reads
    /// `bases[0] + walk(0)` and writes `bases[1] + walk(1)`.
    fn strided(&self, op: &Op, input: Arg<'_, GpuMem>, out: Arg<'_, GpuMem>, dims: &[usize], strides: [Vec<i64>; 2], bases: [i64; 2]) -> Res {
        let size = input.dtype.size();
        let k = Self::kernel(shader::copy(size), op, &[input.dtype])?;
        let n = numel(dims);
        let mut params = walk(n, dims, &strides, 0)?;
        for b in bases {
            params.push(i32::try_from(b).map_err(|_| format!("offset {b} is beyond 32 bits"))? as u32);
        }
        let per = if size < 4 { 4 / size } else { 1 };
        launch(&self.gpu, &k, &[out, input], &params, threads(n.div_ceil(per))?)
    }

    /// Copies `words` words from `src` into `dst` with the copy kernel (a buffer cannot be
    /// copied into itself by the queue).
    fn copy_words(&self, src: Arg<'_, GpuMem>, dst: Arg<'_, GpuMem>, words: usize) -> Res {
        let dims = [words];
        let d = Arg { dtype: DType::U32, dims: &dims, buf: dst.buf, offset: dst.offset, len: words * 4 };
        let s = Arg { dtype: DType::U32, dims: &dims, buf: src.buf, offset: src.offset, len: words * 4 };
        let k = shader::copy(4).ok_or("no word copy")?;
        let mut params = walk(words, &dims, &[vec![1], vec![1]], 0)?;
        params.extend([0, 0]);
        launch(&self.gpu, &k, &[d, s], &params, threads(words)?)
    }

    /// Copies `src`'s bytes into `dst` in order with the other work.
    fn copy_bytes(&self, src: Arg<'_, GpuMem>, dst: Arg<'_, GpuMem>) -> Res {
        if src.len != dst.len {
            return Err(format!("copying {} bytes into {}", src.len, dst.len));
        }
        if src.len == 0 {
            return Ok(());
        }
        if !src.offset.is_multiple_of(4) || !dst.offset.is_multiple_of(4) {
            return Err(format!("a copy between byte offsets {} and {} that are not whole words", src.offset, dst.offset));
        }
        let len = src.len.next_multiple_of(4);
        if src.offset + len > src.buf.size() || dst.offset + len > dst.buf.size() {
            return Err(format!("a copy of {} bytes runs past a buffer's words", src.len));
        }
        if std::ptr::eq(src.buf, dst.buf) {
            return self.copy_words(src, dst, len / 4);
        }
        self.gpu
            .record(|e| e.copy_buffer_to_buffer(&src.buf.buf, src.offset as u64, &dst.buf.buf, dst.offset as u64, len as u64))
            .map_err(|e| e.to_string())
    }

    /// Runs one claimed op.
    fn run(&self, op: &Op, ins: &[Arg<'_, GpuMem>], outs: &[Arg<'_, GpuMem>]) -> Res {
        let d = |i: usize| ins[i].dtype;
        let out = *outs.first().ok_or_else(|| format!("{} was launched without an output", op.kind()))?;
        match op {
            Op::Activation(a) => self.map(shader::activation(a.kind, d(0)), op, ins, out),
            Op::ActivationBackward(a) => self.map(shader::activation_backward(a.kind, d(0)), op, ins, out),
            Op::ReluBackward(_) => self.map(shader::relu_backward(d(0)), op, ins, out),
            Op::Binary(b) => self.map(shader::binary(b.op, d(0)), op, ins, out),
            Op::Compare(c) => self.map(shader::compare(c.op, d(0)), op, ins, out),
            Op::Where(_) => self.map(shader::select(d(0), d(1)), op, ins, out),
            Op::Fma(_) => self.map(shader::fma(d(0)), op, ins, out),
            Op::Cast(c) => self.map(shader::cast(d(0), c.to), op, ins, out),
            Op::ElementwiseRegion(r) => {
                let dtypes: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
                let k = Self::kernel(shader::region::region(r, &dtypes), op, &dtypes)?;
                let n = numel(out.dims);
                let mut params = vec![word(n)?];
                params.extend(r.input_modulus[..ins.len()].iter().copied());
                let per = ty(out.dtype).map_or(1, |t| t.per_word());
                let mut operands = vec![out];
                operands.extend_from_slice(ins);
                launch(&self.gpu, &k, &operands, &params, threads(n.div_ceil(per))?)
            }
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
                let k = Self::kernel(shader::gather(table.dtype.size(), idx.dtype), op, &[table.dtype, idx.dtype])?;
                let n = numel(out.dims);
                let params = [word(n)?, word(numel(&table.dims[g.axis + 1..]))?, word(numel(idx.dims))?, word(table.dims[g.axis])?];
                let size = table.dtype.size();
                let per = if size < 4 { 4 / size } else { 1 };
                launch(&self.gpu, &k, &[out, table, idx], &params, threads(n.div_ceil(per))?)
            }
            Op::Reduce(r) => {
                let x = ins[0];
                let k = Self::kernel(shader::reduce(r.op, x.dtype), op, &[x.dtype])?;
                let own = contiguous(x.dims);
                let split = |reduced: bool| -> (Vec<usize>, Vec<i64>) { (0..x.dims.len()).filter(|a| r.axes.contains(a) == reduced).map(|a| (x.dims[a], own[a])).unzip() };
                let ((kept, ks), (red, rs)) = (split(false), split(true));
                let n = numel(&kept);
                let mut params = walk(n, &kept, &[ks], 0)?;
                params.resize(WALK_WORDS + 4, 0);
                let inner = walk(numel(&red), &red, &[rs], 0)?;
                params.push(inner[0]);
                params.push(inner[1]);
                params.extend_from_slice(&inner[2..10]);
                params.extend_from_slice(&inner[10..18]);
                launch(&self.gpu, &k, &[out, x], &params, grid(n)?)
            }
            Op::MatMul(_) => self.matmul(op, ins, None, out),
            Op::FusedMatMulBiasAct(f) => self.matmul(op, ins, Some(f.activation), out),
            Op::DequantMatMul(q) => self.dequant_matmul(op, q, ins, out),
            Op::Softmax(s) => {
                let x = ins[0];
                let k = Self::kernel(shader::rows::softmax(x.dtype), op, &[x.dtype])?;
                let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(s.axis as i64, x.dims.len())?);
                self.rows(&k, &[out, x], outer * inner, n, inner, 0.0, None)
            }
            Op::ArgMax(a) => self.arg_extreme(op, true, a.axis, ins[0], out),
            Op::ArgMin(a) => self.arg_extreme(op, false, a.axis, ins[0], out),
            Op::LayerNorm(nm) => self.norm(op, shader::rows::Norm::Layer, nm.axis as i64, nm.eps, ins, out),
            Op::LayerNorm2d(nm) => self.norm(op, shader::rows::Norm::Layer, 1, nm.eps, ins, out),
            Op::RmsNorm(nm) => self.norm(op, shader::rows::Norm::Rms, nm.axis as i64, nm.eps, ins, out),
            Op::FusedResidualLN(nm) => self.residual_norm(op, shader::rows::Norm::Layer, nm.has_bias, nm.eps, ins, out),
            Op::FusedResidualRmsNorm(nm) => self.residual_norm(op, shader::rows::Norm::Rms, nm.has_bias, nm.eps, ins, out),
            Op::Rope(r) => self.rope(op, r.head_dim, r.n_rot, r.style, false, ins, out),
            Op::RopeBackward(r) => self.rope(op, r.head_dim, r.n_rot, r.style, true, ins, out),
            Op::Attention(a) => self.attention(op, a, ins, out),
            Op::KvAppend(a) => {
                let cache = ins[0];
                self.strided(op, cache, out, out.dims, [contiguous(cache.dims), contiguous(out.dims)], [0, 0])?;
                self.kv_write(op, a, out, ins[1], ins.get(2).copied())
            }
            _ => Err(format!("{} has no wgpu kernel", op.kind())),
        }
    }

    /// `out [batch.., m, n] = a [.., m, k] · b [.., k, n]`, the batch broadcast.
    fn matmul(&self, op: &Op, ins: &[Arg<'_, GpuMem>], epilogue: shader::matmul::Epilogue, out: Arg<'_, GpuMem>) -> Res {
        let (a, b) = (ins[0], ins[1]);
        let dtypes: Vec<DType> = ins.iter().map(|x| x.dtype).collect();
        let k = Self::kernel(shader::matmul::matmul(a.dtype, epilogue).filter(|_| dtypes.iter().all(|&d| d == a.dtype)), op, &dtypes)?;
        let (ra, rb, ro) = (a.dims.len(), b.dims.len(), out.dims.len());
        if ra < 2 || rb < 2 || ro < 2 {
            return Err(format!("a product of {:?} and {:?} needs matrices", a.dims, b.dims));
        }
        let (m, kd, n) = (a.dims[ra - 2], a.dims[ra - 1], b.dims[rb - 1]);
        let batch = &out.dims[..ro - 2];
        let scaled = |dims: &[usize], per: usize| broadcast(dims, batch).into_iter().map(|s| s * per as i64).collect::<Vec<_>>();
        let items = numel(batch);
        if items > 65535 {
            return Err(format!("{items} batch items exceed a grid's 65535"));
        }
        let mut params = walk(items, batch, &[scaled(&a.dims[..ra - 2], m * kd), scaled(&b.dims[..rb - 2], kd * n)], 0)?;
        params.extend([word(m)?, word(n)?, word(kd)?]);
        let tile = shader::matmul::TILE as usize;
        let mut operands = vec![out];
        operands.extend_from_slice(ins);
        launch(&self.gpu, &k, &operands, &params, [word(n.div_ceil(tile))?, word(m.div_ceil(tile))?, items as u32])
    }

    /// `DequantMatMul` on `(x [.., K], w [N, row_bytes])` of GGUF blocks into `out [.., N]`,
    /// one workgroup per output element.
    fn dequant_matmul(&self, op: &Op, q: &DequantMatMul, ins: &[Arg<'_, GpuMem>], out: Arg<'_, GpuMem>) -> Res {
        let (x, w) = (ins[0], ins[1]);
        let t = q.scheme.gguf().filter(|t| t.plain_header().is_some()).ok_or_else(|| format!("no wgpu kernel for {:?} weights", q.scheme))?;
        let k = Self::kernel(shader::quant::dequant_matmul(t, q.activations), op, &[x.dtype, w.dtype])?;
        let kd = x.dims.last().copied().unwrap_or(0);
        let n = out.dims.last().copied().unwrap_or(0);
        let total = numel(out.dims);
        if total == 0 {
            return Ok(());
        }
        if kd % 32 != 0 || kd == 0 {
            return Err(format!("x {:?}: K = {kd} is not a whole number of {t:?} blocks of 32", x.dims));
        }
        let need = n * (kd / 32) * t.block_bytes();
        if w.len != need {
            return Err(format!("the {t:?} weight holds {} bytes; {n} rows of K = {kd} need {need}", w.len));
        }
        launch(&self.gpu, &k, &[out, x, w], &[word(n)?, word(kd)?, word(total)?], grid(total)?)
    }

    /// A row kernel over `rows` rows of `n` elements `inner` apart, one workgroup each; the
    /// walk of the residual's rows when given.
    #[allow(clippy::too_many_arguments)]
    fn rows(&self, k: &Kernel, operands: &[Arg<'_, GpuMem>], rows: usize, n: usize, inner: usize, eps: f32, residual: Option<(Vec<u32>, u32)>) -> Res {
        if rows == 0 || n == 0 {
            return Ok(());
        }
        let (mut params, res_last) = match residual {
            Some((w, last)) => (w, last),
            None => (walk(rows, &[rows], &[vec![1]], 0)?, 0),
        };
        params.push(0);
        params.extend([word(n)?, word(inner)?, f32_word(eps), res_last]);
        launch(&self.gpu, k, operands, &params, grid(rows)?)
    }

    /// `ArgMax` / `ArgMin` (`max`) along `axis` into i64 indices.
    fn arg_extreme(&self, op: &Op, max: bool, axis: usize, x: Arg<'_, GpuMem>, out: Arg<'_, GpuMem>) -> Res {
        let k = Self::kernel(shader::rows::arg_extreme(max, x.dtype), op, &[x.dtype])?;
        if axis >= x.dims.len() || x.dims[axis] == 0 {
            return Err(format!("no extreme along axis {axis} of {:?}", x.dims));
        }
        let (outer, n, inner) = lanes(x.dims, axis);
        self.rows(&k, &[out, x], outer * inner, n, inner, 0.0, None)
    }

    /// `LayerNorm` / `LayerNorm2d` / `RmsNorm` along `axis`: inputs `(x, gamma, beta)`.
    fn norm(&self, op: &Op, kind: shader::rows::Norm, axis: i64, eps: f32, ins: &[Arg<'_, GpuMem>], out: Arg<'_, GpuMem>) -> Res {
        let x = ins[0];
        let k = Self::kernel(shader::rows::norm(kind, None, x.dtype), op, &[x.dtype])?;
        let (outer, n, inner) = lanes(x.dims, rlx_ir::norm_axis(axis, x.dims.len())?);
        self.rows(&k, &[out, x, ins[1], ins[2]], outer * inner, n, inner, eps, None)
    }

    /// `FusedResidualLN` / `FusedResidualRmsNorm` over the last axis: inputs `(x, residual
    /// [, bias], gamma, beta)`, the residual broadcasting to `x`.
    fn residual_norm(&self, op: &Op, kind: shader::rows::Norm, has_bias: bool, eps: f32, ins: &[Arg<'_, GpuMem>], out: Arg<'_, GpuMem>) -> Res {
        let (x, res) = (ins[0], ins[1]);
        let k = Self::kernel(shader::rows::norm(kind, Some(has_bias), x.dtype).filter(|_| res.dtype == x.dtype), op, &[x.dtype, res.dtype])?;
        let r = x.dims.len();
        let n = *x.dims.last().ok_or("x needs a feature axis")?;
        let lead = &x.dims[..r - 1];
        let rows = numel(lead);
        let row_strides: Vec<i64> = broadcast(res.dims, x.dims)[..r - 1].to_vec();
        let res_last = u32::from(res.dims.last() == Some(&n));
        let w = walk(rows, lead, &[row_strides], 0)?;
        let mut operands = vec![out];
        operands.extend_from_slice(ins);
        self.rows(&k, &operands, rows, n, 1, eps, Some((w, res_last)))
    }

    /// `Rope` / `RopeBackward` (`negate`): inputs `(x, cos, sin)`.
    #[allow(clippy::too_many_arguments)]
    fn rope(&self, op: &Op, head_dim: usize, n_rot: usize, style: rlx_ir::ops::attention::RopeStyle, negate: bool, ins: &[Arg<'_, GpuMem>], out: Arg<'_, GpuMem>) -> Res {
        let (x, cos, sin) = (ins[0], ins[1], ins[2]);
        let k = Self::kernel(shader::attention::rope(x.dtype, cos.dtype), op, &[x.dtype, cos.dtype])?;
        let (seq, width) = match *x.dims {
            [_, s, h, d] => (s, h * d),
            [_, s, w] => (s, w),
            [s, w] => (s, w),
            _ => return Err(format!("x {:?} must be [B, S, H·D], [B, S, H, D] or [S, H·D]", x.dims)),
        };
        let half = n_rot / 2;
        let stride = if cos.dims.len() == 1 { half } else { cos.dims[cos.dims.len() - 1] };
        if seq > 0 && ((seq - 1) * stride + half > numel(cos.dims) || (seq - 1) * stride + half > numel(sin.dims)) {
            return Err(format!("the cos/sin tables {:?} have no row for position {} (x is {:?})", cos.dims, seq - 1, x.dims));
        }
        if head_dim == 0 || width % head_dim != 0 || n_rot > head_dim {
            return Err(format!("rows of {width} channels are no whole heads of {head_dim} with {n_rot} rotated"));
        }
        let n = numel(x.dims);
        let params = [word(n)?, word(width)?, word(seq.max(1))?, word(head_dim)?, word(n_rot)?, word(stride)?, u32::from(style == rlx_ir::ops::attention::RopeStyle::GptJ), u32::from(negate)];
        launch(&self.gpu, &k, &[out, x, cos, sin], &params, threads(n)?)
    }

    /// Attention: inputs `(q, k, v [, mask])`.
    fn attention(&self, op: &Op, a: &Attention, ins: &[Arg<'_, GpuMem>], out: Arg<'_, GpuMem>) -> Res {
        let dtypes: Vec<DType> = ins.iter().map(|x| x.dtype).collect();
        let k = Self::kernel(shader::attention::for_attention(a, &dtypes), op, &dtypes)?;
        let (q, kk, v) = (ins[0], ins[1], ins[2]);
        let heads = a.num_heads;
        let kv_heads = match *kk.dims {
            [_, h, _, _] => h,
            [.., w] if a.head_dim > 0 => w / a.head_dim,
            _ => 0,
        };
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!("{heads} query heads cannot share {kv_heads} key heads"));
        }
        let layout = |dims: &[usize], h: usize| -> ([usize; 3], usize, usize) {
            match *dims {
                [_, hh, s, d] => ([hh * s * d, s * d, d], s, d),
                [_, s, w] => ([s * w, w / h, w], s, w / h),
                [s, w] => ([0, w / h, w], s, w / h),
                _ => ([0; 3], 0, 0),
            }
        };
        let batch = if q.dims.len() >= 3 { q.dims[0] } else { 1 };
        let (qs, s_q, dq) = layout(q.dims, heads);
        let (ks, s_k, _) = layout(kk.dims, kv_heads);
        let (vs, _, dv) = layout(v.dims, kv_heads);
        let (os, _, _) = layout(out.dims, heads);
        if dq != a.head_dim || dv > MAX_HEAD {
            return Err(format!("heads of {dq} and {dv} channels for head_dim {}", a.head_dim));
        }
        let rows = batch * heads * s_q;
        let mut params = vec![word(rows)?];
        for s in [qs, ks, vs, os] {
            for x in s {
                params.push(word(x)?);
            }
        }
        let window = if let MaskKind::SlidingWindow(w) = a.mask_kind { w } else { 0 };
        let scale = a.score_scale.unwrap_or(1.0 / (a.head_dim as f32).sqrt());
        params.extend([word(heads)?, word(heads / kv_heads)?, word(s_q)?, word(s_k)?, word(dq)?, word(dv)?, word(window)?, u32::from(a.mask_kind == MaskKind::Causal)]);
        params.extend([f32_word(scale), f32_word(a.attn_logit_softcap.unwrap_or(0.0))]);
        let mut operands = vec![out, q, kk, v];
        if a.mask_kind == MaskKind::Custom {
            let m = ins[3];
            if numel(m.dims) != batch * s_k {
                return Err(format!("a key mask {:?} for {batch} batch items of {s_k} keys", m.dims));
            }
            params.push(word(s_k)?);
            operands.push(m);
        } else {
            params.push(0);
        }
        if s_k == 0 {
            return Err("attention over no keys".into());
        }
        launch(&self.gpu, &k, &operands, &params, grid(rows)?)
    }

    /// Submits the pending work with `extra` (a range of a buffer) and the report copied to
    /// mapped staging buffers, waits, and returns the range's bytes; a kernel's report of
    /// bad data becomes an error (and the report is cleared).
    fn finish(&self, extra: Option<(&GpuMem, usize, usize)>) -> Result<Vec<u8>> {
        let gpu = &self.gpu;
        let staging = |size: u64| gpu.device.create_buffer(&wgpu::BufferDescriptor { label: None, size, usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, mapped_at_creation: false });
        let report = staging(16);
        let window = extra.map(|(src, offset, len)| {
            let start = offset / 4 * 4;
            let size = (offset - start + len).next_multiple_of(4).max(4).min(src.size() - start);
            (src, start, size, offset - start, len)
        });
        let data = window.map(|w| staging(w.2 as u64));
        gpu.record(|e| {
            e.copy_buffer_to_buffer(&gpu.report, 0, &report, 0, 16);
            if let (Some((src, start, size, _, _)), Some(d)) = (window, &data) {
                e.copy_buffer_to_buffer(&src.buf, start as u64, d, 0, size as u64);
            }
        })?;
        let mapped = |b: &wgpu::Buffer| {
            let (tx, rx) = std::sync::mpsc::channel();
            b.map_async(wgpu::MapMode::Read, .., move |r| {
                let _ = tx.send(r);
            });
            rx
        };
        gpu.flush()?;
        let wait_report = mapped(&report);
        let wait_data = data.as_ref().map(mapped);
        gpu.wait()?;
        let got = |rx: std::sync::mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>| -> Result<()> {
            match rx.recv() {
                Ok(Ok(())) => Ok(()),
                _ => Err(gpu.error("mapping a staging buffer failed").into()),
            }
        };
        got(wait_report)?;
        let words: Vec<u32> = report.get_mapped_range(..).map_err(|e| gpu.error(e))?.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let mut out = Vec::new();
        if let (Some(rx), Some(d), Some((_, _, _, skip, len))) = (wait_data, &data, window) {
            got(rx)?;
            out = d.get_mapped_range(..).map_err(|e| gpu.error(e))?[skip..skip + len].to_vec();
        }
        if words[0] != 0 {
            gpu.queue.write_buffer(&gpu.report, 0, &[0; 16]);
            let what = match words[0] {
                1 => format!("a gather index {} lies outside [0, {})", words[1] as i32, words[2]),
                _ => format!("KvAppend's rows do not fit at position {} of a cache of {}", words[1] as i32, words[2]),
            };
            return Err(gpu.error(what).into());
        }
        Ok(out)
    }
}

/// Checks that `len` bytes at `offset` lie in a buffer of `size`.
fn within(gpu: &Gpu, offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(gpu.error(format!("{len} bytes at offset {offset} overrun a buffer of {size} bytes")).into()),
    }
}

impl Engine for WgpuEngine {
    type Buffer = GpuMem;
    type Prepared = GpuMem;
    type Recording = ();

    fn name(&self) -> &'static str {
        crate::gpu::NAME
    }

    fn align(&self) -> usize {
        256
    }

    /// Values pass between graphs of one opened adapter.
    fn memory(&self) -> u64 {
        self.gpu.id
    }

    fn alloc(&self, bytes: usize) -> Result<GpuMem> {
        GpuMem::zeroed(&self.gpu, bytes)
    }

    /// Submits the work before it, then queues the write: the queue runs writes after
    /// earlier submissions and before later ones.
    fn upload(&self, dst: &GpuMem, offset: usize, src: &[u8]) -> Result<()> {
        within(&self.gpu, offset, src.len(), dst.len)?;
        if src.is_empty() {
            return Ok(());
        }
        if !offset.is_multiple_of(4) {
            return Err(self.gpu.error(format!("an upload at byte offset {offset}, not a whole word")).into());
        }
        self.gpu.flush()?;
        if src.len().is_multiple_of(4) {
            self.gpu.queue.write_buffer(&dst.buf, offset as u64, src);
        } else {
            let mut padded = src.to_vec();
            padded.resize(src.len().next_multiple_of(4), 0);
            if offset + padded.len() > dst.size() {
                return Err(self.gpu.error("an upload runs past its buffer's words").into());
            }
            self.gpu.queue.write_buffer(&dst.buf, offset as u64, &padded);
        }
        Ok(())
    }

    fn download(&self, src: &GpuMem, offset: usize, dst: &mut [u8]) -> Result<()> {
        within(&self.gpu, offset, dst.len(), src.len)?;
        let bytes = self.finish(Some((src, offset, dst.len())))?;
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    fn copy(&self, src: Arg<'_, GpuMem>, dst: Arg<'_, GpuMem>) -> Result<()> {
        within(&self.gpu, src.offset, src.len, src.buf.len.max(src.buf.size()))?;
        within(&self.gpu, dst.offset, dst.len, dst.buf.len.max(dst.buf.size()))?;
        self.copy_bytes(src, dst).map_err(|e| RuntimeError::from(self.gpu.error(e)))
    }

    fn unprepare(&self, prepared: &GpuMem) -> Result<GpuMem> {
        let copy = self.alloc(prepared.len)?;
        let whole = |b| Arg { dtype: DType::U8, dims: &[], buf: b, offset: 0, len: prepared.len };
        self.copy(whole(prepared), whole(&copy))?;
        Ok(copy)
    }

    unsafe fn launch(&self, op: &Op, ins: &[Arg<'_, GpuMem>], outs: &[Arg<'_, GpuMem>], state: Option<(usize, Arg<'_, GpuMem>)>, _prepared: Option<&GpuMem>) -> std::result::Result<(), String> {
        match (op, state) {
            // A cache that is graph state takes the rows in place; the output, with `pos`, is
            // its prefix, and with `at` the cache itself (no output here).
            (Op::KvAppend(a), Some((_, cache))) => {
                self.kv_write(op, a, cache, ins[0], ins.get(1).copied())?;
                match outs.first() {
                    Some(&out) => self.strided(op, cache, out, out.dims, [contiguous(cache.dims), contiguous(out.dims)], [0, 0]),
                    None => Ok(()),
                }
            }
            (_, state) => self.launch_plain(op, ins, outs, state),
        }
    }

    fn sync(&self) -> Result<()> {
        self.finish(None).map(|_| ())
    }
}

impl WgpuEngine {
    /// A launch whose mutated operand, if any, is read as an ordinary one.
    fn launch_plain(&self, op: &Op, ins: &[Arg<'_, GpuMem>], outs: &[Arg<'_, GpuMem>], state: Option<(usize, Arg<'_, GpuMem>)>) -> Res {
        match state {
            // An op that mutates an operand reads its state as an ordinary operand.
            Some((i, s)) => {
                let mut all = ins.to_vec();
                all.insert(i, s);
                self.run(op, &all, outs)
            }
            None => self.run(op, ins, outs),
        }
    }

    /// Writes `rows` into `cache` at `at` (an i64 `[1]` read on the device) or `pos` along
    /// the op's axis.
    fn kv_write(&self, op: &Op, a: &rlx_ir::ops::shape::KvAppend, cache: Arg<'_, GpuMem>, rows: Arg<'_, GpuMem>, at: Option<Arg<'_, GpuMem>>) -> Res {
        let k = Self::kernel(shader::kv_write(cache.dtype.size()), op, &[cache.dtype])?;
        let n = numel(rows.dims);
        let (axis, r) = (a.axis, cache.dims.len());
        if axis >= r || rows.dims.len() != r {
            return Err(format!("rows {:?} for a cache {:?} along axis {axis}", rows.dims, cache.dims));
        }
        let params = [word(n)?, word(rows.dims[axis])?, word(numel(&cache.dims[axis + 1..]))?, word(cache.dims[axis])?, word(a.pos)?, u32::from(at.is_some())];
        launch(&self.gpu, &k, &[cache, rows, at.unwrap_or(rows)], &params, threads(n.max(1))?)
    }
}
