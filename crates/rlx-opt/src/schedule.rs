//! Scheduling a specialized graph for any backend: which values live in the arena (placed by
//! liveness), which are parameters or constants, which nodes run once for many runs
//! (hoisted), which update graph state in place, and which operand a kernel takes prepared.
//!
//! The plan is backend-neutral: a backend answers only which operand of a node its kernel
//! takes laid out ahead of time, and gives the arena's alignment. Effects come from the IR
//! (`OpDef::mutated_inputs`, `aliased_outputs`, `written_back`, `fresh`).
//!
//! Graph state: a node's first mutated input that is a parameter, and that its `written_back`
//! pairs do not cover, is updated in place by the kernel ([`Step::state`]); an output aliased
//! to it is that parameter itself. A written-back output is copied into its parameter after
//! the step ([`Step::write_back`]). Either way the update persists across runs.
//!
//! Hoisting: a node computed from parameters and constants alone (a weight transposed or cast
//! for its consumer) runs once, before the first run, and again only after a parameter
//! changes; its outputs are held as constants. Parameters that some node updates are not
//! fixed, and `fresh` ops and nodes without operands are never hoisted.

use crate::memory::{self, Interval};
use rlx_ir::{DType, Graph, IrError, NodeId, Op, ValueId};

/// Where a value's bytes live during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// `len` bytes at `offset` of the plan's arena.
    Arena { offset: usize, len: usize },
    /// The parameter at this index of `Graph::params()`.
    Param(usize),
    /// The constant at this index of [`Schedule::consts`].
    Const(usize),
}

/// One value of the plan: its storage, dtype and concrete dims.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub slot: Slot,
    pub dtype: DType,
    pub dims: Vec<usize>,
}

impl Value {
    pub fn bytes(&self) -> usize {
        self.dims.iter().product::<usize>() * self.dtype.size()
    }
}

/// One kernel call.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub node: NodeId,
    /// `(operand, parameter)`: the parameter this node's kernel updates in place.
    pub state: Option<(usize, usize)>,
    /// `(operand, slot)`: the parameter or constant operand the kernel takes prepared.
    pub weight: Option<(usize, Slot)>,
    /// `(output, parameter)`: outputs copied into their parameter after the call.
    pub write_back: Vec<(usize, usize)>,
}

/// Everything one concrete set of input shapes needs, for any backend.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Per node, per output.
    pub values: Vec<Vec<Value>>,
    /// The kernel calls of a run, in order.
    pub steps: Vec<Step>,
    /// Calls made once before the first run and again after a parameter changes; their
    /// outputs are constants.
    pub hoisted: Vec<Step>,
    /// The `Input` nodes in `Graph::inputs()` order.
    pub inputs: Vec<NodeId>,
    /// The value each constant holds: a `Constant` node's output (its literal data) or a
    /// hoisted step's output.
    pub consts: Vec<ValueId>,
    /// Arena bytes.
    pub arena: usize,
    /// Parameters read other than as a prepared weight (by a step, a hoisted step or as an
    /// output): a backend keeps these as given even when it also holds them prepared.
    pub unprepared_params: Vec<usize>,
}

/// What a backend says about the operands of one node: the index of the operand its kernel
/// takes prepared, given each operand's dtype and dims.
pub type Prepares<'a> = &'a dyn Fn(&Op, &[(DType, &[usize])]) -> Option<usize>;

