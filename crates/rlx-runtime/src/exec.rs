//! The executor every backend runs on: per concrete input shape, a [`Schedule`] (planned by
//! rlx-opt) over one arena of the backend's memory; runs do no shape work and no allocation
//! beyond their host outputs. The backend supplies only an [`Engine`].
//!
//! Weights: a parameter or constant operand that the engine takes prepared
//! ([`Engine::prepared_operand`]) is laid out once, on first use — per parameter across plans,
//! again only after it is set anew; per constant in its plan. A parameter that the running
//! plan reads only prepared gives up its buffer as given, laid out in it where the engine can
//! ([`Engine::prepare_owned`]: weights take their memory once); `param` and plans that read it
//! as given get it back from the prepared form.
//!
//! Hoisted steps (nodes of parameters and constants alone) run before a plan's first run and
//! again after a parameter changes. Graph state ([`Step::state`], [`Step::write_back`]) is
//! updated in the parameter's own buffer, so it persists across runs; `run_updating` makes
//! outputs the new values of parameters with a copy in the backend's memory.

use crate::compiled::Bindings;
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
    /// Per parameter: its buffer as given (with its dtype and dims), while held.
    params: Vec<Option<Held<E::Buffer>>>,
    /// Per parameter: its prepared form, once a plan's step has needed it.
    prepared: Vec<Option<Prepared<E::Prepared>>>,
    plans: HashMap<Vec<Vec<usize>>, Plan<E>>,
    /// A zero-byte buffer: the operand view of a parameter held only prepared.
    empty: E::Buffer,
    profiling: bool,
    /// Counts parameter changes: a plan's hoisted steps rerun when it moved.
    epoch: u64,
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
fn held_type<'a, B, P>(params: &'a [Option<Held<B>>], prepared: &'a [Option<Prepared<P>>], p: usize) -> Option<TypeOf<'a>> {
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

/// One concrete set of input shapes: its specialized graph, schedule and memory.
struct Plan<E: Engine> {
    graph: Graph,
    schedule: Schedule,
    consts: Vec<E::Buffer>,
    /// Per constant, its prepared form once a step has needed it.
    prepared_consts: Vec<Option<E::Prepared>>,
    arena: E::Buffer,
    /// The parameter epoch the hoisted outputs were computed at.
    hoisted_at: Option<u64>,
    /// Per step, its calls and their time while profiling (empty otherwise).
    times: Vec<(u64, Duration)>,
}

impl<E: Engine> Executor<E> {
    /// An executor for a legalized graph; when every input is static its one plan is made
    /// now, so that planning errors surface at compile time.
    pub fn new(engine: Arc<E>, graph: Graph) -> Result<Executor<E>> {
        let n = graph.params().len();
        let empty = engine.alloc(0)?;
        let mut exec = Executor {
            engine,
            graph,
            params: (0..n).map(|_| None).collect(),
            prepared: (0..n).map(|_| None).collect(),
            plans: HashMap::new(),
            empty,
            profiling: false,
            epoch: 0,
        };
        let static_inputs: Option<Vec<Vec<usize>>> = exec.graph.inputs().iter().map(|(_, v)| exec.graph.ty(*v).shape.as_static()).collect();
        if let Some(shapes) = static_inputs {
            exec.plan_for(&shapes, &Bindings::new())?;
        }
        Ok(exec)
    }

    /// The plan for these input dims, made on first use.
    fn plan_for(&mut self, dims: &[Vec<usize>], bindings: &Bindings) -> Result<&mut Plan<E>> {
        if !self.plans.contains_key(dims) {
            let plan = Plan::new(&*self.engine, &self.graph, dims, bindings)?;
            self.plans.insert(dims.to_vec(), plan);
        }
        Ok(self.plans.get_mut(dims).expect("plan was just inserted"))
    }

    /// Runs the plan for `inputs`, leaving results in the plan's memory, where `after` reads
    /// them (and may copy them into parameters) before the next run.
    fn run_with<R: Send>(&mut self, inputs: &[&Tensor], bindings: &Bindings, after: impl FnOnce(&mut Ran<'_, E>) -> Result<R> + Send) -> Result<R> {
        let dims: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
        let engine = self.engine.clone();
        self.plan_for(&dims, bindings)?;
        let Executor { plans, params, prepared, empty, profiling, epoch, .. } = self;
        let plan = plans.get_mut(&dims).expect("plan was made above");
        let (profiling, epoch) = (*profiling, *epoch);
        engine.scope(|| {
            plan.hold_weights(&engine, params, prepared, empty, epoch)?;
            plan.run(&engine, params, prepared, empty, inputs, profiling)?;
            after(&mut Ran { engine: &engine, plan, params, prepared, empty })
        })
    }
}

/// A value's dtype and dims.
type TypeOf<'a> = (DType, &'a [usize]);

/// A plan right after its run, with the executor's parameters: what reads its results.
struct Ran<'a, E: Engine> {
    engine: &'a E,
    plan: &'a Plan<E>,
    params: &'a mut [Option<Held<E::Buffer>>],
    prepared: &'a mut [Option<Prepared<E::Prepared>>],
    empty: &'a E::Buffer,
}

