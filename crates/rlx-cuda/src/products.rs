//! Decode's products fused with what surrounds them. Where a graph's f16 / bf16 products may
//! have few rows (a row count that is symbolic or at most [`GEMV_ROWS`]: decoding), compiling
//! rewrites each group of products over one operand into one of this backend's ops, [`NAME`]:
//! the products share one launch (Q, K and V; gate and up), the RMSNorm or elementwise region
//! that makes their operand runs inside it as each block stages its rows, and a residual
//! added to a product, or the rotary embedding of it, is applied as the product is written.
//! With more rows than the few-row kernel takes (a prompt), the op runs the pieces it replaced
//! one after another, into the outputs it keeps for them.

use crate::attention;
use crate::engine::{numel, CudaEngine};
use crate::matmul::{self, few_rows, few_rows_take, whole_heads, Product, Rotary, GEMV_ROWS};
use crate::memory::DevMem;
use crate::source::matmul::{self as src, Prologue, GROUP};
use crate::source::{self, rows::Norm, Source};
use crate::{fuse, rows};
use rlx_ir::ops::attention::{Rope, RopeStyle};
use rlx_ir::ops::custom::Custom;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::fused::{chain_dtypes, ElementwiseRegion, RegionPrologue};
use rlx_ir::{DType, Dim, Graph, Node, NodeId, Op, TensorType, ValueId};
use rlx_opt::rewrite::Rewriter;
use rlx_runtime::Arg;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// The op: inputs `(lead inputs…, w_0…, residuals…, [cos, sin])`, outputs `(y_0…, lead
/// value, products before their tail…)` — the lead value only for a norm or region, the
/// products before their tail only for those with one (both written only when the pieces run
/// apart); `cos` and `sin` where a product is rotated.
pub const NAME: &str = "rlx-cuda.products";

/// What the products multiply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Lead {
    /// The operand as it is: inputs `(x)`.
    Plain,
    /// `RmsNorm` along the last axis: inputs `(x, γ, β)`.
    Rms { eps: f32 },
    /// An elementwise region over inputs shaped as its output.
    Region(ElementwiseRegion),
}

impl Lead {
    fn inputs(&self) -> usize {
        match self {
            Lead::Plain => 1,
            Lead::Rms { .. } => 3,
            Lead::Region(r) => r.num_inputs as usize,
        }
    }
}

/// What follows a product as it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tail {
    None,
    /// `+ r` of the product's shape (an input of its own).
    Residual,
    /// The op's [`Fused::rope`] over the product's rows.
    Rope,
}

/// The op's attributes (JSON): the lead, each product's tail, and the rotary embedding of
/// those rotated (one for all, with the op's last two inputs as its tables).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fused {
    pub lead: Lead,
    pub tails: Vec<Tail>,
    pub rope: Option<Rope>,
}

impl Fused {
    fn parse(c: &Custom) -> Result<Fused, String> {
        serde_json::from_slice(&c.attrs).map_err(|e| format!("{}: malformed attributes: {e}", c.name))
    }

    fn prologue<'a>(&'a self, dtypes: &'a [DType]) -> Prologue<'a> {
        match &self.lead {
            Lead::Plain => Prologue::Plain,
            Lead::Rms { .. } => Prologue::Rms,
            Lead::Region(r) => Prologue::Region(r, &dtypes[..r.num_inputs as usize]),
        }
    }

    /// How many products have `tail`.
    fn with(&self, tail: Tail) -> usize {
        self.tails.iter().filter(|&&t| t == tail).count()
    }
}

