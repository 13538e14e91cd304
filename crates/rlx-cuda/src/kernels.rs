//! Kernels compiled with NVRTC from generated CUDA C ([`crate::source`]) and kept per device
//! by their source, so that each distinct kernel is loaded once per process and compiled
//! once per machine ([`crate::ptx_cache`]).

use crate::gpu::{error, Gpu};
use crate::ptx_cache::PtxCache;
use crate::source::Source;
use cudarc::driver::{sys, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use rlx_runtime::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A loaded kernel and the module that keeps it alive.
struct Loaded {
    _module: Arc<CudaModule>,
    function: CudaFunction,
}

/// The kernels loaded so far on one device, by source.
pub(crate) struct Kernels {
    loaded: Mutex<HashMap<String, Loaded>>,
    disk: PtxCache,
}


/// Compiles `code` for `arch` (`sm_90`, say) to PTX; the error carries NVRTC's log.
pub fn compile(code: &str, arch: &str) -> std::result::Result<Ptx, String> {
    // SAFETY: only probes whether the NVRTC library loads.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("NVRTC (libnvrtc) is not installed on this machine".into());
    }
    let options = CompileOptions { options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()], ..Default::default() };
    compile_ptx_with_opts(code, options).map_err(|e| format!("{e:?}"))
}

impl Kernels {
    /// None loaded yet, over the on-disk cache the environment names.
    pub(crate) fn new() -> Kernels {
        Kernels { loaded: Mutex::default(), disk: PtxCache::from_env() }
    }

    /// Unloads every kernel (closing the device, which holds [`crate::gpu::device_wide`]).
    pub(crate) fn unload(&self) {
        if let Ok(mut loaded) = self.loaded.lock() {
            loaded.clear();
        }
    }

    /// The entry point `k` of `source` on `gpu`, compiled and loaded on first use.
    pub(crate) fn function(&self, gpu: &Gpu, source: &Source) -> Result<sys::CUfunction> {
        let mut loaded = self.loaded.lock().map_err(|_| error("the kernel cache was poisoned by a panic"))?;
        if let Some(k) = loaded.get(&source.code) {
            return Ok(k.function.cu_function());
        }
        let ptx = match self.disk.get(&source.code, &gpu.arch) {
            Some(text) => Ptx::from_src(text),
            None => {
                let ptx = compile(&source.code, &gpu.arch).map_err(|log| error(format!("compiling the {} kernel: {log}", source.name)))?;
                self.disk.put(&source.code, &gpu.arch, &ptx.to_src());
                ptx
            }
        };
        let module = gpu.ctx.load_module(ptx).map_err(|e| error(format!("loading the {} kernel: {e:?}", source.name)))?;
        let function = module.load_function("k").map_err(|e| error(format!("finding the {} kernel: {e:?}", source.name)))?;
        let f = function.cu_function();
        loaded.insert(source.code.clone(), Loaded { _module: module, function });
        Ok(f)
    }
}
