//! Host fallback: splitting a legalized graph into segments that run on the device and
//! segments that run on the host (the kinds the device does not claim), in node order, with
//! the values that cross between them made explicit.
//!
//! Each segment is a graph of its own: values it reads from earlier segments or from the
//! graph's inputs become its `Input`s (named `%node.output` for inner values, or the graph
//! input's own name), the parameters it reads are its `Param`s under their own names, the
//! constants it reads are copied in, and the values that later segments or the graph's
//! outputs read are its outputs. A value produced on one side and read on the other is a
//! [`Transfer`].

use rlx_ir::ops::source::Input;
use rlx_ir::{Graph, IrError, Node, NodeId, Op, TensorType, ValueId};
use std::collections::HashMap;
use std::fmt;

/// Where a segment runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    Device,
    Host,
}

/// Where a segment input's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The graph input at this index of `Graph::inputs()`.
    Input(usize),
    /// A value of the source graph, an output of an earlier segment.
    Value(ValueId),
}

/// A run of consecutive nodes on one side.
#[derive(Clone, Debug)]
pub struct Segment {
    pub place: Place,
    pub graph: Graph,
    /// Per `Input` of `graph` (in `Graph::inputs()` order), where its value comes from.
    pub inputs: Vec<Source>,
    /// Per output of `graph`, the source-graph value it is.
    pub outputs: Vec<ValueId>,
    /// Per node of `graph`, the source-graph node it runs (`None` for its own sources).
    pub origin: Vec<Option<NodeId>>,
}

