//! Legalization: rewrites a graph so that a backend can run every node, and reports what
//! happened to each op kind.
//!
//! For each node the backend's [`Claims`] decide, given its input dtypes: a native node stays;
//! a node claimed after a cast gets `Cast`s on its inputs, and back on each output whose dtype
//! changed (every one of them claimed natively, or legalization fails); an unclaimed node is
//! replaced by its decomposition (common-IR, or rewritten for a fused op), whose nodes are
//! legalized in turn. With a host to fall back on ([`legalize_with_host`]), a node that has no
//! decomposition, or whose decomposition fails (a static size it needs is symbolic), stays as
//! it is when the host claims it natively: it will run on the host. If none of these holds,
//! compilation fails naming every such op with its input dtypes.

use crate::claims::{input_dtypes, Claim, Claims};
use crate::decompose;
use crate::rewrite::Rewriter;
use rlx_ir::ops::elementwise::Cast;
use rlx_ir::{DType, Graph, IrError, Node, NodeId, Op, OpKind, ValueId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// What legalization did with a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The backend runs it directly.
    Native,
    /// The backend runs it after its inputs were cast to dtypes it takes.
    Cast,
    /// Lowered to primitives through the common IR.
    CommonIr,
    /// A fused op unfused so that the backend can take its parts.
    Rewritten,
    /// Neither claimed nor decomposable.
    Missing,
    /// Left for the host, which claims it, in a segment of its own.
    Host,
    /// Formed by the fuse pass after legalization from nodes counted above; runs natively.
    Fused,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Native => "native",
            Outcome::Cast => "native after cast",
            Outcome::CommonIr => "common-IR",
            Outcome::Rewritten => "rewritten",
            Outcome::Missing => "missing",
            Outcome::Host => "host fallback",
            Outcome::Fused => "fused",
        }
    }
}

/// The outcome a backend with `claims` gives `kind` for the dtypes it takes, without any
/// graph: native when it claims the kind at all.
pub fn outcome_of(kind: OpKind, claims: &(impl Claims + ?Sized)) -> Outcome {
    if claims.kinds().contains(&kind) {
        Outcome::Native
    } else {
        unclaimed(kind)
    }
}

/// What becomes of a node the backend does not claim.
fn unclaimed(kind: OpKind) -> Outcome {
    if !decompose::has_rule(kind) {
        Outcome::Missing
    } else if kind.family() == "fused" {
        Outcome::Rewritten
    } else {
        Outcome::CommonIr
    }
}

/// Per op kind of the source graph: how many of its nodes had each outcome; and per fused
/// kind, how many nodes the fuse pass formed ([`Outcome::Fused`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DispatchReport {
    pub backend: String,
    pub kinds: BTreeMap<OpKind, BTreeMap<Outcome, usize>>,
}

impl DispatchReport {
    /// Counts one node of `kind` as left for the host instead of lowered.
    fn rehost(&mut self, kind: OpKind) {
        let outcomes = self.kinds.entry(kind).or_default();
        for lowered in [Outcome::CommonIr, Outcome::Rewritten] {
            if let Some(n) = outcomes.get_mut(&lowered).filter(|n| **n > 0) {
                *n -= 1;
                if *n == 0 {
                    outcomes.remove(&lowered);
                }
                break;
            }
        }
        *outcomes.entry(Outcome::Host).or_default() += 1;
    }

    /// Counts the nodes that fusion formed: of each kind, how many more `fused` holds than
    /// `legal`, the graph it was fused from.
    pub fn add_fused(&mut self, legal: &Graph, fused: &Graph) {
        let tally = |g: &Graph| {
            let mut n: BTreeMap<OpKind, usize> = BTreeMap::new();
            for node in g.nodes() {
                *n.entry(node.op.kind()).or_default() += 1;
            }
            n
        };
        let before = tally(legal);
        for (kind, n) in tally(fused) {
            let formed = n.saturating_sub(before.get(&kind).copied().unwrap_or(0));
            if formed > 0 {
                *self.kinds.entry(kind).or_default().entry(Outcome::Fused).or_default() += formed;
            }
        }
    }

