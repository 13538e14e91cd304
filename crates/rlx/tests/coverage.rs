//! `docs/op-coverage.md` must be what the code generates.

#[test]
fn op_coverage_doc_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/op-coverage.md");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rlx::coverage::markdown(),
        "docs/op-coverage.md is stale: run `cargo run -p rlx-cli -- ops --markdown > docs/op-coverage.md`"
    );
}
