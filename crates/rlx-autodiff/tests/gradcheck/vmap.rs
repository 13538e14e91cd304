//! `vmap` of every gradient case against an explicit loop: the unbatched graph run once per
//! example on fresh random inputs, its outputs stacked.
//!
//! Each case maps twice: with every input batched at axis 0 (integer labels and indices are
//! per-example too, drawn from their domain) except those reaching an operand that
//! `SHARED_OPERANDS` keeps shared, and with only the first other input batched, at its last
//! axis (the rest shared), which exercises the rules' unbatched-operand paths and a non-zero
//! in-axis.

use super::harness::{domain, draw, Case, Rng};
use rlx_autodiff::{vmap, SHARED_OPERANDS, UNBATCHED};
use rlx_cpu::CpuBackend;
use rlx_ir::{Dim, Graph, Op, TensorType};
use std::collections::BTreeSet;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// Examples per map.
const B: usize = 3;

/// Whether the case uses a kind that has no batching rule.
pub fn skipped(case: &Case) -> bool {
    let g = rlx_ir::text::parse(case.src).unwrap();
    g.nodes().iter().any(|n| UNBATCHED.iter().any(|(k, _)| *k == n.op.kind()))
}

/// Runs both maps of `case`; the error names the map and output that disagreed.
pub fn check(case: &Case) -> Result<(), String> {
    let g = rlx_ir::text::parse(case.src).map_err(|e| format!("{}: {e}", case.name))?;
    let sources: Vec<(String, TensorType)> = g.inputs().iter().chain(&g.params()).map(|(n, v)| (n.to_string(), g.ty(*v).clone())).collect();
    let shared = kept_shared(&g);
    let free: Vec<&(String, TensorType)> = sources.iter().filter(|(n, _)| !shared.contains(n)).collect();
    let all: Vec<(&str, usize)> = free.iter().map(|(n, _)| (n.as_str(), 0)).collect();
    check_map(case, &g, &sources, &all)?;
    let (first, ty) = free.first().ok_or_else(|| format!("{}: every input is kept shared", case.name))?;
    check_map(case, &g, &sources, &[(first.as_str(), ty.rank())])
}

/// The inputs that reach an operand `SHARED_OPERANDS` keeps shared.
fn kept_shared(g: &Graph) -> BTreeSet<String> {
    let mut reach: Vec<BTreeSet<String>> = Vec::with_capacity(g.len());
    for n in g.nodes() {
        let mut from: BTreeSet<String> = n.inputs.iter().flat_map(|v| reach[v.node.index()].clone()).collect();
        if let Op::Input(i) = &n.op {
            from.insert(i.name.clone());
        }
        reach.push(from);
    }
    let mut kept = BTreeSet::new();
    for n in g.nodes() {
        for (_, ops, _) in SHARED_OPERANDS.iter().filter(|(k, _, _)| *k == n.op.kind()) {
            for v in ops.iter().filter_map(|&i| n.inputs.get(i)) {
                kept.extend(reach[v.node.index()].iter().cloned());
            }
        }
    }
    kept
}

fn check_map(case: &Case, g: &Graph, sources: &[(String, TensorType)], batched: &[(&str, usize)]) -> Result<(), String> {
    let what = format!("{} (batched {batched:?})", case.name);
    let mapped = vmap(g, batched, Dim::Static(B)).map_err(|e| format!("{what}: vmap: {e}"))?;
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut single = session.compile(g).map_err(|e| format!("{what}: {e}"))?;
    let mut many = session.compile(&mapped).map_err(|e| format!("{what}: {e}\n{mapped}"))?;
    let mut rng = Rng::new(0xB47C ^ case.name.len() as u64);
    let shared: Vec<Tensor> = sources.iter().map(|(n, t)| draw(&mut rng, t, domain(case, n))).collect();
    let examples: Vec<Vec<Tensor>> = (0..B)
        .map(|_| {
            sources
                .iter()
                .zip(&shared)
                .map(|((n, t), s)| if batched.iter().any(|(m, _)| m == n) { draw(&mut rng, t, domain(case, n)) } else { s.clone() })
                .collect()
        })
        .collect();
    let mut want: Vec<Vec<f64>> = vec![Vec::new(); g.outputs().len()];
    for ex in &examples {
        let named: Vec<(&str, &Tensor)> = sources.iter().map(|(n, _)| n.as_str()).zip(ex).collect();
        let outs = single.run(&named).map_err(|e| format!("{what}: {e}"))?;
        for (w, o) in want.iter_mut().zip(&outs) {
            w.extend(o.to_f64_vec());
        }
    }
    let stacked: Vec<Tensor> = (0..sources.len())
        .map(|i| match batched.iter().find(|(m, _)| *m == sources[i].0) {
            Some(&(_, axis)) => stack(&examples.iter().map(|ex| &ex[i]).collect::<Vec<_>>(), axis),
            None => shared[i].clone(),
        })
        .collect();
    let named: Vec<(&str, &Tensor)> = sources.iter().map(|(n, _)| n.as_str()).zip(&stacked).collect();
    let got = many.run(&named).map_err(|e| format!("{what}: {e}"))?;
    let tol = if case.tol < 1e-4 { 1e-9 } else { 1e-5 };
    for (o, (got, want)) in got.iter().zip(&want).enumerate() {
        let got = got.to_f64_vec();
        let diff = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
        let norm = want.iter().map(|b| b * b).sum::<f64>().sqrt();
        if got.len() != want.len() || diff.is_nan() || diff > tol * norm.max(1.0) {
            return Err(format!("{what}: output {o} off by {diff:.3e} (|loop| = {norm:.3e})\n  vmap {got:?}\n  loop {want:?}"));
        }
    }
    Ok(())
}

/// The examples stacked along a new `axis`.
fn stack(examples: &[&Tensor], axis: usize) -> Tensor {
    let dims = examples[0].shape();
    let outer: usize = dims[..axis].iter().product();
    let inner = examples[0].bytes().len() / outer.max(1);
    let mut bytes = Vec::with_capacity(inner * outer * examples.len());
    for o in 0..outer {
        for ex in examples {
            bytes.extend_from_slice(&ex.bytes()[o * inner..(o + 1) * inner]);
        }
    }
    let mut shape = dims.to_vec();
    shape.insert(axis, examples.len());
    Tensor::from_bytes(examples[0].dtype(), &shape, &bytes).unwrap()
}