impl Schedule {
    /// The value `v` of the plan.
    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v.node.index()][v.output as usize]
    }

    /// Plans `g`, whose every type must be static (a specialized graph), with arena offsets
    /// aligned to `align` bytes.
    pub fn plan(g: &Graph, align: usize, prepares: Prepares) -> Result<Schedule, IrError> {
        let mut values: Vec<Vec<Value>> = Vec::with_capacity(g.len());
        let mut steps = Vec::new();
        let mut hoisted = Vec::new();
        let mut inputs = Vec::new();
        let mut consts = Vec::new();
        let mut intervals = Vec::new();
        let mut interval_of: Vec<Vec<Option<usize>>> = Vec::with_capacity(g.len());
        let mut params = 0;
        let updated = updated_params(g);
        let mut fixed = vec![false; g.len()];
        for id in g.node_ids() {
            let node = g.node(id);
            let def = node.op.def();
            let (state, write_back) = state_of(g, id, &values)?;
            let hoist = !node.inputs.is_empty()
                && !def.fresh()
                && def.mutated_inputs().is_empty()
                && !matches!(node.op, Op::Input(_) | Op::Param(_) | Op::Constant(_))
                && node.inputs.iter().all(|v| fixed[v.node.index()]);
            fixed[id.index()] = match node.op {
                Op::Param(_) => !updated.contains(&id),
                Op::Constant(_) => true,
                _ => hoist,
            };
            let aliased = match state {
                Some((operand, p)) => def.aliased_outputs(node.inputs.len()).into_iter().filter(|&(_, i)| i == operand).map(|(o, _)| (o, p)).collect(),
                None => Vec::new(),
            };
            let step = steps.len();
            let mut node_values = Vec::with_capacity(node.outputs.len());
            let mut node_iv = Vec::with_capacity(node.outputs.len());
            for (o, ty) in node.outputs.iter().enumerate() {
                let dims = ty.shape.as_static().ok_or_else(|| {
                    IrError::Invalid(format!("node %{} ({}) has the symbolic type {ty} after specialization", id.0, node.op.kind()))
                })?;
                let slot = match &node.op {
                    Op::Param(_) => {
                        params += 1;
                        Some(Slot::Param(params - 1))
                    }
                    Op::Constant(_) => {
                        consts.push(ValueId::new(id, o as u32));
                        Some(Slot::Const(consts.len() - 1))
                    }
                    _ if hoist => {
                        consts.push(ValueId::new(id, o as u32));
                        Some(Slot::Const(consts.len() - 1))
                    }
                    _ => aliased.iter().find(|&&(out, _)| out == o).map(|&(_, p)| Slot::Param(p)),
                };
                let slot = slot.unwrap_or_else(|| {
                    let len = dims.iter().product::<usize>() * ty.dtype.size();
                    // Inputs are copied in before the first step, so they are live from step 0.
                    let first = if matches!(node.op, Op::Input(_)) { 0 } else { step };
                    intervals.push(Interval { size: len, first, last: step });
                    Slot::Arena { offset: 0, len }
                });
                node_iv.push(matches!(slot, Slot::Arena { .. }).then(|| intervals.len() - 1));
                node_values.push(Value { slot, dtype: ty.dtype, dims });
            }
            values.push(node_values);
            interval_of.push(node_iv);
            match node.op {
                Op::Input(_) => inputs.push(id),
                Op::Param(_) | Op::Constant(_) => {}
                _ => {
                    let weight = weight_of(g, id, &values, prepares).filter(|&(i, _)| !updated.contains(&node.inputs[i].node));
                    let call = Step { node: id, state, weight, write_back };
                    if hoist {
                        hoisted.push(call);
                    } else {
                        steps.push(call);
                    }
                }
            }
            for v in &node.inputs {
                if let Some(i) = interval_of[v.node.index()][v.output as usize] {
                    intervals[i].last = intervals[i].last.max(step);
                }
            }
        }
        for v in g.outputs() {
            if let Some(i) = interval_of[v.node.index()][v.output as usize] {
                intervals[i].last = steps.len();
            }
        }
        let placed = memory::plan(&intervals, align);
        for (node_values, ivs) in values.iter_mut().zip(&interval_of) {
            for (value, iv) in node_values.iter_mut().zip(ivs) {
                if let (Slot::Arena { offset, .. }, Some(i)) = (&mut value.slot, iv) {
                    *offset = placed.offsets[*i];
                }
            }
        }
        let mut s = Schedule { values, steps, hoisted, inputs, consts, arena: placed.size, unprepared_params: Vec::new() };
        s.unprepared_params = s.params_read_unprepared(g);
        Ok(s)
    }

    /// The parameters a step reads other than as its prepared weight, or an output returns.
    fn params_read_unprepared(&self, g: &Graph) -> Vec<usize> {
        let mut out = Vec::new();
        let mut read = |v: &ValueId| {
            if let Slot::Param(p) = self.value(*v).slot {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        };
        for step in self.steps.iter().chain(&self.hoisted) {
            let node = g.node(step.node);
            for (i, v) in node.inputs.iter().enumerate() {
                if step.weight.is_none_or(|(w, _)| w != i) {
                    read(v);
                }
            }
        }
        g.outputs().iter().for_each(read);
        out
    }
}

