//! The optimizers of the `ai.onnx.preview.training` domain, `Adagrad`, `Adam` and `Momentum`,
//! as elementwise updates. Inputs are the learning rate `R`, the update count `T`, then one
//! group per role (values, gradients, then the optimizer's state), each holding one tensor per
//! optimized value; outputs are the new values followed by the new state, group by group.

use super::elementwise::{act, bin, bin_scalar, cast_to, select};
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp, Compare};
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[("Adagrad", adagrad), ("Adam", adam), ("Momentum", momentum)];

/// The learning rate, the update count (both in the values' dtype) and the `roles` input
/// groups, `groups[role][tensor]`.
struct Step {
    rate: ValueId,
    count: ValueId,
    groups: Vec<Vec<ValueId>>,
}

fn step(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>, roles: usize) -> OpResult<Step> {
    let tensors = n.inputs.len().saturating_sub(2);
    if tensors == 0 || tensors % roles != 0 {
        return invalid(format!("expects R, T and {roles} groups of equally many tensors, got {} inputs", n.inputs.len()));
    }
    let per = tensors / roles;
    let all: Vec<ValueId> = (2..n.inputs.len()).map(|i| n.input(i)).collect::<OpResult<_>>()?;
    let dt = cx.dtype(all[0]);
    let rate = cast_to(cx, n.input(0)?, dt)?;
    let count = cast_to(cx, n.input(1)?, dt)?;
    Ok(Step { rate, count, groups: all.chunks(per).map(<[ValueId]>::to_vec).collect() })
}

/// `c·x + g`, the gradient with the L2 term `½·c·‖x‖²` added.
fn regularized(cx: &mut Cx<'_>, x: ValueId, g: ValueId, c: f32) -> OpResult<ValueId> {
    if c == 0.0 {
        return Ok(g);
    }
    let cx_ = bin_scalar(cx, BinaryOp::Mul, x, c as f64)?;
    bin(cx, BinaryOp::Add, cx_, g)
}

/// `T > 0 ? then : otherwise`, elementwise against the scalar count.
fn if_started(cx: &mut Cx<'_>, count: ValueId, then: ValueId, otherwise: ValueId) -> OpResult<ValueId> {
    let zero = cx.scalar(cx.dtype(count), 0.0)?;
    let started = cx.add1(Compare { op: CmpOp::Gt }, &[count, zero])?;
    select(cx, started, then, otherwise)
}

/// A required float attribute.
fn required(n: &OnnxNode<'_, '_>, name: &str) -> OpResult<f32> {
    n.attr(name).map(|a| a.f).ok_or_else(|| OpError::Invalid(format!("attribute `{name}` is required")))
}

/// `Adagrad`: `r = R/(1 + T·decay)`, `H' = H + g²`, `X' = X − r·g/(√H' + ε)`.
fn adagrad(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let s = step(cx, n, 3)?;
    let (decay, norm, eps) = (n.float("decay_factor", 0.0), n.float("norm_coefficient", 0.0), n.float("epsilon", 1e-6));
    let slowed = bin_scalar(cx, BinaryOp::Mul, s.count, decay as f64)?;
    let slowed = bin_scalar(cx, BinaryOp::Add, slowed, 1.0)?;
    let r = bin(cx, BinaryOp::Div, s.rate, slowed)?;
    let (mut xs, mut hs) = (Vec::new(), Vec::new());
    for i in 0..s.groups[0].len() {
        let (x, g, h) = (s.groups[0][i], s.groups[1][i], s.groups[2][i]);
        let g = regularized(cx, x, g, norm)?;
        let gg = bin(cx, BinaryOp::Mul, g, g)?;
        let h = bin(cx, BinaryOp::Add, h, gg)?;
        let root = act(cx, ActivationKind::Sqrt, h)?;
        let root = bin_scalar(cx, BinaryOp::Add, root, eps as f64)?;
        let dir = bin(cx, BinaryOp::Div, g, root)?;
        let delta = bin(cx, BinaryOp::Mul, r, dir)?;
        xs.push(bin(cx, BinaryOp::Sub, x, delta)?);
        hs.push(h);
    }
    xs.extend(hs);
    Ok(xs)
}

