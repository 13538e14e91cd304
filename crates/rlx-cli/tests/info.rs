//! `rlx info` prints the processor and the kernels chosen for it (and `RLX_SGEMM_TILE`'s choice).

use std::process::Command;

#[test]
fn info_names_the_cpu_and_the_gemm_tile() {
    let out = Command::new(env!("CARGO_BIN_EXE_rlx")).arg("info").output().expect("rlx runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("cpu "), "{text}");
    assert!(text.contains("kernel    f32 GEMM register tile: "), "{text}");
    assert!(text.contains("threads "), "{text}");
    assert!(text.contains("kernel    int8 products (--precision int8): "), "{text}");
}

#[test]
fn rlx_sgemm_tile_picks_the_tile_and_info_says_so() {
    let info = |tile: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_rlx")).arg("info").env("RLX_SGEMM_TILE", tile).env("RLX_TUNE", "off").output().expect("rlx runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = info("portable");
    assert!(text.contains("f32 GEMM register tile: portable 4×8 (RLX_SGEMM_TILE=portable)"), "{text}");
    let text = info("sve 8x8");
    assert!(text.contains("(default; RLX_SGEMM_TILE=\"sve 8x8\" names no tile this CPU runs)"), "{text}");
}
