//! A graph split between a device backend and the host ([`rlx_opt::partition`]): each segment
//! compiled by its own backend, run in order, the values that cross handed over as host
//! tensors. Parameters live in every segment that reads them; an update of a parameter that
//! only its own segment reads stays in that segment's memory.

use crate::backend::Executable;
use crate::compiled::Bindings;
use crate::error::{Result, RuntimeError};
use crate::profile::NodeTime;
use crate::specialize::specialize;
use crate::tensor::Tensor;
use rlx_ir::{DType, Graph, Op, ValueId};
use rlx_opt::partition::{Partition, Segment, Source};
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
        Ok(Partitioned { graph, parts })
    }

    /// The segments holding parameter `p`, with its index in each.
    fn holders(&self, p: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.parts.iter().enumerate().filter_map(move |(s, part)| Some((s, part.params.iter().position(|&q| q == p)?)))
    }

    /// Runs every segment, keeping the values later segments or the outputs read; `local`
    /// gives each segment's in-place updates `(segment output, segment parameter)`.
    fn run_parts(&mut self, inputs: &[&Tensor], bindings: &Bindings, local: &[Vec<(usize, usize)>]) -> Result<HashMap<ValueId, Tensor>> {
        let mut values: HashMap<ValueId, Tensor> = HashMap::new();
        for (part, updates) in self.parts.iter_mut().zip(local) {
            let ins: Vec<&Tensor> = part
                .segment
                .inputs
                .iter()
                .map(|s| match s {
                    Source::Input(i) => inputs[*i],
                    Source::Value(v) => &values[v],
                })
                .collect();
            let outs = part.exec.run_updating(&ins, bindings, updates)?;
            let kept = part.segment.outputs.iter().enumerate().filter(|(o, _)| !updates.iter().any(|u| u.0 == *o)).map(|(_, v)| *v);
            let made: Vec<(ValueId, Tensor)> = kept.zip(outs).collect();
            values.extend(made);
        }
        Ok(values)
    }

    /// Graph output `v`: a value some segment made, or an input, parameter or constant.
    fn output(&self, v: ValueId, values: &HashMap<ValueId, Tensor>, inputs: &[&Tensor]) -> Result<Tensor> {
        if let Some(t) = values.get(&v) {
            return Ok(t.clone());
        }
        match &self.graph.node(v.node).op {
            Op::Input(_) => {
                let i = self.graph.inputs().iter().position(|(_, w)| *w == v).expect("an input node is an input");
                Ok(inputs[i].clone())
            }
            Op::Param(_) => {
                let p = self.graph.params().iter().position(|(_, w)| *w == v).expect("a param node is a param");
                self.param(p)?.ok_or_else(|| RuntimeError::MissingParam { name: self.graph.params()[p].0.to_string() })
            }
            Op::Constant(c) => Tensor::from_bytes(c.ty.dtype, &c.ty.shape.as_static().unwrap_or_default(), &c.data),
            op => Err(RuntimeError::Backend { backend: "partition".into(), msg: format!("output {v} ({}) was made by no segment", op.kind()) }),
        }
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

    /// An update whose output one segment makes, of a parameter no other segment holds and
    /// that no later segment reads, stays in that segment's memory; others go through the
    /// host to every segment that holds the parameter.
    fn run_updating(&mut self, inputs: &[&Tensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<Tensor>> {
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
        let values = self.run_parts(inputs, bindings, &local)?;
        let locally = |o: usize| updates.iter().any(|&(u, p)| u == o && !global.contains(&(u, p)));
        let mut kept = Vec::new();
        for (o, &v) in outputs.iter().enumerate() {
            if locally(o) {
                continue;
            }
            let t = self.output(v, &values, inputs)?;
            match global.iter().find(|u| u.0 == o) {
                Some(&(_, p)) => self.set_param(p, t)?,
                None => kept.push(t),
            }
        }
        Ok(kept)
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
