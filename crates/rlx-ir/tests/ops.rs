//! Data-driven op tests over `tests/data/`:
//! - `<family>.rlx`: a graph using every kind of the family; it must verify, print and
//!   parse back to an equal graph.
//! - `<family>.bad`: malformed cases, each headed `! Kind: expected message part`; parsing
//!   must fail with an error that names the kind and contains that part.
//!
//! Together the files must cover every op kind (kinds still marked unspecified excepted).

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

/// Kinds whose attribute struct is still the unspecified placeholder.
fn unspecified() -> BTreeSet<OpKind> {
    OpKind::ALL
        .iter()
        .copied()
        .filter(|k| {
            text::parse_op(&format!("{}()", k.name())).is_ok_and(|op| !op.def().specified())
        })
        .collect()
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
        .filter(|k| !covered.contains(k) && !unspecified().contains(k))
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
        .filter(|k| !covered.contains(k) && !unspecified().contains(k))
        .filter(|k| !matches!(k, OpKind::Input | OpKind::Param))
        .collect();
    assert!(missing.is_empty(), "kinds with no malformed case in tests/data: {missing:?}");
}
