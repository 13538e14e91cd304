//! The executor every backend runs on: per concrete input shape, a [`Schedule`] (planned by
//! rlx-opt) over one arena of the backend's memory; runs do no shape work and no allocation
//! beyond their outputs. The backend supplies only an [`Engine`].
//!
//! Inputs go into the arena and outputs come out of it: `run` uploads host tensors and
//! downloads the results; `submit` copies device values in and out within the engine's
//! memory (outputs into buffers of their own, so they outlive the next run) and waits for
//! nothing.
//!
//! Weights: a parameter or constant operand that the engine takes prepared
//! ([`Engine::prepared_operand`]) is laid out once, on first use — per parameter across plans,
//! again only after it is set anew; per constant in its plan. A parameter that the running
//! plan reads only prepared gives up its buffer as given, laid out in it where the engine can
//! ([`Engine::prepare_owned`]: weights take their memory once); `param` and plans that read it
//! as given get it back from the prepared form.
//!
//! Hoisted steps (nodes of parameters and constants alone) run before a plan's first run and
//! again after a parameter changes. A constant or hoisted value that another plan computes the
//! same way (the same nodes, with the same attributes and types, down to the parameters and
//! literals) shares that plan's buffer, so the plans of a decoder's prefill and decode steps,
//! or of a model's batch sizes, hold each such value once. Graph state ([`Step::state`],
//! [`Step::write_back`]) is updated in the parameter's own buffer, so it persists across runs;
//! `run_updating` makes outputs the new values of parameters with a copy in the backend's
//! memory.

use crate::compiled::Bindings;
use crate::device_tensor::{DeviceTensor, Memory};
use crate::engine::{Arg, Engine};
use crate::error::{Result, RuntimeError};
use crate::profile::NodeTime;
use crate::specialize::specialize;
use crate::tensor::Tensor;
use crate::Executable;
use rlx_ir::{DType, Graph, Op, ValueId};
use rlx_opt::schedule::{Schedule, Slot, Step, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A compiled graph on one backend's [`Engine`].
pub struct Executor<E: Engine> {
    engine: Arc<E>,
    graph: Graph,
    /// Per parameter: its buffer as given (with its dtype and dims), while held; shared with
    /// the executors [`Executable::share`] made, read-only while shared.
    params: Vec<Option<Arc<Held<E::Buffer>>>>,
    /// Per parameter: its prepared form, once a plan's step has needed it (shared the same way).
    prepared: Vec<Option<Arc<Prepared<E::Prepared>>>>,
    /// Plans by input dims, then the sizes bound to [`Executor::symbols`].
    plans: HashMap<Vec<Vec<usize>>, Plan<E>>,
    /// The symbolic dims the graph's values carry: a segment of a partitioned graph may size
    /// a value by a symbol none of its inputs has, so it is planned per size of each.
    symbols: Vec<String>,
    /// A zero-byte buffer: the operand view of a parameter held only prepared.
    empty: E::Buffer,
    profiling: bool,
    /// Counts parameter changes: a plan's hoisted steps rerun when it moved.
    epoch: u64,
    /// Counts changes of the buffers parameters are held in (set anew, reallocated, prepared,
    /// given up): a plan's recording is replayed only while it has not moved.
    layout: u64,
}

/// A parameter's buffer with the dtype and dims it was given in.
struct Held<B> {
    buf: B,
    dtype: DType,
    dims: Vec<usize>,
}

impl<B> Held<B> {
    fn bytes(&self) -> usize {
        self.dims.iter().product::<usize>() * self.dtype.size()
    }

    /// The whole buffer as an operand.
    fn arg(&self) -> Arg<'_, B> {
        Arg { dtype: self.dtype, dims: &self.dims, buf: &self.buf, offset: 0, len: self.bytes() }
    }
}

/// Every parameter's buffer as given, where held.
type Params<B> = [Option<Arc<Held<B>>>];
/// Every parameter's prepared form, where made.
type Forms<P> = [Option<Arc<Prepared<P>>>];

/// A prepared weight with the dtype and dims of the weight it was made from.
struct Prepared<P> {
    form: P,
    dtype: DType,
    dims: Vec<usize>,
}

