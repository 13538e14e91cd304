//! Crafted malformed ONNX files: each import fails with a typed [`IoError`] naming the file
//! and the field, node or tensor at fault, never a panic, and no single allocation made while
//! importing exceeds 1 MiB however large the dims and counts the file claims.

mod common;

use rlx_io::onnx::{import, ImportOptions, Layout};
use rlx_io::IoError;
use common::{largest_allocation, write, MIB};

/// Protobuf encoding, just enough to write ONNX messages.
mod pb {
    pub fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    pub fn int(field: u32, v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(u64::from(field) << 3, &mut out);
        varint(v as u64, &mut out);
        out
    }

    pub fn bytes(field: u32, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint((u64::from(field) << 3) | 2, &mut out);
        varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    pub fn msg(field: u32, parts: &[Vec<u8>]) -> Vec<u8> {
        bytes(field, &parts.concat())
    }
}

/// `ValueInfoProto` field `field` of a float tensor with these dims.
fn value_info(field: u32, name: &str, dims: &[i64]) -> Vec<u8> {
    let dims: Vec<Vec<u8>> = dims.iter().map(|&d| pb::msg(1, &[pb::int(1, d)])).collect();
    let tensor_type = pb::msg(1, &[pb::int(1, 1), pb::msg(2, &dims)]);
    pb::msg(field, &[pb::bytes(1, name.as_bytes()), pb::msg(2, &[tensor_type])])
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
    let mut parts: Vec<Vec<u8>> = inputs.iter().map(|i| pb::bytes(1, i.as_bytes())).collect();
    parts.extend(outputs.iter().map(|o| pb::bytes(2, o.as_bytes())));
    parts.push(pb::bytes(3, format!("{op}_node").as_bytes()));
    parts.push(pb::bytes(4, op.as_bytes()));
    pb::msg(1, &parts)
}

/// A float initializer with `dims` and `raw` bytes.
fn initializer(name: &str, dims: &[i64], raw: &[u8]) -> Vec<u8> {
    let mut parts: Vec<Vec<u8>> = dims.iter().map(|&d| pb::int(1, d)).collect();
    parts.push(pb::int(2, 1));
    parts.push(pb::bytes(8, name.as_bytes()));
    parts.push(pb::bytes(9, raw));
    pb::msg(5, &parts)
}

fn model(graph_parts: &[Vec<u8>]) -> Vec<u8> {
    let opset = pb::msg(8, &[pb::bytes(1, b""), pb::int(2, 17)]);
    [pb::int(1, 8), opset, pb::msg(7, graph_parts)].concat()
}

/// `y = Relu(x)` over `x [2, 3]`: the valid model the crafted ones start from.
fn valid() -> Vec<u8> {
    model(&[node("Relu", &["x"], &["y"]), value_info(11, "x", &[2, 3]), value_info(12, "y", &[2, 3])])
}

/// Imports `bytes`, checking that no allocation exceeded 1 MiB.
fn load(tag: &str, bytes: &[u8]) -> Result<rlx_io::onnx::OnnxGraph, IoError> {
    let path = write(tag, "onnx", bytes);
    let (r, largest) = largest_allocation(|| import(&path, &ImportOptions::default()));
    assert!(largest <= MIB, "{tag}: an allocation of {largest} bytes");
    r
}

fn fails(tag: &str, bytes: &[u8]) -> IoError {
    match load(tag, bytes) {
        Ok(_) => panic!("{tag}: imported"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains(&format!("{tag}.onnx")), "{tag}: the message does not name the file: {text}");
            e
        }
    }
}

#[test]
fn the_valid_model_imports() {
    let g = load("valid", &valid()).unwrap();
    assert_eq!(g.inputs.len(), 1);
    assert_eq!(g.outputs, vec![("y".to_string(), Layout::Tensor)]);
}

#[test]
fn every_truncation_is_a_typed_error() {
    let bytes = valid();
    for cut in 1..bytes.len() {
        match load("truncated", &bytes[..cut]) {
            Ok(_) => {}
            Err(IoError::Proto { .. } | IoError::OnnxModel { .. } | IoError::OnnxNode { .. }) => {}
            Err(e) => panic!("cut at {cut}: unexpected error {e}"),
        }
    }
    let e = fails("truncated", &bytes[..bytes.len() - 3]);
    assert!(matches!(&e, IoError::Proto { field, reason, .. } if field == "ModelProto" && reason.contains("truncated")), "{e}");
    let inner = model(&[pb::bytes(1, &[0x0a, 9, b'x'])]);
    let e = fails("truncated_node", &inner);
    assert!(matches!(&e, IoError::Proto { field, .. } if field == "ModelProto.graph.node[0]"), "{e}");
}

#[test]
fn cycles_and_dangling_names_are_named() {
    let cycle = model(&[node("Relu", &["b"], &["a"]), node("Relu", &["a"], &["b"]), value_info(12, "a", &[1])]);
    let e = fails("cycle", &cycle);
    assert!(e.to_string().contains("cycle") && e.to_string().contains("Relu_node"), "{e}");
    let dangling = model(&[node("Relu", &["nowhere"], &["y"]), value_info(12, "y", &[1])]);
    let e = fails("dangling", &dangling);
    assert!(e.to_string().contains("`nowhere`"), "{e}");
    let unproduced = model(&[value_info(11, "x", &[1]), value_info(12, "missing", &[1])]);
    assert!(fails("unproduced", &unproduced).to_string().contains("`missing`"));
}