impl<E: Engine> Ran<'_, E> {
    /// Graph output `o` copied to the host.
    fn download(&self, o: usize) -> Result<Tensor> {
        let v = self.plan.graph.outputs()[o];
        to_host(self.engine, self.plan.arg(self.params, self.empty, self.plan.schedule.value(v)))
    }

    /// Makes graph output `o` the new value of parameter `p`, copied in the engine's memory
    /// (into the parameter's buffer when it holds one of the same size).
    fn update(&mut self, o: usize, p: usize) -> Result<()> {
        let v = self.plan.graph.outputs()[o];
        let value = self.plan.schedule.value(v);
        if value.slot == Slot::Param(p) {
            return Ok(());
        }
        let fits = self.params[p].as_ref().is_some_and(|h| h.dtype == value.dtype && h.dims == value.dims);
        if !fits {
            let buf = self.engine.alloc(value.bytes())?;
            self.params[p] = Some(Held { buf, dtype: value.dtype, dims: value.dims.clone() });
        }
        let src = self.plan.arg(self.params, self.empty, value);
        let target = Value { slot: Slot::Param(p), ..value.clone() };
        let dst = self.plan.arg(self.params, self.empty, &target);
        self.engine.copy(src, dst)?;
        self.prepared[p] = None;
        Ok(())
    }

    /// The dtype and dims of graph output `o` and of parameter `p`.
    fn types(&self, o: usize, p: usize) -> (TypeOf<'_>, Option<TypeOf<'_>>) {
        let value = self.plan.schedule.value(self.plan.graph.outputs()[o]);
        ((value.dtype, value.dims.as_slice()), held_type(self.params, self.prepared, p))
    }
}

impl<E: Engine> Plan<E> {
    fn new(engine: &E, g: &Graph, dims: &[Vec<usize>], bindings: &Bindings) -> Result<Plan<E>> {
        let inputs = g.inputs();
        let types: Vec<_> = inputs.iter().zip(dims).map(|((_, v), d)| rlx_ir::TensorType::of(g.ty(*v).dtype, d)).collect();
        let graph = specialize(g, &types, bindings)?;
        let prepares = |op: &Op, operands: &[(DType, &[usize])]| engine.prepared_operand(op, operands);
        let schedule = Schedule::plan(&graph, engine.align(), &prepares)?;
        let consts = schedule
            .consts
            .iter()
            .map(|&v| {
                let buf = engine.alloc(schedule.value(v).bytes())?;
                if let Op::Constant(c) = &graph.node(v.node).op {
                    engine.upload(&buf, 0, &c.data)?;
                }
                Ok(buf)
            })
            .collect::<Result<Vec<_>>>()?;
        let arena = engine.alloc(schedule.arena)?;
        let prepared_consts = (0..consts.len()).map(|_| None).collect();
        Ok(Plan { graph, schedule, consts, prepared_consts, arena, hoisted_at: None, times: Vec::new() })
    }

    /// The operand view of a value.
    fn arg<'a>(&'a self, params: &'a [Option<Held<E::Buffer>>], empty: &'a E::Buffer, value: &'a Value) -> Arg<'a, E::Buffer> {
        let (buf, offset, len) = match value.slot {
            Slot::Arena { offset, len } => (&self.arena, offset, len),
            Slot::Param(p) => match &params[p] {
                Some(h) => (&h.buf, 0, h.bytes()),
                None => (empty, 0, 0),
            },
            Slot::Const(c) => (&self.consts[c], 0, value.bytes()),
        };
        Arg { dtype: value.dtype, dims: &value.dims, buf, offset, len }
    }

