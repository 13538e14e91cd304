//! Legalization: rewrites a graph so that a backend can run every node, and reports what
//! happened to each op kind.
//!
//! For each node: if the backend claims its kind it stays (native); otherwise its
//! decomposition replaces it (common-IR, or rewritten for a fused op), and the new nodes are
//! legalized in turn; if neither holds, compilation fails naming every such op.

use crate::decompose;
use crate::rewrite::Rewriter;
use rlx_ir::{Graph, IrError, OpKind};
use std::collections::BTreeMap;
use std::fmt;

/// What legalization did with an op kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The backend runs it directly.
    Native,
    /// Lowered to primitives through the common IR.
    CommonIr,
    /// A fused op unfused so that the backend can take its parts.
    Rewritten,
    /// Neither claimed nor decomposable.
    Missing,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Native => "native",
            Outcome::CommonIr => "common-IR",
            Outcome::Rewritten => "rewritten",
            Outcome::Missing => "missing",
        }
    }
}

/// The outcome a backend with `claims` gives `kind`, without any graph.
pub fn outcome_of(kind: OpKind, claims: &[OpKind]) -> Outcome {
    if claims.contains(&kind) {
        Outcome::Native
    } else if decompose::has_rule(kind) {
        if kind.family() == "fused" {
            Outcome::Rewritten
        } else {
            Outcome::CommonIr
        }
    } else {
        Outcome::Missing
    }
}

/// Per op kind of the source graph: its outcome and how many nodes had it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DispatchReport {
    pub backend: String,
    pub kinds: BTreeMap<OpKind, (Outcome, usize)>,
}

impl fmt::Display for DispatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dispatch report for backend `{}`:", self.backend)?;
        for (kind, (outcome, n)) in &self.kinds {
            writeln!(f, "  {:<32} {:>5}×  {}", kind.name(), n, outcome.name())?;
        }
        Ok(())
    }
}

/// Errors of legalization.
#[derive(Debug, thiserror::Error)]
pub enum LegalizeError {
    #[error("backend `{backend}` cannot run {}: claim {} in the backend or add a decomposition in rlx-opt/src/decompose/<family>.rs",
        .kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "),
        if .kinds.len() == 1 { "it" } else { "them" })]
    Missing { backend: String, kinds: Vec<OpKind> },
    #[error(transparent)]
    Ir(#[from] IrError),
}

/// Deepest chain of decompositions (a decomposition producing ops that decompose again).
const MAX_ROUNDS: usize = 16;

/// Rewrites `g` so that every node's kind is in `claims`.
pub fn legalize(g: &Graph, backend: &str, claims: &[OpKind]) -> Result<(Graph, DispatchReport), LegalizeError> {
    let mut report = DispatchReport {
        backend: backend.to_string(),
        ..Default::default()
    };
    for n in g.nodes() {
        let kind = n.op.kind();
        report.kinds.entry(kind).or_insert((outcome_of(kind, claims), 0)).1 += 1;
    }
    let missing: Vec<OpKind> = report
        .kinds
        .iter()
        .filter(|(_, (o, _))| *o == Outcome::Missing)
        .map(|(k, _)| *k)
        .collect();
    if !missing.is_empty() {
        return Err(LegalizeError::Missing { backend: backend.into(), kinds: missing });
    }
    let mut cur = g.clone();
    for _ in 0..MAX_ROUNDS {
        if cur.nodes().iter().all(|n| claims.contains(&n.op.kind())) {
            return Ok((cur, report));
        }
        let mut rw = Rewriter::new(&cur);
        let mut missing = Vec::new();
        for id in cur.node_ids() {
            let node = cur.node(id);
            if claims.contains(&node.op.kind()) {
                rw.keep(id);
                continue;
            }
            let inputs = rw.inputs(id);
            match decompose::decompose(&node.op, rw.graph(), &inputs) {
                Some(values) => rw.replace(id, values?)?,
                None => {
                    missing.push(node.op.kind());
                    rw.keep(id);
                }
            }
        }
        if !missing.is_empty() {
            missing.sort();
            missing.dedup();
            return Err(LegalizeError::Missing { backend: backend.into(), kinds: missing });
        }
        cur = rw.finish();
    }
    Err(LegalizeError::Ir(IrError::Invalid(format!(
        "legalization for `{backend}` did not settle after {MAX_ROUNDS} rounds of decomposition"
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::text::parse;

    const SRC: &str = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[3]))()
        %1 = Input(name:\"d\",ty:(dtype:F32,shape:[3]))()
        %2 = ReluBackward()(%0, %1)
        %3 = Fma()(%0, %1, %2)
        return %3";

    #[test]
    fn decomposes_unclaimed_ops_into_claimed_ones() {
        let g = parse(SRC).unwrap();
        let claims = [OpKind::Input, OpKind::Constant, OpKind::Binary, OpKind::Compare, OpKind::Where];
        let (out, report) = legalize(&g, "test", &claims).unwrap();
        assert!(out.nodes().iter().all(|n| claims.contains(&n.op.kind())), "{out}");
        rlx_ir::verify(&out).unwrap();
        assert_eq!(report.kinds[&OpKind::ReluBackward], (Outcome::CommonIr, 1));
        assert_eq!(report.kinds[&OpKind::Input], (Outcome::Native, 2));
    }

    #[test]
    fn names_what_is_missing() {
        let g = parse(SRC).unwrap();
        let err = legalize(&g, "test", &[OpKind::Input]).unwrap_err().to_string();
        assert!(err.starts_with("backend `test` cannot run Constant, Binary, Compare, Where"), "{err}");
    }
}
