//! Chains of elementwise ops (`Activation`, `Binary`, `Compare`, `Where`, `Cast`) whose inner
//! values have no other reader → one `ElementwiseRegion`.
//!
//! A region grows from its root (the node whose value leaves it) back through operands that
//! are read only by the region and have the root's shape. Every operand from outside becomes
//! a region input, which must read as NumPy broadcasting through the region's modulo indexing:
//! after dropping leading 1s its shape is a suffix of the output's (static when shorter).

use super::Site;
use rlx_ir::ops::fused::{ChainStep, Operand, MAX_REGION_INPUTS};
use rlx_ir::{Dim, Graph, IrError, NodeId, Op, Shape, ValueId};

/// Most steps one region holds.
const MAX_STEPS: usize = 32;

pub(super) fn fuse(s: &mut Site, root: NodeId) -> Result<Option<ValueId>, IrError> {
    if !member_kind(s.src, root) || region_root(s, root) != root {
        return Ok(None);
    }
    let members = grow(s, root);
    if members.len() < 2 {
        return Ok(None);
    }
    let (chain, leaves) = chain_of(s.src, &members);
    let inputs: Vec<ValueId> = leaves.iter().map(|&v| s.rw.map(v)).collect();
    Ok(s.rw.graph().elementwise_region(chain, &inputs, None).ok())
}

/// Whether node `id` is a single-output elementwise op whose operands all read as region
/// inputs of its shape.
fn member_kind(g: &Graph, id: NodeId) -> bool {
    let node = g.node(id);
    let elementwise = match &node.op {
        Op::Activation(a) => a.kind.region_fusable(),
        Op::Binary(_) | Op::Compare(_) | Op::Where(_) | Op::Cast(_) => true,
        _ => false,
    };
    let out = &node.outputs[0].shape;
    elementwise && node.outputs.len() == 1 && node.inputs.iter().all(|&v| reads_by_modulus(&g.ty(v).shape, out))
}

/// Whether an operand of shape `x` reads into `out` by `g mod numel(x)`: with leading 1s
/// dropped, `x` is `out`'s trailing dims, and static if it is shorter.
fn reads_by_modulus(x: &Shape, out: &Shape) -> bool {
    let strip = |d: &[Dim]| d.iter().position(|d| *d != Dim::Static(1)).map_or(0, |k| d.len() - k);
    let (x, out) = (x.dims(), out.dims());
    let (xs, os) = (&x[x.len() - strip(x)..], &out[out.len() - strip(out)..]);
    let suffix = xs.len() <= os.len() && xs == &os[os.len() - xs.len()..];
    suffix && (xs.len() == os.len() || xs.iter().all(|d| d.as_static().is_some()))
}

/// The reader that would take `id` into its region: its only reader, elementwise, of the
/// same shape.
fn absorbing_reader(s: &Site, id: NodeId) -> Option<NodeId> {
    let r = s.uses.sole_reader(id)?;
    let same_shape = s.src.node(r).outputs[0].shape == s.src.node(id).outputs[0].shape;
    (member_kind(s.src, id) && member_kind(s.src, r) && same_shape).then_some(r)
}

/// The root of the region that holds `id`: the region of its absorbing reader if that region
/// took `id` in (its size limits may stop it), else `id` itself.
fn region_root(s: &Site, id: NodeId) -> NodeId {
    match absorbing_reader(s, id) {
        Some(r) => {
            let top = region_root(s, r);
            if grow(s, top).contains(&id) {
                top
            } else {
                id
            }
        }
        None => id,
    }
}

/// The members of the region rooted at `root`, in graph order: breadth-first through operands
/// that `absorbing_reader` gives to a member, within `MAX_STEPS` steps and `MAX_REGION_INPUTS`
/// inputs.
fn grow(s: &Site, root: NodeId) -> Vec<NodeId> {
    let mut members = vec![root];
    let mut leaves: Vec<ValueId> = s.src.node(root).inputs.clone();
    leaves.dedup();
    let mut next = 0;
    while next < members.len() && members.len() < MAX_STEPS {
        let at = members[next];
        next += 1;
        for v in s.src.node(at).inputs.clone() {
            if members.len() == MAX_STEPS || members.contains(&v.node) || absorbing_reader(s, v.node) != Some(at) {
                continue;
            }
            let mut grown: Vec<ValueId> = leaves.iter().copied().filter(|&l| l != v).collect();
            for &o in &s.src.node(v.node).inputs {
                if !grown.contains(&o) {
                    grown.push(o);
                }
            }
            if grown.len() <= MAX_REGION_INPUTS {
                members.push(v.node);
                leaves = grown;
            }
        }
    }
    members.sort();
    members
}

