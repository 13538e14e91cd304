//! Forward mode and second order on every gradient case: `jvp` of the case's loss along a
//! random tangent against the central difference of the loss, and `hvp` against the central
//! difference of the gradient along the same tangent.

use crate::harness::{self, domain, draw, with_loss, Case, Domain, Rng};
use rlx_autodiff::{grad, hvp, jvp, TANGENT};
use rlx_cpu::CpuBackend;
use rlx_runtime::{CompiledGraph, Session, Tensor};
use std::sync::Arc;

/// How far the derivatives of a case's kinds are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Order {
    /// `grad` only: `jvp` (the transposed VJP) must be refused.
    Reverse,
    /// `grad` and `jvp`: `hvp` must be refused.
    First,
    /// `grad`, `jvp` and `hvp`.
    Second,
}

/// Kinds whose forward mode or second order is not built, the highest order they reach and
/// why. A case using one is checked up to that order, and the next must fail to build
/// rather than return a wrong tangent.
pub const LIMITED: &[(&str, Order, &str)] = &[
    (
        "Svd",
        Order::First,
        "U and Vt are forward-only (OPS.md §15); the derivative of S's gradient U·diag(S̄)·Vᵀ needs theirs",
    ),
    (
        "GaussianSplatRender",
        Order::Reverse,
        "jvp differentiates GaussianSplatRenderBackward with respect to d_rgba, which is the render's \
         own JVP, and hvp its second derivative: neither has a kernel or a primitive decomposition",
    ),
];

/// The `LIMITED` entry with the lowest order among `case`'s kinds, if any.
pub fn limit(case: &Case) -> Option<&'static (&'static str, Order, &'static str)> {
    let g = rlx_ir::text::parse(case.src).ok()?;
    LIMITED
        .iter()
        .filter(|(kind, _, _)| g.nodes().iter().any(|n| n.op.kind().name() == *kind))
        .min_by_key(|(_, order, _)| *order)
}

/// `Ok` when building the graph failed with an error naming `kind`, as it must for an order
/// past what is built.
fn refused<T>(built: Result<T, rlx_autodiff::AdError>, kind: &str) -> Result<(), String> {
    match built {
        Err(e) if e.to_string().contains(kind) => Ok(()),
        Err(e) => Err(format!("refused, but not by {kind}: {e}")),
        Ok(_) => Err(format!("built, though {kind} is listed in LIMITED without it")),
    }
}

fn run(c: &mut CompiledGraph, values: &[(String, Tensor)]) -> Result<Vec<Vec<f64>>, String> {
    let named: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
    c.run(&named).map(|o| o.iter().map(Tensor::to_f64_vec).collect()).map_err(|e| e.to_string())
}

/// `values` with each input named in `tangents` moved by `h·tangent`.
fn moved(values: &[(String, Tensor)], tangents: &[(String, Tensor)], h: f64) -> Vec<(String, Tensor)> {
    values
        .iter()
        .map(|(n, t)| match tangents.iter().find(|(m, _)| m == n) {
            Some((_, d)) => {
                let v: Vec<f64> = t.to_f64_vec().iter().zip(d.to_f64_vec()).map(|(a, b)| a + h * b).collect();
                (n.clone(), harness::retype(&v, t))
            }
            None => (n.clone(), t.clone()),
        })
        .collect()
}

fn close(got: &[f64], want: &[f64], tol: f64) -> Result<(), String> {
    let diff: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
    let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
    if diff.is_nan() || diff > tol * norm.max(1.0) {
        return Err(format!("off by {diff:.3e} (|fd| {norm:.3e})\n  analytic {got:?}\n  numeric  {want:?}"));
    }
    Ok(())
}