/// The kernels an op of this backend's named `c` over inputs of `dtypes` launches; `None`
/// for another name.
pub(crate) fn sources(c: &Custom, dtypes: &[DType]) -> Option<Vec<Source>> {
    if c.name != NAME {
        return None;
    }
    let f = Fused::parse(c).ok().filter(|f| dtypes.len() >= f.lead.inputs())?;
    let d = c.outputs.first()?.dtype;
    // With more rows the pieces run apart: the lead's own kernels, the products, the tails'.
    let lead = match &f.lead {
        Lead::Plain => Vec::new(),
        Lead::Rms { .. } => [source::rows::norm(Norm::Rms, d), source::rows::norm_held(Norm::Rms, d, false)].into_iter().flatten().collect(),
        Lead::Region(r) => source::fused::region(r, &dtypes[..r.num_inputs as usize]).into_iter().collect(),
    };
    let rope = f.rope.as_ref().and_then(|_| source::attention::rope(d, DType::F32));
    Some(src::products(d, f.prologue(dtypes)).into_iter().chain(lead).chain(source::binary(BinaryOp::Add, d)).chain(rope).chain(src::staging(d)).collect())
}

/// Runs the op `c`: one few-row launch where it takes the rows, else the pieces in turn.
pub(crate) fn run(e: &CudaEngine, op: &Op, c: &Custom, ins: &[Arg<'_, DevMem>], outs: &[Arg<'_, DevMem>]) -> Result<(), String> {
    let f = Fused::parse(c)?;
    let (lead, count) = (f.lead.inputs(), f.tails.len());
    let (residuals, tables) = (f.with(Tail::Residual), if f.with(Tail::Rope) > 0 { 2 } else { 0 });
    let kept = usize::from(f.lead != Lead::Plain);
    let spares = count - f.with(Tail::None);
    if ins.len() != lead + count + residuals + tables || outs.len() != count + kept + spares || count == 0 || (tables > 0) != f.rope.is_some() {
        return Err(format!("{}: {} inputs and {} outputs do not fit {count} products", c.name, ins.len(), outs.len()));
    }
    let (x, rest) = ins.split_at(lead);
    let (w, rest) = rest.split_at(count);
    let (res, table) = rest.split_at(residuals);
    let d = outs[0].dtype;
    let k = x[0].dims.last().copied().unwrap_or(0);
    let m = numel(outs[0].dims) / w[0].dims.last().copied().unwrap_or(1).max(1);
    let at = |a: &Arg<'_, DevMem>| a.buf.at(a.offset);
    let mut r = res.iter();
    let products: Vec<Product> = (0..count)
        .map(|j| Product {
            w: at(&w[j]),
            out: at(&outs[j]),
            residual: if f.tails[j] == Tail::Residual { r.next().map_or(0, at) } else { 0 },
            n: w[j].dims.last().copied().unwrap_or(0),
            rotated: f.tails[j] == Tail::Rope,
        })
        .collect();
    let rotary = match (&f.rope, table) {
        (Some(rope), [cos, sin]) => Rotary {
            cos: at(cos),
            sin: at(sin),
            head_dim: rope.head_dim,
            n_rot: rope.n_rot,
            stride: cos.dims.last().copied().unwrap_or(0),
            gptj: rope.style == RopeStyle::GptJ,
        },
        _ => Rotary::default(),
    };
    let dtypes: Vec<DType> = ins.iter().map(|a| a.dtype).collect();
    if k > 0 && few_rows_take(m, k, &products, &rotary) {
        let func = e.kernel(src::products(d, f.prologue(&dtypes)), op, &dtypes)?;
        let mut pointers = [0u64; 4];
        for (p, a) in pointers.iter_mut().zip(x) {
            *p = at(a);
        }
        let eps = if let Lead::Rms { eps } = f.lead { eps } else { 0.0 };
        return few_rows(e, func, pointers, eps, &products, &rotary, (m, k));
    }
    let operand = match &f.lead {
        Lead::Plain => x[0],
        Lead::Rms { eps } => {
            rows::norm(e, op, Norm::Rms, -1, *eps, x, outs[count])?;
            outs[count]
        }
        Lead::Region(region) => {
            fuse::region(e, op, region, x, outs[count])?;
            outs[count]
        }
    };
    let (mut spare, mut r) = (outs[count + kept..].iter(), res.iter());
    for j in 0..count {
        if f.tails[j] == Tail::None {
            matmul::matmul(e, op, operand, w[j], outs[j])?;
            continue;
        }
        let Some(&p) = spare.next() else { return Err(format!("{}: product {j} has no output of its own", c.name)) };
        matmul::matmul(e, op, operand, w[j], p)?;
        match (f.tails[j], &f.rope, table) {
            (Tail::Residual, _, _) => {
                let Some(&add) = r.next() else { return Err(format!("{}: product {j} lacks its residual", c.name)) };
                e.map(source::binary(BinaryOp::Add, d), op, &[add, p], outs[j])?;
            }
            (_, Some(rope), &[cos, sin]) => attention::rope(e, op, rope.head_dim, rope.n_rot, rope.style, false, &[p, cos, sin], outs[j])?,
            _ => return Err(format!("{}: product {j} is rotated without tables", c.name)),
        }
    }
    Ok(())
}

