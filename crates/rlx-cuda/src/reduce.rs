//! Launches of `Reduce` ([`crate::source::reduce`]): the input seen as `[outer, m, inner]`
//! where its reduced axes form one run, split along `m` until the device has about four
//! blocks per multiprocessor; the walked kernel for any other layout.

use crate::engine::{numel, CudaEngine};
use crate::launch::{self, contiguous, elementwise, Param, Walk};
use crate::memory::DevMem;
use crate::rows::extent;
use crate::source::reduce::{self as src, WARPS};
use rlx_ir::ops::reduce::Reduce;
use rlx_ir::Op;
use rlx_runtime::Arg;

/// The fewest reduced elements one split of a row ([`src::rows`]) or of a column
/// ([`src::columns`], per warp) takes: less would spend more on the partials than it saves.
const ROW_SPLIT: usize = 2048;
const COLUMN_SPLIT: usize = 64;

/// `(outer, m, inner)` of `dims` reduced over `axes` when the reduced axes of more than one
/// element are adjacent (axes of one element count either way).
pub fn runs(dims: &[usize], axes: &[usize]) -> Option<(usize, usize, usize)> {
    let wide: Vec<usize> = (0..dims.len()).filter(|a| axes.contains(a) && dims[*a] > 1).collect();
    let (first, last) = match (wide.first(), wide.last()) {
        (Some(&f), Some(&l)) => (f, l),
        _ => return Some((1, 1, numel(dims))),
    };
    if (first..=last).any(|a| !axes.contains(&a) && dims[a] > 1) {
        return None;
    }
    Some((numel(&dims[..first]), numel(&dims[first..=last]), numel(&dims[last + 1..])))
}

/// How many splits of `m` (each at least `least` long) bring `blocks` up to about four per
/// multiprocessor, and the length of each.
fn splits(e: &CudaEngine, blocks: usize, m: usize, least: usize) -> (usize, usize) {
    let want = (4 * e.split.sms()).div_ceil(blocks.max(1));
    let n = want.clamp(1, (m / least).max(1)).min(65535);
    let chunk = m.div_ceil(n).max(1);
    (m.div_ceil(chunk).max(1), chunk)
}

/// `Reduce` of `x` into `out`.
pub(crate) fn reduce(e: &CudaEngine, op: &Op, r: &Reduce, x: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Result<(), String> {
    if numel(out.dims) == 0 {
        return Ok(());
    }
    let Some((outer, m, inner)) = runs(x.dims, &r.axes).filter(|_| numel(x.dims) > 0) else {
        return walked(e, op, r, x, out);
    };
    let acc = if x.dtype == rlx_ir::DType::F64 { 8 } else { 4 };
    let n = outer * inner;
    let (blocks, least) = if inner == 1 { (outer.div_ceil(WARPS), ROW_SPLIT) } else { (inner.div_ceil(32) * outer, COLUMN_SPLIT * WARPS) };
    let (parts, chunk) = splits(e, blocks, m, least);
    let scratch = if parts > 1 { Some(DevMem::zeroed(&e.gpu, parts * n * acc).map_err(|err| err.to_string())?) } else { None };
    let partial = Param::Ptr(scratch.as_ref().map_or(0, |s| s.at(0)));
    let (o, i) = (Param::Ptr(out.buf.at(out.offset)), Param::Ptr(x.buf.at(x.offset)));
    let long = |v: usize| Param::I64(v as i64);
    if inner == 1 {
        let f = e.kernel(src::rows(r.op, x.dtype), op, &[x.dtype])?;
        let mut params = vec![o, i, partial, long(outer), long(m), long(chunk)];
        launch::grid(&e.gpu, f, (extent(blocks)?, parts as u32, 1), (256, 1, 1), 0, &mut params)?;
    } else {
        let tiles = inner.div_ceil(32);
        let f = e.kernel(src::columns(r.op, x.dtype), op, &[x.dtype])?;
        let mut params = vec![o, i, partial, long(outer), long(m), long(inner), long(chunk), long(tiles)];
        launch::grid(&e.gpu, f, (extent(blocks)?, parts as u32, 1), (256, 1, 1), 0, &mut params)?;
    }
    if let Some(scratch) = scratch {
        let f = e.kernel(src::combine(r.op, x.dtype), op, &[x.dtype])?;
        let mut params = vec![Param::Ptr(out.buf.at(out.offset)), Param::Ptr(scratch.at(0)), long(n), long(parts), long(m)];
        elementwise(&e.gpu, f, n, &mut params)?;
        // Freed on the stream, after the kernel that reads it.
        drop(scratch);
    }
    Ok(())
}

/// Any other layout (or an empty input): one thread per output walking its reduced elements.
fn walked(e: &CudaEngine, op: &Op, r: &Reduce, x: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Result<(), String> {
    let f = e.kernel(src::walked(r.op, x.dtype), op, &[x.dtype])?;
    let own = contiguous(x.dims);
    let split = |reduced: bool| -> (Vec<usize>, Vec<i64>) { (0..x.dims.len()).filter(|a| r.axes.contains(a) == reduced).map(|a| (x.dims[a], own[a])).unzip() };
    let ((kept, ks), (red, rs)) = (split(false), split(true));
    let mut params = vec![
        Param::Ptr(out.buf.at(out.offset)),
        Param::Ptr(x.buf.at(x.offset)),
        Param::I64(numel(&kept) as i64),
        Param::Walk(Box::new(Walk::new(&kept, &[ks])?)),
        Param::Walk(Box::new(Walk::new(&red, &[rs])?)),
        Param::I64(numel(&red) as i64),
    ];
    elementwise(&e.gpu, f, numel(&kept), &mut params)
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn reduced_axes_in_one_run_read_as_outer_m_inner() {
        assert_eq!(runs(&[4, 5, 6], &[2]), Some((20, 6, 1)));
        assert_eq!(runs(&[4, 5, 6], &[0]), Some((1, 4, 30)));
        assert_eq!(runs(&[4, 5, 6, 7], &[1, 2]), Some((4, 30, 7)));
        assert_eq!(runs(&[4, 1, 6], &[0, 2]), Some((1, 24, 1)), "an axis of one element joins the run");
        assert_eq!(runs(&[4, 5, 6], &[0, 2]), None, "a kept axis between reduced ones");
        assert_eq!(runs(&[4, 1, 6], &[1]), Some((1, 1, 24)), "nothing wide reduced");
        assert_eq!(runs(&[], &[]), Some((1, 1, 1)));
    }
}
