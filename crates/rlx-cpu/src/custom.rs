//! The CPU side of `Custom` ops (OPS.md §21): a process-wide registry of named kernels.
//!
//! A graph holding a `Custom` op whose name has no registered kernel fails to compile for the
//! CPU, naming the op; it never runs as a no-op.

use crate::view::{In, Out};
use rlx_ir::ops::custom::Custom;
use rlx_ir::{Graph, Op};
use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

/// A `Custom` kernel: the op's opaque `attrs` blob, its operands and its declared outputs.
pub type CustomKernel = dyn Fn(&[u8], &[In], &mut [Out]) -> Result<(), String> + Send + Sync;

static REGISTRY: RwLock<BTreeMap<String, Arc<CustomKernel>>> = RwLock::new(BTreeMap::new());

/// Registers `kernel` under `name` for every later compile and run; returns the kernel it
/// replaces, if any.
pub fn register_custom_kernel(
    name: &str,
    kernel: impl Fn(&[u8], &[In], &mut [Out]) -> Result<(), String> + Send + Sync + 'static,
) -> Option<Arc<CustomKernel>> {
    REGISTRY.write().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), Arc::new(kernel))
}

/// The kernel registered under `name`.
pub fn custom_kernel(name: &str) -> Option<Arc<CustomKernel>> {
    REGISTRY.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
}

/// Checks that every `Custom` op of `graph` (sub-graphs included) has a registered kernel.
pub(crate) fn check_registered(graph: &Graph) -> Result<(), String> {
    for (i, node) in graph.nodes().iter().enumerate() {
        if let Op::Custom(c) = &node.op {
            if custom_kernel(&c.name).is_none() {
                return Err(format!(
                    "Custom op `{}` (node %{i}) has no CPU kernel; register one with rlx_cpu::register_custom_kernel",
                    c.name
                ));
            }
        }
        for sub in node.op.def().subgraphs() {
            check_registered(sub)?;
        }
    }
    Ok(())
}

/// Runs the registered kernel of `op`.
pub(crate) fn run(op: &Custom, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let kernel = custom_kernel(&op.name).ok_or_else(|| format!("no CPU kernel is registered as `{}`", op.name))?;
    kernel(&op.attrs, ins, outs).map_err(|e| format!("`{}`: {e}", op.name))
}
