//! The CPU executable: per concrete input shape, a flat schedule of kernel calls over one
//! arena planned by liveness; runs do no shape work and no arena allocation.
//!
//! Graph state: a node that updates its first operand in place (`dispatch::updates_state`,
//! e.g. `KvAppend`) and gets a parameter there writes that parameter's buffer, so the update
//! persists across runs like a training step's weights; when its output is the state itself
//! (`dispatch::output_is_state`) consumers read the parameter directly, with no copy.
//!
//! Weights: a matmul or conv whose weight is a parameter or constant that its kernel takes
//! laid out (`dispatch::packs`: an f32 `b` under more than a few rows, an ungrouped f32 conv
//! weight, a quantized `Q8Blocks` weight)
//! gets it laid out once, on first use — per parameter across plans, again only after
//! `set_param` replaces it; per constant in its plan. Parameters that a node updates in place
//! are never packed. A parameter that the running plan reads only packed keeps no unpacked
//! copy (so weights take their memory once); `param` and plans that read it unpacked unpack
//! it again.
//!
//! Hoisting: a node computed from parameters and constants alone (a weight transposed or cast
//! for its consumer) runs once, before the first run, and again only after `set_param`; its
//! output is held like a constant (and pre-packed like one) instead of recomputed per run.

use crate::dispatch::{self, Packed};
use crate::view::{In, Out};
use rlx_ir::{DType, Graph, NodeId, Op};
use rlx_opt::memory::{self, Interval};
use rlx_runtime::specialize::specialize;
use rlx_runtime::{Bindings, Executable, NodeTime, Result, RuntimeError, Tensor};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Where a value's bytes live during a run.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Arena { offset: usize, len: usize },
    Param(usize),
    Const(usize),
}

/// One kernel call: the node, the parameter it updates in place (with that parameter's
/// node, for its dims) when it writes graph state, and the slot of its pre-packed weight.
#[derive(Clone, Copy)]
struct Step {
    node: NodeId,
    state: Option<(usize, NodeId)>,
    weight: Option<Slot>,
}

/// Everything one concrete set of input shapes needs.
struct Plan {
    graph: Graph,
    /// Per node, per output: its slot and concrete dims.
    slots: Vec<Vec<(Slot, Vec<usize>)>>,
    steps: Vec<Step>,
    inputs: Vec<NodeId>,
    consts: Vec<Tensor>,
    /// Per constant, its packed form once a step has needed it.
    packed_consts: Vec<Option<Packed>>,
    /// The parameters some step or output reads unpacked; the others this plan pre-packs
    /// are held only packed.
    unpacked_params: Vec<usize>,
    arena: Tensor,
    /// Steps whose operands are all parameters, constants or other such steps' outputs (a
    /// transposed or cast weight): run once before the first run and again after a parameter
    /// changes, their outputs held among `consts`.
    hoisted: Vec<Step>,
    /// The parameter epoch (`CpuExecutable::epoch`) the hoisted outputs were computed at.
    hoisted_at: Option<u64>,
    /// Per step, its calls and their time while profiling (empty otherwise).
    times: Vec<(u64, Duration)>,
}

pub struct CpuExecutable {
    graph: Graph,
    params: Vec<Option<Tensor>>,
    /// Per parameter, its packed form once a plan's step has needed it.
    packed: Vec<Option<Laid>>,
    plans: HashMap<Vec<Vec<usize>>, Plan>,
    profiling: bool,
    /// Counts `set_param` calls: the hoisted steps of a plan rerun when it moved.
    epoch: u64,
}

/// A parameter laid out for its kernel, with the dtype and dims it was given in.
struct Laid {
    packed: Packed,
    dtype: DType,
    dims: Vec<usize>,
}

impl Laid {
    /// The parameter as it was given.
    fn unpack(&self) -> Result<Tensor> {
        Tensor::from_bytes(self.dtype, &self.dims, &self.packed.unpack())
    }
}

