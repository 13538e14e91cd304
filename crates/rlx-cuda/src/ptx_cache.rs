//! PTX kept on disk between processes, by target architecture, NVRTC version and kernel
//! source, so that NVRTC compiles a kernel once per machine rather than once per process
//! (an ONNX model run from the command line would otherwise spend most of its time there).
//!
//! `RLX_CUDA_CACHE` names the folder (`off` turns the cache off); by default it is
//! `$XDG_CACHE_HOME/rlx/cuda` or `$HOME/.cache/rlx/cuda`. An entry is two files named by a
//! hash: `<hash>.cu` (what was compiled) and `<hash>.ptx`. A hit needs the `.cu` to match in
//! full, so a hash collision or a torn entry costs a compile, never a wrong kernel. Failing
//! to read or write the folder only costs the compile.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The on-disk PTX of one process.
pub(crate) struct PtxCache {
    dir: Option<PathBuf>,
    nvrtc: String,
}

impl PtxCache {
    /// The cache the environment names, for the NVRTC that is loaded.
    pub(crate) fn from_env() -> PtxCache {
        let dir = match std::env::var_os("RLX_CUDA_CACHE") {
            Some(v) if v == "off" => None,
            Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .map(|base| base.join("rlx").join("cuda")),
        };
        PtxCache { dir, nvrtc: nvrtc_version() }
    }

    /// A cache in `dir` (none: off) for NVRTC version `nvrtc`.
    #[cfg(test)]
    fn at(dir: Option<PathBuf>, nvrtc: &str) -> PtxCache {
        PtxCache { dir, nvrtc: nvrtc.into() }
    }

    /// What an entry's `.cu` holds: the compile's target and NVRTC, then the source.
    fn entry(&self, code: &str, arch: &str) -> String {
        format!("// rlx kernel for {arch}, NVRTC {}\n{code}", self.nvrtc)
    }

    /// The entry's two paths.
    fn paths(&self, entry: &str) -> Option<(PathBuf, PathBuf)> {
        let stem = format!("{:016x}", fnv1a(entry.as_bytes()));
        self.dir.as_ref().map(|d| (d.join(format!("{stem}.cu")), d.join(format!("{stem}.ptx"))))
    }

    /// The PTX of `code` for `arch`, where an earlier compile left it.
    pub(crate) fn get(&self, code: &str, arch: &str) -> Option<String> {
        let entry = self.entry(code, arch);
        let (cu, ptx) = self.paths(&entry)?;
        if std::fs::read(cu).ok()? != entry.as_bytes() {
            return None;
        }
        std::fs::read_to_string(ptx).ok()
    }

    /// Keeps `ptx`, compiled from `code` for `arch`: the PTX first, so that a matching `.cu`
    /// always has its PTX beside it; each file written whole, then renamed into place.
    pub(crate) fn put(&self, code: &str, arch: &str, ptx: &str) {
        let entry = self.entry(code, arch);
        let Some((cu, ptx_path)) = self.paths(&entry) else { return };
        let _ = std::fs::create_dir_all(cu.parent().unwrap_or(Path::new(".")));
        if place(&ptx_path, ptx.as_bytes()).is_ok() {
            let _ = place(&cu, entry.as_bytes());
        }
    }
}

/// Writes `bytes` to a file beside `path` unique to this write, then renames it to `path`.
fn place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
    std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// 64-bit FNV-1a: stable across builds and platforms, which `std`'s hasher does not promise.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// `major.minor` of the NVRTC that is loaded (`unknown` where none answers).
fn nvrtc_version() -> String {
    // SAFETY: probes that the library loads before calling into it; the out-pointers are live.
    unsafe {
        if !cudarc::nvrtc::sys::is_culib_present() {
            return "unknown".into();
        }
        let (mut major, mut minor) = (0, 0);
        match cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) {
            cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS => format!("{major}.{minor}"),
            _ => "unknown".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rlx-ptx-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn an_entry_comes_back_only_for_its_source_architecture_and_nvrtc() {
        let dir = scratch("keys");
        let cache = PtxCache::at(Some(dir.clone()), "13.0");
        assert_eq!(cache.get("kernel a", "sm_90"), None);
        cache.put("kernel a", "sm_90", ".version 9.0 // a");
        assert_eq!(cache.get("kernel a", "sm_90").as_deref(), Some(".version 9.0 // a"));
        assert_eq!(cache.get("kernel b", "sm_90"), None);
        assert_eq!(cache.get("kernel a", "sm_80"), None);
        assert_eq!(PtxCache::at(Some(dir.clone()), "13.1").get("kernel a", "sm_90"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_source_that_does_not_match_its_entry_misses() {
        let dir = scratch("collide");
        let cache = PtxCache::at(Some(dir.clone()), "13.0");
        cache.put("kernel a", "sm_90", "ptx a");
        let entry = cache.entry("kernel a", "sm_90");
        let (cu, ptx) = cache.paths(&entry).unwrap();
        std::fs::write(&cu, "another kernel that hashed alike").unwrap();
        assert_eq!(cache.get("kernel a", "sm_90"), None);
        cache.put("kernel a", "sm_90", "ptx a");
        std::fs::remove_file(ptx).unwrap();
        assert_eq!(cache.get("kernel a", "sm_90"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn off_and_unwritable_folders_cost_only_the_compile() {
        let off = PtxCache::at(None, "13.0");
        off.put("kernel a", "sm_90", "ptx a");
        assert_eq!(off.get("kernel a", "sm_90"), None);
        let file = scratch("file");
        std::fs::write(&file, "a file, not a folder").unwrap();
        let blocked = PtxCache::at(Some(file.join("under")), "13.0");
        blocked.put("kernel a", "sm_90", "ptx a");
        assert_eq!(blocked.get("kernel a", "sm_90"), None);
        std::fs::remove_file(file).unwrap();
    }
}