/// `Adam`: running averages `V' = αV + (1−α)g`, `H' = βH + (1−β)g²`, the rate bias-corrected
/// once `T > 0`, `X' = (1 − c_post)·(X − r·V'/(√H' + ε))`.
fn adam(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let s = step(cx, n, 4)?;
    let (alpha, beta) = (n.float("alpha", 0.9) as f64, n.float("beta", 0.999) as f64);
    let (norm, post, eps) = (n.float("norm_coefficient", 0.0), n.float("norm_coefficient_post", 0.0), n.float("epsilon", 1e-6));
    let dt = cx.dtype(s.count);
    let power = |cx: &mut Cx<'_>, base: f64| -> OpResult<ValueId> {
        let b = cx.scalar(dt, base)?;
        let p = bin(cx, BinaryOp::Pow, b, s.count)?;
        let one = cx.scalar(dt, 1.0)?;
        bin(cx, BinaryOp::Sub, one, p)
    };
    let beta_t = power(cx, beta)?;
    let alpha_t = power(cx, alpha)?;
    let root = act(cx, ActivationKind::Sqrt, beta_t)?;
    let corrected = bin(cx, BinaryOp::Mul, s.rate, root)?;
    let corrected = bin(cx, BinaryOp::Div, corrected, alpha_t)?;
    let r = if_started(cx, s.count, corrected, s.rate)?;
    let (mut xs, mut vs, mut hs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..s.groups[0].len() {
        let (x, g, v, h) = (s.groups[0][i], s.groups[1][i], s.groups[2][i], s.groups[3][i]);
        let g = regularized(cx, x, g, norm)?;
        let v_old = bin_scalar(cx, BinaryOp::Mul, v, alpha)?;
        let v_new = bin_scalar(cx, BinaryOp::Mul, g, 1.0 - alpha)?;
        let v = bin(cx, BinaryOp::Add, v_old, v_new)?;
        let gg = bin(cx, BinaryOp::Mul, g, g)?;
        let h_old = bin_scalar(cx, BinaryOp::Mul, h, beta)?;
        let h_new = bin_scalar(cx, BinaryOp::Mul, gg, 1.0 - beta)?;
        let h = bin(cx, BinaryOp::Add, h_old, h_new)?;
        let root = act(cx, ActivationKind::Sqrt, h)?;
        let root = bin_scalar(cx, BinaryOp::Add, root, eps as f64)?;
        let dir = bin(cx, BinaryOp::Div, v, root)?;
        let delta = bin(cx, BinaryOp::Mul, r, dir)?;
        let mut x = bin(cx, BinaryOp::Sub, x, delta)?;
        if post != 0.0 {
            x = bin_scalar(cx, BinaryOp::Mul, x, 1.0 - post as f64)?;
        }
        xs.push(x);
        vs.push(v);
        hs.push(h);
    }
    xs.extend(vs);
    xs.extend(hs);
    Ok(xs)
}