    /// How many nodes of `kind` had `outcome`.
    pub fn count(&self, kind: OpKind, outcome: Outcome) -> usize {
        self.kinds.get(&kind).and_then(|o| o.get(&outcome)).copied().unwrap_or(0)
    }
}

impl fmt::Display for DispatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "dispatch report for backend `{}`:", self.backend)?;
        for (kind, outcomes) in &self.kinds {
            for (outcome, n) in outcomes {
                writeln!(f, "  {:<32} {:>5}×  {}", kind.name(), n, outcome.name())?;
            }
        }
        Ok(())
    }
}

/// A node's kind and input dtypes, as errors name it: `MatMul(f64, f64)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpDtypes {
    pub kind: OpKind,
    pub dtypes: Vec<DType>,
}

impl OpDtypes {
    fn of(g: &Graph, node: &Node) -> OpDtypes {
        OpDtypes { kind: node.op.kind(), dtypes: input_dtypes(g, node) }
    }
}

impl fmt::Display for OpDtypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.kind, dtype_list(&self.dtypes))
    }
}

fn dtype_list(dtypes: &[DType]) -> String {
    dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

/// Errors of legalization.
#[derive(Debug, thiserror::Error)]
pub enum LegalizeError {
    #[error("backend `{backend}` cannot run {}: claim {} in the backend (natively or after a cast to dtypes it takes) \
        or add a decomposition in rlx-opt/src/decompose/<family>.rs",
        .ops.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", "),
        if .ops.len() == 1 { "it" } else { "them" })]
    Missing { backend: String, ops: Vec<OpDtypes> },
    #[error("backend `{backend}` claims {op} after a cast to ({}), but {problem}", dtype_list(.to))]
    BadCast { backend: String, op: OpDtypes, to: Vec<DType>, problem: String },
    #[error(transparent)]
    Ir(#[from] IrError),
}

/// Deepest chain of decompositions (a decomposition producing ops that decompose again).
const MAX_ROUNDS: usize = 16;

/// Rewrites `g` so that `claims` holds every node natively for its input dtypes.
pub fn legalize(g: &Graph, backend: &str, claims: &(impl Claims + ?Sized)) -> Result<(Graph, DispatchReport), LegalizeError> {
    legalize_with_host(g, backend, claims, None)
}

