//! Fusion: small local rewrites that fold chains of ops into the fused kinds of OPS.md §19
//! (and gathers of keys and values into the `Attention` that reads them, as its `kv_rows`),
//! each emitted only where the backend claims it natively for the fused node's input dtypes.
//!
//! Runs in compile after legalization, so it also sees the primitives that decompositions
//! produced, and never before autodiff (gradients are taken on unfused graphs). One module per
//! rule; every rule matches at the node that ends its pattern (the root), builds the fused node
//! from the pattern's inputs and stands it in for the root. The pattern's inner nodes must have
//! no other reader, so they are dead afterwards and dead-code elimination drops them.

mod attention;
mod conv;
mod matmul;
mod norm;
mod region;
mod swiglu;

use crate::claims::{input_dtypes, Claim, Claims};
use crate::dce::Dce;
use crate::pass::Pass;
use crate::rewrite::Rewriter;
use rlx_ir::{Graph, IrError, Node, NodeId, OpKind, ValueId};

/// Who reads each node of a graph.
pub(crate) struct Uses {
    /// Per node: reads by other nodes plus appearances among the graph's outputs.
    count: Vec<usize>,
    /// Per node: the node reading it when that is its only use.
    sole: Vec<Option<NodeId>>,
}

impl Uses {
    fn of(g: &Graph) -> Uses {
        let count = g.use_counts();
        let mut sole = vec![None; g.len()];
        for id in g.node_ids() {
            for v in &g.node(id).inputs {
                if count[v.node.index()] == 1 {
                    sole[v.node.index()] = Some(id);
                }
            }
        }
        Uses { count, sole }
    }

    /// Whether `v`'s node is read once, so a fusion may absorb it.
    pub fn single(&self, v: ValueId) -> bool {
        v.output == 0 && self.count[v.node.index()] == 1
    }

    /// The one node that reads `id`, if it has exactly one use and that use is not a graph output.
    pub fn sole_reader(&self, id: NodeId) -> Option<NodeId> {
        self.sole[id.index()]
    }
}

/// What a rule sees when it looks at one root candidate.
pub(crate) struct Site<'s, 'g> {
    pub src: &'g Graph,
    pub uses: &'s Uses,
    pub rw: &'s mut Rewriter<'g>,
}

impl Site<'_, '_> {
    pub fn node(&self, v: ValueId) -> &Node {
        self.src.node(v.node)
    }

    /// The rebuilt values standing for source values.
    pub fn map<const N: usize>(&self, vs: [ValueId; N]) -> [ValueId; N] {
        vs.map(|v| self.rw.map(v))
    }
}

/// A fusion rule: the kind it emits and its matcher, which returns the fused value built in
/// the rewriter's graph, or `None` when `root` does not end its pattern.
struct Rule {
    kind: OpKind,
    fuse: fn(&mut Site, NodeId) -> Result<Option<ValueId>, IrError>,
}

/// The rules in the order they run: the epilogue fusions claim their elementwise ops before
/// the region rule gathers the rest.
const RULES: &[Rule] = &[
    Rule { kind: OpKind::FusedSwiGLU, fuse: swiglu::fuse },
    Rule { kind: OpKind::FusedMatMulBiasAct, fuse: matmul::fuse },
    Rule { kind: OpKind::FusedConvBiasAct, fuse: conv::fuse },
    Rule { kind: OpKind::FusedResidualLN, fuse: norm::fuse_layer_norm },
    Rule { kind: OpKind::FusedResidualRmsNorm, fuse: norm::fuse_rms_norm },
    Rule { kind: OpKind::ElementwiseRegion, fuse: region::fuse },
    Rule { kind: OpKind::Attention, fuse: attention::fuse },
];

/// Folds the patterns of every fused kind that `claims` holds into fused nodes.
pub fn fuse(g: &Graph, claims: &(impl Claims + ?Sized)) -> Result<Graph, IrError> {
    let mut cur = g.clone();
    for rule in RULES.iter().filter(|r| claims.kinds().contains(&r.kind)) {
        cur = apply(&cur, rule, claims)?;
    }
    Ok(cur)
}

