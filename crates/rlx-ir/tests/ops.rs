//! Data-driven op tests over `tests/data/`:
//! - `<family>.rlx`: a graph using every kind of the family; it must verify, print and
//!   parse back to an equal graph.
//! - `<family>.bad`: malformed cases, each headed `! Kind: expected message part`; parsing
//!   must fail with an error that names the kind and contains that part.
//!
//! Together the files must cover every op kind.

use rlx_ir::{text, verify, OpKind};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn data_files(ext: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/data exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

#[test]
fn every_graph_round_trips_and_every_kind_is_covered() {
    let mut covered = BTreeSet::new();
    for path in data_files("rlx") {
        let src = std::fs::read_to_string(&path).unwrap();
        let g = text::parse(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        verify(&g).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let printed = g.to_string();
        let back = text::parse(&printed).unwrap_or_else(|e| panic!("{}: reparse: {e}\n{printed}", path.display()));
        assert_eq!(back, g, "{}: round trip changed the graph", path.display());
        assert_eq!(back.to_string(), printed);
        covered.extend(g.nodes().iter().map(|n| n.op.kind()));
    }
    let missing: Vec<_> = OpKind::ALL
        .iter()
        .filter(|k| !covered.contains(k))
        .collect();
    assert!(missing.is_empty(), "kinds with no round-trip graph in tests/data: {missing:?}");
}

#[test]
fn every_kind_rejects_a_malformed_case_with_a_named_error() {
    let mut covered = BTreeSet::new();
    for path in data_files("bad") {
        let src = std::fs::read_to_string(&path).unwrap();
        let mut cases: Vec<(String, String)> = Vec::new();
        for line in src.lines() {
            if let Some(head) = line.strip_prefix('!') {
                cases.push((head.trim().to_string(), String::new()));
            } else if let Some((_, body)) = cases.last_mut() {
                body.push_str(line);
                body.push('\n');
            }
        }
        for (head, body) in cases {
            let (kind, expect) = head
                .split_once(':')
                .unwrap_or_else(|| panic!("{}: case header `{head}` needs `Kind: message`", path.display()));
            let kind = OpKind::from_name(kind.trim())
                .unwrap_or_else(|| panic!("{}: unknown kind in `{head}`", path.display()));
            let err = match text::parse(&body) {
                Ok(g) => verify(&g).expect_err(&format!("{}: `{head}` was accepted", path.display())),
                Err(e) => e,
            }
            .to_string();
            assert!(
                (err.contains(&format!("{}(", kind.name())) || err.contains(&format!("{}:", kind.name())))
                    && err.contains(expect.trim()),
                "{}: `{head}` failed with a different error: {err}",
                path.display()
            );
            covered.insert(kind);
        }
    }
    let missing: Vec<_> = OpKind::ALL
        .iter()
        .filter(|k| !covered.contains(k))
        .filter(|k| !matches!(k, OpKind::Input | OpKind::Param))
        .collect();
    assert!(missing.is_empty(), "kinds with no malformed case in tests/data: {missing:?}");
}

/// All family graphs joined into one graph holding every one of the 177 kinds: it verifies,
/// prints and parses back equal.
#[test]
fn one_graph_with_every_kind_round_trips() {
    let mut all = rlx_ir::Graph::new();
    let mut outputs = Vec::new();
    for path in data_files("rlx") {
        let g = text::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let base = all.len() as u32;
        let shift = |v: &rlx_ir::ValueId| rlx_ir::ValueId::new(rlx_ir::NodeId(v.node.0 + base), v.output);
        let family = path.file_stem().unwrap().to_string_lossy().to_string();
        for n in g.nodes() {
            let mut n = n.clone();
            n.inputs = n.inputs.iter().map(shift).collect();
            match &mut n.op {
                rlx_ir::Op::Input(i) => i.name = format!("{family}_{}", i.name),
                rlx_ir::Op::Param(p) => p.name = format!("{family}_{}", p.name),
                _ => {}
            }
            all.push(n);
        }
        outputs.extend(g.outputs().iter().map(shift));
    }
    all.set_outputs(outputs).unwrap();
    verify(&all).unwrap();
    let kinds: BTreeSet<OpKind> = all.nodes().iter().map(|n| n.op.kind()).collect();
    assert_eq!(kinds.len(), OpKind::ALL.len());
    let printed = all.to_string();
    let back = text::parse(&printed).unwrap();
    assert_eq!(back, all);
    assert_eq!(back.to_string(), printed);
}