impl CpuExecutable {
    pub fn new(graph: Graph) -> CpuExecutable {
        let params = vec![None; graph.params().len()];
        let packed = (0..params.len()).map(|_| None).collect();
        CpuExecutable { graph, params, packed, plans: HashMap::new(), profiling: false, epoch: 0 }
    }
}

/// The plan of `g` for these input shapes, made on first use.
fn plan_for<'p>(plans: &'p mut HashMap<Vec<Vec<usize>>, Plan>, g: &Graph, inputs: &[&Tensor], bindings: &Bindings) -> Result<&'p mut Plan> {
    let key: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    if !plans.contains_key(&key) {
        let p = plan(g, inputs, bindings)?;
        plans.insert(key.clone(), p);
    }
    Ok(plans.get_mut(&key).expect("plan was just inserted"))
}

fn plan(g: &Graph, inputs: &[&Tensor], bindings: &Bindings) -> Result<Plan> {
    let graph = specialize(g, &inputs.iter().map(|t| t.ty()).collect::<Vec<_>>(), bindings)?;
    let mut slots: Vec<Vec<(Slot, Vec<usize>)>> = Vec::with_capacity(graph.len());
    let mut steps = Vec::new();
    let mut input_nodes = Vec::new();
    let mut consts = Vec::new();
    let mut intervals = Vec::new();
    let mut interval_of: Vec<Vec<Option<usize>>> = Vec::with_capacity(graph.len());
    let mut param_index = 0;
    let mut hoisted = Vec::new();
    // Whether each node's value depends on parameters and constants alone; a parameter that
    // some node updates in place changes during a run, so it does not count.
    let updated: Vec<NodeId> = graph.node_ids().filter(|&id| dispatch::updates_state(&graph.node(id).op)).filter_map(|id| Some(graph.node(id).inputs.first()?.node)).collect();
    let mut fixed = vec![false; graph.len()];
    for id in graph.node_ids() {
        let node = graph.node(id);
        let state = state_operand(&graph, &slots, id)?;
        let hoist = hoistable(&node.op) && node.inputs.iter().all(|v| fixed[v.node.index()]);
        fixed[id.index()] = match node.op {
            Op::Param(_) => !updated.contains(&id),
            Op::Constant(_) => true,
            _ => hoist,
        };
        let dims: Vec<Vec<usize>> = node
            .outputs
            .iter()
            .map(|t| {
                t.shape.as_static().ok_or_else(|| RuntimeError::Backend {
                    backend: "cpu".into(),
                    msg: format!("node %{} ({}) has a symbolic shape {t} after specialization", id.0, node.op.kind()),
                })
            })
            .collect::<Result<_>>()?;
        let step = steps.len();
        let mut node_slots = Vec::new();
        let mut node_iv = Vec::new();
        for (ty, d) in node.outputs.iter().zip(dims) {
            let slot = match &node.op {
                Op::Param(_) => {
                    param_index += 1;
                    Slot::Param(param_index - 1)
                }
                Op::Constant(c) => {
                    consts.push(Tensor::from_bytes(c.ty.dtype, &d, &c.data)?);
                    Slot::Const(consts.len() - 1)
                }
                op if state.is_some() && dispatch::output_is_state(op, node.inputs.len()) => {
                    Slot::Param(state.map_or(0, |(p, _)| p))
                }
                _ if hoist => {
                    consts.push(Tensor::zeros(ty.dtype, &d));
                    Slot::Const(consts.len() - 1)
                }
                _ => {
                    let len = d.iter().product::<usize>() * ty.dtype.size();
                    // Inputs are copied in before the first step, so they are live from step 0.
                    let first = if matches!(node.op, Op::Input(_)) { 0 } else { step };
                    intervals.push(Interval { size: len, first, last: step });
                    node_iv.push(Some(intervals.len() - 1));
                    node_slots.push((Slot::Arena { offset: 0, len }, d));
                    continue;
                }
            };
            node_iv.push(None);
            node_slots.push((slot, d));
        }
        match node.op {
            Op::Input(_) => input_nodes.push(id),
            Op::Param(_) | Op::Constant(_) => {}
            _ if hoist => hoisted.push(Step { node: id, state: None, weight: None }),
            _ => steps.push(Step { node: id, state, weight: weight_slot(&graph, &slots, id) }),
        }
        for v in &node.inputs {
            if let Some(i) = interval_of[v.node.index()][v.output as usize] {
                intervals[i].last = intervals[i].last.max(step);
            }
        }
        slots.push(node_slots);
        interval_of.push(node_iv);
    }
    for v in graph.outputs() {
        if let Some(i) = interval_of[v.node.index()][v.output as usize] {
            intervals[i].last = steps.len();
        }
    }
    let states: Vec<usize> = steps.iter().filter_map(|s| s.state.map(|(p, _)| p)).collect();
    for s in &mut steps {
        if matches!(s.weight, Some(Slot::Param(p)) if states.contains(&p)) {
            s.weight = None;
        }
    }
    let placed = memory::plan(&intervals);
    for (node_slots, ivs) in slots.iter_mut().zip(&interval_of) {
        for ((slot, _), iv) in node_slots.iter_mut().zip(ivs) {
            if let (Slot::Arena { offset, .. }, Some(i)) = (slot, iv) {
                *offset = placed.offsets[*i];
            }
        }
    }
    let arena = Tensor::zeros(rlx_ir::DType::U8, &[placed.size]);
    let packed_consts = (0..consts.len()).map(|_| None).collect();
    let unpacked_params = unpacked_params(&graph, &slots, steps.iter().chain(&hoisted));
    Ok(Plan { graph, slots, steps, inputs: input_nodes, consts, packed_consts, unpacked_params, arena, hoisted, hoisted_at: None, times: Vec::new() })
}

