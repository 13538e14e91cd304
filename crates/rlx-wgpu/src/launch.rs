//! Kernel launches: operands bound as ranges of their buffers (from the adapter's offset
//! alignment down, with the element offset passed in the parameters), the parameter block
//! with the strided walk the kernels index by, and workgroup grids within the adapter's
//! 65535 per dimension.

use crate::error::WgpuError;
use crate::gpu::Gpu;
use crate::memory::GpuMem;
use crate::shader::{Kernel, GROUP, RANK};
pub use rlx_runtime::layout::{broadcast, contiguous};
use rlx_runtime::layout::merge_dims;
use rlx_runtime::Arg;

/// Workgroups per grid dimension that every adapter allows.
const MAX_GROUPS: usize = 65535;

/// Words of the walk block every parameter list of a walking kernel starts with:
/// `n, rank, dims[8], strides[3][8], plain`.
pub const WALK_WORDS: usize = 35;

/// The walk block over `dims` (`n` elements) with up to three operands' `strides`, merging
/// dims that every operand steps through contiguously and dropping dims of extent 1; `plain`
/// marks the operands read at the element's own index.
pub fn walk(n: usize, dims: &[usize], strides: &[Vec<i64>], plain: u32) -> Result<Vec<u32>, String> {
    let kept = merge_dims(dims, strides);
    if kept.len() > RANK {
        return Err(format!("a walk over {} strided dims; the kernels take at most {RANK}", kept.len()));
    }
    let mut w = vec![0u32; WALK_WORDS];
    w[0] = word(n)?;
    w[1] = kept.len() as u32;
    for (d, (extent, s)) in kept.into_iter().enumerate() {
        w[2 + d] = word(extent as usize)?;
        for (o, stride) in s.into_iter().enumerate() {
            w[10 + 8 * o + d] = i32::try_from(stride).map_err(|_| format!("stride {stride} is beyond 32 bits"))? as u32;
        }
    }
    w[34] = plain;
    Ok(w)
}

/// `v` as a 32-bit kernel parameter.
pub fn word(v: usize) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{v} elements are beyond the kernels' 32-bit indices"))
}

/// The grid of `groups` workgroups of a one-dimensional kernel (`x · y ≥ groups`).
pub fn grid(groups: usize) -> Result<[u32; 3], String> {
    let x = groups.clamp(1, MAX_GROUPS);
    let y = groups.div_ceil(x);
    if y > MAX_GROUPS {
        return Err(format!("{groups} workgroups exceed a 65535 × 65535 grid"));
    }
    Ok([x as u32, y as u32, 1])
}

/// The grid of a one-dimensional kernel with `threads` invocations.
pub fn threads(threads: usize) -> Result<[u32; 3], String> {
    grid(threads.div_ceil(GROUP as usize))
}

/// An operand bound: `size` bytes of `buf` from `offset`, its element offset `base`.
struct Bound<'a> {
    buf: &'a wgpu::Buffer,
    offset: u64,
    size: u64,
    base: u32,
}

/// Binds `a`: from its offset rounded down to the adapter's alignment to its end rounded up
/// to a word, within the adapter's `max_storage_buffer_binding_size`.
fn bind<'a>(gpu: &Gpu, a: &Arg<'a, GpuMem>) -> Result<Bound<'a>, String> {
    let align = gpu.limits.min_storage_buffer_offset_alignment.max(4) as usize;
    let start = a.offset / align * align;
    let delta = a.offset - start;
    let elem = a.dtype.size().max(1);
    if !delta.is_multiple_of(elem) {
        return Err(format!("a {} operand at byte offset {} is not aligned to its elements", a.dtype, a.offset));
    }
    let size = (delta + a.len).next_multiple_of(4).max(4).min(a.buf.size().saturating_sub(start));
    let max = gpu.limits.max_storage_buffer_binding_size;
    if size as u64 > max {
        return Err(WgpuError::Limit { adapter: gpu.adapter.clone(), what: format!("a {} operand {:?}", a.dtype, a.dims), bytes: a.len as u64, limit: "max_storage_buffer_binding_size", max }.to_string());
    }
    Ok(Bound { buf: &a.buf.buf, offset: start as u64, size: size as u64, base: word(delta / elem)? })
}

/// Records one dispatch of `kernel` over `operands` (outputs first): the parameter buffer
/// holds each operand's element offset, then `params`. A grid with no workgroups records
/// nothing.
pub fn launch(gpu: &Gpu, kernel: &Kernel, operands: &[Arg<'_, GpuMem>], params: &[u32], groups: [u32; 3]) -> Result<(), String> {
    if groups.contains(&0) {
        return Ok(());
    }
    let words = operands.len();
    if words + usize::from(kernel.report) != kernel.operands {
        return Err(format!("the {} kernel binds {} operands, {} were given", kernel.name, kernel.operands, words));
    }
    let (pipeline, layout) = gpu.pipeline(kernel).map_err(|e| e.to_string())?;
    let bound = operands.iter().map(|a| bind(gpu, a)).collect::<Result<Vec<_>, _>>()?;
    let mut p: Vec<u32> = bound.iter().map(|b| b.base).collect();
    p.extend_from_slice(params);
    let bytes: Vec<u8> = p.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> = bound
        .iter()
        .enumerate()
        .map(|(j, b)| wgpu::BindGroupEntry {
            binding: j as u32 + 1,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: b.buf, offset: b.offset, size: std::num::NonZeroU64::new(b.size) }),
        })
        .collect();
    if kernel.report {
        entries.push(wgpu::BindGroupEntry { binding: kernel.operands as u32, resource: gpu.report.as_entire_binding() });
    }
    gpu.dispatch(kernel.name, &pipeline, &layout, &bytes, entries, groups).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_dims_merge_and_broadcasts_keep_their_zero_strides() {
        let out = [2, 3, 4];
        let w = walk(24, &out, &[contiguous(&out), broadcast(&[3, 1], &out)], 1).unwrap();
        assert_eq!(w[1], 3, "the broadcast keeps three dims apart");
        assert_eq!(&w[2..5], &[2, 3, 4]);
        assert_eq!(&w[18..21], &[0, 1, 0]);
        let plain = walk(24, &out, &[contiguous(&out)], 1).unwrap();
        assert_eq!((plain[1], plain[2], plain[10]), (1, 24, 1), "one contiguous operand walks one dim");
        assert_eq!(grid(70000).unwrap(), [65535, 2, 1]);
        assert!(grid(65535 * 65536).is_err());
    }
}