/// What follows a product in the source graph: the node, and what it adds (the residual
/// operand) or rotates with (the embedding and its tables).
#[derive(Clone)]
enum Found {
    Residual(ValueId),
    Rope(Rope, ValueId, ValueId),
}

impl Found {
    /// The embedding and its tables, for a rotation.
    fn rope(&self) -> Option<(Rope, ValueId, ValueId)> {
        match self {
            Found::Rope(r, cos, sin) => Some((r.clone(), *cos, *sin)),
            Found::Residual(_) => None,
        }
    }
}

/// One group found in the source graph: its lead node (a norm or region, if any), products
/// and the nodes that follow them, all of these nodes, and the last of them, where the op goes.
struct Group {
    lead: Option<(NodeId, Lead)>,
    products: Vec<NodeId>,
    tails: Vec<Option<(NodeId, Found)>>,
    members: Vec<NodeId>,
    last: NodeId,
}

/// Whether `ty` is a `[M, K]` operand the few-row kernel may see: f16 / bf16, its rows
/// symbolic or few, `K` static.
fn few(ty: &TensorType) -> bool {
    let dims = ty.shape.dims();
    matches!(ty.dtype, DType::F16 | DType::BF16)
        && dims.len() == 2
        && matches!(dims[1], Dim::Static(_))
        && match &dims[0] {
            Dim::Static(m) => (1..=GEMV_ROWS).contains(m),
            Dim::Sym(_) => true,
        }
}