/// [`legalize`], leaving for `host` the nodes it claims natively that the backend cannot run
/// even decomposed. Afterwards every node is claimed natively by the backend or by the host.
pub fn legalize_with_host(
    g: &Graph,
    backend: &str,
    claims: &(impl Claims + ?Sized),
    host: Option<&dyn Claims>,
) -> Result<(Graph, DispatchReport), LegalizeError> {
    let on_host = |g: &Graph, node: &Node| host.is_some_and(|h| h.claim(&node.op, &input_dtypes(g, node)) == Claim::Native);
    let mut verdicts = claims_of(g, claims);
    let mut report = DispatchReport {
        backend: backend.to_string(),
        ..Default::default()
    };
    let mut missing = Vec::new();
    for (node, claim) in g.nodes().iter().zip(&verdicts) {
        let kind = node.op.kind();
        let outcome = match claim {
            Claim::Native => Outcome::Native,
            Claim::Cast(_) => Outcome::Cast,
            Claim::No => unclaimed(kind),
        };
        let outcome = match outcome {
            Outcome::Missing if on_host(g, node) => Outcome::Host,
            Outcome::Missing => {
                missing.push(OpDtypes::of(g, node));
                outcome
            }
            _ => outcome,
        };
        *report.kinds.entry(kind).or_default().entry(outcome).or_default() += 1;
    }
    fail_on_missing(backend, missing)?;
    let mut cur = g.clone();
    // Nodes left for the host, by id in `cur`.
    let mut hosted: Vec<NodeId> = Vec::new();
    for round in 0..MAX_ROUNDS {
        if cur.node_ids().zip(&verdicts).all(|(id, c)| *c == Claim::Native || hosted.contains(&id)) {
            return Ok((cur, report));
        }
        let mut kept_for_host = Vec::new();
        let mut rw = Rewriter::new(&cur);
        let mut missing = Vec::new();
        let mut casts = HashMap::new();
        for (id, claim) in cur.node_ids().zip(verdicts) {
            let node = cur.node(id);
            match claim {
                Claim::Native => {
                    rw.keep(id);
                }
                Claim::Cast(to) => {
                    let values = cast_around(&mut rw, &mut casts, id, &to, backend, claims)?;
                    rw.replace(id, values)?;
                }
                Claim::No if hosted.contains(&id) => kept_for_host.push(rw.keep(id)),
                Claim::No => {
                    let inputs = rw.inputs(id);
                    let mark = rw.graph().len();
                    match decompose::decompose(&node.op, rw.graph(), &inputs) {
                        Some(Ok(values)) => rw.replace(id, values)?,
                        failed if on_host(&cur, node) => {
                            // A failed decomposition leaves no node that anything reads.
                            rw.graph().truncate(mark);
                            kept_for_host.push(rw.keep(id));
                            if round == 0 && failed.is_some() {
                                report.rehost(node.op.kind());
                            }
                        }
                        Some(Err(e)) => return Err(e.into()),
                        None => {
                            missing.push(OpDtypes::of(&cur, node));
                            rw.keep(id);
                        }
                    }
                }
            }
        }
        fail_on_missing(backend, missing)?;
        cur = rw.finish();
        hosted = kept_for_host;
        verdicts = claims_of(&cur, claims);
    }
    Err(LegalizeError::Ir(IrError::Invalid(format!(
        "legalization for `{backend}` did not settle after {MAX_ROUNDS} rounds of decomposition"
    ))))
}

/// The backend's claim on every node of `g`.
fn claims_of(g: &Graph, claims: &(impl Claims + ?Sized)) -> Vec<Claim> {
    g.nodes().iter().map(|n| claims.claim(&n.op, &input_dtypes(g, n))).collect()
}

/// The error naming `ops` (sorted, each once), if there are any.
fn fail_on_missing(backend: &str, mut ops: Vec<OpDtypes>) -> Result<(), LegalizeError> {
    if ops.is_empty() {
        return Ok(());
    }
    ops.sort();
    ops.dedup();
    Err(LegalizeError::Missing { backend: backend.into(), ops })
}