/// The chain of `members` (in graph order) and the outside values it reads, in first-read order.
fn chain_of(g: &Graph, members: &[NodeId]) -> (Vec<ChainStep>, Vec<ValueId>) {
    let mut leaves: Vec<ValueId> = Vec::new();
    let mut chain = Vec::with_capacity(members.len());
    for &id in members {
        let node = g.node(id);
        let mut operand = |v: ValueId| match members.iter().position(|&m| m == v.node) {
            Some(j) => Operand::Step(j as u32),
            None => {
                let i = leaves.iter().position(|&l| l == v).unwrap_or_else(|| {
                    leaves.push(v);
                    leaves.len() - 1
                });
                Operand::Input(i as u32)
            }
        };
        let x = &node.inputs;
        chain.push(match &node.op {
            Op::Activation(a) => ChainStep::Activation(a.kind, operand(x[0])),
            Op::Cast(c) => ChainStep::Cast(c.to, operand(x[0])),
            Op::Binary(b) => {
                let (p, q) = (operand(x[0]), operand(x[1]));
                ChainStep::Binary(b.op, p, q)
            }
            Op::Compare(c) => {
                let (p, q) = (operand(x[0]), operand(x[1]));
                ChainStep::Compare(c.op, p, q)
            }
            _ => {
                let (c, t, f) = (operand(x[0]), operand(x[1]), operand(x[2]));
                ChainStep::Where(c, t, f)
            }
        });
    }
    (chain, leaves)
}

#[cfg(test)]
mod tests {
    use crate::fuse::tests::assert_fuses;
    use rlx_ir::OpKind;

    const CLAIMS: &[OpKind] = &[OpKind::ElementwiseRegion];

    #[test]
    fn a_chain_with_broadcast_and_scalar_inputs_becomes_one_region() {
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3,4]))()
            %1 = Param(name:"b",ty:(dtype:F32,shape:[1,4]))()
            %2 = Constant(ty:(dtype:F32,shape:[1]),data:[0,0,0,63])()
            %3 = Binary(op:Add)(%0, %1)
            %4 = Activation(kind:Tanh)(%3)
            %5 = Compare(op:Gt)(%4, %2)
            %6 = Where()(%5, %0, %2)
            return %6"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:["B",3,4]))()
            %1 = Param(name:"b",ty:(dtype:F32,shape:[1,4]))()
            %2 = Constant(ty:(dtype:F32,shape:[1]),data:[0,0,0,63])()
            %3 = ElementwiseRegion(chain:[Binary(Add,Input(0),Input(1)),Activation(Tanh,Step(0)),Compare(Gt,Step(1),Input(2)),Where(Step(2),Input(0),Input(2))],num_inputs:3,scalar_input_mask:4,input_modulus:(0,4,1,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0, %1, %2)
            return %3"#,
        );
    }

    #[test]
    fn shared_values_and_column_broadcasts_end_a_region() {
        // %3 is read twice, so it is an input of the region ending at %5; the column [3, 1]
        // cannot be read by modulus, so %6 stays.
        assert_fuses(
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,4]))()
            %1 = Input(name:"c",ty:(dtype:F32,shape:[3,1]))()
            %2 = Activation(kind:Exp)(%0)
            %3 = Activation(kind:Neg)(%2)
            %4 = Activation(kind:Sigmoid)(%3)
            %5 = Binary(op:Mul)(%4, %3)
            %6 = Binary(op:Sub)(%5, %1)
            return %6"#,
            CLAIMS,
            r#"%0 = Input(name:"x",ty:(dtype:F32,shape:[3,4]))()
            %1 = Input(name:"c",ty:(dtype:F32,shape:[3,1]))()
            %2 = ElementwiseRegion(chain:[Activation(Exp,Input(0)),Activation(Neg,Step(0))],num_inputs:1,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%0)
            %3 = ElementwiseRegion(chain:[Activation(Sigmoid,Input(0)),Binary(Mul,Step(0),Input(0))],num_inputs:1,scalar_input_mask:0,input_modulus:(0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0),prologue:None,prologue_input:0)(%2)
            %4 = Binary(op:Sub)(%3, %1)
            return %4"#,
        );
    }

    #[test]
    fn long_chains_split_at_the_step_limit() {
        let mut src = String::from("%0 = Input(name:\"x\",ty:(dtype:F32,shape:[5]))()\n");
        for i in 1..=40 {
            src += &format!("%{i} = Activation(kind:Neg)(%{})\n", i - 1);
        }
        src += "return %40";
        let g = rlx_ir::text::parse(&src).unwrap();
        let out = crate::fuse::fuse(&g, CLAIMS).unwrap();
        let steps: Vec<usize> = out
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                rlx_ir::Op::ElementwiseRegion(r) => Some(r.chain.len()),
                _ => None,
            })
            .collect();
        assert_eq!(steps, vec![8, 32], "{out}");
    }
}
