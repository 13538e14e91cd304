//! `rlx.Trainer`: a model graph's training step (gradients + optimizer update) compiled once.

use crate::array::{to_numpy, to_tensor};
use crate::device::session;
use crate::lock::lock;
use crate::error::{self, RlxError};
use crate::graph::{Handle, PyGraph};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rlx::ir::NodeId;
use rlx::train::{Optimizer, Schedule, TrainConfig, TrainError, Trainer};
use rlx::ValueId;
use std::sync::Mutex;

fn train(e: TrainError) -> PyErr {
    match e {
        TrainError::Autodiff(e) => error::autodiff(e),
        TrainError::Runtime(e) => error::runtime(e),
        TrainError::Ir(e) => error::ir(e),
        TrainError::Checkpoint { .. } => error::FileError::new_err(e.to_string()),
        TrainError::Config(_) => RlxError::new_err(e.to_string()),
    }
}

fn optimizer(name: &str, momentum: f32, weight_decay: f32) -> PyResult<Optimizer> {
    Ok(match name {
        "sgd" => Optimizer::Sgd { momentum, nesterov: false, weight_decay },
        "nesterov" => Optimizer::Sgd { momentum, nesterov: true, weight_decay },
        "adam" => Optimizer::Adam { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay },
        "adamw" => Optimizer::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay },
        other => return Err(RlxError::new_err(format!("unknown optimizer `{other}`: sgd, nesterov, adam or adamw"))),
    })
}

#[pyclass(frozen, module = "rlx._rlx", name = "Trainer")]
pub struct PyTrainer {
    trainer: Mutex<Trainer>,
}

#[pymethods]
impl PyTrainer {
    /// Compiles the step minimising `loss` (a value of `graph`) over every parameter of the
    /// graph. `warmup`/`total` > 0 give a warm-up cosine schedule peaking at `lr`.
    #[new]
    #[pyo3(signature = (graph, loss, optimizer = "adamw", lr = 1e-3, momentum = 0.0, weight_decay = 0.0, clip_norm = None, warmup = 0, total = 0, device = "cpu"))]
    #[allow(clippy::too_many_arguments)]
    fn new(py: Python<'_>, graph: &PyGraph, loss: Handle, optimizer: &str, lr: f32, momentum: f32, weight_decay: f32, clip_norm: Option<f32>, warmup: u64, total: u64, device: &str) -> PyResult<PyTrainer> {
        let schedule = if total > 0 { Schedule::WarmupCosine { peak: lr, min: 0.0, warmup, total } } else { Schedule::Constant(lr) };
        let mut config = TrainConfig::new(self::optimizer(optimizer, momentum, weight_decay)?, schedule);
        if let Some(max) = clip_norm {
            config = config.with_clip_norm(max);
        }
        let loss = ValueId::new(NodeId(loss.0), loss.1);
        if graph.graph.try_ty(loss).is_none() {
            return Err(RlxError::new_err("the loss is not a value of this graph"));
        }
        let session = session(device)?;
        let g = &graph.graph;
        let trainer = py.detach(|| Trainer::new(&session, g, loss, config)).map_err(train)?;
        Ok(PyTrainer { trainer: Mutex::new(trainer) })
    }

    /// One step on a batch (a dict of arrays by input name); returns the loss before the update.
    fn step(&self, py: Python<'_>, batch: &Bound<'_, PyDict>) -> PyResult<f32> {
        let mut named = Vec::with_capacity(batch.len());
        for (k, v) in batch.iter() {
            named.push((k.extract::<String>()?, to_tensor(&v, None)?));
        }
        let inputs: Vec<(&str, &rlx::Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let mut guard = lock(py, &self.trainer)?;
        let trainer = &mut *guard;
        py.detach(|| trainer.step(&inputs)).map_err(train)
    }

    fn set_param(&self, py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = to_tensor(value, None)?;
        let mut guard = lock(py, &self.trainer)?;
        let trainer = &mut *guard;
        py.detach(|| trainer.set_param(name, t)).map_err(train)
    }

    fn param<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let t = lock(py, &self.trainer)?.param(name).map_err(train)?;
        to_numpy(py, t)
    }

    /// The trainable parameters' names.
    fn params(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(lock(py, &self.trainer)?.params().to_vec())
    }

    #[getter]
    fn steps(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(lock(py, &self.trainer)?.steps())
    }

    /// The learning rate of the next step.
    #[getter]
    fn lr(&self, py: Python<'_>) -> PyResult<f32> {
        Ok(lock(py, &self.trainer)?.lr())
    }

    /// Writes parameters, optimizer state and step count to a safetensors file.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        lock(py, &self.trainer)?.save(path).map_err(train)
    }

    /// Resumes from a file `save` wrote.
    fn load(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        lock(py, &self.trainer)?.load(path).map_err(train)
    }
}

