//! Kernel arguments and launches: the strided [`Walk`] the generated kernels index by, and
//! a grid-stride launch of one thread per element.

use crate::attention::AttnArgs;
use crate::gpu::Gpu;
use crate::source::RANK;
pub use rlx_runtime::layout::{broadcast, contiguous};
use rlx_runtime::layout::merge_dims;
use cudarc::driver::{result as cu, sys};
use std::ffi::c_void;

/// The generated kernels' `struct Walk`: up to [`RANK`] dims of an iteration space and, per
/// operand, the element stride of each dim (0 where it broadcasts).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Walk {
    dims: [i64; RANK],
    strides: [[i64; RANK]; 4],
    rank: i32,
    /// 1 where the walk has fewer than 2³² elements (32-bit index arithmetic).
    narrow: i32,
}

impl Walk {
    /// The walk over `dims` with each operand's `strides`, merging dims that every operand
    /// steps through contiguously and dropping dims of extent 1 (fewer divisions per element;
    /// ranks above [`RANK`] fit when they merge); 32-bit divisions below 2³² elements.
    pub fn new(dims: &[usize], strides: &[Vec<i64>]) -> Result<Walk, String> {
        let kept = merge_dims(dims, strides);
        if kept.len() > RANK {
            return Err(format!("a walk over {} strided dims; the CUDA kernels take at most {RANK}", kept.len()));
        }
        let size = kept.iter().try_fold(1u64, |n, (extent, _)| n.checked_mul(*extent as u64));
        let narrow = size.is_some_and(|n| n <= u64::from(u32::MAX)) as i32;
        let mut w = Walk { rank: kept.len() as i32, narrow, ..Walk::default() };
        for (d, (extent, s)) in kept.into_iter().enumerate() {
            w.dims[d] = extent;
            for (o, stride) in s.into_iter().enumerate() {
                w.strides[o][d] = stride;
            }
        }
        Ok(w)
    }
}

/// One kernel argument, held where the launch can point at it.
pub enum Param {
    Ptr(sys::CUdeviceptr),
    I64(i64),
    I32(i32),
    F32(f32),
    Walk(Box<Walk>),
    Attn(Box<AttnArgs>),
}

/// Threads per block of the elementwise kernels.
const BLOCK: u32 = 256;

/// Launches `f` over `n` elements (grid-stride, so any `n` fits), nothing when `n` is 0.
pub fn elementwise(gpu: &Gpu, f: sys::CUfunction, n: usize, params: &mut [Param]) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    let blocks = n.div_ceil(BLOCK as usize).min(1 << 20) as u32;
    grid(gpu, f, (blocks, 1, 1), (BLOCK, 1, 1), 0, params)
}

/// Elements per thread of the kernels written with the prelude's `TILES` / `LANES`.
pub const UNROLL: usize = 4;

/// Launches `f`, written with `TILES` / `LANES`, over `n` elements: one tile of
/// [`UNROLL`] elements per thread and block (grid-stride past 2²⁰ blocks), nothing when `n`
/// is 0.
pub fn tiled(gpu: &Gpu, f: sys::CUfunction, n: usize, params: &mut [Param]) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    let blocks = n.div_ceil(BLOCK as usize * UNROLL).min(1 << 20) as u32;
    grid(gpu, f, (blocks, 1, 1), (BLOCK, 1, 1), 0, params)
}

/// Launches `f` on the device's stream with this grid, block and dynamic shared memory.
pub fn grid(gpu: &Gpu, f: sys::CUfunction, grid: (u32, u32, u32), block: (u32, u32, u32), shared: u32, params: &mut [Param]) -> Result<(), String> {
    let mut ptrs: Vec<*mut c_void> = params
        .iter_mut()
        .map(|p| match p {
            Param::Ptr(v) => v as *mut _ as *mut c_void,
            Param::I64(v) => v as *mut _ as *mut c_void,
            Param::I32(v) => v as *mut _ as *mut c_void,
            Param::F32(v) => v as *mut _ as *mut c_void,
            Param::Walk(v) => &mut **v as *mut Walk as *mut c_void,
            Param::Attn(v) => &mut **v as *mut AttnArgs as *mut c_void,
        })
        .collect();
    if !gpu.chained {
        // SAFETY: `f` is a loaded kernel whose parameter list the generated source gives in
        // this order and these types; `ptrs` point into `params`, alive for the call.
        return unsafe { cu::launch_kernel(f, grid, block, shared, gpu.stream, &mut ptrs) }.map_err(|e| format!("launching the kernel: {e:?}"));
    }
    // SAFETY: plain data; the union's field is the one the attribute's id names.
    let mut chain: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    chain.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    chain.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: shared,
        hStream: gpu.stream,
        attrs: &mut chain,
        numAttrs: 1,
    };
    // SAFETY: as above; every generated kernel begins with `CHAIN()`, so none reads the
    // previous kernel's output before it is complete and visible.
    unsafe { sys::cuLaunchKernelEx(&config, f, ptrs.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(|e| format!("launching the kernel: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prelude_unrolls_as_many_elements_as_tiled_launches_for() {
        assert!(crate::source::PRELUDE.contains(&format!("#define UNROLL {UNROLL}\n")));
    }

    #[test]
    fn walks_below_four_billion_elements_divide_in_32_bits() {
        let small = Walk::new(&[3, 1, 5], &[vec![5, 0, 1]]).unwrap();
        assert_eq!((small.rank, small.narrow), (1, 1), "the unit dim drops and the contiguous ones merge");
        let large = Walk::new(&[1 << 17, 1 << 16], &[vec![1, 1 << 17]]).unwrap();
        assert_eq!(large.narrow, 0);
    }
}
