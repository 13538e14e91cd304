//! The compiled training step.

use crate::optim::{clip_global_norm, StepInputs};
use crate::{Optimizer, Precision, Result, Schedule, TrainError};
use rlx_autodiff::{GradOptions, Remat};
use rlx_ir::{Graph, TensorType, ValueId};
use rlx_runtime::{CompiledGraph, Profile, Session, Tensor};

/// How to train: the optimizer, the learning-rate schedule, optional clipping,
/// rematerialisation and mixed precision.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    pub optimizer: Optimizer,
    pub schedule: Schedule,
    /// Clip the global gradient norm to this value before the update.
    pub clip_norm: Option<f32>,
    /// Which activations the step keeps for the backward sweep; the rest it recomputes
    /// (less memory for more compute; the same parameters either way).
    pub remat: Remat,
    /// The dtypes the step computes in (parameters and optimizer state stay f32).
    pub precision: Precision,
}

impl TrainConfig {
    /// `optimizer` with `schedule`, no clipping, every activation kept.
    pub fn new(optimizer: Optimizer, schedule: Schedule) -> TrainConfig {
        TrainConfig { optimizer, schedule, clip_norm: None, remat: Remat::KeepAll, precision: Precision::Full }
    }

    /// Clips the global gradient norm to `max` before each update.
    pub fn with_clip_norm(mut self, max: f32) -> TrainConfig {
        self.clip_norm = Some(max);
        self
    }

    /// Trains with rematerialisation (activation checkpointing).
    pub fn with_remat(mut self, remat: Remat) -> TrainConfig {
        self.remat = remat;
        self
    }

    /// Trains in `precision` (mixed: products in a 16-bit float over f32 master weights).
    pub fn with_precision(mut self, precision: Precision) -> TrainConfig {
        self.precision = precision;
        self
    }
}

/// Names of the scalar inputs the step graph adds.
const LR: &str = "__lr";
const STEP: &str = "__step";

/// A model graph's training step, compiled once: run [`Trainer::step`] per batch.
pub struct Trainer {
    compiled: CompiledGraph,
    config: TrainConfig,
    /// Every trainable parameter, then every optimizer state slot, in output order.
    updated: Vec<String>,
    params: Vec<String>,
    step: u64,
}

/// A training step as a graph, before compilation: outputs the loss, then each trained
/// parameter's new value, then each optimizer state slot's.
pub struct StepGraph {
    pub graph: Graph,
    /// The trained parameters, in output order.
    pub params: Vec<String>,
    /// The optimizer state slots with their types, in output order.
    pub state: Vec<(String, TensorType)>,
}

impl StepGraph {
    /// The step for `loss` of `model` (a scalar value of the graph), training every
    /// floating-point parameter of `model`.
    pub fn new(model: &Graph, loss: ValueId, config: &TrainConfig) -> Result<StepGraph> {
        if !model.ty(loss).dtype.is_float() || model.ty(loss).rank() != 0 {
            return Err(TrainError::Config(format!("the loss must be a float scalar, got {}", model.ty(loss))));
        }
        let params: Vec<String> =
            model.params().iter().filter(|(_, v)| model.ty(*v).dtype.is_float()).map(|(n, _)| n.to_string()).collect();
        let names: Vec<&str> = params.iter().map(String::as_str).collect();
        let mut scored = model.clone();
        scored.set_outputs(vec![loss])?;
        let scored = config.precision.apply(&scored)?;
        let mut g = rlx_autodiff::grad_with(&scored, scored.outputs()[0], &names, &GradOptions { remat: config.remat.clone() })?;
        let outs = g.outputs().to_vec();
        let loss_out = outs[0];
        let mut grads = outs[1..].to_vec();
        if let Some(max) = config.clip_norm {
            grads = clip_global_norm(&mut g, &grads, max)?;
        }
        let dt = model.ty(loss).dtype;
        let at = StepInputs { lr: g.input(LR, TensorType::of(dt, &[])), step: g.input(STEP, TensorType::of(dt, &[])) };
        let sources: Vec<(String, ValueId)> = g.params().into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        let mut new_params = Vec::new();
        let mut states = Vec::new();
        for (name, grad) in params.iter().zip(grads) {
            let p = sources.iter().find(|(n, _)| n == name).map(|(_, v)| *v).expect("a trained parameter is in the graph");
            let u = config.optimizer.update(&mut g, name, p, grad, &at)?;
            new_params.push(u.param);
            states.extend(u.state);
        }
        let mut results = vec![loss_out];
        results.extend(&new_params);
        results.extend(states.iter().map(|(_, _, new)| *new));
        g.set_outputs(results)?;
        let state = states.iter().map(|(n, v, _)| (n.clone(), g.ty(*v).clone())).collect();
        Ok(StepGraph { graph: g, params, state })
    }
}

