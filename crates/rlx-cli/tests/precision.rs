//! `--precision int8` / `bf16` on `rlx onnx-run` and `rlx embed`: products of weights in 8-bit
//! integers or on bf16 operands on the CPU, and a typed refusal on any other device.

use std::process::Command;

fn rlx(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rlx")).args(args).output().expect("rlx runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn onnx_run_benches_a_model_with_int8_and_bf16_products() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../rlx-io/tests/data/onnx/mlp/model.onnx");
    for precision in ["int8", "bf16"] {
        let (ok, stdout, stderr) = rlx(&["onnx-run", model, "--bench", "--runs", "2", "--precision", precision]);
        assert!(ok, "{precision}: {stderr}");
        assert!(stdout.contains("median"), "{precision}: {stdout}");
    }
}

#[test]
fn int8_products_on_another_device_are_refused_by_name() {
    let (ok, _, stderr) = rlx(&["embed", "--model", "no-such-folder", "--device", "cuda:0", "--precision", "int8", "a text"]);
    assert!(!ok);
    assert!(stderr.contains("cuda:0") && stderr.contains("products run on the CPU only"), "{stderr}");
}
