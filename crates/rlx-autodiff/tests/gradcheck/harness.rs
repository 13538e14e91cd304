//! Finite-difference gradient checks: a case is a small graph in text form; every float
//! output is dotted with fixed random weights into a scalar loss, `grad` differentiates it
//! with respect to every float input, and central differences of the loss check the result.

use rlx_autodiff::grad;
use rlx_cpu::CpuBackend;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Graph, TensorType, ValueId};
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;

/// How a case's input is drawn.
#[derive(Clone, Copy, Debug)]
pub enum Domain {
    /// Standard normal.
    Normal,
    /// Uniform in `[0.5, 2)`: for logs, roots, divisors.
    Positive,
    /// Uniform integers in `[0, n)`: labels and indices.
    Below(u32),
    /// Distinct integers in `[0, n)` (a prefix of a random permutation): scatter targets
    /// that must not collide.
    Distinct(u32),
    /// As `Positive`, for an operand that receives no gradient by definition (a frozen
    /// quantization scale): its gradient must come out exactly zero, with no finite difference.
    Frozen,
    /// Exactly these values (repeated to the input's length), for an operand that receives
    /// no gradient by definition (a camera); checked as `Frozen`.
    Fixed(&'static [f64]),
    /// `base` (repeated to the input's length) plus uniform noise in `±spread`: inputs that
    /// must stay near a valid configuration (a visible splat scene).
    Around(&'static [f64], f64),
    /// Standard normal with exact zeros at these flat positions: products through a zero.
    Zeros(&'static [usize]),
}

/// One gradient check.
pub struct Case {
    pub name: &'static str,
    /// The graph (rlx text format); all its outputs enter the loss.
    pub src: &'static str,
    /// Inputs drawn from something other than [`Domain::Normal`].
    pub domains: &'static [(&'static str, Domain)],
    /// Relative tolerance of the gradient (1e-6 for f64 cases; f32 ones need ~1e-2).
    pub tol: f64,
}

/// A deterministic stream of pseudo-random numbers (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

pub fn draw(rng: &mut Rng, ty: &TensorType, domain: Domain) -> Tensor {
    let dims: Vec<usize> = ty.shape.dims().iter().map(|d| d.as_static().expect("gradient cases use static shapes")).collect();
    let n: usize = dims.iter().product();
    let values: Vec<f64> = match domain {
        Domain::Distinct(k) => {
            let mut perm: Vec<f64> = (0..k).map(f64::from).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, (rng.uniform() * (i + 1) as f64) as usize);
            }
            assert!(n <= perm.len(), "{n} distinct values below {k}");
            perm[..n].to_vec()
        }
        _ => (0..n)
            .map(|i| match domain {
                Domain::Positive | Domain::Frozen => 0.5 + 1.5 * rng.uniform(),
                Domain::Below(k) => (rng.uniform() * f64::from(k)).floor(),
                Domain::Fixed(base) => base[i % base.len()],
                Domain::Around(base, spread) => base[i % base.len()] + spread * (2.0 * rng.uniform() - 1.0),
                Domain::Zeros(at) if at.contains(&i) => 0.0,
                _ => rng.normal(),
            })
            .collect(),
    };
    match ty.dtype {
        DType::F64 => Tensor::from_vec(values, &dims).unwrap(),
        DType::F32 => Tensor::from_vec(values.iter().map(|&v| v as f32).collect(), &dims).unwrap(),
        DType::I64 => Tensor::from_vec(values.iter().map(|&v| v as i64).collect(), &dims).unwrap(),
        DType::I32 => Tensor::from_vec(values.iter().map(|&v| v as i32).collect(), &dims).unwrap(),
        DType::I8 => Tensor::from_vec(values.iter().map(|&v| v as i8).collect(), &dims).unwrap(),
        DType::U8 => Tensor::from_vec(values.iter().map(|&v| v as u8).collect(), &dims).unwrap(),
        DType::U32 => Tensor::from_vec(values.iter().map(|&v| v as u32).collect(), &dims).unwrap(),
        d => panic!("gradient cases draw f32, f64 or integer inputs, not {d}"),
    }
}

/// The case's graph with one extra weight input per float output and a scalar loss
/// `Σ_i Σ w_i·y_i` as its only output; returns the graph and the weight input names.
pub fn with_loss(g: &Graph) -> (Graph, Vec<String>) {
    let mut g = g.clone();
    let mut loss: Option<ValueId> = None;
    let mut weights = Vec::new();
    for (i, &y) in g.outputs().to_vec().iter().enumerate() {
        let ty = g.ty(y).clone();
        if !ty.dtype.is_float() {
            continue;
        }
        let name = format!("__w{i}");
        let w = g.input(&name, ty.clone());
        weights.push(name);
        let p = g.binary(BinaryOp::Mul, y, w).unwrap();
        let axes: Vec<usize> = (0..ty.rank()).collect();
        let s = g.reduce(ReduceOp::Sum, p, &axes, false).unwrap();
        loss = Some(match loss {
            Some(l) => g.binary(BinaryOp::Add, l, s).unwrap(),
            None => s,
        });
    }
    g.set_outputs(vec![loss.expect("a gradient case needs a float output")]).unwrap();
    (g, weights)
}

