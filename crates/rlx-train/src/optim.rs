//! Optimizers as graph rewrites: each appends its update of one parameter to the step
//! graph, reading and writing its state through extra parameters of the compiled graph.
//! The formulas are PyTorch's (`torch.optim.SGD`, `Adam`, `AdamW`, no dampening, no amsgrad).

use crate::Result;
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp};
use rlx_ir::{DType, Graph, ValueId};
use rlx_opt::decompose::build::{inner_sum, scalar};

/// An optimizer and its hyper-parameters (the learning rate comes from the schedule).
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    /// `g += wd·p; v = μ·v + g; p −= lr·(nesterov ? g + μ·v : v)`.
    Sgd { momentum: f32, nesterov: bool, weight_decay: f32 },
    /// Adam with L2 regularisation folded into the gradient (`g += wd·p`).
    Adam { beta1: f32, beta2: f32, eps: f32, weight_decay: f32 },
    /// Adam with decoupled weight decay: `p −= lr·(m̂/(√v̂ + eps) + wd·p)`.
    AdamW { beta1: f32, beta2: f32, eps: f32, weight_decay: f32 },
}

/// One parameter's update: its new value and `(state name, state param, new state)`.
pub(crate) struct Update {
    pub param: ValueId,
    pub state: Vec<(String, ValueId, ValueId)>,
}

/// The scalar inputs every update reads: learning rate and 1-based step count (f32).
pub(crate) struct StepInputs {
    pub lr: ValueId,
    pub step: ValueId,
}

impl Optimizer {
    pub fn adamw(weight_decay: f32) -> Optimizer {
        Optimizer::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay }
    }

    /// The names of the state slots this optimizer keeps per parameter.
    pub fn state_slots(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => &[],
            Optimizer::Sgd { .. } => &["momentum"],
            Optimizer::Adam { .. } | Optimizer::AdamW { .. } => &["m", "v"],
        }
    }

    /// Appends the update of parameter `p` (named `name`) with gradient `grad`.
    pub(crate) fn update(&self, g: &mut Graph, name: &str, p: ValueId, grad: ValueId, at: &StepInputs) -> Result<Update> {
        let ty = g.ty(p).clone();
        let dt = ty.dtype;
        let mut state = Vec::new();
        let slot = |g: &mut Graph, slot: &str| {
            let sname = format!("{name}.{slot}");
            let v = g.param(&sname, ty.clone());
            (sname, v)
        };
        let param = match *self {
            Optimizer::Sgd { momentum, nesterov, weight_decay } => {
                let gr = decay_into(g, grad, p, weight_decay)?;
                let dir = if momentum == 0.0 {
                    gr
                } else {
                    let (sname, v) = slot(g, "momentum");
                    let mu = scalar(g, dt, f64::from(momentum))?;
                    let mv = g.binary(BinaryOp::Mul, v, mu)?;
                    let v_new = g.binary(BinaryOp::Add, mv, gr)?;
                    state.push((sname, v, v_new));
                    if nesterov {
                        let look = g.binary(BinaryOp::Mul, v_new, mu)?;
                        g.binary(BinaryOp::Add, gr, look)?
                    } else {
                        v_new
                    }
                };
                let step = scaled(g, dir, at.lr)?;
                g.binary(BinaryOp::Sub, p, step)?
            }
            Optimizer::Adam { beta1, beta2, eps, weight_decay } | Optimizer::AdamW { beta1, beta2, eps, weight_decay } => {
                let decoupled = matches!(self, Optimizer::AdamW { .. });
                let gr = if decoupled { grad } else { decay_into(g, grad, p, weight_decay)? };
                let (mname, m) = slot(g, "m");
                let (vname, v) = slot(g, "v");
                let m_new = ema(g, m, gr, beta1)?;
                let g2 = g.binary(BinaryOp::Mul, gr, gr)?;
                let v_new = ema(g, v, g2, beta2)?;
                let c1 = bias_correction(g, beta1, at.step, dt)?;
                let c2 = bias_correction(g, beta2, at.step, dt)?;
                let m_hat = g.binary(BinaryOp::Div, m_new, c1)?;
                let v_hat = g.binary(BinaryOp::Div, v_new, c2)?;
                let root = g.activation(ActivationKind::Sqrt, v_hat)?;
                let e = scalar(g, dt, f64::from(eps))?;
                let denom = g.binary(BinaryOp::Add, root, e)?;
                let mut dir = g.binary(BinaryOp::Div, m_hat, denom)?;
                if decoupled && weight_decay != 0.0 {
                    let wd = scalar(g, dt, f64::from(weight_decay))?;
                    let pw = g.binary(BinaryOp::Mul, p, wd)?;
                    dir = g.binary(BinaryOp::Add, dir, pw)?;
                }
                state.push((mname, m, m_new));
                state.push((vname, v, v_new));
                let step = scaled(g, dir, at.lr)?;
                g.binary(BinaryOp::Sub, p, step)?
            }
        };
        Ok(Update { param, state })
    }
}