/// `Momentum`: `V' = αV + β'g` (`β' = 1` at `T = 0`); standard `X' = X − R·V'`, Nesterov
/// `X' = X − R·(g + αV')`.
fn momentum(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let s = step(cx, n, 3)?;
    let (alpha, beta, norm) = (required(n, "alpha")? as f64, required(n, "beta")? as f64, required(n, "norm_coefficient")?);
    let nesterov = match n.string("mode", "").as_str() {
        "standard" => false,
        "nesterov" => true,
        m => return invalid(format!("mode `{m}` (standard or nesterov)")),
    };
    let dt = cx.dtype(s.count);
    let (b, one) = (cx.scalar(dt, beta)?, cx.scalar(dt, 1.0)?);
    let b = if_started(cx, s.count, b, one)?;
    let (mut xs, mut vs) = (Vec::new(), Vec::new());
    for i in 0..s.groups[0].len() {
        let (x, g, v) = (s.groups[0][i], s.groups[1][i], s.groups[2][i]);
        let g = regularized(cx, x, g, norm)?;
        let v_old = bin_scalar(cx, BinaryOp::Mul, v, alpha)?;
        let v_new = bin(cx, BinaryOp::Mul, g, b)?;
        let v = bin(cx, BinaryOp::Add, v_old, v_new)?;
        let dir = if nesterov {
            let ahead = bin_scalar(cx, BinaryOp::Mul, v, alpha)?;
            bin(cx, BinaryOp::Add, g, ahead)?
        } else {
            v
        };
        let delta = bin(cx, BinaryOp::Mul, s.rate, dir)?;
        xs.push(bin(cx, BinaryOp::Sub, x, delta)?);
        vs.push(v);
    }
    xs.extend(vs);
    Ok(xs)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{float, float_attr, graph, import_graph, node, string_attr};
    use crate::error::IoError;

    const TRAINING: &str = "ai.onnx.preview.training";

    fn momentum(mode: &str) -> crate::error::Result<crate::onnx::OnnxGraph> {
        let attrs = vec![float_attr("alpha", 0.9), float_attr("beta", 0.1), float_attr("norm_coefficient", 0.0), string_attr("mode", mode)];
        let n = node("Momentum", TRAINING, &["r", "t", "x", "g", "v"], &["x2", "v2"], attrs);
        let ins = ["r", "t"].iter().map(|s| float(s, &[])).chain(["x", "g", "v"].iter().map(|s| float(s, &[3]))).collect();
        import_graph(&[(TRAINING, 1)], graph(vec![n], ins, vec![float("x2", &[3]), float("v2", &[3])]))
    }

    #[test]
    fn a_model_importing_only_the_training_domain_imports() {
        let g = momentum("nesterov").unwrap();
        assert_eq!(g.outputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["x2", "v2"]);
    }

    #[test]
    fn an_unknown_momentum_mode_names_node_op_and_domain_opset() {
        match momentum("sideways") {
            Err(IoError::OnnxNode { node, op, opset, reason, .. }) => {
                assert_eq!((node.as_str(), op.as_str(), opset), ("Momentum_node", "Momentum", 1));
                assert!(reason.contains("sideways"), "{reason}");
            }
            other => panic!("{:?}", other.map(|g| g.outputs)),
        }
    }

    #[test]
    fn a_node_of_a_domain_the_model_does_not_import_is_an_error() {
        let n = node("Adam", TRAINING, &["r", "t", "x", "g", "v", "h"], &["x2"], vec![]);
        let ins = ["r", "t", "x", "g", "v", "h"].iter().map(|s| float(s, &[2])).collect();
        match import_graph(&[("", 21)], graph(vec![n], ins, vec![float("x2", &[2])])) {
            Err(IoError::OnnxNode { op, reason, .. }) => {
                assert_eq!(op, "Adam");
                assert!(reason.contains("imports no opset of domain `ai.onnx.preview.training`"), "{reason}");
            }
            other => panic!("{:?}", other.map(|g| g.outputs)),
        }
    }

    #[test]
    fn ops_of_an_unknown_domain_name_the_domain() {
        let n = node("Relu", "com.example", &["x"], &["y"], vec![]);
        match import_graph(&[("", 21), ("com.example", 3)], graph(vec![n], vec![float("x", &[2])], vec![float("y", &[2])])) {
            Err(IoError::OnnxUnsupported { op, opset, reason, .. }) => {
                assert_eq!((op.as_str(), opset), ("Relu", 3));
                assert!(reason.contains("com.example"), "{reason}");
            }
            other => panic!("{:?}", other.map(|g| g.outputs)),
        }
    }
}