#[test]
fn initializer_sizes_are_checked_before_allocating() {
    let short = model(&[initializer("w", &[2, 3], &[0; 20]), node("Relu", &["w"], &["y"]), value_info(12, "y", &[2, 3])]);
    let e = fails("short_initializer", &short);
    assert!(e.to_string().contains("`w`") && e.to_string().contains("raw_data has 20 bytes"), "{e}");
    let huge = model(&[initializer("w", &[1 << 40, 1 << 40], &[0; 4]), value_info(12, "w", &[1])]);
    assert!(fails("huge_initializer", &huge).to_string().contains("more than"));
    let negative = model(&[initializer("w", &[-4], &[0; 4]), value_info(12, "w", &[1])]);
    assert!(fails("negative_dim", &negative).to_string().contains("negative dim"));
}

#[test]
fn absurd_input_dims_are_refused() {
    let bytes = model(&[node("Relu", &["x"], &["y"]), value_info(11, "x", &[1 << 31, 1 << 31, 1 << 31]), value_info(12, "y", &[1])]);
    assert!(fails("absurd_dims", &bytes).to_string().contains("more than"));
}

#[test]
fn deep_nesting_and_bad_wire_types_are_errors() {
    let mut ty = pb::msg(1, &[pb::int(1, 1)]);
    for _ in 0..200 {
        ty = pb::msg(4, &[pb::msg(1, &[ty])]);
    }
    let deep = model(&[pb::msg(11, &[pb::bytes(1, b"x"), pb::bytes(2, &ty)])]);
    assert!(matches!(fails("deep", &deep), IoError::Proto { reason, .. } if reason.contains("nested")));
    let wrong_type = model(&[pb::int(1, 5)]);
    assert!(matches!(fails("wire_type", &wrong_type), IoError::Proto { field, .. } if field.contains("node")));
}

#[test]
fn unsupported_ops_name_the_node_op_and_opset() {
    let bytes = model(&[node("NoSuchOp", &["x"], &["y"]), value_info(11, "x", &[2]), value_info(12, "y", &[2])]);
    match fails("unsupported", &bytes) {
        IoError::OnnxUnsupported { node, op, opset, .. } => assert_eq!((node.as_str(), op.as_str(), opset), ("NoSuchOp_node", "NoSuchOp", 17)),
        e => panic!("{e}"),
    }
}

/// A Bool scalar graph input.
fn bool_input(name: &str) -> Vec<u8> {
    let tensor_type = pb::msg(1, &[pb::int(1, 9), pb::msg(2, &[])]);
    pb::msg(11, &[pb::bytes(1, name.as_bytes()), pb::msg(2, &[tensor_type])])
}

/// `node` with graph attributes, each a name and the sub-graph's `GraphProto` fields.
fn node_with_graphs(op: &str, inputs: &[&str], outputs: &[&str], graphs: &[(&str, Vec<Vec<u8>>)]) -> Vec<u8> {
    let mut parts: Vec<Vec<u8>> = inputs.iter().map(|i| pb::bytes(1, i.as_bytes())).collect();
    parts.extend(outputs.iter().map(|o| pb::bytes(2, o.as_bytes())));
    parts.push(pb::bytes(3, format!("{op}_node").as_bytes()));
    parts.push(pb::bytes(4, op.as_bytes()));
    for (name, graph) in graphs {
        parts.push(pb::msg(5, &[pb::bytes(1, name.as_bytes()), pb::msg(6, graph), pb::int(20, 5)]));
    }
    pb::msg(1, &parts)
}

/// A branch named `name` returning `Relu(x)` for each of `outputs`.
fn branch(name: &str, outputs: &[&str]) -> Vec<Vec<u8>> {
    let mut parts = vec![pb::bytes(2, name.as_bytes())];
    for o in outputs {
        parts.push(node("Relu", &["x"], &[o]));
        parts.push(value_info(12, o, &[2]));
    }
    parts
}

#[test]
fn malformed_subgraphs_name_the_node_and_the_branch() {
    let if_model = |then_outs: &[&str], else_parts: Vec<Vec<u8>>| {
        let graphs = [("then_branch", branch("then", then_outs)), ("else_branch", else_parts)];
        model(&[
            node_with_graphs("If", &["c"], &["y"], &graphs),
            bool_input("c"),
            value_info(11, "x", &[2]),
            value_info(12, "y", &[2]),
        ])
    };
    match fails("if_counts", &if_model(&["a"], branch("else", &["a", "b"]))) {
        IoError::OnnxNode { node, op, reason, .. } => {
            assert_eq!((node.as_str(), op.as_str()), ("If_node", "If"));
            assert!(reason.contains("then_branch returns 1 outputs, else_branch 2"), "{reason}");
        }
        e => panic!("{e}"),
    }
    let unknown = vec![pb::bytes(2, b"else"), node("NoSuchOp", &["x"], &["a"]), value_info(12, "a", &[2])];
    match fails("if_inner_op", &if_model(&["a"], unknown)) {
        IoError::OnnxUnsupported { node, op, reason, .. } => {
            assert_eq!((node.as_str(), op.as_str()), ("If_node", "If"));
            assert!(reason.contains("sub-graph `else`") && reason.contains("`NoSuchOp_node` (NoSuchOp)"), "{reason}");
        }
        e => panic!("{e}"),
    }
    let dangling = vec![pb::bytes(2, b"else"), node("Relu", &["nowhere"], &["a"]), value_info(12, "a", &[2])];
    let e = fails("if_dangling", &if_model(&["a"], dangling));
    assert!(e.to_string().contains("`nowhere`") && e.to_string().contains("If_node"), "{e}");
}

#[test]
fn random_corruptions_never_panic() {
    let base = valid();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for round in 0..300 {
        let mut bytes = base.clone();
        for _ in 0..1 + round % 4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state % bytes.len() as u64) as usize;
            bytes[at] = (state >> 32) as u8;
        }
        let _ = load("corrupt", &bytes);
    }
}