/// The `Param` nodes some node updates (in place or by write-back).
fn updated_params(g: &Graph) -> Vec<NodeId> {
    let mut out = Vec::new();
    for node in g.nodes() {
        for i in node.op.def().mutated_inputs() {
            if let Some(v) = node.inputs.get(i) {
                if matches!(g.node(v.node).op, Op::Param(_)) && !out.contains(&v.node) {
                    out.push(v.node);
                }
            }
        }
    }
    out
}

/// A node's in-place state and write-backs: its first mutated input that is a parameter and
/// has no write-back (updated by the kernel), and its written-back outputs whose input is a
/// parameter. A node that also reads its state through another operand is an error.
#[allow(clippy::type_complexity)]
fn state_of(g: &Graph, id: NodeId, values: &[Vec<Value>]) -> Result<(Option<(usize, usize)>, Vec<(usize, usize)>), IrError> {
    let node = g.node(id);
    let def = node.op.def();
    let param_at = |i: usize| match node.inputs.get(i).map(|v| values[v.node.index()][v.output as usize].slot) {
        Some(Slot::Param(p)) => Some(p),
        _ => None,
    };
    let written = def.written_back();
    let mut state = None;
    for i in def.mutated_inputs() {
        let Some(p) = param_at(i) else { continue };
        let v = node.inputs[i];
        if node.inputs.iter().enumerate().any(|(j, w)| j != i && w.node == v.node) {
            return Err(IrError::Invalid(format!("node %{} ({}) reads the state it updates as another operand", id.0, node.op.kind())));
        }
        if state.is_none() && !written.iter().any(|&(_, w)| w == i) {
            state = Some((i, p));
        }
    }
    let write_back = written.into_iter().filter_map(|(o, i)| Some((o, param_at(i)?))).collect();
    Ok((state, write_back))
}