/// The values standing for node `id`'s outputs when its op runs on its inputs cast to `to`,
/// each output cast back to its dtype where that changed. The backend must claim the op on
/// `to` and every cast natively. `casts` holds the casts built so far, so a value is cast to
/// a dtype once.
fn cast_around(
    rw: &mut Rewriter,
    casts: &mut HashMap<(ValueId, DType), ValueId>,
    id: NodeId,
    to: &[DType],
    backend: &str,
    claims: &(impl Claims + ?Sized),
) -> Result<Vec<ValueId>, LegalizeError> {
    let src = rw.source();
    let node = src.node(id);
    let bad = |problem: String| LegalizeError::BadCast { backend: backend.into(), op: OpDtypes::of(src, node), to: to.to_vec(), problem };
    if to.len() != node.inputs.len() {
        return Err(bad(format!("names {} dtypes for {} inputs", to.len(), node.inputs.len())));
    }
    if claims.claim(&node.op, to) != Claim::Native {
        return Err(bad("does not claim it natively for those dtypes".into()));
    }
    let mut cast = |g: &mut Graph, v: ValueId, to: DType| -> Result<ValueId, LegalizeError> {
        let from = g.ty(v).dtype;
        if from == to {
            return Ok(v);
        }
        if let Some(&c) = casts.get(&(v, to)) {
            return Ok(c);
        }
        if claims.claim(&Op::from(Cast { to }), &[from]) != Claim::Native {
            return Err(bad(format!("does not claim Cast from {from} to {to}")));
        }
        let c = g.cast(v, to)?;
        casts.insert((v, to), c);
        Ok(c)
    };
    let mut inputs = rw.inputs(id);
    for (v, &d) in inputs.iter_mut().zip(to) {
        *v = cast(rw.graph(), *v, d)?;
    }
    let new = rw.graph().add(node.op.clone(), &inputs)?;
    node.outputs.iter().enumerate().map(|(i, t)| cast(rw.graph(), ValueId::new(new, i as u32), t.dtype)).collect()
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
    fn nodes_the_fuse_pass_formed_count_as_fused() {
        let legal = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[3]))()
            %1 = Binary(op:Mul)(%0, %0)
            %2 = Binary(op:Add)(%1, %0)
            return %2",
        )
        .unwrap();
        let fused = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[3]))()
            %1 = ElementwiseRegion(chain:[Binary(Mul,Input(0),Input(0)),Binary(Add,Step(0),Input(0))],num_inputs:1,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0)
            return %1",
        )
        .unwrap();
        let mut report = DispatchReport::default();
        report.add_fused(&legal, &fused);
        assert_eq!(report.count(OpKind::ElementwiseRegion, Outcome::Fused), 1, "{report}");
        assert_eq!(report.count(OpKind::Binary, Outcome::Fused), 0, "{report}");
        assert_eq!(report.count(OpKind::Input, Outcome::Fused), 0, "{report}");
    }

    #[test]
    fn decomposes_unclaimed_ops_into_claimed_ones() {
        let g = parse(SRC).unwrap();
        let claims = [OpKind::Input, OpKind::Constant, OpKind::Binary, OpKind::Compare, OpKind::Where];
        let (out, report) = legalize(&g, "test", &claims[..]).unwrap();
        assert!(out.nodes().iter().all(|n| claims.contains(&n.op.kind())), "{out}");
        rlx_ir::verify(&out).unwrap();
        assert_eq!(report.count(OpKind::ReluBackward, Outcome::CommonIr), 1);
        assert_eq!(report.count(OpKind::Input, Outcome::Native), 2);
    }

    #[test]
    fn names_what_is_missing_with_its_dtypes() {
        let g = parse(SRC).unwrap();
        let err = legalize(&g, "test", &[OpKind::Input][..]).unwrap_err().to_string();
        assert!(err.starts_with("backend `test` cannot run Constant(), Binary(f32, f32), Compare(f32, f32), Where(bool, f32, f32)"), "{err}");
    }

    /// A device without f64 whose products and comparisons run in f32 only: `MatMul` and
    /// `Compare` take f16 after a cast to f32, `Fma` is f32 only, casts go between f16 and
    /// f32 only.
    struct F32Device;

    impl Claims for F32Device {
        fn kinds(&self) -> &[OpKind] {
            use OpKind::*;
            &[Input, Cast, Binary, Compare, MatMul, Fma, Activation]
        }

        fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
            let all_f32 = inputs.iter().all(|&d| d == DType::F32);
            match op {
                _ if !self.kinds().contains(&op.kind()) => Claim::No,
                Op::Cast(c) if matches!((inputs[0], c.to), (DType::F16, DType::F32) | (DType::F32, DType::F16)) => Claim::Native,
                Op::Cast(_) => Claim::No,
                _ if inputs.contains(&DType::F64) => Claim::No,
                Op::MatMul(_) | Op::Compare(_) if !all_f32 => Claim::Cast(vec![DType::F32; inputs.len()]),
                Op::Fma(_) if !all_f32 => Claim::No,
                _ => Claim::Native,
            }
        }
    }

    /// Asserts that legalizing `before` for `claims` gives `after` (text format), and returns
    /// the report.
    fn assert_legalizes(before: &str, claims: &(impl Claims + ?Sized), after: &str) -> DispatchReport {
        let g = parse(before).unwrap_or_else(|e| panic!("{e}\n{before}"));
        let (got, report) = legalize(&g, "test", claims).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&got).unwrap_or_else(|e| panic!("{e}\n{got}"));
        let want = parse(after).unwrap_or_else(|e| panic!("{e}\n{after}"));
        assert_eq!(got.to_string(), want.to_string(), "legalizing\n{g}");
        report
    }

    #[test]
    fn casts_inputs_and_outputs_around_a_claim_after_cast() {
        let report = assert_legalizes(
            r#"%0 = Input(name:"a",ty:(dtype:F16,shape:[2,3]))()
            %1 = Input(name:"b",ty:(dtype:F16,shape:[3,4]))()
            %2 = MatMul()(%0, %1)
            %3 = Activation(kind:Relu)(%2)
            return %3"#,
            &F32Device,
            r#"%0 = Input(name:"a",ty:(dtype:F16,shape:[2,3]))()
            %1 = Input(name:"b",ty:(dtype:F16,shape:[3,4]))()
            %2 = Cast(to:F32)(%0)
            %3 = Cast(to:F32)(%1)
            %4 = MatMul()(%2, %3)
            %5 = Cast(to:F16)(%4)
            %6 = Activation(kind:Relu)(%5)
            return %6"#,
        );
        assert_eq!(report.count(OpKind::MatMul, Outcome::Cast), 1);
        assert_eq!(report.count(OpKind::Activation, Outcome::Native), 1);
        assert!(report.to_string().contains("MatMul                               1×  native after cast"), "{report}");
    }

    #[test]
    fn an_output_whose_dtype_stays_is_not_cast_back() {
        assert_legalizes(
            r#"%0 = Input(name:"a",ty:(dtype:F16,shape:[4]))()
            %1 = Compare(op:Gt)(%0, %0)
            return %1"#,
            &F32Device,
            r#"%0 = Input(name:"a",ty:(dtype:F16,shape:[4]))()
            %1 = Cast(to:F32)(%0)
            %2 = Compare(op:Gt)(%1, %1)
            return %2"#,
        );
    }

    #[test]
    fn an_op_not_claimed_for_its_dtypes_is_decomposed() {
        let report = assert_legalizes(
            r#"%0 = Input(name:"a",ty:(dtype:F16,shape:[4]))()
            %1 = Fma()(%0, %0, %0)
            %2 = Input(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = Fma()(%2, %2, %2)
            return %1, %3"#,
            &F32Device,
            r#"%0 = Input(name:"a",ty:(dtype:F16,shape:[4]))()
            %1 = Binary(op:Mul)(%0, %0)
            %2 = Binary(op:Add)(%1, %0)
            %3 = Input(name:"b",ty:(dtype:F32,shape:[4]))()
            %4 = Fma()(%3, %3, %3)
            return %2, %4"#,
        );
        assert_eq!(report.count(OpKind::Fma, Outcome::CommonIr), 1);
        assert_eq!(report.count(OpKind::Fma, Outcome::Native), 1);
    }

    #[test]
    fn names_op_and_dtypes_when_neither_cast_nor_decomposition_helps() {
        let g = parse(
            r#"%0 = Input(name:"a",ty:(dtype:F64,shape:[2,2]))()
            %1 = MatMul()(%0, %0)
            return %1"#,
        )
        .unwrap();
        let err = legalize(&g, "test", &F32Device).unwrap_err().to_string();
        assert!(err.starts_with("backend `test` cannot run MatMul(f64, f64): claim it in the backend"), "{err}");
    }

    #[test]
    fn a_cast_the_backend_does_not_claim_is_an_error() {
        // The device claims MatMul on bf16 after a cast to f32 but has no bf16 → f32 cast.
        let g = parse(
            r#"%0 = Input(name:"a",ty:(dtype:BF16,shape:[2,2]))()
            %1 = MatMul()(%0, %0)
            return %1"#,
        )
        .unwrap();
        let err = legalize(&g, "test", &F32Device).unwrap_err().to_string();
        assert_eq!(err, "backend `test` claims MatMul(bf16, bf16) after a cast to (f32, f32), but does not claim Cast from bf16 to f32");
    }
}
