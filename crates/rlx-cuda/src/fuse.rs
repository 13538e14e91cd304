//! Launches of fused elementwise regions: the fuse pass (run by the session for the kinds the
//! backend claims) folds chains of elementwise ops and casts into `ElementwiseRegion` nodes,
//! and each runs here as one generated kernel ([`crate::source::fused`]).

use crate::engine::{numel, CudaEngine};
use crate::launch::{tiled, Param};
use crate::memory::DevMem;
use crate::source;
use rlx_ir::ops::fused::ElementwiseRegion;
use rlx_ir::{DType, Op};
use rlx_runtime::Arg;

/// Region `r` over `ins` into `out`, one thread per output element.
pub(crate) fn region(engine: &CudaEngine, op: &Op, r: &ElementwiseRegion, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Result<(), String> {
    let dtypes: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
    let f = engine.kernel(source::fused::region(r, &dtypes), op, &dtypes)?;
    let n = numel(out.dims);
    let mut params = vec![Param::Ptr(out.buf.at(out.offset))];
    params.extend(ins.iter().map(|a| Param::Ptr(a.buf.at(a.offset))));
    params.push(Param::I64(n as i64));
    params.extend(r.input_modulus[..ins.len()].iter().map(|&m| Param::I64(i64::from(m))));
    tiled(&engine.gpu, f, n, &mut params)
}