/// The operand a backend takes prepared, when it is a parameter or constant.
fn weight_of(g: &Graph, id: NodeId, values: &[Vec<Value>], prepares: Prepares) -> Option<(usize, Slot)> {
    let node = g.node(id);
    let operands: Vec<(DType, &[usize])> = node.inputs.iter().map(|v| {
        let value = &values[v.node.index()][v.output as usize];
        (value.dtype, value.dims.as_slice())
    }).collect();
    let i = prepares(&node.op, &operands)?;
    let v = node.inputs.get(i)?;
    let slot = values[v.node.index()][v.output as usize].slot;
    matches!(slot, Slot::Param(_) | Slot::Const(_)).then_some((i, slot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::text::parse;

    fn none(_: &Op, _: &[(DType, &[usize])]) -> Option<usize> {
        None
    }

    /// Takes operand 1 of every MatMul prepared.
    fn matmul_b(op: &Op, _: &[(DType, &[usize])]) -> Option<usize> {
        matches!(op, Op::MatMul(_)).then_some(1)
    }

    fn plan(src: &str, align: usize, prepares: Prepares) -> (Graph, Schedule) {
        let g = parse(src).unwrap();
        let s = Schedule::plan(&g, align, prepares).unwrap();
        (g, s)
    }

    #[test]
    fn weight_only_nodes_are_hoisted_and_prepared_as_constants() {
        let (_, s) = plan(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[16,8]))()
%1 = Param(name:\"w\",ty:(dtype:F32,shape:[4,8]))()
%2 = Transpose(perm:[1,0])(%1)
%3 = MatMul()(%0, %2)
%4 = Activation(kind:Relu)(%3)
return %4",
            64,
            &matmul_b,
        );
        assert_eq!(s.hoisted.iter().map(|h| h.node.0).collect::<Vec<_>>(), vec![2]);
        assert_eq!(s.steps.iter().map(|h| h.node.0).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(s.consts, vec![ValueId::new(NodeId(2), 0)]);
        assert_eq!(s.steps[0].weight, Some((1, Slot::Const(0))));
        assert_eq!(s.value(ValueId::new(NodeId(1), 0)).slot, Slot::Param(0));
        assert!(s.unprepared_params.contains(&0), "the hoisted transpose reads w as given");
    }

    #[test]
    fn a_parameter_read_only_prepared_is_not_listed_unprepared() {
        let (_, s) = plan(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[16,8]))()
%1 = Param(name:\"w\",ty:(dtype:F32,shape:[8,4]))()
%2 = MatMul()(%0, %1)
return %2",
            64,
            &matmul_b,
        );
        assert_eq!(s.steps[0].weight, Some((1, Slot::Param(0))));
        assert!(s.unprepared_params.is_empty());
    }

    #[test]
    fn kv_append_updates_its_parameter_in_place_and_aliases_the_cache() {
        let (_, s) = plan(
            "%0 = Input(name:\"row\",ty:(dtype:F32,shape:[1,2,3]))()
%1 = Input(name:\"at\",ty:(dtype:I64,shape:[1]))()
%2 = Param(name:\"cache\",ty:(dtype:F32,shape:[1,8,3]))()
%3 = KvAppend(axis:1,pos:0)(%2, %0, %1)
%4 = Reduce(op:Sum,axes:[1],keep_dim:false)(%3)
return %4",
            64,
            &none,
        );
        assert_eq!(s.steps[0].state, Some((0, 0)));
        assert_eq!(s.value(ValueId::new(NodeId(3), 0)).slot, Slot::Param(0), "the output is the cache itself");
        assert!(s.hoisted.is_empty(), "state is not fixed, so nothing downstream is hoisted");
    }

    #[test]
    fn reading_the_state_twice_is_an_error() {
        let g = parse(
            "%0 = Param(name:\"cache\",ty:(dtype:F32,shape:[1,1,3]))()
%1 = KvAppend(axis:1,pos:0)(%0, %0)
return %1",
        )
        .unwrap();
        let e = Schedule::plan(&g, 64, &none).unwrap_err().to_string();
        assert!(e.contains("reads the state it updates"), "{e}");
    }

    #[test]
    fn recurrent_carries_are_written_back() {
        let (_, s) = plan(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2,1,4]))()
%1 = Param(name:\"w_ih\",ty:(dtype:F32,shape:[12,4]))()
%2 = Param(name:\"w_hh\",ty:(dtype:F32,shape:[12,4]))()
%3 = Param(name:\"b\",ty:(dtype:F32,shape:[12]))()
%4 = Param(name:\"h\",ty:(dtype:F32,shape:[1,2,4]))()
%5 = Gru(hidden_size:4,num_layers:1,bidirectional:false,carry:true)(%0, %1, %2, %3, %3, %4)
return %5.0",
            64,
            &none,
        );
        assert_eq!(s.steps[0].state, None);
        assert_eq!(s.steps[0].write_back, vec![(1, 3)]);
    }

    #[test]
    fn arena_offsets_follow_the_alignment_and_outputs_live_to_the_end() {
        let src = "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[3,5]))()
%1 = Activation(kind:Exp)(%0)
%2 = Activation(kind:Tanh)(%1)
%3 = Activation(kind:Relu)(%2)
return %1, %3";
        for align in [64, 256] {
            let (g, s) = plan(src, align, &none);
            let arena: Vec<usize> = g
                .node_ids()
                .filter_map(|id| match s.values[id.index()][0].slot {
                    Slot::Arena { offset, .. } => Some(offset),
                    _ => None,
                })
                .collect();
            assert_eq!(arena.len(), 4);
            assert!(arena.iter().all(|o| o % align == 0));
            let first = s.value(ValueId::new(NodeId(1), 0)).slot;
            let third = s.value(ValueId::new(NodeId(3), 0)).slot;
            assert_ne!(first, third, "an output may not share bytes with a later value");
        }
    }

    #[test]
    fn symbolic_types_are_an_error_naming_the_node() {
        let g = parse(
            "%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",5]))()
%1 = Activation(kind:Exp)(%0)
return %1",
        )
        .unwrap();
        let e = Schedule::plan(&g, 64, &none).unwrap_err().to_string();
        assert!(e.contains("%0 (Input) has the symbolic type"), "{e}");
    }
}