    /// Before a run: parameters read as given get their buffer back where only a prepared
    /// form is held; the hoisted steps rerun if a parameter changed; then every weight a step
    /// takes prepared is prepared if it is not yet, and a parameter this plan reads only
    /// prepared gives up its buffer as given.
    fn hold_weights(
        &mut self,
        engine: &E,
        params: &mut [Option<Held<E::Buffer>>],
        prepared: &mut [Option<Prepared<E::Prepared>>],
        empty: &E::Buffer,
        epoch: u64,
    ) -> Result<()> {
        for &p in &self.schedule.unprepared_params {
            if let (None, Some(prep)) = (&params[p], &prepared[p]) {
                params[p] = Some(prep.unprepare(engine)?);
            }
        }
        self.check_params(params, prepared)?;
        if self.hoisted_at != Some(epoch) {
            for (c, v) in self.schedule.consts.iter().enumerate() {
                if !matches!(self.graph.node(v.node).op, Op::Constant(_)) {
                    self.prepared_consts[c] = None;
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
                            prepared[p] = form.map(|form| Prepared { form, dtype: h.dtype, dims: h.dims.clone() });
                        }
                    } else if let Some(Held { buf, dtype, dims }) = params[p].take() {
                        match engine.prepare_owned(op, buf, dtype, &dims, out_dims)? {
                            Ok(form) => prepared[p] = Some(Prepared { form, dtype, dims }),
                            Err(buf) => params[p] = Some(Held { buf, dtype, dims }),
                        }
                    }
                }
                Slot::Param(p) if !self.schedule.unprepared_params.contains(&p) => params[p] = None,
                Slot::Const(c) if self.prepared_consts[c].is_none() => {
                    let arg = Arg { dtype: value.dtype, dims: &value.dims, buf: &self.consts[c], offset: 0, len: value.bytes() };
                    self.prepared_consts[c] = engine.prepare(&self.graph.node(step.node).op, arg, out_dims)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every parameter this plan reads is set, with the dims the plan was made for.
    fn check_params(&self, params: &[Option<Held<E::Buffer>>], prepared: &[Option<Prepared<E::Prepared>>]) -> Result<()> {
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
    fn launch(&self, engine: &E, params: &[Option<Held<E::Buffer>>], empty: &E::Buffer, step: &Step, prepared: Option<&E::Prepared>) -> Result<()> {
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

    /// Copies the inputs in and runs the schedule; with `profiling`, timing each step.
    fn run(
        &mut self,
        engine: &E,
        params: &[Option<Held<E::Buffer>>],
        prepared: &[Option<Prepared<E::Prepared>>],
        empty: &E::Buffer,
        inputs: &[&Tensor],
        profiling: bool,
    ) -> Result<()> {
        if profiling && self.times.len() != self.schedule.steps.len() {
            self.times = vec![(0, Duration::ZERO); self.schedule.steps.len()];
        }
        for (id, t) in self.schedule.inputs.iter().zip(inputs) {
            if let Slot::Arena { offset, .. } = self.schedule.values[id.index()][0].slot {
                engine.upload(&self.arena, offset, t.bytes())?;
            }
        }
        for i in 0..self.schedule.steps.len() {
            let started = profiling.then(Instant::now);
            let step = &self.schedule.steps[i];
            let weight = match step.weight {
                Some((_, Slot::Param(p))) => prepared[p].as_ref().map(|w| &w.form),
                Some((_, Slot::Const(c))) => self.prepared_consts[c].as_ref(),
                _ => None,
            };
            self.launch(engine, params, empty, step, weight)?;
            if let Some(t) = started {
                engine.sync()?;
                self.times[i].0 += 1;
                self.times[i].1 += t.elapsed();
            }
        }
        Ok(())
    }
}

impl<E: Engine> Executable for Executor<E> {
    fn set_param(&mut self, index: usize, value: Tensor) -> Result<()> {
        let (dtype, dims) = (value.dtype(), value.shape().to_vec());
        self.params[index] = Some(Held { buf: self.engine.adopt(value)?, dtype, dims });
        self.prepared[index] = None;
        self.epoch += 1;
        Ok(())
    }

    /// The bytes go straight into a buffer of the engine's.
    fn set_param_bytes(&mut self, index: usize, dtype: DType, dims: &[usize], bytes: &[u8]) -> Result<()> {
        let buf = self.engine.alloc(bytes.len())?;
        self.engine.upload(&buf, 0, bytes)?;
        self.params[index] = Some(Held { buf, dtype, dims: dims.to_vec() });
        self.prepared[index] = None;
        self.epoch += 1;
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
        self.run_with(inputs, bindings, |ran| (0..ran.plan.graph.outputs().len()).map(|o| ran.download(o)).collect())
    }

    /// The updates are copies in the engine's memory: weights and optimizer state never
    /// leave the device. Every update's type is checked before any is made.
    fn run_updating(&mut self, inputs: &[&Tensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<Tensor>> {
        let names: Vec<String> = self.graph.params().iter().map(|(n, _)| n.to_string()).collect();
        let outputs = self.run_with(inputs, bindings, |ran| {
            for &(o, p) in updates {
                if let ((dtype, dims), Some(held)) = ran.types(o, p) {
                    if held != (dtype, dims) {
                        return Err(RuntimeError::TypeMismatch {
                            what: "parameter update",
                            name: names[p].clone(),
                            expected: rlx_ir::TensorType::of(held.0, held.1),
                            got: rlx_ir::TensorType::of(dtype, dims).to_string(),
                        });
                    }
                }
            }
            for &(o, p) in updates {
                ran.update(o, p)?;
            }
            (0..ran.plan.graph.outputs().len()).filter(|o| !updates.iter().any(|u| u.0 == *o)).map(|o| ran.download(o)).collect()
        })?;
        if !updates.is_empty() {
            self.epoch += 1;
        }
        Ok(outputs)
    }

    fn arena_bytes(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Option<usize>> {
        let dims: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape().to_vec()).collect();
        Ok(Some(self.plan_for(&dims, bindings)?.schedule.arena))
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
            for (step, &(calls, total)) in plan.schedule.steps.iter().zip(&plan.times).filter(|(_, t)| t.0 > 0) {
                let op = plan.graph.node(step.node).op.kind().to_string();
                let dims = plan.schedule.values[step.node.index()].first().map(|v| v.dims.clone()).unwrap_or_default();
                nodes.push(NodeTime { node: step.node, op, dims, calls, total });
            }
        }
        nodes
    }
}
