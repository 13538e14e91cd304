//! `rlx tune` times the f32 GEMM's candidates, prints the table and writes this machine's cache
//! file into `RLX_CACHE_DIR`; `rlx info` then names that file as the choices' origin.

use std::path::PathBuf;
use std::process::{Command, Output};

/// `rlx args` with the cache in `cache`, the tuning variables unset but for `vars`.
fn rlx(args: &[&str], cache: &PathBuf, vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rlx"));
    command.args(args).env("RLX_CACHE_DIR", cache);
    for name in ["RLX_TUNE", "RLX_SGEMM_TILE", "RLX_SGEMM_KC", "RLX_SGEMM_NC"] {
        command.env_remove(name);
    }
    let out = command.envs(vars.iter().copied()).output().expect("rlx runs");
    assert!(out.status.success(), "rlx {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn tune_writes_the_cache_that_info_then_reads() {
    let cache = std::env::temp_dir().join(format!("rlx-cli-tune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let text = |out: Output| String::from_utf8_lossy(&out.stdout).into_owned();

    let info = text(rlx(&["info"], &cache, &[]));
    assert!(info.contains("tuned     none: no file at ") && info.contains("f32 GEMM cache blocking: KC 384 (default), NC 512 (default)"), "{info}");

    let dry = text(rlx(&["tune", "--shape", "32x64x64", "--rounds", "1", "--dry-run"], &cache, &[]));
    assert!(dry.contains("32×64×64") && dry.contains("chosen: ") && !dry.contains("wrote "), "{dry}");
    assert!(!cache.exists(), "--dry-run writes nothing");

    let tuned = text(rlx(&["tune", "--shape", "32x64x64", "--shape", "16x48x96", "--rounds", "1"], &cache, &[]));
    assert!(tuned.contains("default") && tuned.contains("chosen") && tuned.contains("wrote "), "{tuned}");
    let files: Vec<PathBuf> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one file, no temporary left: {files:?}");
    let file = std::fs::read_to_string(&files[0]).unwrap();
    assert!(file.contains("machine = ") && file.contains("sgemm.tile = ") && file.contains("sgemm.kc = "), "{file}");

    let info = text(rlx(&["info"], &cache, &[]));
    let origin = format!("(cache {})", files[0].display());
    assert!(info.contains(&format!("tuned     {}", files[0].display())), "{info}");
    assert!(info.lines().filter(|l| l.contains("f32 GEMM")).all(|l| l.contains(&origin)), "{info}");
    let info = text(rlx(&["info"], &cache, &[("RLX_SGEMM_KC", "128")]));
    assert!(info.contains("KC 128 (RLX_SGEMM_KC=128), NC ") && info.contains(&origin), "the variable wins over the cache: {info}");
    let info = text(rlx(&["info"], &cache, &[("RLX_TUNE", "off")]));
    assert!(info.contains("tuned     none: RLX_TUNE=off") && !info.contains(&origin), "{info}");

    // A file from another machine is ignored, not an error.
    std::fs::write(&files[0], file.replace("machine = ", "machine = another ")).unwrap();
    let info = text(rlx(&["info"], &cache, &[]));
    assert!(info.contains("does not parse or names another machine (ignored)") && info.contains("KC 384 (default)"), "{info}");
    let _ = std::fs::remove_dir_all(&cache);
}
