//! A compiled graph: checks what the user passes, then hands it to the backend executable.

use crate::backend::Executable;
use crate::device_tensor::DeviceTensor;
use crate::error::{Result, RuntimeError};
use crate::profile::Profile;
use crate::tensor::Tensor;
use rlx_ir::{DType, Dim, Graph, TensorType};
use rlx_opt::partition::Partition;
use rlx_opt::DispatchReport;
use std::collections::BTreeMap;

/// Concrete sizes of the symbolic dims, read off the inputs of one run.
pub type Bindings = BTreeMap<String, usize>;

/// The result of compiling a graph for a backend.
pub struct CompiledGraph {
    graph: Graph,
    report: DispatchReport,
    inputs: Vec<(String, TensorType)>,
    params: Vec<(String, TensorType, bool)>,
    exec: Box<dyn Executable>,
    partition: Option<Partition>,
}

impl CompiledGraph {
    pub(crate) fn new(graph: Graph, report: DispatchReport, exec: Box<dyn Executable>) -> CompiledGraph {
        let inputs = graph.inputs().into_iter().map(|(n, v)| (n.to_string(), graph.ty(v).clone())).collect();
        let params = graph.params().into_iter().map(|(n, v)| (n.to_string(), graph.ty(v).clone(), false)).collect();
        CompiledGraph { graph, report, inputs, params, exec, partition: None }
    }

    pub(crate) fn with_partition(mut self, partition: Partition) -> CompiledGraph {
        self.partition = Some(partition);
        self
    }

    /// The device and host segments and the values that cross between them, when part of
    /// the graph runs on the host.
    pub fn partition(&self) -> Option<&Partition> {
        self.partition.as_ref()
    }

    /// The legalized graph the backend compiled.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// What legalization did with each op kind.
    pub fn report(&self) -> &DispatchReport {
        &self.report
    }