/// `graph` with each group of few-row products (more than a lone product) rewritten into
/// [`NAME`] ops; `None` where there is none.
pub(crate) fn rewrite(graph: &Graph) -> Option<Graph> {
    let mut users: HashMap<ValueId, Vec<NodeId>> = HashMap::new();
    for id in graph.node_ids() {
        for &v in &graph.node(id).inputs {
            users.entry(v).or_default().push(id);
        }
    }
    let outputs: HashSet<ValueId> = graph.outputs().iter().copied().collect();
    let used_by = |v: ValueId| users.get(&v).map_or(&[][..], |u| &u[..]);
    let product = |id: NodeId| -> bool {
        let node = graph.node(id);
        let (x, w) = match (&node.op, &node.inputs[..]) {
            (Op::MatMul(_), &[x, w]) => (graph.ty(x), graph.ty(w)),
            _ => return false,
        };
        let k = x.shape.dims().last().and_then(Dim::as_static);
        few(x) && w.dtype == x.dtype && node.outputs[0].dtype == x.dtype && matches!(w.shape.as_static().as_deref(), Some(&[kw, n]) if Some(kw) == k && n % 8 == 0 && n > 0)
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut grouped: HashSet<NodeId> = HashSet::new();
    for id in graph.node_ids() {
        if grouped.contains(&id) || !product(id) {
            continue;
        }
        let x = graph.node(id).inputs[0];
        let products: Vec<NodeId> = used_by(x).iter().copied().filter(|&p| !grouped.contains(&p) && product(p) && graph.node(p).inputs[0] == x).take(GROUP).collect();
        let lead = lead_of(graph, x, &products, used_by(x), outputs.contains(&x));
        let mut tails: Vec<Option<(NodeId, Found)>> = products.iter().map(|&p| tail_of(graph, p, &products, used_by(ValueId::new(p, 0)), outputs.contains(&ValueId::new(p, 0)))).collect();
        // One embedding and one pair of tables for the op: the first rotated product's.
        let first = tails.iter().flatten().find_map(|(_, f)| f.rope());
        for t in &mut tails {
            if t.as_ref().is_some_and(|(_, f)| f.rope().is_some_and(|r| Some(r) != first)) {
                *t = None;
            }
        }
        if lead.is_none() && products.len() == 1 && tails[0].is_none() {
            continue;
        }
        let members: Vec<NodeId> = lead.iter().map(|(n, _)| *n).chain(products.iter().copied()).chain(tails.iter().flatten().map(|(a, _)| *a)).collect();
        let last = members.iter().copied().max_by_key(|n| n.index()).unwrap_or(id);
        // The op stands at the group's last node: nothing outside it may read a member's
        // result before then.
        let early = members.iter().any(|&n| (0..graph.node(n).outputs.len() as u32).any(|o| used_by(ValueId::new(n, o)).iter().any(|u| !members.contains(u) && u.index() < last.index())));
        if early {
            continue;
        }
        grouped.extend(&products);
        groups.push(Group { lead, products, tails, members, last });
    }
    if groups.is_empty() {
        return None;
    }
    build(graph, &groups)
}

/// What follows product `p` (its result read by `users` alone, not a graph output) that the
/// op can apply as it writes it: a residual add of another value (not one of the group's
/// `products`), or a rotary embedding over whole heads of 256-column tiles with f32 tables of
/// a row per position.
fn tail_of(graph: &Graph, p: NodeId, products: &[NodeId], users: &[NodeId], output: bool) -> Option<(NodeId, Found)> {
    let (&[user], false) = (users, output) else { return None };
    let y = ValueId::new(p, 0);
    let ty = graph.ty(y);
    let node = graph.node(user);
    if node.outputs[0] != *ty {
        return None;
    }
    let found = match (&node.op, &node.inputs[..]) {
        (Op::Binary(b), &[a, c]) if b.op == BinaryOp::Add && a != c => {
            let other = if a == y { c } else { a };
            (graph.ty(other) == ty && !products.contains(&other.node)).then_some(Found::Residual(other))?
        }
        (Op::Rope(r), &[x, cos, sin]) if x == y => {
            let (dims, table) = (ty.shape.dims(), graph.ty(cos));
            let n = dims.last()?.as_static()?;
            let rows = table.shape.dims();
            let heads = whole_heads(n, r.head_dim, r.n_rot);
            let tables = table.dtype == DType::F32 && graph.ty(sin) == table && rows.len() == 2 && rows[0] == dims[0] && rows[1] == Dim::Static(r.n_rot / 2);
            (heads && tables).then(|| Found::Rope(r.clone(), cos, sin))?
        }
        _ => return None,
    };
    Some((user, found))
}

/// How the products over `x` can take its producer in: an RMSNorm along the last axis or an
/// elementwise region whose inputs are shaped as `x`, read by these products alone.
fn lead_of(graph: &Graph, x: ValueId, products: &[NodeId], users: &[NodeId], output: bool) -> Option<(NodeId, Lead)> {
    if output || users.len() != products.len() {
        return None;
    }
    let node = graph.node(x.node);
    let ty = graph.ty(x);
    let k = ty.shape.dims().last()?.as_static()?;
    let alike = |v: &ValueId| graph.ty(*v) == ty;
    let lead = match &node.op {
        Op::RmsNorm(n) => {
            let vector = |v: &ValueId| graph.ty(*v).dtype == ty.dtype && graph.ty(*v).shape.as_static() == Some(vec![k]);
            let last = n.axis == -1 || n.axis == 1;
            (last && !n.flatten_leading && node.inputs.len() == 3 && alike(&node.inputs[0]) && node.inputs[1..].iter().all(vector)).then_some(Lead::Rms { eps: n.eps })?
        }
        Op::ElementwiseRegion(r) => {
            let dtypes: Vec<DType> = node.inputs.iter().map(|&v| graph.ty(v).dtype).collect();
            let plain = r.prologue == RegionPrologue::None && r.scalar_input_mask == 0 && r.input_modulus.iter().all(|&m| m == 0);
            let out = chain_dtypes(&r.chain, &dtypes).ok()?.last().copied();
            let shaped = node.inputs.iter().all(|v| graph.ty(*v).shape == ty.shape);
            (plain && shaped && dtypes.len() <= 4 && out == Some(ty.dtype) && src::products(ty.dtype, Prologue::Region(r, &dtypes)).is_some()).then(|| Lead::Region(r.clone()))?
        }
        _ => return None,
    };
    Some((x.node, lead))
}

/// The source graph with each group replaced by one op, placed at the group's last node (the
/// group's earlier nodes skipped until then).
fn build(graph: &Graph, groups: &[Group]) -> Option<Graph> {
    let at: HashMap<NodeId, &Group> = groups.iter().map(|g| (g.last, g)).collect();
    let waiting: HashSet<NodeId> = groups.iter().flat_map(|g| g.members.iter().copied().filter(|&n| n != g.last)).collect();
    let mut rw = Rewriter::new(graph);
    for id in graph.node_ids() {
        let Some(g) = at.get(&id) else {
            if waiting.contains(&id) {
                rw.skip(id);
            } else {
                rw.keep(id);
            }
            continue;
        };
        let (lead, mut inputs) = match &g.lead {
            Some((n, lead)) => (lead.clone(), graph.node(*n).inputs.clone()),
            None => (Lead::Plain, vec![graph.node(g.products[0]).inputs[0]]),
        };
        inputs.extend(g.products.iter().map(|&p| graph.node(p).inputs[1]));
        inputs.extend(g.tails.iter().flatten().filter_map(|(_, f)| if let Found::Residual(r) = f { Some(*r) } else { None }));
        let rope = g.tails.iter().flatten().find_map(|(_, f)| f.rope());
        if let Some((_, cos, sin)) = &rope {
            inputs.extend([*cos, *sin]);
        }
        let ty = |n: NodeId| graph.node(n).outputs[0].clone();
        let mut outputs: Vec<TensorType> = g.products.iter().map(|&p| ty(p)).collect();
        outputs.extend(g.lead.iter().map(|(n, _)| ty(*n)));
        outputs.extend(g.products.iter().zip(&g.tails).filter(|(_, t)| t.is_some()).map(|(&p, _)| ty(p)));
        let tails = g.tails.iter().map(|t| match t {
            None => Tail::None,
            Some((_, Found::Residual(_))) => Tail::Residual,
            Some((_, Found::Rope(..))) => Tail::Rope,
        });
        let attrs = serde_json::to_vec(&Fused { lead, tails: tails.collect(), rope: rope.map(|(r, _, _)| r) }).ok()?;
        let inputs: Vec<ValueId> = inputs.iter().map(|&v| rw.map(v)).collect();
        let op = Custom { name: NAME.into(), num_inputs: inputs.len() as u32, attrs, outputs: outputs.clone() };
        let new = rw.graph().push(Node { op: Op::Custom(op), inputs, outputs });
        let value = |i: usize| vec![ValueId::new(new, i as u32)];
        let count = g.products.len();
        let mut stands: Vec<(NodeId, Vec<ValueId>)> = g.lead.iter().map(|(n, _)| (*n, value(count))).collect();
        let mut spare = count + usize::from(g.lead.is_some());
        for (j, (&p, tail)) in g.products.iter().zip(&g.tails).enumerate() {
            match tail {
                Some((t, _)) => {
                    stands.extend([(p, value(spare)), (*t, value(j))]);
                    spare += 1;
                }
                None => stands.push((p, value(j))),
            }
        }
        for (n, values) in stands {
            if n == id {
                rw.replace(n, values).ok()?;
            } else {
                rw.fill(n, values).ok()?;
            }
        }
    }
    Some(rw.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::elementwise::ActivationKind;
    use rlx_ir::ops::fused::{ChainStep, Operand};
    use rlx_ir::Shape;

    /// A decoder layer's products over `[rows, 64]` bf16 activations: RMSNorm → Q, K, V, the
    /// first two rotated; the output product plus the residual; RMSNorm → gate, up; SiLU(gate)·up (a region) → down
    /// plus the residual. Each weight enters the graph just before its product, as a model's
    /// builder adds them.
    fn layer(rows: Dim) -> Graph {
        let mut g = Graph::new();
        let ty = |dims: Vec<Dim>| TensorType::new(DType::BF16, Shape::new(dims));
        let s = |n: usize| Dim::Static(n);
        let x = g.input("x", ty(vec![rows.clone(), s(64)]));
        let norm = |g: &mut Graph, x: ValueId, name: &str| {
            let (gamma, beta) = (g.input(&format!("{name}.g"), ty(vec![s(64)])), g.input(&format!("{name}.b"), ty(vec![s(64)])));
            g.rms_norm(x, gamma, beta, -1, 1e-5).unwrap()
        };
        let linear = |g: &mut Graph, x: ValueId, name: &str, n: usize| {
            let k = g.ty(x).shape.dims()[1].as_static().unwrap();
            let w = g.input(name, ty(vec![s(k), s(n)]));
            g.matmul(x, w).unwrap()
        };
        let table = |g: &mut Graph, name: &str| g.input(name, TensorType::new(DType::F32, Shape::new(vec![rows.clone(), s(8)])));
        let (cos, sin) = (table(&mut g, "cos"), table(&mut g, "sin"));
        let a = norm(&mut g, x, "attn_norm");
        let (q, k, v) = (linear(&mut g, a, "q", 64), linear(&mut g, a, "k", 32), linear(&mut g, a, "v", 32));
        let rope = Rope { head_dim: 16, n_rot: 16, style: RopeStyle::NeoX };
        let (q, k) = (g.rope(rope.clone(), q, cos, sin).unwrap(), g.rope(rope, k, cos, sin).unwrap());
        let o = linear(&mut g, q, "o", 64);
        let x = g.binary(BinaryOp::Add, x, o).unwrap();
        let f = norm(&mut g, x, "ffn_norm");
        let (gate, up) = (linear(&mut g, f, "gate", 128), linear(&mut g, f, "up", 128));
        let chain = vec![ChainStep::Activation(ActivationKind::Silu, Operand::Input(0)), ChainStep::Binary(BinaryOp::Mul, Operand::Step(0), Operand::Input(1))];
        let h = g.elementwise_region(chain, &[gate, up], None).unwrap();
        let down = linear(&mut g, h, "down", 64);
        let y = g.binary(BinaryOp::Add, x, down).unwrap();
        g.set_outputs(vec![y, k, v]).unwrap();
        g
    }

    fn fused(g: &Graph) -> Vec<(Fused, usize, usize)> {
        g.nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Custom(c) if c.name == NAME => Some((Fused::parse(c).unwrap(), n.inputs.len(), n.outputs.len())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_decoder_layer_becomes_four_launches() {
        let out = rewrite(&layer(Dim::sym("S"))).expect("rewritten");
        rlx_ir::verify(&out).expect("the rewritten graph verifies");
        let ops = fused(&out);
        let leads: Vec<&Lead> = ops.iter().map(|(f, _, _)| &f.lead).collect();
        assert!(matches!(leads[..], [Lead::Rms { .. }, Lead::Plain, Lead::Rms { .. }, Lead::Region(_)]), "{leads:?}");
        let tails: Vec<&[Tail]> = ops.iter().map(|(f, _, _)| &f.tails[..]).collect();
        use Tail::{None as Plain, Residual, Rope as Rotated};
        assert_eq!(tails, [&[Rotated, Rotated, Plain][..], &[Residual], &[Plain, Plain], &[Residual]]);
        assert_eq!(ops[0].0.rope.as_ref().map(|r| r.head_dim), Some(16));
        // (x, γ, β, 3 weights, cos, sin) → 3 results, the norm and 2 unrotated products;
        // (q, w_o, x) → the sum and the product.
        assert_eq!(ops.iter().map(|&(_, i, o)| (i, o)).collect::<Vec<_>>(), [(8, 6), (3, 2), (5, 3), (4, 3)]);
        assert!(!out.nodes().iter().any(|n| matches!(n.op, Op::MatMul(_) | Op::RmsNorm(_) | Op::ElementwiseRegion(_) | Op::Binary(_) | Op::Rope(_))), "every product, norm, region, add and rotation is inside");
    }

    #[test]
    fn products_of_many_rows_or_shared_operands_are_left_alone() {
        assert!(rewrite(&layer(Dim::Static(64))).is_none(), "64 rows go to cuBLAS");
        let out = rewrite(&layer(Dim::Static(3))).expect("three rows are few");
        assert_eq!(fused(&out).len(), 4);
        let mut g = Graph::new();
        let ty = |dims: &[usize]| TensorType::new(DType::BF16, Shape::of(dims));
        let x = g.input("x", ty(&[1, 64]));
        let (gamma, beta, w) = (g.input("g", ty(&[64])), g.input("b", ty(&[64])), g.input("w", ty(&[64, 64])));
        let a = g.rms_norm(x, gamma, beta, -1, 1e-5).unwrap();
        let y = g.matmul(a, w).unwrap();
        g.set_outputs(vec![y, a]).unwrap();
        assert!(rewrite(&g).is_none(), "the norm is an output itself, and a lone product gains nothing");
        let mut g = Graph::new();
        let x = g.input("x", ty(&[1, 64]));
        let (w, odd) = (g.input("w", ty(&[64, 64])), g.input("odd", ty(&[64, 12])));
        let (y, z) = (g.matmul(x, w).unwrap(), g.matmul(x, odd).unwrap());
        let y = g.binary(BinaryOp::Add, y, y).unwrap();
        g.set_outputs(vec![y, z]).unwrap();
        assert!(rewrite(&g).is_none(), "12 columns are no multiple of 8, and y + y adds no residual");
        let mut g = Graph::new();
        let x = g.input("x", ty(&[1, 64]));
        let w0 = g.input("w0", ty(&[64, 64]));
        let p0 = g.matmul(x, w0).unwrap();
        let early = g.activation(ActivationKind::Relu, p0).unwrap();
        let w1 = g.input("w1", ty(&[64, 64]));
        let p1 = g.matmul(x, w1).unwrap();
        g.set_outputs(vec![early, p1]).unwrap();
        assert!(rewrite(&g).is_none(), "the first product is read before the second is made");
    }

    #[test]
    fn malformed_attributes_are_an_error() {
        let c = Custom { name: NAME.into(), num_inputs: 2, attrs: b"{".to_vec(), outputs: vec![] };
        assert!(Fused::parse(&c).unwrap_err().contains(NAME));
        assert!(sources(&c, &[DType::BF16]).is_none());
    }
}