/// `grad + wd·p` (just `grad` when `wd` is 0).
fn decay_into(g: &mut Graph, grad: ValueId, p: ValueId, wd: f32) -> Result<ValueId> {
    if wd == 0.0 {
        return Ok(grad);
    }
    let w = scalar(g, g.ty(p).dtype, f64::from(wd))?;
    let pw = g.binary(BinaryOp::Mul, p, w)?;
    Ok(g.binary(BinaryOp::Add, grad, pw)?)
}

/// `β·s + (1 − β)·x`.
fn ema(g: &mut Graph, s: ValueId, x: ValueId, beta: f32) -> Result<ValueId> {
    let dt = g.ty(s).dtype;
    let b = scalar(g, dt, f64::from(beta))?;
    let rest = scalar(g, dt, 1.0 - f64::from(beta))?;
    let bs = g.binary(BinaryOp::Mul, s, b)?;
    let rx = g.binary(BinaryOp::Mul, x, rest)?;
    Ok(g.binary(BinaryOp::Add, bs, rx)?)
}

/// `1 − βᵗ` for the step count `t`.
fn bias_correction(g: &mut Graph, beta: f32, t: ValueId, dt: DType) -> Result<ValueId> {
    let b = scalar(g, dt, f64::from(beta))?;
    let one = scalar(g, dt, 1.0)?;
    let bt = g.binary(BinaryOp::Pow, b, t)?;
    Ok(g.binary(BinaryOp::Sub, one, bt)?)
}

/// `lr·x`.
fn scaled(g: &mut Graph, x: ValueId, lr: ValueId) -> Result<ValueId> {
    Ok(g.binary(BinaryOp::Mul, x, lr)?)
}

/// Scales every gradient by `min(1, max_norm/(‖g‖ + 1e-6))`, `‖g‖` the global L2 norm
/// (`torch.nn.utils.clip_grad_norm_`).
pub(crate) fn clip_global_norm(g: &mut Graph, grads: &[ValueId], max_norm: f32) -> Result<Vec<ValueId>> {
    let pairs: Vec<(ValueId, ValueId)> = grads.iter().map(|&gr| (gr, gr)).collect();
    let Some(total) = inner_sum(g, &pairs)? else { return Ok(Vec::new()) };
    let dt = g.ty(total).dtype;
    let norm = g.activation(ActivationKind::Sqrt, total)?;
    let tiny = scalar(g, dt, 1e-6)?;
    let denom = g.binary(BinaryOp::Add, norm, tiny)?;
    let max = scalar(g, dt, f64::from(max_norm))?;
    let ratio = g.binary(BinaryOp::Div, max, denom)?;
    let one = scalar(g, dt, 1.0)?;
    let factor = g.binary(BinaryOp::Min, ratio, one)?;
    grads.iter().map(|&gr| Ok(g.binary(BinaryOp::Mul, gr, factor)?)).collect()
}
