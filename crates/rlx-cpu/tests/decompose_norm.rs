//! The norm decompositions compute what the native kernels compute.

mod common;

use common::graphs::{claims_all, matches_kernel};
use rlx_ir::OpKind;

fn input(name: &str, dtype: &str, dims: &str) -> String {
    format!("Input(name:\"{name}\",ty:(dtype:{dtype},shape:[{dims}]))()")
}

/// `x [dims]`, a vector input `v [d]`, `var [d]` and `dy [dims]`, then `op` and `return`.
fn graph(dtype: &str, dims: &str, d: usize, op: &str) -> String {
    format!(
        "%0 = {}\n%1 = {}\n%2 = {}\n%3 = {}\n%4 = {op}\nreturn %4\n",
        input("x", dtype, dims),
        input("v", dtype, &d.to_string()),
        input("var", dtype, &d.to_string()),
        input("dy", dtype, dims)
    )
}

#[test]
fn last_axis_batch_norm_needs_only_elementwise_kernels() {
    let bn = graph("F32", "4,6", 6, "BatchNormInference(eps:0.001,axis:-1)(%0, %1, %1, %1, %2)");
    matches_kernel(&bn, OpKind::BatchNormInference, 1e-5, 1e-5);
    let dx = graph("F64", "2,3,5", 5, "BatchNormInferenceBackwardInput(eps:0.001,axis:-1)(%0, %1, %1, %2, %3)");
    matches_kernel(&dx, OpKind::BatchNormInferenceBackwardInput, 1e-12, 1e-12);
}

#[test]
fn norms_and_their_gradients_match_their_kernels() {
    if !claims_all("norms_and_their_gradients_match_their_kernels", &[OpKind::Reduce, OpKind::Reshape, OpKind::Transpose]) {
        return;
    }
    let x = "2,6,3,5";
    let cases: &[(&str, usize, &str, OpKind)] = &[
        ("F32", 5, "LayerNorm(axis:-1,eps:1e-5)(%0, %1, %1)", OpKind::LayerNorm),
        ("F64", 3, "LayerNorm(axis:2,eps:1e-5)(%0, %1, %1)", OpKind::LayerNorm),
        ("F16", 5, "LayerNorm(axis:-1,eps:1e-5)(%0, %1, %1)", OpKind::LayerNorm),
        ("F32", 6, "LayerNorm2d(eps:1e-6)(%0, %1, %1)", OpKind::LayerNorm2d),
        ("F32", 6, "GroupNorm(num_groups:3,eps:1e-5)(%0, %1, %1)", OpKind::GroupNorm),
        ("F32", 5, "RmsNorm(axis:-1,eps:1e-6,flatten_leading:true)(%0, %1, %1)", OpKind::RmsNorm),
        ("F64", 6, "RmsNorm(axis:1,eps:1e-6,flatten_leading:false)(%0, %1, %1)", OpKind::RmsNorm),
        ("F32", 6, "BatchNormInference(eps:0.001,axis:1)(%0, %1, %1, %1, %2)", OpKind::BatchNormInference),
        ("F64", 5, "LayerNormBackwardInput(axis:-1,eps:1e-5)(%0, %1, %3)", OpKind::LayerNormBackwardInput),
        ("F64", 6, "LayerNormBackwardGamma(axis:1,eps:1e-5)(%0, %3)", OpKind::LayerNormBackwardGamma),
        ("F64", 3, "RmsNormBackwardInput(axis:2,eps:1e-5)(%0, %1, %1, %3)", OpKind::RmsNormBackwardInput),
        ("F64", 5, "RmsNormBackwardGamma(axis:-1,eps:1e-5)(%0, %1, %1, %3)", OpKind::RmsNormBackwardGamma),
        ("F64", 5, "RmsNormBackwardBeta(axis:-1,eps:1e-5)(%0, %1, %1, %3)", OpKind::RmsNormBackwardBeta),
        ("F64", 6, "GroupNormBackwardInput(num_groups:2,eps:1e-5)(%0, %1, %1, %3)", OpKind::GroupNormBackwardInput),
        ("F64", 6, "GroupNormBackwardGamma(num_groups:2,eps:1e-5)(%0, %3)", OpKind::GroupNormBackwardGamma),
        ("F64", 6, "GroupNormBackwardBeta(num_groups:2,eps:1e-5)(%0, %3)", OpKind::GroupNormBackwardBeta),
        ("F64", 6, "BatchNormInferenceBackwardInput(eps:0.001,axis:1)(%0, %1, %1, %2, %3)", OpKind::BatchNormInferenceBackwardInput),
        ("F64", 6, "BatchNormInferenceBackwardGamma(eps:0.001,axis:1)(%0, %1, %2, %3)", OpKind::BatchNormInferenceBackwardGamma),
        ("F64", 6, "BatchNormInferenceBackwardBeta(axis:1)(%3)", OpKind::BatchNormInferenceBackwardBeta),
    ];
    for &(dtype, d, op, kind) in cases {
        // Reductions in a different order: f32 agrees to a few ulps, f16 to its rounding.
        let (rtol, atol) = match dtype {
            "F64" => (1e-10, 1e-10),
            "F32" => (2e-5, 2e-5),
            _ => (2e-3, 2e-3),
        };
        matches_kernel(&graph(dtype, x, d, op), kind, rtol, atol);
    }
}
