//! Launches of `DequantMatMul` over GGUF blocks as uploaded ([`crate::source::quant`]): one
//! warp per weight row, one block row per activation row (decode's one row, or a prefill's
//! few, each reading the weight again).

use crate::engine::{numel, CudaEngine};
use crate::launch::{self, Param};
use crate::memory::DevMem;
use crate::rows::{extent, ptr};
use crate::source::quant::{self as src, ROWS};
use rlx_ir::ops::quant::{Activations, DequantMatMul};
use rlx_ir::Op;
use rlx_runtime::Arg;

/// Shared memory a block may use without opting in.
const SHARED: usize = 48 * 1024;

/// `DequantMatMul` on `(x [.., K], w [N, row_bytes])` into `out [.., N]`.
pub fn dequant_matmul(e: &CudaEngine, op: &Op, q: &DequantMatMul, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Result<(), String> {
    let (x, w) = (ins[0], ins[1]);
    let t = q.scheme.gguf().filter(|t| t.plain_header().is_some()).ok_or_else(|| format!("no CUDA kernel for {:?} weights", q.scheme))?;
    let k = x.dims.last().copied().unwrap_or(0);
    let n = out.dims.last().copied().unwrap_or(0);
    if numel(out.dims) == 0 {
        return Ok(());
    }
    if k % 32 != 0 || k == 0 {
        return Err(format!("x {:?}: K = {k} is not a whole number of {t:?} blocks of 32", x.dims));
    }
    let m = numel(x.dims) / k;
    let need = n * (k / 32) * t.block_bytes();
    if w.len != need {
        return Err(format!("the {t:?} weight holds {} bytes; {n} rows of K = {k} need {need}", w.len));
    }
    let shared = match q.activations {
        Activations::Q8Blocks => k + 12 * (k / 32),
        Activations::Exact => 0,
    };
    if shared > SHARED {
        return Err(format!("rounding rows of K = {k} to 8-bit blocks needs {shared} bytes of shared memory; at most {SHARED} are used"));
    }
    let f = e.kernel(src::dequant_matmul(t, q.activations), op, &[x.dtype, w.dtype])?;
    let mut params = vec![ptr(out), ptr(x), ptr(w), Param::I64(k as i64), Param::I64(n as i64)];
    launch::grid(&e.gpu, f, (extent(n.div_ceil(ROWS))?, extent(m)?, 1), (32 * ROWS as u32, 1, 1), shared as u32, &mut params)
}
