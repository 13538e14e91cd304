//! `KvAppend` (OPS.md §9): rows written into a KV cache along one axis, at the `pos`
//! attribute or at the run-time position `at` (`[1]` I64, read on the device, so a decode
//! loop never waits for the host). A position where the rows do not fit writes nothing and
//! is reported through the engine's reports, which [`CudaEngine`] turns into an error when
//! the run's results are read.
//!
//! With the cache as graph state (a parameter), the executor passes it apart and the write
//! goes into it in place: with `at` the output is the cache itself (no output here), with
//! `pos` the output is the prefix `..pos + 1`, copied after the write. A cache that is an
//! ordinary operand is copied into the output first (the prefix, with `pos`) and the rows
//! written there.

use crate::engine::{numel, CudaEngine};
use crate::launch::{self, contiguous, Param};
use crate::memory::DevMem;
use crate::rows::{extent, ptr};
use crate::source;
use rlx_ir::ops::shape::KvAppend;
use rlx_ir::Op;
use rlx_runtime::Arg;

type Res = Result<(), String>;

/// Writes `rows` into `cache` at `at[0]` (or `pos` without `at`) along `axis`.
fn write(e: &CudaEngine, op: &Op, axis: usize, pos: usize, cache: Arg<'_, DevMem>, rows: Arg<'_, DevMem>, at: Option<Arg<'_, DevMem>>) -> Res {
    let size = cache.dtype.size();
    let f = e.kernel(source::kv_write(size), op, &[cache.dtype])?;
    let n = numel(rows.dims);
    let inner: usize = cache.dims[axis + 1..].iter().product();
    let mut params = vec![
        ptr(cache),
        ptr(rows),
        at.map_or(Param::Ptr(0), ptr),
        Param::I64(pos as i64),
        Param::I64(n as i64),
        Param::I64(rows.dims[axis] as i64),
        Param::I64(inner as i64),
        Param::I64(cache.dims[axis] as i64),
        Param::I64(axis as i64),
        Param::Ptr(e.reports()),
    ];
    // At least one block, so that a bad position is reported even with no rows to write.
    let blocks = extent(n.div_ceil(256).clamp(1, 1 << 20))?;
    launch::grid(&e.gpu, f, (blocks, 1, 1), (256, 1, 1), 0, &mut params)
}

/// Copies the prefix of `cache` that `out` holds (its extent along the axis) into `out`.
fn prefix(e: &CudaEngine, op: &Op, cache: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Res {
    e.strided(op, cache, out, out.dims, [contiguous(cache.dims), contiguous(out.dims)], [0, 0])
}

/// `KvAppend` on a cache that is graph state, updated in place: `ins` are `(rows[, at])`,
/// `outs` the prefix output with `pos`, none with `at`.
pub fn append_in_place(e: &CudaEngine, op: &Op, a: &KvAppend, cache: Arg<'_, DevMem>, ins: &[Arg<'_, DevMem>], outs: &[Arg<'_, DevMem>]) -> Res {
    write(e, op, a.axis, a.pos, cache, ins[0], ins.get(1).copied())?;
    match outs.first() {
        Some(&out) => prefix(e, op, cache, out),
        None => Ok(()),
    }
}

/// `KvAppend` on a cache that is an ordinary operand: `ins` are `(cache, rows[, at])`; the
/// output is the cache (with `at`) or its prefix (with `pos`) with the rows written.
pub fn append(e: &CudaEngine, op: &Op, a: &KvAppend, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Res {
    prefix(e, op, ins[0], out)?;
    write(e, op, a.axis, a.pos, out, ins[1], ins.get(2).copied())
}