impl Trainer {
    /// Builds ([`StepGraph::new`]) and compiles the step for `loss` of `model`. Parameters
    /// start unset (set them with [`Trainer::set_param`]); optimizer state starts at zero.
    pub fn new(session: &Session, model: &Graph, loss: ValueId, config: TrainConfig) -> Result<Trainer> {
        let StepGraph { graph, params, state: state_params } = StepGraph::new(model, loss, &config)?;
        let mut compiled = session.compile(&graph)?;
        for (name, ty) in &state_params {
            let dims = ty
                .shape
                .dims()
                .iter()
                .map(|d| d.as_static().ok_or_else(|| TrainError::Config(format!("optimizer state `{name}` needs a static shape, got {ty}"))))
                .collect::<Result<Vec<usize>>>()?;
            compiled.set_param(name, Tensor::zeros(ty.dtype, &dims))?;
        }
        let updated = params.iter().cloned().chain(state_params.into_iter().map(|(n, _)| n)).collect();
        Ok(Trainer { compiled, config, updated, params, step: 0 })
    }

    /// Sets a trained parameter (or a state slot `"<param>.m"` etc. when restoring).
    pub fn set_param(&mut self, name: &str, value: Tensor) -> Result<()> {
        Ok(self.compiled.set_param(name, value)?)
    }

    /// The current value of a parameter or state slot.
    pub fn param(&self, name: &str) -> Result<Tensor> {
        Ok(self.compiled.param(name)?)
    }

    /// The step graph as compiled (legalized and fused for the session's backend).
    pub fn graph(&self) -> &Graph {
        self.compiled.graph()
    }

    /// Names of the trained parameters.
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// Names of everything a step rewrites: parameters, then optimizer state.
    pub fn updated(&self) -> &[String] {
        &self.updated
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    pub(crate) fn set_steps(&mut self, step: u64) {
        self.step = step;
    }

    /// The learning rate the next step will use.
    pub fn lr(&self) -> f32 {
        self.config.schedule.lr(self.step)
    }

    /// One optimizer step on a batch (the model's inputs by name); returns the loss before
    /// the update.
    pub fn step(&mut self, batch: &[(&str, &Tensor)]) -> Result<f32> {
        let (lr, t) = self.scalars();
        let inputs = with_scalars(batch, &lr, &t);
        let updates: Vec<(usize, &str)> = self.updated.iter().enumerate().map(|(i, n)| (1 + i, n.as_str())).collect();
        let out = self.compiled.run_updating(&inputs, &updates)?;
        self.step += 1;
        let loss = out.first().ok_or_else(|| TrainError::Config("the step graph returned no loss".into()))?;
        Ok(loss.to_f64_vec()[0] as f32)
    }

    /// The working memory a step on batches shaped like `batch` takes (the backend's planned
    /// arena, see [`rlx_runtime::CompiledGraph::arena_bytes`]); `None` if it plans none.
    pub fn arena_bytes(&mut self, batch: &[(&str, &Tensor)]) -> Result<Option<usize>> {
        let (lr, t) = self.scalars();
        Ok(self.compiled.arena_bytes(&with_scalars(batch, &lr, &t))?)
    }

    /// Turns per-node timing of the following steps on (from zero) or off; `false` where the
    /// backend cannot time its nodes.
    pub fn set_profiling(&mut self, on: bool) -> bool {
        self.compiled.set_profiling(on)
    }

    /// Where the steps since profiling was turned on spent their time.
    pub fn profile(&self) -> Profile {
        self.compiled.profile()
    }

    /// The learning rate and step number the next step reads.
    fn scalars(&self) -> (Tensor, Tensor) {
        (Tensor::scalar(self.lr()), Tensor::scalar((self.step + 1) as f32))
    }
}

/// `batch` with the step graph's scalar inputs added.
fn with_scalars<'a>(batch: &[(&'a str, &'a Tensor)], lr: &'a Tensor, t: &'a Tensor) -> Vec<(&'a str, &'a Tensor)> {
    let mut inputs = batch.to_vec();
    inputs.push((LR, lr));
    inputs.push((STEP, t));
    inputs
}
