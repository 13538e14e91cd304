//! The attention and rotary decompositions compute what the native kernels compute.

mod common;

use common::graphs::{claims_all, matches_kernel};
use rlx_ir::OpKind;

fn input(name: &str, dtype: &str, dims: &str) -> String {
    format!("Input(name:\"{name}\",ty:(dtype:{dtype},shape:[{dims}]))()")
}

/// `q`, `k`, `v`, `dy` (shaped like q) and, when `mask` names a dtype and dims, a mask/bias
/// input; then `op` over the inputs it takes, returning `outs` (`#` = the op's node).
fn attention_graph(dtype: &str, q: &str, kv: &str, mask: Option<(&str, &str)>, op: &str, outs: &str) -> String {
    let mut s = format!(
        "%0 = {}\n%1 = {}\n%2 = {}\n%3 = {}\n",
        input("q", dtype, q),
        input("k", dtype, kv),
        input("v", dtype, kv),
        input("dy", dtype, q)
    );
    let mut args = vec!["%0", "%1", "%2"];
    if op.starts_with("AttentionBackward") {
        args.push("%3");
    }
    if let Some((dt, dims)) = mask {
        s += &format!("%4 = {}\n", input("mask", dt, dims));
        args.push("%4");
    }
    s + &format!("%5 = {op}({})\nreturn {}\n", args.join(", "), outs.replace('#', "%5"))
}

fn forward(heads: usize, d: usize, dv: &str, mask: &str, scale: &str, cap: &str) -> String {
    format!("Attention(num_heads:{heads},head_dim:{d},v_head_dim:{dv},mask_kind:{mask},score_scale:{scale},attn_logit_softcap:{cap})")
}

const NEEDS: &[OpKind] = &[OpKind::MatMul, OpKind::Reduce, OpKind::Reshape, OpKind::Transpose, OpKind::Narrow, OpKind::Concat];

#[test]
fn attention_matches_its_kernel() {
    if !claims_all("attention_matches_its_kernel", NEEDS) {
        return;
    }
    let cases = [
        ("F32", "2,5,8", "2,7,8", None, forward(2, 4, "None", "Causal", "None", "None")),
        ("F32", "2,2,5,4", "2,2,5,4", None, forward(2, 4, "None", "SlidingWindow(2)", "Some(0.3)", "Some(2.0)")),
        ("F64", "5,8", "3,8", None, forward(2, 4, "None", "Causal", "None", "None")),
        ("F32", "3,4,8", "3,6,8", Some(("F32", "3,6")), forward(2, 4, "None", "Custom", "None", "None")),
        ("F32", "2,2,4,4", "2,2,6,4", Some(("Bool", "2,6")), forward(2, 4, "None", "Custom", "None", "None")),
        ("F32", "2,2,3,4", "2,2,5,4", Some(("F32", "1,2,3,5")), forward(2, 4, "None", "Bias", "None", "None")),
        ("F16", "1,3,8", "1,4,8", None, forward(2, 4, "None", "Causal", "None", "None")),
        // Grouped KV heads: 6 query heads over 2, 4 over 1 (MQA), head-major 4 over 2 with a
        // bias, and 70 queries (a lane block) of 4 heads over 2.
        ("F32", "2,5,24", "2,7,8", None, forward(6, 4, "None", "Causal", "None", "None")),
        ("F64", "5,16", "3,4", None, forward(4, 4, "None", "None", "None", "None")),
        ("F32", "1,4,5,8", "1,2,9,8", Some(("F32", "1,4,5,9")), forward(4, 8, "None", "Bias", "None", "None")),
        ("F32", "1,70,16", "1,70,8", None, forward(4, 4, "None", "Causal", "None", "None")),
    ];
    for (dtype, q, kv, extra, op) in cases {
        let tol = if dtype == "F16" { 2e-3 } else { 2e-5 };
        matches_kernel(&attention_graph(dtype, q, kv, extra, &op, "#"), OpKind::Attention, tol, tol);
    }
    // V wider than Q/K: its own value layout.
    let src = format!(
        "%0 = {}\n%1 = {}\n%2 = {}\n%3 = {}(%0, %1, %2)\nreturn %3\n",
        input("q", "F32", "2,3,8"),
        input("k", "F32", "2,5,8"),
        input("v", "F32", "2,5,12"),
        forward(2, 4, "Some(6)", "None", "None", "None")
    );
    matches_kernel(&src, OpKind::Attention, 2e-5, 2e-5);
}

#[test]
fn attention_gradients_match_their_kernels() {
    if !claims_all("attention_gradients_match_their_kernels", NEEDS) {
        return;
    }
    let all = |mask: &str| format!("AttentionBackwardAll(num_heads:2,head_dim:4,mask_kind:{mask})");
    for (q, kv, extra, mask) in [
        ("2,4,8", "2,6,8", None, "Causal"),
        ("2,2,5,4", "2,2,5,4", None, "SlidingWindow(3)"),
        ("3,4,8", "3,5,8", Some(("F64", "3,5")), "Custom"),
        ("2,2,3,4", "2,2,5,4", Some(("F64", "2,2,3,5")), "Bias"),
    ] {
        matches_kernel(&attention_graph("F64", q, kv, extra, &all(mask), "#.0, #.1, #.2"), OpKind::AttentionBackwardAll, 1e-10, 1e-10);
    }
    for wrt in ["Query", "Key", "Value"] {
        let op = format!("AttentionBackward(num_heads:2,head_dim:4,mask_kind:Causal,wrt:{wrt})");
        matches_kernel(&attention_graph("F64", "3,8", "5,8", None, &op, "#"), OpKind::AttentionBackward, 1e-10, 1e-10);
    }
}

#[test]
fn rotary_embeddings_match_their_kernels() {
    if !claims_all("rotary_embeddings_match_their_kernels", &[OpKind::Reshape, OpKind::Narrow, OpKind::Concat]) {
        return;
    }
    for (x, table, op, kind) in [
        ("2,5,16", "5,8", "Rope(head_dim:8,n_rot:8,style:NeoX)", OpKind::Rope),
        ("1,5,3,8", "7,4", "Rope(head_dim:8,n_rot:8,style:GptJ)", OpKind::Rope),
        ("5,12", "20", "Rope(head_dim:6,n_rot:4,style:NeoX)", OpKind::Rope),
        ("2,4,12", "1,4,1,6", "RopeBackward(head_dim:6,n_rot:4,style:GptJ)", OpKind::RopeBackward),
        ("2,4,12", "4,3", "RopeBackward(head_dim:6,n_rot:6,style:NeoX)", OpKind::RopeBackward),
    ] {
        let src = format!(
            "%0 = {}\n%1 = {}\n%2 = {}\n%3 = {op}(%0, %1, %2)\nreturn %3\n",
            input("x", "F32", x),
            input("cos", "F32", table),
            input("sin", "F32", table)
        );
        matches_kernel(&src, kind, 1e-6, 1e-6);
    }
    let src = format!(
        "%0 = {}\n%1 = AxialRope2d(end_x:3,end_y:2,head_dim:8,num_heads:2,theta:100.0,repeat_factor:2)(%0)\nreturn %1\n",
        input("x", "F32", "2,12,16")
    );
    matches_kernel(&src, OpKind::AxialRope2d, 1e-5, 1e-5);
}