/// Whether a node whose operands are all fixed may run once for many runs: not an input,
/// parameter or constant itself, not a state update, a sampler (fresh samples per run) or a
/// user kernel (which may keep state of its own).
fn hoistable(op: &Op) -> bool {
    !matches!(op, Op::Input(_) | Op::Param(_) | Op::Constant(_) | Op::RngNormal(_) | Op::RngUniform(_) | Op::Custom(_)) && !dispatch::updates_state(op)
}

/// The parameters a step reads other than as its pre-packed weight, or an output returns.
fn unpacked_params<'s>(g: &Graph, slots: &[Vec<(Slot, Vec<usize>)>], steps: impl Iterator<Item = &'s Step>) -> Vec<usize> {
    let mut out = Vec::new();
    let mut read = |v: &rlx_ir::ValueId, packed_here: bool| {
        if let (Slot::Param(p), false) = (slots[v.node.index()][v.output as usize].0, packed_here) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    };
    for step in steps {
        let node = g.node(step.node);
        let packed_at = step.weight.and(dispatch::packable_operand(&node.op));
        for (i, v) in node.inputs.iter().enumerate() {
            read(v, packed_at == Some(i));
        }
    }
    for v in g.outputs() {
        read(v, false);
    }
    out
}

/// The slot of node `id`'s weight to pre-pack: its [`dispatch::packable_operand`] when that is
/// a parameter or constant and [`dispatch::packs`] says the kernel takes it laid out.
fn weight_slot(g: &Graph, slots: &[Vec<(Slot, Vec<usize>)>], id: NodeId) -> Option<Slot> {
    let node = g.node(id);
    let (a, b) = (node.inputs.first()?, node.inputs.get(dispatch::packable_operand(&node.op)?)?);
    let (slot, dims) = &slots[b.node.index()][b.output as usize];
    let a_dims = &slots[a.node.index()][a.output as usize].1;
    let packs = dispatch::packs(&node.op, (g.ty(*a).dtype, a_dims), (g.ty(*b).dtype, dims));
    (matches!(slot, Slot::Param(_) | Slot::Const(_)) && packs).then_some(*slot)
}