impl<P> Prepared<P> {
    /// The weight as it was given, in a new buffer.
    fn unprepare<E: Engine<Prepared = P>>(&self, engine: &E) -> Result<Held<E::Buffer>> {
        Ok(Held { buf: engine.unprepare(&self.form)?, dtype: self.dtype, dims: self.dims.clone() })
    }
}

/// The dtype and dims parameter `p` was set with, held as given or only prepared.
fn held_type<'a, B, P>(params: &'a Params<B>, prepared: &'a Forms<P>, p: usize) -> Option<TypeOf<'a>> {
    match (&params[p], &prepared[p]) {
        (Some(h), _) => Some((h.dtype, h.dims.as_slice())),
        (None, Some(prep)) => Some((prep.dtype, prep.dims.as_slice())),
        (None, None) => None,
    }
}

/// An operand's bytes copied into a host tensor.
fn to_host<E: Engine>(engine: &E, arg: Arg<'_, E::Buffer>) -> Result<Tensor> {
    let mut t = Tensor::zeros(arg.dtype, arg.dims);
    engine.download(arg.buf, arg.offset, t.bytes_mut())?;
    Ok(t)
}

/// An input of one run: a host tensor to upload, or a buffer of the engine's (holding a value
/// of these dims) to copy.
enum Feed<'a, B> {
    Host(&'a Tensor),
    Device(&'a B, &'a [usize]),
}

impl<B> Feed<'_, B> {
    fn dims(&self) -> &[usize] {
        match self {
            Feed::Host(t) => t.shape(),
            Feed::Device(_, dims) => dims,
        }
    }
}

/// One concrete set of input shapes: its specialized graph, schedule and memory.
struct Plan<E: Engine> {
    graph: Graph,
    schedule: Schedule,
    /// Per constant, its buffer, shared with the other plans that hold the same value.
    consts: Vec<Arc<E::Buffer>>,
    /// Per constant, its prepared form once a step has needed it.
    prepared_consts: Vec<Option<E::Prepared>>,
    arena: E::Buffer,
    /// The parameter epoch the hoisted outputs were computed at.
    hoisted_at: Option<u64>,
    /// The engine's recording of the steps, with the parameter layout it was made at.
    recording: Option<(u64, E::Recording)>,
    /// Per step, its calls and their time while profiling (empty otherwise).
    times: Vec<(u64, Duration)>,
    /// Elements the steps (hoisted ones too) read and write, summed: the size of a run, which
    /// [`Engine::needs_scope`] weighs.
    elements: usize,
}

impl<E: Engine> Executor<E> {
    /// An executor for a legalized graph; when every input is static its one plan is made
    /// now, so that planning errors surface at compile time.
    pub fn new(engine: Arc<E>, graph: Graph) -> Result<Executor<E>> {
        let n = graph.params().len();
        let empty = engine.alloc(0)?;
        let mut symbols: Vec<String> = graph
            .nodes()
            .iter()
            .flat_map(|n| n.outputs.iter().flat_map(|t| t.shape.0.iter()))
            .filter_map(|d| match d {
                rlx_ir::Dim::Sym(s) => Some(s.clone()),
                rlx_ir::Dim::Static(_) => None,
            })
            .collect();
        symbols.sort();
        symbols.dedup();
        let mut exec = Executor {
            engine,
            graph,
            symbols,
            params: (0..n).map(|_| None).collect(),
            prepared: (0..n).map(|_| None).collect(),
            plans: HashMap::new(),
            empty,
            profiling: false,
            epoch: 0,
            layout: 0,
        };
        let static_inputs: Option<Vec<Vec<usize>>> = exec.graph.inputs().iter().map(|(_, v)| exec.graph.ty(*v).shape.as_static()).collect();
        if let (Some(shapes), true) = (static_inputs, exec.symbols.is_empty()) {
            let key = exec.key(shapes.iter().map(Vec::as_slice), &Bindings::new());
            exec.plan_for(&key, &Bindings::new())?;
        }
        Ok(exec)
    }

