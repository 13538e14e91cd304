//! A graph split between a device backend and the host ([`rlx_opt::partition`]): each segment
//! compiled by its own backend, run in order. A value that crosses stays in the memory of the
//! side that made it until the other side reads it, and moves once however many segments read
//! it: values passing between device segments never leave the device. Device segments are
//! submitted without waiting; a host segment waits for the device values it reads. Parameters
//! live in every segment that reads them; an update of a parameter that only its own segment
//! reads stays in that segment's memory.

use crate::backend::Executable;
use crate::compiled::Bindings;
use crate::device_tensor::{DeviceTensor, Memory};
use crate::error::{Result, RuntimeError};
use crate::profile::NodeTime;
use crate::specialize::specialize;
use crate::tensor::Tensor;
use rlx_ir::{DType, Graph, Op, ValueId};
use rlx_opt::partition::{Partition, Place, Segment, Source};
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// One compiled segment with its parameters' indices in the whole graph.
struct Part {
    segment: Segment,
    exec: Box<dyn Executable>,
    /// Per parameter of the segment's graph, its index in the whole graph's parameters.
    params: Vec<usize>,
}

/// The whole graph's executable over its segments.
pub struct Partitioned {
    graph: Graph,
    parts: Vec<Part>,
    /// The part whose executable moves values between host and device: the first device
    /// segment's (the first segment's when every segment runs on the host).
    keeper: usize,
}

/// A value between segments: in the memory of the side that made it and, once the other side
/// has read it, in that side's too.
enum Crossing<'a> {
    Host(Cow<'a, Tensor>, Option<DeviceTensor>),
    Device(DeviceTensor, Option<Tensor>),
}

impl Crossing<'_> {
    /// Its host form, downloaded through `keeper` when first asked for.
    fn on_host(&mut self, keeper: &dyn Executable) -> Result<&Tensor> {
        match self {
            Crossing::Host(t, _) => Ok(t),
            Crossing::Device(_, Some(t)) => Ok(t),
            Crossing::Device(d, down @ None) => Ok(down.insert(keeper.download(d)?)),
        }
    }

    /// Its device form, uploaded through `keeper` when first asked for.
    fn on_device(&mut self, keeper: &dyn Executable) -> Result<&DeviceTensor> {
        match self {
            Crossing::Device(d, _) | Crossing::Host(_, Some(d)) => Ok(d),
            Crossing::Host(t, up @ None) => Ok(up.insert(keeper.upload(t)?)),
        }
    }

    /// Its host form, if it has one.
    fn host(&self) -> Option<&Tensor> {
        match self {
            Crossing::Host(t, _) => Some(t),
            Crossing::Device(_, down) => down.as_ref(),
        }
    }
}

/// The values of one run by their ids in the whole graph: its inputs, then what segments make.
type Values<'a> = HashMap<ValueId, Crossing<'a>>;

/// Value `k`, which a segment reads.
fn read<'v, 'a>(values: &'v mut Values<'a>, k: &ValueId) -> &'v mut Crossing<'a> {
    values.get_mut(k).expect("a segment reads only values made before it")
}

impl Partitioned {
    /// `compile` builds each segment's executable on its side's backend.
    pub fn new(graph: Graph, partition: Partition, mut compile: impl FnMut(&Segment) -> Result<Box<dyn Executable>>) -> Result<Partitioned> {
        let names: Vec<String> = graph.params().iter().map(|(n, _)| n.to_string()).collect();
        let mut parts = Vec::with_capacity(partition.segments.len());
        for segment in partition.segments {
            let params = segment.graph.params().iter().map(|(n, _)| names.iter().position(|m| m == n).expect("a segment's parameters are the graph's")).collect();
            let exec = compile(&segment)?;
            parts.push(Part { segment, exec, params });
        }
        let keeper = parts.iter().position(|p| p.segment.place == Place::Device).unwrap_or(0);
        Ok(Partitioned { graph, parts, keeper })
    }

    /// The executable that moves values between host and device.
    fn keeper(&self) -> &dyn Executable {
        &*self.parts[self.keeper].exec
    }

    /// The segments holding parameter `p`, with its index in each.
    fn holders(&self, p: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.parts.iter().enumerate().filter_map(move |(s, part)| Some((s, part.params.iter().position(|&q| q == p)?)))
    }

