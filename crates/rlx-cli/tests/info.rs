//! `rlx info` prints the processor and the kernels chosen for it.

use std::process::Command;

#[test]
fn info_names_the_cpu_and_the_gemm_tile() {
    let out = Command::new(env!("CARGO_BIN_EXE_rlx")).arg("info").output().expect("rlx runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("cpu "), "{text}");
    assert!(text.contains("kernel    f32 GEMM register tile: "), "{text}");
    assert!(text.contains("threads "), "{text}");
}