    /// Names and types of the inputs `run` expects.
    pub fn inputs(&self) -> impl Iterator<Item = (&str, &TensorType)> {
        self.inputs.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// Names and types of the parameters `set_param` accepts.
    pub fn params(&self) -> impl Iterator<Item = (&str, &TensorType)> {
        self.params.iter().map(|(n, t, _)| (n.as_str(), t))
    }

    /// Sets a parameter (weights are uploaded or packed once, here).
    pub fn set_param(&mut self, name: &str, value: Tensor) -> Result<()> {
        let index = self.checked_param(name, value.dtype(), value.shape())?;
        self.exec.set_param(index, value)?;
        self.params[index].2 = true;
        Ok(())
    }

    /// Sets a parameter from bytes it borrows (a memory-mapped weight file): a device backend
    /// uploads them straight from there, with no host tensor in between.
    pub fn set_param_bytes(&mut self, name: &str, dtype: DType, dims: &[usize], bytes: &[u8]) -> Result<()> {
        let index = self.checked_param(name, dtype, dims)?;
        let expected = dims.iter().product::<usize>() * dtype.size();
        if bytes.len() != expected {
            return Err(RuntimeError::DataLength { shape: dims.to_vec(), expected: dims.iter().product(), got: bytes.len() / dtype.size().max(1) });
        }
        self.exec.set_param_bytes(index, dtype, dims, bytes)?;
        self.params[index].2 = true;
        Ok(())
    }

    /// The index of parameter `name`, which a value of `dtype` and `dims` fits.
    fn checked_param(&self, name: &str, dtype: DType, dims: &[usize]) -> Result<usize> {
        let index = self.param_index(name)?;
        let expected = &self.params[index].1;
        if !matches_static(expected, dtype, dims, &mut Bindings::new()) {
            return Err(RuntimeError::TypeMismatch {
                what: "parameter",
                name: name.into(),
                expected: expected.clone(),
                got: TensorType::of(dtype, dims).to_string(),
            });
        }
        Ok(index)
    }

    /// Another compiled copy of this graph that shares its parameters instead of copying
    /// them (one set of weights in memory for all copies) and has working memory of its own:
    /// give each thread a copy, and each runs as this one would, bit for bit. Share after
    /// setting the parameters and after a first run (which lays the weights out for their
    /// kernels), so the copies share the laid-out forms too. Shared weights are only read:
    /// `set_param` or `run_updating` on one copy gives that copy a buffer of its own, and graph
    /// state (parameters updated in place) is copied.
    pub fn share(&mut self) -> Result<CompiledGraph> {
        Ok(CompiledGraph {
            graph: self.graph.clone(),
            report: self.report.clone(),
            inputs: self.inputs.clone(),
            params: self.params.clone(),
            exec: self.exec.share()?,
            partition: self.partition.clone(),
        })
    }

    /// The current value of a parameter.
    pub fn param(&self, name: &str) -> Result<Tensor> {
        let index = self.param_index(name)?;
        self.exec.param(index)?.ok_or_else(|| RuntimeError::MissingParam { name: name.into() })
    }

    fn param_index(&self, name: &str) -> Result<usize> {
        self.params.iter().position(|(n, _, _)| n == name).ok_or_else(|| RuntimeError::UnknownParam {
            name: name.into(),
            known: self.params.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Runs, then makes each output listed in `updates` the new value of its parameter
    /// (`(output index, parameter name)`): a training step's weights and optimizer state stay
    /// with the compiled graph. Returns the outputs not consumed by an update, in order.
    pub fn run_updating(&mut self, inputs: &[(&str, &Tensor)], updates: &[(usize, &str)]) -> Result<Vec<Tensor>> {
        let targets = self.targets(updates)?;
        let (ordered, bindings) = self.bind(inputs, |t| (t.dtype(), t.shape()))?;
        self.check_params_set()?;
        self.exec.run_updating(&ordered, &bindings, &targets)
    }

    /// Runs the graph on named inputs and waits for its outputs, which come in the graph's
    /// output order: the simple path. [`CompiledGraph::submit`] keeps values on the device.
    pub fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor>> {
        let (ordered, bindings) = self.bind(inputs, |t| (t.dtype(), t.shape()))?;
        self.check_params_set()?;
        self.exec.run(&ordered, &bindings)
    }

    /// `t` copied into the backend's memory, as an input for [`CompiledGraph::submit`] (of this
    /// graph or any other compiled for the same device).
    pub fn upload(&self, t: &Tensor) -> Result<DeviceTensor> {
        self.exec.upload(t)
    }

    /// `value` copied to the host, once the runs submitted before have completed.
    pub fn download(&self, value: &DeviceTensor) -> Result<Tensor> {
        self.exec.download(value)
    }

    /// Issues a run on named device values, checked as [`CompiledGraph::run`] checks its
    /// inputs, and returns its outputs without waiting: they are ready after
    /// [`CompiledGraph::sync`], and `download` or another submitted run reads them in order.
    /// Outputs can be fed straight into this or another graph of the same device.
    pub fn submit(&mut self, inputs: &[(&str, &DeviceTensor)]) -> Result<Vec<DeviceTensor>> {
        self.submit_updating(inputs, &[])
    }

    /// [`CompiledGraph::submit`] that makes each output listed in `updates` the new value of
    /// its parameter, as [`CompiledGraph::run_updating`] does: a training or decode loop that
    /// stays on the device.
    pub fn submit_updating(&mut self, inputs: &[(&str, &DeviceTensor)], updates: &[(usize, &str)]) -> Result<Vec<DeviceTensor>> {
        let targets = self.targets(updates)?;
        let (ordered, bindings) = self.bind(inputs, |v| (v.dtype(), v.shape()))?;
        let memory = self.exec.memory();
        for ((name, _), v) in self.inputs.iter().zip(&ordered) {
            if v.memory() != memory {
                return Err(RuntimeError::ForeignValue { what: format!("input `{name}`"), expected: memory.to_string(), got: v.memory().to_string() });
            }
        }
        self.check_params_set()?;
        self.exec.submit_updating(&ordered, &bindings, &targets)
    }

    /// Waits until every run submitted so far has completed.
    pub fn sync(&self) -> Result<()> {
        self.exec.sync()
    }

    /// `updates` as `(output index, parameter index)`, each output one the graph has.
    fn targets(&self, updates: &[(usize, &str)]) -> Result<Vec<(usize, usize)>> {
        let count = self.graph.outputs().len();
        updates
            .iter()
            .map(|&(o, name)| match o < count {
                true => Ok((o, self.param_index(name)?)),
                false => Err(RuntimeError::UnknownOutput { index: o, count }),
            })
            .collect()
    }

    fn check_params_set(&self) -> Result<()> {
        match self.params.iter().find(|p| !p.2) {
            Some((name, _, _)) => Err(RuntimeError::MissingParam { name: name.clone() }),
            None => Ok(()),
        }
    }

    /// The working memory the backend plans for a run on these inputs (see
    /// [`Executable::arena_bytes`]); planning needs their shapes only, not parameters.
    pub fn arena_bytes(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Option<usize>> {
        let (ordered, bindings) = self.bind(inputs, |t| (t.dtype(), t.shape()))?;
        self.exec.arena_bytes(&ordered, &bindings)
    }

    /// Turns per-node timing of the following runs on (from zero) or off; `false` where the
    /// backend cannot time its nodes.
    pub fn set_profiling(&mut self, on: bool) -> bool {
        self.exec.set_profiling(on)
    }

    /// Where the runs since profiling was turned on spent their time.
    pub fn profile(&self) -> Profile {
        Profile { nodes: self.exec.profile() }
    }

    /// The named inputs (host tensors or device values, whose dtype and dims `ty` reads) in
    /// `Graph::inputs()` order, checked against their types, with the symbols they bind.
    fn bind<'t, T>(&self, inputs: &[(&str, &'t T)], ty: impl Fn(&T) -> (DType, &[usize])) -> Result<(Vec<&'t T>, Bindings)> {
        for (name, _) in inputs {
            if !self.inputs.iter().any(|(n, _)| n == name) {
                let known = self.inputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ");
                return Err(RuntimeError::UnknownInput { name: name.to_string(), known });
            }
        }
        let mut ordered = Vec::with_capacity(self.inputs.len());
        let mut bindings = Bindings::new();
        let mut origin: BTreeMap<String, String> = BTreeMap::new();
        for (name, expected) in &self.inputs {
            let mut given = inputs.iter().filter(|(n, _)| n == name);
            let t = given.next().ok_or_else(|| RuntimeError::MissingInput { name: name.clone() })?.1;
            if given.next().is_some() {
                return Err(RuntimeError::DuplicateInput { name: name.clone() });
            }
            let mut local = Bindings::new();
            let (dtype, dims) = ty(t);
            if !matches_static(expected, dtype, dims, &mut local) {
                return Err(RuntimeError::TypeMismatch {
                    what: "input",
                    name: name.clone(),
                    expected: expected.clone(),
                    got: TensorType::of(dtype, dims).to_string(),
                });
            }
            for (sym, size) in local {
                match bindings.get(&sym) {
                    Some(&prev) if prev != size => {
                        return Err(RuntimeError::SymbolConflict {
                            symbol: sym.clone(),
                            first: prev,
                            first_from: origin[&sym].clone(),
                            second: size,
                            second_from: name.clone(),
                        })
                    }
                    _ => {
                        origin.insert(sym.clone(), name.clone());
                        bindings.insert(sym, size);
                    }
                }
            }
            ordered.push(t);
        }
        Ok((ordered, bindings))
    }
}

/// Whether `t` fits `ty` (dtype, rank, static dims), binding its symbols into `b`.
fn matches_static(ty: &TensorType, dtype: DType, dims: &[usize], b: &mut Bindings) -> bool {
    if ty.dtype != dtype || ty.rank() != dims.len() {
        return false;
    }
    ty.shape.dims().iter().zip(dims).all(|(d, &n)| match d {
        Dim::Static(s) => *s == n,
        Dim::Sym(s) => *b.entry(s.clone()).or_insert(n) == n,
    })
}