    /// `inputs` as the first values of a run.
    fn values<'a>(&self, inputs: impl IntoIterator<Item = Crossing<'a>>) -> Values<'a> {
        self.graph.inputs().iter().map(|(_, v)| *v).zip(inputs).collect()
    }

    /// Runs every segment, adding the values it makes to `values`: a device segment's inputs
    /// as device values, a host segment's as host tensors. `local` gives each segment's
    /// in-place updates `(segment output, segment parameter)`.
    fn run_parts(&mut self, values: &mut Values<'_>, bindings: &Bindings, local: &[Vec<(usize, usize)>]) -> Result<()> {
        let inputs: Vec<ValueId> = self.graph.inputs().iter().map(|(_, v)| *v).collect();
        for (s, updates) in local.iter().enumerate() {
            let keeper = self.keeper();
            let keys: Vec<ValueId> = self.parts[s]
                .segment
                .inputs
                .iter()
                .map(|src| match *src {
                    Source::Input(i) => inputs[i],
                    Source::Value(v) => v,
                })
                .collect();
            let made: Vec<Crossing> = match self.parts[s].segment.place {
                Place::Device => {
                    let ins = keys.iter().map(|k| Ok(read(values, k).on_device(keeper)?.clone())).collect::<Result<Vec<_>>>()?;
                    let ins: Vec<&DeviceTensor> = ins.iter().collect();
                    let outs = self.parts[s].exec.submit_updating(&ins, bindings, updates)?;
                    outs.into_iter().map(|d| Crossing::Device(d, None)).collect()
                }
                Place::Host => {
                    for k in &keys {
                        read(values, k).on_host(keeper)?;
                    }
                    let ins: Vec<&Tensor> = keys.iter().map(|k| values[k].host().expect("brought to the host above")).collect();
                    let outs = self.parts[s].exec.run_updating(&ins, bindings, updates)?;
                    outs.into_iter().map(|t| Crossing::Host(Cow::Owned(t), None)).collect()
                }
            };
            let kept = self.parts[s].segment.outputs.iter().enumerate().filter(|(o, _)| !updates.iter().any(|u| u.0 == *o)).map(|(_, v)| *v);
            values.extend(kept.zip(made));
        }
        Ok(())
    }

    /// Graph output `v` that no segment made: a parameter or a constant.
    fn unmade(&self, v: ValueId) -> Result<Tensor> {
        match &self.graph.node(v.node).op {
            Op::Param(_) => {
                let p = self.graph.params().iter().position(|(_, w)| *w == v).expect("a param node is a param");
                self.param(p)?.ok_or_else(|| RuntimeError::MissingParam { name: self.graph.params()[p].0.to_string() })
            }
            Op::Constant(c) => Tensor::from_bytes(c.ty.dtype, &c.ty.shape.as_static().unwrap_or_default(), &c.data),
            op => Err(RuntimeError::Backend { backend: "partition".into(), msg: format!("output {v} ({}) was made by no segment", op.kind()) }),
        }
    }

    /// Runs the graph on `values` (its inputs) and makes the updates: an update whose output
    /// one segment makes, of a parameter no other segment holds and that no later segment
    /// reads, stays in that segment's memory; others go through the host to every segment
    /// that holds the parameter. Gives the outputs no update consumed, in order, among the
    /// values.
    fn execute<'a>(&mut self, mut values: Values<'a>, bindings: &Bindings, updates: &[(usize, usize)]) -> Result<(Values<'a>, Vec<ValueId>)> {
        let outputs = self.graph.outputs().to_vec();
        let mut local: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.parts.len()];
        let mut global = Vec::new();
        for &(o, p) in updates {
            let v = outputs[o];
            let holders: Vec<(usize, usize)> = self.holders(p).collect();
            let maker = self.parts.iter().position(|part| part.segment.outputs.contains(&v));
            let read_later = |s: usize| self.parts[s + 1..].iter().any(|part| part.segment.inputs.contains(&Source::Value(v)));
            let repeated = outputs.iter().filter(|&&w| w == v).count() > 1;
            match (maker, holders.as_slice()) {
                (Some(s), &[(h, q)]) if h == s && !read_later(s) && !repeated => {
                    let out = self.parts[s].segment.outputs.iter().position(|&w| w == v).expect("the maker lists it");
                    local[s].push((out, q));
                }
                _ => global.push((o, p)),
            }
        }
        self.run_parts(&mut values, bindings, &local)?;
        let locally = |o: usize| updates.iter().any(|&(u, p)| u == o && !global.contains(&(u, p)));
        let mut kept = Vec::new();
        for (o, &v) in outputs.iter().enumerate() {
            if locally(o) {
                continue;
            }
            if let Entry::Vacant(e) = values.entry(v) {
                e.insert(Crossing::Host(Cow::Owned(self.unmade(v)?), None));
            }
            match global.iter().find(|u| u.0 == o) {
                Some(&(_, p)) => {
                    let t = values.get_mut(&v).expect("inserted above").on_host(self.keeper())?.clone();
                    self.set_param(p, t)?;
                }
                None => kept.push(v),
            }
        }
        Ok((values, kept))
    }
}