impl Segment {
    /// How many source-graph nodes it runs.
    pub fn len(&self) -> usize {
        self.origin.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A value read on the other side from where it is made.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    pub value: ValueId,
    pub ty: TensorType,
    pub from: Place,
    /// The segment that reads it.
    pub to_segment: usize,
}

/// The segments of a graph, in the order they run.
#[derive(Clone, Debug)]
pub struct Partition {
    pub segments: Vec<Segment>,
    pub transfers: Vec<Transfer>,
}

/// Splits `g` where `place` changes between consecutive non-source nodes.
pub fn partition(g: &Graph, place: &dyn Fn(NodeId) -> Place) -> Result<Partition, IrError> {
    let mut runs: Vec<(Place, Vec<NodeId>)> = Vec::new();
    let mut segment_of = vec![None; g.len()];
    for id in g.node_ids() {
        if matches!(g.node(id).op, Op::Input(_) | Op::Param(_) | Op::Constant(_)) {
            continue;
        }
        let p = place(id);
        match runs.last_mut() {
            Some((q, nodes)) if *q == p => nodes.push(id),
            _ => runs.push((p, vec![id])),
        }
        segment_of[id.index()] = Some(runs.len() - 1);
    }
    let input_index: HashMap<NodeId, usize> = g.inputs().iter().enumerate().map(|(i, (_, v))| (v.node, i)).collect();
    // Values each segment must hand on: read by a later segment or a graph output.
    let mut handed: Vec<Vec<ValueId>> = vec![Vec::new(); runs.len()];
    let mut hand = |v: ValueId, reader: Option<usize>| {
        if let Some(s) = segment_of[v.node.index()] {
            if reader != Some(s) && !handed[s].contains(&v) {
                handed[s].push(v);
            }
        }
    };
    for (s, (_, nodes)) in runs.iter().enumerate() {
        for &id in nodes {
            g.node(id).inputs.iter().for_each(|&v| hand(v, Some(s)));
        }
    }
    g.outputs().iter().for_each(|&v| hand(v, None));
    let mut segments = Vec::with_capacity(runs.len());
    let mut transfers = Vec::new();
    for (s, (place, nodes)) in runs.into_iter().enumerate() {
        let mut sub = Graph::new();
        let mut map: HashMap<ValueId, ValueId> = HashMap::new();
        let mut inputs = Vec::new();
        let mut origin = Vec::new();
        for &id in &nodes {
            let node = g.node(id);
            let mut new_inputs = Vec::with_capacity(node.inputs.len());
            for &v in &node.inputs {
                if let Some(&m) = map.get(&v) {
                    new_inputs.push(m);
                    continue;
                }
                let ty = g.ty(v).clone();
                let m = match &g.node(v.node).op {
                    Op::Param(p) => sub.param(&p.name, ty),
                    Op::Constant(c) => sub.constant(ty, c.data.clone())?,
                    Op::Input(i) => {
                        if place == Place::Device {
                            transfers.push(Transfer { value: v, ty: ty.clone(), from: Place::Host, to_segment: s });
                        }
                        inputs.push(Source::Input(input_index[&v.node]));
                        sub.input(&i.name, ty)
                    }
                    _ => {
                        let from = segment_of[v.node.index()].map(|_| place_of(&segments, v));
                        if let Some(from) = from.filter(|&f| f != place) {
                            transfers.push(Transfer { value: v, ty: ty.clone(), from, to_segment: s });
                        }
                        inputs.push(Source::Value(v));
                        sub.push(Node { op: Op::Input(Input { name: v.to_string(), ty: ty.clone() }), inputs: Vec::new(), outputs: vec![ty] }).into()
                    }
                };
                origin.resize(sub.len(), None);
                map.insert(v, m);
                new_inputs.push(m);
            }
            let new = sub.push(Node { op: node.op.clone(), inputs: new_inputs, outputs: node.outputs.clone() });
            origin.push(Some(id));
            for o in 0..node.outputs.len() as u32 {
                map.insert(ValueId::new(id, o), ValueId::new(new, o));
            }
        }
        let outputs = std::mem::take(&mut handed[s]);
        sub.set_outputs(outputs.iter().map(|v| map[v]).collect())?;
        segments.push(Segment { place, graph: sub, inputs, outputs, origin });
    }
    for &v in g.outputs() {
        if let Some(s) = segment_of[v.node.index()] {
            if segments[s].place == Place::Device {
                transfers.push(Transfer { value: v, ty: g.ty(v).clone(), from: Place::Device, to_segment: segments.len() });
            }
        }
    }
    Ok(Partition { segments, transfers })
}

/// The place of the segment that makes `v` (an earlier segment's output).
fn place_of(segments: &[Segment], v: ValueId) -> Place {
    segments.iter().find(|s| s.outputs.contains(&v)).map_or(Place::Host, |s| s.place)
}

impl Partition {
    /// Whether everything runs on one side.
    pub fn is_single(&self) -> bool {
        self.segments.len() <= 1
    }
}

/// One line per segment (side, node count, kinds), then one per transfer.
impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "segments:")?;
        for (i, s) in self.segments.iter().enumerate() {
            let mut kinds: Vec<&str> = s.graph.nodes().iter().filter(|n| !matches!(n.op, Op::Input(_) | Op::Param(_) | Op::Constant(_))).map(|n| n.op.kind().name()).collect();
            kinds.sort_unstable();
            kinds.dedup();
            writeln!(f, "  #{i} {:?}: {} nodes ({})", s.place, s.len(), kinds.join(", "))?;
        }
        writeln!(f, "transfers:")?;
        for t in &self.transfers {
            let to = if t.to_segment == self.segments.len() { "outputs".to_string() } else { format!("#{}", t.to_segment) };
            let bytes = t.ty.shape.numel().map_or("per run".to_string(), |n| format!("{} bytes", n * t.ty.dtype.size()));
            writeln!(f, "  {} {} {:?} → {to}: {bytes}", t.value, t.ty, t.from)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::text::parse;

    /// A three-layer chain whose middle op runs on the host.
    const SRC: &str = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",4]))()
%1 = Param(name:\"w\",ty:(dtype:F32,shape:[4,4]))()
%2 = MatMul()(%0, %1)
%3 = Activation(kind:Erf)(%2)
%4 = MatMul()(%3, %1)
%5 = Binary(op:Add)(%4, %2)
return %5, %3";

    fn host_erf(g: &Graph) -> impl Fn(NodeId) -> Place + '_ {
        |id| if matches!(&g.node(id).op, Op::Activation(_)) { Place::Host } else { Place::Device }
    }

    #[test]
    fn segments_follow_the_placement_and_hand_on_what_later_ones_read() {
        let g = parse(SRC).unwrap();
        let p = partition(&g, &host_erf(&g)).unwrap();
        let places: Vec<Place> = p.segments.iter().map(|s| s.place).collect();
        assert_eq!(places, vec![Place::Device, Place::Host, Place::Device]);
        let (v2, v3) = (ValueId::new(NodeId(2), 0), ValueId::new(NodeId(3), 0));
        assert_eq!(p.segments[0].outputs, vec![v2], "%2 is read by the host and by the last segment");
        assert_eq!(p.segments[1].inputs, vec![Source::Value(v2)]);
        assert_eq!(p.segments[1].outputs, vec![v3]);
        assert_eq!(p.segments[2].inputs, vec![Source::Value(v3), Source::Value(v2)]);
        assert_eq!(p.segments[2].graph.params().len(), 1, "the weight is a parameter of each segment that reads it");
        assert_eq!(p.segments[0].inputs, vec![Source::Input(0)]);
        let text = p.segments[2].graph.to_string();
        assert!(text.contains("Input(name:\"%3\""), "{text}");
        assert_eq!(p.segments.iter().map(Segment::len).sum::<usize>(), 4);
    }

    #[test]
    fn transfers_list_every_crossing_value_with_its_type() {
        let g = parse(SRC).unwrap();
        let p = partition(&g, &host_erf(&g)).unwrap();
        let crossing: Vec<(String, Place, usize)> = p.transfers.iter().map(|t| (t.value.to_string(), t.from, t.to_segment)).collect();
        assert_eq!(
            crossing,
            vec![("%0".into(), Place::Host, 0), ("%2".into(), Place::Device, 1), ("%3".into(), Place::Host, 2), ("%5".into(), Place::Device, 3)]
        );
        let text = p.to_string();
        assert!(text.contains("#1 Host: 1 nodes (Activation)"), "{text}");
        assert!(text.contains("%2 f32[B, 4] Device → #1: per run"), "{text}");
    }

    #[test]
    fn one_side_is_one_segment() {
        let g = parse(SRC).unwrap();
        let p = partition(&g, &|_| Place::Device).unwrap();
        assert!(p.is_single());
        assert_eq!(p.segments[0].graph.outputs().len(), 2);
    }
}