/// One rule over the whole graph, then the absorbed nodes dropped (and a fused node whose type
/// came out other than its root's, or that the backend does not claim for its dtypes, which
/// is left unused).
fn apply(g: &Graph, rule: &Rule, claims: &(impl Claims + ?Sized)) -> Result<Graph, IrError> {
    let uses = Uses::of(g);
    let mut rw = Rewriter::new(g);
    let mut fused = false;
    for id in g.node_ids() {
        let mut site = Site { src: g, uses: &uses, rw: &mut rw };
        let built = (rule.fuse)(&mut site, id)?;
        fused |= built.is_some();
        match built {
            Some(v) if [rw.built().ty(v).clone()] == g.node(id).outputs[..] && native(rw.built(), v, claims) => {
                rw.replace(id, vec![v])?
            }
            _ => {
                rw.keep(id);
            }
        }
    }
    let out = rw.finish();
    if fused {
        Dce.run(&out)
    } else {
        Ok(out)
    }
}

/// Whether the backend claims the node that produces `v` natively for its input dtypes.
fn native(g: &Graph, v: ValueId, claims: &(impl Claims + ?Sized)) -> bool {
    let node = g.node(v.node);
    claims.claim(&node.op, &input_dtypes(g, node)) == Claim::Native
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::claims::{Claim, Claims};
    use rlx_ir::text::parse;
    use rlx_ir::{DType, Op, OpKind};

    /// Asserts that fusing `before` with `claims` gives `after` (both in the text format;
    /// `after` may leave out the output types).
    pub fn assert_fuses(before: &str, claims: &(impl Claims + ?Sized), after: &str) {
        let g = parse(before).unwrap_or_else(|e| panic!("{e}\n{before}"));
        let got = super::fuse(&g, claims).unwrap_or_else(|e| panic!("{e}\n{g}"));
        rlx_ir::verify(&got).unwrap_or_else(|e| panic!("{e}\n{got}"));
        let want = parse(after).unwrap_or_else(|e| panic!("{e}\n{after}"));
        assert_eq!(got.to_string(), want.to_string(), "fusing\n{g}");
    }

    #[test]
    fn unclaimed_kinds_are_not_emitted() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,3]))()
            %1 = Activation(kind:Exp)(%0)
            %2 = Activation(kind:Tanh)(%1)
            return %2";
        assert_fuses(src, &[OpKind::FusedMatMulBiasAct][..], src);
    }

    /// Claims the fused matmul natively for f32 operands only.
    struct F32FusedMatMul;

    impl Claims for F32FusedMatMul {
        fn kinds(&self) -> &[OpKind] {
            &[OpKind::FusedMatMulBiasAct]
        }

        fn claim(&self, op: &Op, inputs: &[DType]) -> Claim {
            if op.kind() == OpKind::FusedMatMulBiasAct && inputs.iter().all(|&d| d == DType::F32) {
                Claim::Native
            } else {
                Claim::No
            }
        }
    }

    #[test]
    fn fused_kinds_form_only_for_the_dtypes_the_backend_claims() {
        let chain = |dtype: &str| {
            format!(
                r#"%0 = Input(name:"x",ty:(dtype:{dtype},shape:[3,5]))()
            %1 = Param(name:"w",ty:(dtype:{dtype},shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:{dtype},shape:[4]))()
            %3 = MatMul()(%0, %1)
            %4 = Binary(op:Add)(%3, %2)
            return %4"#
            )
        };
        let f16 = chain("F16");
        assert_fuses(&f16, &F32FusedMatMul, &f16);
        assert_fuses(
            &chain("F32"),
            &F32FusedMatMul,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,5]))()
            %1 = Param(name:"w",ty:(dtype:F32,shape:[5,4]))()
            %2 = Param(name:"b",ty:(dtype:F32,shape:[4]))()
            %3 = FusedMatMulBiasAct(activation:None)(%0, %1, %2)
            return %3"#,
        );
    }
}