impl Executable for Partitioned {
    fn set_param(&mut self, index: usize, value: Tensor) -> Result<()> {
        let mut holders: Vec<(usize, usize)> = self.holders(index).collect();
        let Some((last, q_last)) = holders.pop() else { return Ok(()) };
        for (s, q) in holders {
            self.parts[s].exec.set_param(q, value.clone())?;
        }
        self.parts[last].exec.set_param(q_last, value)
    }

    fn set_param_bytes(&mut self, index: usize, dtype: DType, dims: &[usize], bytes: &[u8]) -> Result<()> {
        let holders: Vec<(usize, usize)> = self.holders(index).collect();
        for (s, q) in holders {
            self.parts[s].exec.set_param_bytes(q, dtype, dims, bytes)?;
        }
        Ok(())
    }

    fn param(&self, index: usize) -> Result<Option<Tensor>> {
        match self.holders(index).next() {
            Some((s, q)) => self.parts[s].exec.param(q),
            None => Ok(None),
        }
    }

    fn run(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Vec<Tensor>> {
        self.run_updating(inputs, bindings, &[])
    }

    /// Each segment's executable shares its own parameters.
    fn share(&mut self) -> Result<Box<dyn Executable>> {
        let parts = self
            .parts
            .iter_mut()
            .map(|p| Ok(Part { segment: p.segment.clone(), exec: p.exec.share()?, params: p.params.clone() }))
            .collect::<Result<Vec<Part>>>()?;
        Ok(Box::new(Partitioned { graph: self.graph.clone(), parts, keeper: self.keeper }))
    }

    fn run_updating(&mut self, inputs: &[&Tensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<Tensor>> {
        let values = self.values(inputs.iter().map(|&t| Crossing::Host(Cow::Borrowed(t), None)));
        let (mut values, kept) = self.execute(values, bindings, updates)?;
        let keeper = self.keeper();
        kept.iter().map(|v| Ok(values.get_mut(v).expect("outputs are among the values").on_host(keeper)?.clone())).collect()
    }

    /// The keeper's memory: every device segment's, as one backend compiled them.
    fn memory(&self) -> Memory {
        self.keeper().memory()
    }

    fn upload(&self, t: &Tensor) -> Result<DeviceTensor> {
        self.keeper().upload(t)
    }

    fn download(&self, value: &DeviceTensor) -> Result<Tensor> {
        self.keeper().download(value)
    }

    fn submit_updating(&mut self, inputs: &[&DeviceTensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<DeviceTensor>> {
        let values = self.values(inputs.iter().map(|&d| Crossing::Device(d.clone(), None)));
        let (mut values, kept) = self.execute(values, bindings, updates)?;
        let keeper = self.keeper();
        kept.iter().map(|v| Ok(values.get_mut(v).expect("outputs are among the values").on_device(keeper)?.clone())).collect()
    }

    fn sync(&self) -> Result<()> {
        self.parts.iter().try_for_each(|part| part.exec.sync())
    }

    /// The segments' plans together (each keeps its own arena), planned from the types the
    /// whole graph infers for these inputs; nothing runs.
    fn arena_bytes(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Option<usize>> {
        let types: Vec<_> = inputs.iter().map(|t| t.ty()).collect();
        let concrete = specialize(&self.graph, &types, bindings)?;
        let mut total = 0;
        for part in &mut self.parts {
            let crossing: Vec<Tensor> = part
                .segment
                .inputs
                .iter()
                .map(|s| match s {
                    Source::Input(i) => inputs[*i].clone(),
                    Source::Value(v) => {
                        let ty = concrete.ty(*v);
                        Tensor::zeros(ty.dtype, &ty.shape.as_static().unwrap_or_default())
                    }
                })
                .collect();
            let ins: Vec<&Tensor> = crossing.iter().collect();
            total += part.exec.arena_bytes(&ins, bindings)?.unwrap_or(0);
        }
        Ok(Some(total))
    }

    fn set_profiling(&mut self, on: bool) -> bool {
        let mut all = true;
        for part in &mut self.parts {
            all &= part.exec.set_profiling(on);
        }
        all
    }

    /// Each segment's nodes under their ids in the whole graph.
    fn profile(&self) -> Vec<NodeTime> {
        let mut nodes = Vec::new();
        for part in &self.parts {
            for mut n in part.exec.profile() {
                if let Some(Some(id)) = part.segment.origin.get(n.node.index()) {
                    n.node = *id;
                }
                nodes.push(n);
            }
        }
        nodes
    }
}