/// The parameter node `id` updates in place: its first operand, when the op has a state kernel
/// and that operand is a parameter no other operand of the node reads.
fn state_operand(g: &Graph, slots: &[Vec<(Slot, Vec<usize>)>], id: NodeId) -> Result<Option<(usize, NodeId)>> {
    let node = g.node(id);
    if !dispatch::updates_state(&node.op) {
        return Ok(None);
    }
    let Some(first) = node.inputs.first() else { return Ok(None) };
    let Slot::Param(p) = slots[first.node.index()][first.output as usize].0 else { return Ok(None) };
    if node.inputs[1..].iter().any(|v| v.node == first.node) {
        return Err(RuntimeError::Backend {
            backend: "cpu".into(),
            msg: format!("node %{} ({}) reads the state it updates as another operand", id.0, node.op.kind()),
        });
    }
    Ok(Some((p, first.node)))
}

/// The bytes of a parameter held only packed (or not yet set): empty, but aligned for any
/// element type, so kernels may view it as a slice of their dtype.
const NO_BYTES: &[u8] = {
    const EMPTY: &[u128] = &[];
    // SAFETY: an empty slice of u128 is an empty, 16-aligned slice of bytes.
    unsafe { std::slice::from_raw_parts(EMPTY.as_ptr().cast::<u8>(), 0) }
};

impl Plan {
    /// The bytes of a value. Safety: `base` is this plan's arena and nothing writes the
    /// value's bytes while the returned slice lives (the planner keeps live values apart).
    unsafe fn bytes<'a>(&'a self, params: &'a [Option<Tensor>], base: *mut u8, slot: Slot) -> &'a [u8] {
        match slot {
            Slot::Arena { offset, len } => std::slice::from_raw_parts(base.add(offset), len),
            Slot::Param(i) => params[i].as_ref().map_or(NO_BYTES, Tensor::bytes),
            Slot::Const(i) => self.consts[i].bytes(),
        }
    }