    /// The key of the plan for these input dims and symbol sizes: the dims, then the sizes.
    fn key<'d>(&self, dims: impl ExactSizeIterator<Item = &'d [usize]>, bindings: &Bindings) -> Vec<Vec<usize>> {
        let mut key = Vec::with_capacity(dims.len() + 1);
        key.extend(dims.map(<[usize]>::to_vec));
        key.push(self.symbols.iter().map(|s| bindings.get(s).copied().unwrap_or(usize::MAX)).collect());
        key
    }

    /// The plan of `key` (see [`Executor::key`]), made on first use.
    fn plan_for(&mut self, key: &[Vec<usize>], bindings: &Bindings) -> Result<&mut Plan<E>> {
        if !self.plans.contains_key(key) {
            let dims = &key[..key.len() - 1];
            let plan = Plan::new(&*self.engine, &self.graph, dims, bindings, self.plans.values())?;
            self.plans.insert(key.to_vec(), plan);
        }
        Ok(self.plans.get_mut(key).expect("plan was just inserted"))
    }

    /// Runs the plan for `inputs`, makes each output `o` of `updates` (`(output, parameter)`)
    /// the new value of its parameter, and gives every other output, in order, as `out` reads
    /// it from the plan's memory.
    fn run_with<R>(
        &mut self,
        inputs: &[Feed<'_, E::Buffer>],
        bindings: &Bindings,
        updates: &[(usize, usize)],
        out: impl Fn(&Ran<'_, E>, usize) -> Result<R>,
    ) -> Result<Vec<R>> {
        let key = self.key(inputs.iter().map(Feed::dims), bindings);
        let engine = self.engine.clone();
        self.plan_for(&key, bindings)?;
        if !updates.is_empty() {
            self.check_updates(&self.plans[&key], updates)?;
        }
        let Executor { plans, params, prepared, empty, profiling, epoch, layout, .. } = self;
        let plan = plans.get_mut(&key).expect("plan was made above");
        let (profiling, at) = (*profiling, *epoch);
        let scoped = engine.needs_scope(plan.elements);
        let (plan_in, layout_in) = (&mut *plan, &mut *layout);
        let mut body = || {
            plan_in.hold_weights(&engine, params, prepared, empty, at, layout_in)?;
            plan_in.run(&engine, params, prepared, empty, inputs, profiling, *layout_in)
        };
        match scoped {
            true => engine.scope(body)?,
            false => body()?,
        }
        // Outputs are read on the caller's thread, not in the launches' context (a CPU pool
        // worker): the buffers they are read into then come from the caller's allocator arena,
        // which the next run's outputs reuse, instead of a worker's, which keeps them once
        // freed.
        let mut ran: Ran<'_, E> = Ran { engine: &engine, plan, params, prepared, empty, layout };
        for &(o, p) in updates {
            ran.update(o, p)?;
        }
        let outputs = (0..ran.plan.graph.outputs().len()).filter(|o| !updates.iter().any(|u| u.0 == *o)).map(|o| out(&ran, o)).collect::<Result<Vec<R>>>()?;
        if !updates.is_empty() {
            *epoch += 1;
        }
        Ok(outputs)
    }

    /// The parameters a node updates in place or writes an output back to: graph state, which
    /// each executor needs a buffer of its own for.
    fn state_params(&self) -> Vec<usize> {
        let params = self.graph.params();
        let mut out: Vec<usize> = self
            .graph
            .nodes()
            .iter()
            .flat_map(|n| {
                let def = n.op.def();
                let written = def.mutated_inputs().into_iter().chain(def.written_back().into_iter().map(|(_, i)| i));
                written.filter_map(|i| n.inputs.get(i).copied()).collect::<Vec<_>>()
            })
            .filter_map(|v| params.iter().position(|&(_, pv)| pv == v))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Each update's output has the dtype and dims of its parameter, where that is set.
    fn check_updates(&self, plan: &Plan<E>, updates: &[(usize, usize)]) -> Result<()> {
        for &(o, p) in updates {
            let value = plan.schedule.value(plan.graph.outputs()[o]);
            match held_type(&self.params, &self.prepared, p) {
                Some(held) if held != (value.dtype, value.dims.as_slice()) => {
                    return Err(RuntimeError::TypeMismatch {
                        what: "parameter update",
                        name: self.graph.params()[p].0.to_string(),
                        expected: rlx_ir::TensorType::of(held.0, held.1),
                        got: rlx_ir::TensorType::of(value.dtype, &value.dims).to_string(),
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The elements every step of `schedule` (hoisted or not) reads and writes, summed.
fn step_elements(graph: &Graph, schedule: &Schedule) -> usize {
    let count = |v: &Value| v.dims.iter().product::<usize>();
    schedule
        .hoisted
        .iter()
        .chain(&schedule.steps)
        .map(|step| {
            let read: usize = graph.node(step.node).inputs.iter().map(|&v| count(schedule.value(v))).sum();
            read + schedule.values[step.node.index()].iter().map(count).sum::<usize>()
        })
        .sum()
}

/// A value's dtype and dims.
type TypeOf<'a> = (DType, &'a [usize]);

/// A plan right after its run, with the executor's parameters: what reads its results.
struct Ran<'a, E: Engine> {
    engine: &'a E,
    plan: &'a Plan<E>,
    params: &'a mut Params<E::Buffer>,
    prepared: &'a mut Forms<E::Prepared>,
    empty: &'a E::Buffer,
    layout: &'a mut u64,
}

impl<E: Engine> Ran<'_, E> {
    /// Graph output `o` copied to the host.
    fn download(&self, o: usize) -> Result<Tensor> {
        let v = self.plan.graph.outputs()[o];
        to_host(self.engine, self.plan.arg(self.params, self.empty, self.plan.schedule.value(v)))
    }

    /// Graph output `o` copied into a new buffer of the engine's.
    fn detach(&self, o: usize) -> Result<DeviceTensor> {
        let value = self.plan.schedule.value(self.plan.graph.outputs()[o]);
        let buf = self.engine.alloc(value.bytes())?;
        let src = self.plan.arg(self.params, self.empty, value);
        self.engine.copy(src, Arg { buf: &buf, offset: 0, ..src })?;
        Ok(DeviceTensor::new(Memory::of(self.engine), value.dtype, &value.dims, buf))
    }

    /// Makes graph output `o` the new value of parameter `p`, copied in the engine's memory
    /// (into the parameter's buffer when it holds one of the same size that no other executor
    /// shares).
    fn update(&mut self, o: usize, p: usize) -> Result<()> {
        let v = self.plan.graph.outputs()[o];
        let value = self.plan.schedule.value(v);
        if value.slot == Slot::Param(p) {
            return Ok(());
        }
        let fits = self.params[p].as_mut().and_then(Arc::get_mut).is_some_and(|h| h.dtype == value.dtype && h.dims == value.dims);
        if !fits {
            let buf = self.engine.alloc(value.bytes())?;
            self.params[p] = Some(Arc::new(Held { buf, dtype: value.dtype, dims: value.dims.clone() }));
            *self.layout += 1;
        }
        let src = self.plan.arg(self.params, self.empty, value);
        let target = Value { slot: Slot::Param(p), ..value.clone() };
        let dst = self.plan.arg(self.params, self.empty, &target);
        self.engine.copy(src, dst)?;
        if self.prepared[p].take().is_some() {
            *self.layout += 1;
        }
        Ok(())
    }
}

impl<E: Engine> Plan<E> {
    /// The plan of `g` for these input dims and symbol sizes; a constant that one of the
    /// `others` holds computed the same way takes its buffer.
    fn new<'o>(
        engine: &E,
        g: &Graph,
        dims: &[Vec<usize>],
        bindings: &Bindings,
        others: impl Iterator<Item = &'o Plan<E>> + Clone,
    ) -> Result<Plan<E>> {
        let inputs = g.inputs();
        let types: Vec<_> = inputs.iter().zip(dims).map(|((_, v), d)| rlx_ir::TensorType::of(g.ty(*v).dtype, d)).collect();
        let graph = specialize(g, &types, bindings)?;
        let prepares = |op: &Op, operands: &[(DType, &[usize])]| engine.prepared_operand(op, operands);
        let schedule = Schedule::plan(&graph, engine.align(), &prepares)?;
        let consts = schedule
            .consts
            .iter()
            .map(|&v| {
                if let Some(buf) = others.clone().find_map(|o| o.same_const(&graph, v)) {
                    return Ok(buf);
                }
                let buf = engine.alloc(schedule.value(v).bytes())?;
                if let Op::Constant(c) = &graph.node(v.node).op {
                    engine.upload(&buf, 0, &c.data)?;
                }
                Ok(Arc::new(buf))
            })
            .collect::<Result<Vec<_>>>()?;
        let arena = engine.alloc(schedule.arena)?;
        let prepared_consts = (0..consts.len()).map(|_| None).collect();
        let elements = step_elements(&graph, &schedule);
        Ok(Plan { graph, schedule, consts, prepared_consts, arena, hoisted_at: None, recording: None, times: Vec::new(), elements })
    }

    /// This plan's buffer of the constant `v` of `graph` (another specialization of the same
    /// graph, so node ids agree), when it holds `v` as a constant computed the same way: `v`'s
    /// node and every node it is computed from are equal in the two graphs. A hoisted value
    /// that depends on a symbol's size (an `Expand` to `[S]`) differs in attributes or types.
    fn same_const(&self, graph: &Graph, v: ValueId) -> Option<Arc<E::Buffer>> {
        let Slot::Const(c) = self.schedule.value(v).slot else { return None };
        let mut seen = vec![false; graph.len()];
        let mut todo = vec![v.node];
        while let Some(n) = todo.pop() {
            if std::mem::replace(&mut seen[n.index()], true) {
                continue;
            }
            let node = graph.node(n);
            if self.graph.node(n) != node {
                return None;
            }
            todo.extend(node.inputs.iter().map(|i| i.node));
        }
        Some(self.consts[c].clone())
    }

    /// The operand view of a value.
    fn arg<'a>(&'a self, params: &'a Params<E::Buffer>, empty: &'a E::Buffer, value: &'a Value) -> Arg<'a, E::Buffer> {
        let (buf, offset, len) = match value.slot {
            Slot::Arena { offset, len } => (&self.arena, offset, len),
            Slot::Param(p) => match &params[p] {
                Some(h) => (&h.buf, 0, h.bytes()),
                None => (empty, 0, 0),
            },
            Slot::Const(c) => (self.consts[c].as_ref(), 0, value.bytes()),
        };
        Arg { dtype: value.dtype, dims: &value.dims, buf, offset, len }
    }

    /// Before a run: parameters read as given get their buffer back where only a prepared
    /// form is held; the hoisted steps rerun if a parameter changed; then every weight a step
    /// takes prepared is prepared if it is not yet, and a parameter this plan reads only
    /// prepared gives up its buffer as given. Each change of a parameter's buffers moves
    /// `layout`; a change of a prepared constant drops the plan's recording.
    fn hold_weights(
        &mut self,
        engine: &E,
        params: &mut Params<E::Buffer>,
        prepared: &mut Forms<E::Prepared>,
        empty: &E::Buffer,
        epoch: u64,
        layout: &mut u64,
    ) -> Result<()> {
        for &p in &self.schedule.unprepared_params {
            if let (None, Some(prep)) = (&params[p], &prepared[p]) {
                params[p] = Some(Arc::new(prep.unprepare(engine)?));
                *layout += 1;
            }
        }
        self.check_params(params, prepared)?;
        if self.hoisted_at != Some(epoch) {
            for (c, v) in self.schedule.consts.iter().enumerate() {
                if !matches!(self.graph.node(v.node).op, Op::Constant(_)) && self.prepared_consts[c].take().is_some() {
                    self.recording = None;
                }
            }
            for i in 0..self.schedule.hoisted.len() {
                self.launch(engine, params, empty, &self.schedule.hoisted[i], None)?;
            }
            self.hoisted_at = Some(epoch);
        }
        for step in &self.schedule.steps {
            let Some((operand, slot)) = step.weight else { continue };
            let v = self.graph.node(step.node).inputs[operand];
            let value = self.schedule.value(v);
            let out_dims = &self.schedule.values[step.node.index()][0].dims;
            match slot {
                Slot::Param(p) if prepared[p].is_none() => {
                    let op = &self.graph.node(step.node).op;
                    if self.schedule.unprepared_params.contains(&p) {
                        if let Some(h) = &params[p] {
                            let form = engine.prepare(op, h.arg(), out_dims)?;
                            prepared[p] = form.map(|form| Arc::new(Prepared { form, dtype: h.dtype, dims: h.dims.clone() }));
                            *layout += 1;
                        }
                    } else if let Some(held) = params[p].take() {
                        match Arc::try_unwrap(held) {
                            Ok(Held { buf, dtype, dims }) => match engine.prepare_owned(op, buf, dtype, &dims, out_dims)? {
                                Ok(form) => {
                                    prepared[p] = Some(Arc::new(Prepared { form, dtype, dims }));
                                    *layout += 1;
                                }
                                Err(buf) => params[p] = Some(Arc::new(Held { buf, dtype, dims })),
                            },
                            // Another executor reads the buffer too: prepare a copy.
                            Err(held) => match engine.prepare(op, held.arg(), out_dims)? {
                                Some(form) => {
                                    prepared[p] = Some(Arc::new(Prepared { form, dtype: held.dtype, dims: held.dims.clone() }));
                                    *layout += 1;
                                }
                                None => params[p] = Some(held),
                            },
                        }
                    }
                }
                Slot::Param(p) if !self.schedule.unprepared_params.contains(&p) && params[p].take().is_some() => *layout += 1,
                Slot::Const(c) if self.prepared_consts[c].is_none() => {
                    let arg = Arg { dtype: value.dtype, dims: &value.dims, buf: self.consts[c].as_ref(), offset: 0, len: value.bytes() };
                    self.prepared_consts[c] = engine.prepare(&self.graph.node(step.node).op, arg, out_dims)?;
                    self.recording = None;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every parameter this plan reads is set, with the dims the plan was made for.
    fn check_params(&self, params: &Params<E::Buffer>, prepared: &Forms<E::Prepared>) -> Result<()> {
        let names = self.graph.params();
        for (p, (name, v)) in names.iter().enumerate() {
            let want = self.schedule.value(*v).dims.as_slice();
            let Some((_, have)) = held_type(params, prepared, p) else {
                return Err(RuntimeError::MissingParam { name: name.to_string() });
            };
            if have != want {
                return Err(RuntimeError::Backend {
                    backend: "executor".into(),
                    msg: format!("parameter `{name}` holds dims {have:?}, but these inputs need {want:?}"),
                });
            }
        }
        Ok(())
    }

    /// Launches one step (hoisted or scheduled) with its prepared weight, then its
    /// write-backs.
    fn launch(&self, engine: &E, params: &Params<E::Buffer>, empty: &E::Buffer, step: &Step, prepared: Option<&E::Prepared>) -> Result<()> {
        let node = self.graph.node(step.node);
        let kernel_error = |msg| RuntimeError::Kernel { op: node.op.kind().to_string(), node: step.node.0, msg };
        let value = |v: &ValueId| self.schedule.value(*v);
        let mut ins = Vec::with_capacity(node.inputs.len());
        let mut state = None;
        for (i, v) in node.inputs.iter().enumerate() {
            let arg = self.arg(params, empty, value(v));
            match step.state {
                Some((operand, _)) if operand == i => state = Some((i, arg)),
                _ => ins.push(arg),
            }
        }
        let outs: Vec<_> = self.schedule.values[step.node.index()].iter().filter(|v| !matches!(v.slot, Slot::Param(_))).map(|v| self.arg(params, empty, v)).collect();
        // SAFETY: the schedule gives each output its own arena range (or constant), disjoint
        // from every value live at this step, and a state parameter is read by no other operand.
        unsafe { engine.launch(&node.op, &ins, &outs, state, prepared) }.map_err(kernel_error)?;
        for &(o, p) in &step.write_back {
            let value = &self.schedule.values[step.node.index()][o];
            let target = Value { slot: Slot::Param(p), ..value.clone() };
            engine.copy(self.arg(params, empty, value), self.arg(params, empty, &target))?;
        }
        Ok(())
    }

    /// Puts the inputs into the arena and runs the schedule: with `profiling`, timing each
    /// step; otherwise replaying the engine's recording of the steps where it was made at this
    /// parameter `layout`, else recording them as they run.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        engine: &E,
        params: &Params<E::Buffer>,
        prepared: &Forms<E::Prepared>,
        empty: &E::Buffer,
        inputs: &[Feed<'_, E::Buffer>],
        profiling: bool,
        layout: u64,
    ) -> Result<()> {
        if profiling && self.times.len() != self.schedule.steps.len() {
            self.times = vec![(0, Duration::ZERO); self.schedule.steps.len()];
        }
        for (id, feed) in self.schedule.inputs.iter().zip(inputs) {
            let value = &self.schedule.values[id.index()][0];
            let Slot::Arena { offset, .. } = value.slot else { continue };
            let dst = Arg { dtype: value.dtype, dims: &value.dims, buf: &self.arena, offset, len: value.bytes() };
            match feed {
                Feed::Host(t) => engine.upload(&self.arena, offset, t.bytes())?,
                Feed::Device(buf, _) => engine.copy(Arg { buf, offset: 0, ..dst }, dst)?,
            }
        }
        if !profiling {
            if let Some((at, recording)) = &self.recording {
                if *at == layout {
                    return engine.replay(recording);
                }
            }
            let recording = engine.record(&mut || (0..self.schedule.steps.len()).try_for_each(|i| self.step(engine, params, prepared, empty, i)))?;
            self.recording = recording.map(|r| (layout, r));
            return Ok(());
        }
        for i in 0..self.schedule.steps.len() {
            let started = Instant::now();
            self.step(engine, params, prepared, empty, i)?;
            engine.sync()?;
            self.times[i].0 += 1;
            self.times[i].1 += started.elapsed();
        }
        Ok(())
    }

    /// Launches scheduled step `i` with its prepared weight.
    fn step(&self, engine: &E, params: &Params<E::Buffer>, prepared: &Forms<E::Prepared>, empty: &E::Buffer, i: usize) -> Result<()> {
        let step = &self.schedule.steps[i];
        let weight = match step.weight {
            Some((_, Slot::Param(p))) => prepared[p].as_ref().map(|w| &w.form),
            Some((_, Slot::Const(c))) => self.prepared_consts[c].as_ref(),
            _ => None,
        };
        self.launch(engine, params, empty, step, weight)
    }
}

impl<E: Engine> Executable for Executor<E> {
    fn set_param(&mut self, index: usize, value: Tensor) -> Result<()> {
        let (dtype, dims) = (value.dtype(), value.shape().to_vec());
        self.params[index] = Some(Arc::new(Held { buf: self.engine.adopt(value)?, dtype, dims }));
        self.prepared[index] = None;
        self.epoch += 1;
        self.layout += 1;
        Ok(())
    }

    /// The bytes go straight into a buffer of the engine's.
    fn set_param_bytes(&mut self, index: usize, dtype: DType, dims: &[usize], bytes: &[u8]) -> Result<()> {
        let buf = self.engine.alloc(bytes.len())?;
        self.engine.upload(&buf, 0, bytes)?;
        self.params[index] = Some(Arc::new(Held { buf, dtype, dims: dims.to_vec() }));
        self.prepared[index] = None;
        self.epoch += 1;
        self.layout += 1;
        Ok(())
    }

    /// A parameter held only prepared is given back as it was set.
    fn param(&self, index: usize) -> Result<Option<Tensor>> {
        match (&self.params[index], &self.prepared[index]) {
            (Some(h), _) => to_host(&*self.engine, h.arg()).map(Some),
            (None, Some(prep)) => to_host(&*self.engine, prep.unprepare(&*self.engine)?.arg()).map(Some),
            (None, None) => Ok(None),
        }
    }

    fn run(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Vec<Tensor>> {
        self.run_updating(inputs, bindings, &[])
    }

    /// The updates are copies in the engine's memory: weights and optimizer state never
    /// leave the device. Every update's type is checked before the run.
    fn run_updating(&mut self, inputs: &[&Tensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<Tensor>> {
        let feeds: Vec<_> = inputs.iter().map(|t| Feed::Host(t)).collect();
        self.run_with(&feeds, bindings, updates, |ran, o| ran.download(o))
    }

    fn memory(&self) -> Memory {
        Memory::of(&*self.engine)
    }

    fn upload(&self, t: &Tensor) -> Result<DeviceTensor> {
        let buf = self.engine.alloc(t.bytes().len())?;
        self.engine.upload(&buf, 0, t.bytes())?;
        Ok(DeviceTensor::new(self.memory(), t.dtype(), t.shape(), buf))
    }

    fn download(&self, value: &DeviceTensor) -> Result<Tensor> {
        let buf = value.buffer::<E::Buffer>(self.memory(), "the downloaded value")?;
        to_host(&*self.engine, Arg { dtype: value.dtype(), dims: value.shape(), buf, offset: 0, len: value.byte_len() })
    }

    /// Inputs and outputs are copies in the engine's memory, and nothing waits for the run.
    fn submit_updating(&mut self, inputs: &[&DeviceTensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<DeviceTensor>> {
        let memory = self.memory();
        let feeds = inputs
            .iter()
            .zip(self.graph.inputs())
            .map(|(v, (name, id))| {
                let buf = v.buffer::<E::Buffer>(memory, &format!("input `{name}`"))?;
                let expected = self.graph.ty(id);
                if v.dtype() != expected.dtype {
                    return Err(RuntimeError::TypeMismatch { what: "input", name: name.to_string(), expected: expected.clone(), got: v.ty().to_string() });
                }
                Ok(Feed::Device(buf, v.shape()))
            })
            .collect::<Result<Vec<_>>>()?;
        self.run_with(&feeds, bindings, updates, |ran, o| ran.detach(o))
    }

    fn sync(&self) -> Result<()> {
        self.engine.sync()
    }

    fn arena_bytes(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Option<usize>> {
        let key = self.key(inputs.iter().map(|t| t.shape()), bindings);
        Ok(Some(self.plan_for(&key, bindings)?.schedule.arena))
    }

    fn set_profiling(&mut self, on: bool) -> bool {
        self.profiling = on;
        for plan in self.plans.values_mut() {
            plan.times.clear();
        }
        true
    }

    /// Every plan made so far first holds its weights as it will run them (prepared where the
    /// engine prepares them, and then not as given), so the copy shares the prepared forms; a
    /// plan made later prepares in each executor the weights that neither holds prepared yet.
    fn share(&mut self) -> Result<Box<dyn Executable>> {
        let engine = self.engine.clone();
        let all_set = (0..self.params.len()).all(|p| held_type(&self.params, &self.prepared, p).is_some());
        if all_set {
            let Executor { plans, params, prepared, empty, epoch, layout, .. } = self;
            for plan in plans.values_mut() {
                engine.scope(|| plan.hold_weights(&engine, params, prepared, empty, *epoch, layout))?;
            }
        }
        let mut copy = Executor::new(engine.clone(), self.graph.clone())?;
        copy.params = self.params.clone();
        copy.prepared = self.prepared.clone();
        for p in self.state_params() {
            copy.prepared[p] = None;
            copy.params[p] = match (&self.params[p], &self.prepared[p]) {
                (Some(h), _) => {
                    let buf = engine.alloc(h.bytes())?;
                    engine.copy(h.arg(), Arg { buf: &buf, ..h.arg() })?;
                    Some(Arc::new(Held { buf, dtype: h.dtype, dims: h.dims.clone() }))
                }
                (None, Some(prep)) => Some(Arc::new(prep.unprepare(&*engine)?)),
                (None, None) => None,
            };
        }
        Ok(Box::new(copy))
    }

    /// Steps of every plan (input shape) that ran while profiling.
    fn profile(&self) -> Vec<NodeTime> {
        let mut nodes = Vec::new();
        for plan in self.plans.values() {
            for (step, &(calls, total)) in plan.schedule.steps.iter().zip(&plan.times).filter(|(_, t)| t.0 > 0) {
                let op = plan.graph.node(step.node).op.kind().to_string();
                let dims = plan.schedule.values[step.node.index()].first().map(|v| v.dims.clone()).unwrap_or_default();
                nodes.push(NodeTime { node: step.node, op, dims, calls, total });
            }
        }
        nodes
    }
}
