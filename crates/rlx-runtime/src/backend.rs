//! The interface every backend implements.

use crate::compiled::Bindings;
use crate::device_tensor::{DeviceTensor, Memory};
use crate::error::Result;
use crate::profile::NodeTime;
use crate::tensor::Tensor;
use rlx_ir::{DType, Graph};
use rlx_opt::fold::ConstEval;
use rlx_opt::Claims;
use std::fmt;

/// Where a graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    /// An NVIDIA GPU by ordinal.
    Cuda(usize),
    /// A GPU reached through wgpu (Metal, Vulkan, DX12) by adapter index.
    Wgpu(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
        }
    }
}

/// Parses what [`Device`]'s `Display` writes: `cpu`, `cuda` (`cuda:0`), `cuda:1`, `wgpu:0`.
impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Device, String> {
        let (kind, index) = match s.split_once(':') {
            Some((kind, i)) => (kind, i.parse::<usize>().map_err(|_| format!("`{s}`: the device index must be a number, as in cuda:0"))?),
            None => (s, 0),
        };
        match kind {
            "cpu" if index == 0 => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(index)),
            "wgpu" => Ok(Device::Wgpu(index)),
            _ => Err(format!("unknown device `{s}`: expected cpu, cuda[:N] or wgpu[:N]")),
        }
    }
}

/// A compilation target. Backends claim op kinds per input dtypes; the shared legalizer decides
/// the rest, so `compile` only ever sees nodes claimed natively for their dtypes.
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;

    fn device(&self) -> Device;

    /// What this backend runs itself (natively or by a host fallback), per op and input dtypes.
    fn claims(&self) -> &dyn Claims;

    /// The evaluator constant folding runs on, when this backend lends its kernels to it (the
    /// CPU does; a device session folds with its host's).
    fn const_eval(&self) -> Option<&dyn ConstEval> {
        None
    }

    /// `(in use, peak)` bytes of device memory the backend holds, where it counts them (a GPU;
    /// not the host's memory).
    fn device_memory(&self) -> Option<(usize, usize)> {
        None
    }

    /// Builds an executable for a legalized, verified graph.
    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>>;
}

/// A graph compiled for one backend, holding its parameters and working memory.
pub trait Executable: Send {
    /// Stores the parameter at `index` of `Graph::params()`; its type is already checked.
    fn set_param(&mut self, index: usize, value: Tensor) -> Result<()>;

    /// Stores the parameter at `index` from bytes of that `dtype` and `dims` (length checked).
    fn set_param_bytes(&mut self, index: usize, dtype: DType, dims: &[usize], bytes: &[u8]) -> Result<()> {
        self.set_param(index, Tensor::from_bytes(dtype, dims, bytes)?)
    }

    /// A copy of the parameter at `index` as a host tensor (`None` if never set).
    fn param(&self, index: usize) -> Result<Option<Tensor>>;

    /// Runs with the inputs in `Graph::inputs()` order (types checked, symbols bound) and
    /// returns the graph's outputs: the simple path, which waits for the results; it does what
    /// `upload`, `submit` and `download` do together, without the device values between.
    fn run(&mut self, inputs: &[&Tensor], bindings: &Bindings) -> Result<Vec<Tensor>>;

    /// Runs, then makes each output `o` of `updates` (`(output, parameter index)`) the new
    /// value of its parameter, returning the other outputs in order. A device backend keeps
    /// the updated values where they are.
    fn run_updating(&mut self, inputs: &[&Tensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<Tensor>> {
        let mut kept = Vec::new();
        for (o, t) in self.run(inputs, bindings)?.into_iter().enumerate() {
            match updates.iter().find(|u| u.0 == o) {
                Some(&(_, p)) => self.set_param(p, t)?,
                None => kept.push(t),
            }
        }
        Ok(kept)
    }

    /// The memory its device values live in.
    fn memory(&self) -> Memory;

    /// `t` copied into a value of this executable's memory.
    fn upload(&self, t: &Tensor) -> Result<DeviceTensor>;

    /// `value` copied to the host, once the work issued before has completed.
    fn download(&self, value: &DeviceTensor) -> Result<Tensor>;

    /// Issues a run on device values (in `Graph::inputs()` order, types checked, symbols
    /// bound) and returns its outputs without waiting for them: they are ready after `sync`,
    /// and `download` or a later run reads them in order.
    fn submit(&mut self, inputs: &[&DeviceTensor], bindings: &Bindings) -> Result<Vec<DeviceTensor>> {
        self.submit_updating(inputs, bindings, &[])
    }

    /// [`Executable::submit`] that makes each output `o` of `updates` (`(output, parameter
    /// index)`) the new value of its parameter, as [`Executable::run_updating`] does, returning
    /// the other outputs in order.
    fn submit_updating(&mut self, inputs: &[&DeviceTensor], bindings: &Bindings, updates: &[(usize, usize)]) -> Result<Vec<DeviceTensor>>;

    /// Waits until every run and copy issued so far has completed.
    fn sync(&self) -> Result<()>;

    /// Bytes of working memory (activations, inputs and outputs; not parameters or constants)
    /// that `run` plans for inputs of these shapes, or `None` for a backend without one planned
    /// arena. It is the memory planner's peak, what rematerialisation aims to lower.
    fn arena_bytes(&mut self, _inputs: &[&Tensor], _bindings: &Bindings) -> Result<Option<usize>> {
        Ok(None)
    }

    /// Turns timing of each node's calls on (from zero) or off; `false` where the backend
    /// cannot time its nodes.
    fn set_profiling(&mut self, _on: bool) -> bool {
        false
    }

    /// Per node, its calls and time since profiling was last turned on.
    fn profile(&self) -> Vec<NodeTime> {
        Vec::new()
    }

    /// Another executable of the same graph that shares this one's parameters (their buffers
    /// and prepared forms, one copy in memory for both) and has working memory of its own, so
    /// that each of several threads runs one. Shared weights are only read: setting or
    /// updating a parameter in one gives that one a buffer of its own, and parameters the
    /// graph updates in place (state) are copied. A backend that cannot share says so.
    fn share(&mut self) -> Result<Box<dyn Executable>> {
        Err(crate::RuntimeError::Backend { backend: "executable".into(), msg: "this backend's compiled graphs cannot share parameters".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::Device;

    #[test]
    fn devices_parse_as_they_print() {
        for d in [Device::Cpu, Device::Cuda(0), Device::Cuda(3), Device::Wgpu(1)] {
            assert_eq!(d.to_string().parse::<Device>(), Ok(d));
        }
        assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda(0)));
        assert!("tpu".parse::<Device>().unwrap_err().contains("unknown device `tpu`"));
        assert!("cuda:x".parse::<Device>().unwrap_err().contains("must be a number"));
        assert!("cpu:1".parse::<Device>().is_err());
    }
}