    /// Before a run: parameters this plan reads unpacked get their unpacked copy back where
    /// another plan left them only packed; then every weight a step pre-packs is packed if it
    /// is not yet (a parameter not set, or not of its planned size, is left to the kernel), and
    /// a parameter this plan reads only packed gives up its unpacked copy as soon as it is
    /// packed, so that each weight is in memory once, and twice only one at a time.
    fn hold_weights(&mut self, params: &mut [Option<Tensor>], packed: &mut [Option<Laid>], epoch: u64) -> Result<()> {
        for &p in &self.unpacked_params {
            if params[p].is_none() {
                if let Some(laid) = packed[p].take() {
                    params[p] = Some(laid.unpack()?);
                }
            }
        }
        if self.hoisted_at != Some(epoch) {
            self.run_hoisted(params)?;
            self.hoisted_at = Some(epoch);
        }
        for step in &self.steps {
            let Some(slot) = step.weight else { continue };
            let node = self.graph.node(step.node);
            let Some(b) = dispatch::packable_operand(&node.op).and_then(|i| node.inputs.get(i)) else { continue };
            let (dtype, dims) = (self.graph.ty(*b).dtype, &self.slots[b.node.index()][b.output as usize].1);
            let out_dims = &self.slots[step.node.index()][0].1;
            match slot {
                Slot::Param(p) => {
                    if let (None, Some(t)) = (&packed[p], &params[p]) {
                        let laid = dispatch::prepack(&node.op, In { dtype, dims, bytes: t.bytes() }, out_dims);
                        packed[p] = laid.map(|packed| Laid { packed, dtype, dims: dims.clone() });
                    }
                    if packed[p].is_some() && !self.unpacked_params.contains(&p) {
                        params[p] = None;
                    }
                }
                Slot::Const(c) if self.packed_consts[c].is_none() => {
                    self.packed_consts[c] = dispatch::prepack(&node.op, In { dtype, dims, bytes: self.consts[c].bytes() }, out_dims);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs the hoisted steps into their constants, whose packed forms are then stale.
    fn run_hoisted(&mut self, params: &[Option<Tensor>]) -> Result<()> {
        let base = self.arena.bytes_mut().as_mut_ptr();
        for i in 0..self.hoisted.len() {
            let (id, node) = (self.hoisted[i].node, self.graph.node(self.hoisted[i].node));
            let mut made = Vec::with_capacity(node.outputs.len());
            for (slot, _) in &self.slots[id.index()] {
                if let Slot::Const(c) = *slot {
                    made.push((c, std::mem::replace(&mut self.consts[c], Tensor::zeros(DType::U8, &[0]))));
                    self.packed_consts[c] = None;
                }
            }
            let ins: Vec<In> = node
                .inputs
                .iter()
                .map(|v| {
                    let (slot, dims) = &self.slots[v.node.index()][v.output as usize];
                    // Safety: a hoisted step's operands are parameters and constants, never
                    // arena values, and its outputs were moved out of `consts`.
                    In { dtype: self.graph.ty(*v).dtype, dims, bytes: unsafe { self.bytes(params, base, *slot) } }
                })
                .collect();
            let mut outs: Vec<Out> = made.iter_mut().zip(&self.slots[id.index()]).map(|((_, t), (_, dims))| Out { dtype: t.dtype(), dims, bytes: t.bytes_mut() }).collect();
            let result = dispatch::run(&node.op, &ins, &mut outs);
            drop((ins, outs));
            for (c, t) in made {
                self.consts[c] = t;
            }
            result.map_err(|msg| RuntimeError::Kernel { op: node.op.kind().to_string(), node: id.0, msg })?;
        }
        Ok(())
    }

    /// Runs the schedule; with `profiling`, timing each step into `times`.
    fn run(&mut self, params: &mut [Option<Tensor>], packed: &mut [Option<Laid>], inputs: &[&Tensor], profiling: bool, epoch: u64) -> Result<Vec<Tensor>> {
        self.hold_weights(params, packed, epoch)?;
        if profiling && self.times.len() != self.steps.len() {
            self.times = vec![(0, Duration::ZERO); self.steps.len()];
        }
        let base = self.arena.bytes_mut().as_mut_ptr();
        for (id, t) in self.inputs.iter().zip(inputs) {
            if let (Slot::Arena { offset, len }, _) = self.slots[id.index()][0] {
                // Safety: the input's arena range is in bounds and not aliased yet.
                unsafe { std::slice::from_raw_parts_mut(base.add(offset), len) }.copy_from_slice(t.bytes());
            }
        }
        for i in 0..self.steps.len() {
            let started = profiling.then(Instant::now);
            let step = self.steps[i];
            let id = step.node;
            let node = self.graph.node(id);
            // The updated state leaves `params` for the call, so no operand view can alias it.
            let state = match step.state {
                Some((p, _)) => Some(params[p].take().ok_or_else(|| RuntimeError::Backend {
                    backend: "cpu".into(),
                    msg: format!("node %{} ({}) updates parameter {p}, which is not set", id.0, node.op.kind()),
                })?),
                None => None,
            };
            let operands = if state.is_some() { &node.inputs[1..] } else { &node.inputs[..] };
            let params_ro: &[Option<Tensor>] = params;
            let ins: Vec<In> = operands
                .iter()
                .map(|v| {
                    let (slot, dims) = &self.slots[v.node.index()][v.output as usize];
                    let ty = self.graph.ty(*v);
                    // Safety: inputs are live at this step, so no output of it overlaps them.
                    In { dtype: ty.dtype, dims, bytes: unsafe { self.bytes(params_ro, base, *slot) } }
                })
                .collect();
            let mut outs: Vec<Out> = self.slots[id.index()]
                .iter()
                .zip(&node.outputs)
                .filter_map(|((slot, dims), ty)| {
                    let Slot::Arena { offset, len } = *slot else { return None };
                    // Safety: each output has its own planned range, disjoint from live values.
                    Some(Out { dtype: ty.dtype, dims, bytes: unsafe { std::slice::from_raw_parts_mut(base.add(offset), len) } })
                })
                .collect();
            let kernel_error = |msg| RuntimeError::Kernel { op: node.op.kind().to_string(), node: id.0, msg };
            match (state, step.state) {
                (Some(mut t), Some((p, param_node))) => {
                    let dims = &self.slots[param_node.index()][0].1;
                    let mut st = Out { dtype: t.dtype(), dims, bytes: t.bytes_mut() };
                    let result = dispatch::run_in_place(&node.op, &mut st, &ins, &mut outs);
                    drop(ins);
                    params[p] = Some(t);
                    result.map_err(kernel_error)?;
                }
                _ => {
                    let weight = match step.weight {
                        Some(Slot::Param(p)) => packed[p].as_ref().map(|l| &l.packed),
                        Some(Slot::Const(c)) => self.packed_consts[c].as_ref(),
                        _ => None,
                    };
                    match weight {
                        Some(w) => dispatch::run_prepacked(&node.op, &ins, w, &mut outs),
                        None => dispatch::run(&node.op, &ins, &mut outs),
                    }
                    .map_err(kernel_error)?
                }
            }
            if let Some(t) = started {
                self.times[i].0 += 1;
                self.times[i].1 += t.elapsed();
            }
        }
        self.graph
            .outputs()
            .iter()
            .map(|v| {
                let (slot, dims) = &self.slots[v.node.index()][v.output as usize];
                // Safety: no kernel runs while outputs are copied out.
                let bytes = unsafe { self.bytes(params, base, *slot) };
                Tensor::from_bytes(self.graph.ty(*v).dtype, dims, bytes)
            })
            .collect()
    }
}

impl Executable for CpuExecutable {
    /// A parameter held only packed is unpacked for the caller.
    fn param(&self, index: usize) -> Result<Option<Tensor>> {
        match (&self.params[index], &self.packed[index]) {
            (None, Some(laid)) => Ok(Some(laid.unpack()?)),
            (t, _) => Ok(t.clone()),
        }
    }

    fn set_param(&mut self, index: usize, value: Tensor) -> Result<()> {
        self.params[index] = Some(value);
        self.packed[index] = None;
        self.epoch += 1;
        Ok(())
    }

    /// Runs the whole schedule on one of rayon's worker threads, the others spinning for its
    /// jobs ([`crate::awake`]): a kernel splits its work and joins inside the pool instead of
    /// waking a worker and sleeping on a lock once per kernel call (measured: a quarter of a
    /// decode step went to those hand-offs).
    fn run(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Vec<Tensor>> {
        let (plans, graph, params, packed) = (&mut self.plans, &self.graph, &mut self.params, &mut self.packed);
        let (profiling, epoch) = (self.profiling, self.epoch);
        crate::awake::run(|| plan_for(plans, graph, inputs, bindings)?.run(params, packed, inputs, profiling, epoch))
    }

    fn arena_bytes(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Option<usize>> {
        Ok(Some(plan_for(&mut self.plans, &self.graph, inputs, bindings)?.arena.bytes().len()))
    }

    fn set_profiling(&mut self, on: bool) -> bool {
        self.profiling = on;
        for plan in self.plans.values_mut() {
            plan.times.clear();
        }
        true
    }

    /// Steps of every plan (input shape) that ran while profiling.
    fn profile(&self) -> Vec<NodeTime> {
        let mut nodes = Vec::new();
        for plan in self.plans.values() {
            for (step, &(calls, total)) in plan.steps.iter().zip(&plan.times).filter(|(_, t)| t.0 > 0) {
                let op = plan.graph.node(step.node).op.kind().to_string();
                let dims = plan.slots[step.node.index()].first().map(|s| s.1.clone()).unwrap_or_default();
                nodes.push(NodeTime { node: step.node, op, dims, calls, total });
            }
        }
        nodes
    }
}