/// Runs the check; the error says which input's gradient disagreed and by how much.
pub fn check(case: &Case) -> Result<(), String> {
    let tol = case.tol;
    let g = rlx_ir::text::parse(case.src).map_err(|e| format!("{}: {e}", case.name))?;
    let (lg, _) = with_loss(&g);
    let loss = lg.outputs()[0];
    let sources: Vec<(String, TensorType)> = lg.inputs().iter().map(|(n, v)| (n.to_string(), lg.ty(*v).clone())).collect();
    let wrt: Vec<&str> =
        sources.iter().filter(|(n, t)| t.dtype.is_float() && !n.starts_with("__w")).map(|(n, _)| n.as_str()).collect();
    let gg = grad(&lg, loss, &wrt).map_err(|e| format!("{}: grad: {e}", case.name))?;
    let session = Session::new(Arc::new(CpuBackend::new()));
    let mut fwd = session.compile(&lg).map_err(|e| format!("{}: {e}", case.name))?;
    let mut bwd = session.compile(&gg).map_err(|e| format!("{}: {e}\n{gg}", case.name))?;
    let mut rng = Rng::new(0x5EED ^ case.name.len() as u64);
    let mut values: Vec<(String, Tensor)> = sources
        .iter()
        .map(|(n, t)| {
            (n.clone(), draw(&mut rng, t, domain(case, n)))
        })
        .collect();
    let run = |c: &mut rlx_runtime::CompiledGraph, values: &[(String, Tensor)]| -> Result<Vec<Tensor>, String> {
        let named: Vec<(&str, &Tensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
        c.run(&named).map_err(|e| format!("{}: {e}", case.name))
    };
    let analytic = run(&mut bwd, &values)?;
    let step = if computes_in_f32(&lg) { 1e-3 } else { 1e-5 };
    for (k, name) in wrt.iter().enumerate() {
        let got = analytic[1 + k].to_f64_vec();
        if matches!(domain(case, name), Domain::Frozen | Domain::Fixed(_)) {
            if got.iter().any(|&v| v != 0.0) {
                return Err(format!("{}: the frozen `{name}` got a gradient {got:?}", case.name));
            }
            continue;
        }
        let idx = values.iter().position(|(n, _)| n == name).unwrap();
        let base = values[idx].1.clone();
        let xs = base.to_f64_vec();
        let mut numeric = Vec::with_capacity(xs.len());
        for j in 0..xs.len() {
            let h = step * xs[j].abs().max(1.0);
            let mut at = |x: f64| -> Result<f64, String> {
                let mut p = xs.clone();
                p[j] = x;
                values[idx].1 = retype(&p, &base);
                Ok(run(&mut fwd, &values)?[0].to_f64_vec()[0])
            };
            numeric.push((at(xs[j] + h)? - at(xs[j] - h)?) / (2.0 * h));
        }
        values[idx].1 = base;
        let diff: f64 = got.iter().zip(&numeric).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
        let norm: f64 = numeric.iter().map(|b| b * b).sum::<f64>().sqrt();
        if diff.is_nan() || diff > tol * norm.max(1.0) {
            return Err(format!(
                "{}: gradient of `{name}` off by {:.3e} relative (|fd| = {norm:.3e})\n  analytic {got:?}\n  numeric  {numeric:?}",
                case.name,
                diff / norm.max(1.0)
            ));
        }
    }
    Ok(())
}

/// How `case` draws its input `name`.
pub fn domain(case: &Case, name: &str) -> Domain {
    case.domains.iter().find(|(d, _)| *d == name).map_or(Domain::Normal, |(_, d)| *d)
}

/// Whether any value of `g` is f32-precision (F32, F16, BF16, or C64's f32 pairs): its
/// rounding would swamp a 1e-5 difference quotient, so such cases take wider steps.
fn computes_in_f32(g: &Graph) -> bool {
    g.nodes().iter().flat_map(|n| &n.outputs).any(|t| matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::C64))
}

pub fn retype(values: &[f64], like: &Tensor) -> Tensor {
    match like.dtype() {
        DType::F64 => Tensor::from_vec(values.to_vec(), like.shape()).unwrap(),
        DType::F32 => Tensor::from_vec(values.iter().map(|&v| v as f32).collect(), like.shape()).unwrap(),
        d => panic!("perturbing a {d} input"),
    }
}
