//! Fusion: small local rewrites that fold chains of ops into the fused kinds of OPS.md §19,
//! each emitted only when the backend claims it.
//!
//! Runs in compile after legalization, so it also sees the primitives that decompositions
//! produced, and never before autodiff (gradients are taken on unfused graphs). One module per
//! rule; every rule matches at the node that ends its pattern (the root), builds the fused node
//! from the pattern's inputs and stands it in for the root. The pattern's inner nodes must have
//! no other reader, so they are dead afterwards and dead-code elimination drops them.

mod conv;
mod matmul;
mod norm;
mod region;
mod swiglu;

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
];

/// Folds the patterns of every fused kind in `claims` into fused nodes.
pub fn fuse(g: &Graph, claims: &[OpKind]) -> Result<Graph, IrError> {
    let mut cur = g.clone();
    for rule in RULES.iter().filter(|r| claims.contains(&r.kind)) {
        cur = apply(&cur, rule)?;
    }
    Ok(cur)
}

/// One rule over the whole graph, then the absorbed nodes dropped (and a fused node whose type
/// came out other than its root's, which is left unused).
fn apply(g: &Graph, rule: &Rule) -> Result<Graph, IrError> {
    let uses = Uses::of(g);
    let mut rw = Rewriter::new(g);
    let mut fused = false;
    for id in g.node_ids() {
        let mut site = Site { src: g, uses: &uses, rw: &mut rw };
        let built = (rule.fuse)(&mut site, id)?;
        fused |= built.is_some();
        match built {
            Some(v) if [rw.built().ty(v).clone()] == g.node(id).outputs[..] => rw.replace(id, vec![v])?,
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

#[cfg(test)]
pub(crate) mod tests {
    use rlx_ir::text::parse;
    use rlx_ir::OpKind;

    /// Asserts that fusing `before` with `claims` gives `after` (both in the text format;
    /// `after` may leave out the output types).
    pub fn assert_fuses(before: &str, claims: &[OpKind], after: &str) {
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
        assert_fuses(src, &[OpKind::FusedMatMulBiasAct], src);
    }
}