/// Checks `jvp` and `hvp` of `case` along a random tangent up to the order its kinds reach,
/// and that the order past it is refused by the limiting kind.
pub fn check(case: &Case) -> Result<(), String> {
    let (kind, built) = limit(case).map_or(("", Order::Second), |(kind, order, _)| (*kind, *order));
    let fail = |what: &str, e: String| format!("{} {what}: {e}", case.name);
    let g = rlx_ir::text::parse(case.src).map_err(|e| fail("parse", e.to_string()))?;
    let (lg, _) = with_loss(&g);
    let loss = lg.outputs()[0];
    let mut rng = Rng::new(0xD1EC ^ case.name.len() as u64);
    let inputs: Vec<(String, rlx_ir::TensorType)> = lg.inputs().iter().map(|(n, v)| (n.to_string(), lg.ty(*v).clone())).collect();
    let values: Vec<(String, Tensor)> = inputs.iter().map(|(n, t)| (n.clone(), draw(&mut rng, t, domain(case, n)))).collect();
    let wrt: Vec<&str> = inputs
        .iter()
        .filter(|(n, t)| t.dtype.is_float() && !n.starts_with("__w") && !matches!(domain(case, n), Domain::Frozen | Domain::Fixed(_)))
        .map(|(n, _)| n.as_str())
        .collect();
    if wrt.is_empty() {
        return Ok(());
    }
    let tangents: Vec<(String, Tensor)> =
        wrt.iter().map(|n| (n.to_string(), draw(&mut rng, &inputs.iter().find(|(m, _)| m == n).unwrap().1, Domain::Normal))).collect();
    let with_tangents: Vec<(String, Tensor)> =
        values.iter().cloned().chain(tangents.iter().map(|(n, t)| (format!("{TANGENT}{n}"), t.clone()))).collect();
    let session = Session::new(Arc::new(CpuBackend::new()));
    let compile = |g: &rlx_ir::Graph, what: &str| session.compile(g).map_err(|e| fail(what, e.to_string()));
    let h = if case.tol > 1e-4 { 1e-3 } else { 1e-5 };

    if built == Order::Reverse {
        return refused(jvp(&lg, &wrt), kind).map_err(|e| fail("jvp", e));
    }
    let mut jc = compile(&jvp(&lg, &wrt).map_err(|e| fail("jvp", e.to_string()))?, "jvp")?;
    let got = run(&mut jc, &with_tangents).map_err(|e| fail("jvp run", e))?;
    let mut fc = compile(&lg, "forward")?;
    let (plus, minus) = (run(&mut fc, &moved(&values, &tangents, h)).map_err(|e| fail("run", e))?, run(&mut fc, &moved(&values, &tangents, -h)).map_err(|e| fail("run", e))?);
    let fd = (plus[0][0] - minus[0][0]) / (2.0 * h);
    close(&got[1], &[fd], case.tol).map_err(|e| fail("jvp", e))?;
    if built == Order::First {
        return refused(hvp(&lg, loss, &wrt), kind).map_err(|e| fail("hvp", e));
    }

    let mut hc = compile(&hvp(&lg, loss, &wrt).map_err(|e| fail("hvp", e.to_string()))?, "hvp")?;
    let got = run(&mut hc, &with_tangents).map_err(|e| fail("hvp run", e))?;
    let mut gc = compile(&grad(&lg, loss, &wrt).map_err(|e| fail("grad", e.to_string()))?, "grad")?;
    let (plus, minus) = (run(&mut gc, &moved(&values, &tangents, h)).map_err(|e| fail("run", e))?, run(&mut gc, &moved(&values, &tangents, -h)).map_err(|e| fail("run", e))?);
    for (k, name) in wrt.iter().enumerate() {
        let fd: Vec<f64> = plus[1 + k].iter().zip(&minus[1 + k]).map(|(a, b)| (a - b) / (2.0 * h)).collect();
        close(&got[wrt.len() + k], &fd, case.tol.max(1e-5)).map_err(|e| fail(&format!("hvp `{name}`"), e))?;
    }
    Ok(())
}
