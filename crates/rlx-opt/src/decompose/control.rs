//! Decompositions of control flow (OPS.md §20) by inlining the sub-graphs: `If` evaluates both
//! branches and selects, `While` with `max_iterations` unrolls to that bound behind an
//! `active` flag, `Scan` unrolls fully. Control ops nested in a body are copied as they are
//! and lowered by the next round of legalization.
//!
//! The scan gradients `ScanBackward`/`ScanBackwardXs` unroll their reverse sweep (OPS.md §22)
//! the same way, reading carries from the saved trajectory.
//!
//! Not here: `While` without `max_iterations` (it needs a runtime executor), checkpointed scan
//! gradients (`0 < num_checkpoints < length`, whose carries are recomputed between
//! checkpoints) and gradients of empty scans; legalization names those as missing.

use rlx_ir::ops::control::{Scan, ScanBackward, ScanBackwardXs, While};
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::{Dim, Graph, IrError, Node, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::If, OpKind::While, OpKind::Scan, OpKind::ScanBackward, OpKind::ScanBackwardXs];

/// Most nodes one unrolled loop may add; past it the unroll is refused rather than
/// exhausting memory.
const MAX_UNROLLED_NODES: usize = 1 << 22;

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    Some(match op {
        Op::If(i) => if_else(g, &i.then_branch, &i.else_branch, x),
        Op::While(w) => while_loop(g, w, x)?,
        Op::Scan(s) => scan(g, s, x).map(|v| vec![v]),
        Op::ScanBackward(b) => scan_backward(g, &Sweep::of_init(b), x)?.map(|v| vec![v]),
        Op::ScanBackwardXs(b) => scan_backward(g, &Sweep::of_xs(b), x)?.map(|v| vec![v]),
        _ => return None,
    })
}

/// Copies `body` into `g` with its `Input`s (in creation order) bound to `args`, and returns
/// the values of its outputs. A `Param` in the body becomes the outer graph's parameter of
/// that name (added if the graph has none of that name and type).
pub fn inline(g: &mut Graph, body: &Graph, args: &[ValueId]) -> Result<Vec<ValueId>, IrError> {
    let mut map: Vec<Vec<ValueId>> = Vec::with_capacity(body.len());
    let mut args = args.iter();
    for node in body.nodes() {
        let values = match &node.op {
            Op::Input(input) => {
                let v = *args.next().ok_or_else(|| {
                    IrError::Invalid(format!("the body's input \"{}\" has no value bound to it", input.name))
                })?;
                if *g.ty(v) != input.ty {
                    return Err(IrError::Invalid(format!(
                        "the body's input \"{}\" is {}, but {v} bound to it is {}",
                        input.name,
                        input.ty,
                        g.ty(v)
                    )));
                }
                vec![v]
            }
            Op::Param(p) => {
                let found = g.params().into_iter().find(|(name, v)| *name == p.name && *g.ty(*v) == p.ty);
                vec![match found {
                    Some((_, v)) => v,
                    None => g.param(&p.name, p.ty.clone()),
                }]
            }
            op => {
                let inputs = node.inputs.iter().map(|v| map[v.node.index()][v.output as usize]).collect();
                let id = g.push(Node { op: op.clone(), inputs, outputs: node.outputs.clone() });
                (0..node.outputs.len() as u32).map(|i| ValueId::new(id, i)).collect()
            }
        };
        map.push(values);
    }
    if args.next().is_some() {
        return Err(IrError::Invalid("more values than the body has inputs".into()));
    }
    Ok(body.outputs().iter().map(|v| map[v.node.index()][v.output as usize]).collect())
}

/// `Where(flag, t, e)` for a one-element Bool `flag`; a flag of higher rank than the branches
/// is made rank 0 first, so that it broadcasts without growing them.
fn select(g: &mut Graph, flag: ValueId, t: ValueId, e: ValueId) -> Result<ValueId, IrError> {
    let flag = if g.ty(flag).rank() > g.ty(t).rank() { g.reshape_to(flag, &Shape::scalar())? } else { flag };
    g.select(flag, t, e)
}

/// Both branches inlined on the captures, each output `Where(pred, then, else)`. Both are
/// evaluated (OPS.md §20), side effects of either branch included.
fn if_else(g: &mut Graph, then_branch: &Graph, else_branch: &Graph, x: &[ValueId]) -> Result<Vec<ValueId>, IrError> {
    let t = inline(g, then_branch, &x[1..])?;
    let e = inline(g, else_branch, &x[1..])?;
    t.into_iter().zip(e).map(|(t, e)| select(g, x[0], t, e)).collect()
}

/// Refuses an unroll of `times` copies of bodies with `per_copy` nodes past the limit.
fn check_unroll(what: &str, times: usize, per_copy: usize) -> Result<(), IrError> {
    match times.checked_mul(per_copy) {
        Some(n) if n <= MAX_UNROLLED_NODES => Ok(()),
        _ => Err(IrError::Invalid(format!(
            "{what}: unrolling {times} copies of {per_copy} nodes exceeds {MAX_UNROLLED_NODES} nodes"
        ))),
    }
}

/// `max_iterations` copies of `active = active ∧ cond(c)` (as `Where(active, cond(c), active)`,
/// the first copy just `cond(c)`) and `c = Where(active, body(c), c)`; `None` without a bound.
fn while_loop(g: &mut Graph, w: &While, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let n = w.max_iterations?;
    let run = |g: &mut Graph| -> Result<Vec<ValueId>, IrError> {
        check_unroll("While", n, w.cond.len() + w.body.len() + 2 * x.len())?;
        let mut carries = x.to_vec();
        let mut active: Option<ValueId> = None;
        for _ in 0..n {
            let c = inline(g, &w.cond, &carries)?[0];
            let a = match active {
                Some(a) => g.select(a, c, a)?,
                None => c,
            };
            active = Some(a);
            let next = inline(g, &w.body, &carries)?;
            carries = next.into_iter().zip(&carries).map(|(n, &c)| select(g, a, n, c)).collect::<Result<_, _>>()?;
        }
        Ok(carries)
    };
    Some(run(g))
}

/// `[1, dims..]` of a carry, the shape of one trajectory row.
fn row_shape(g: &Graph, v: ValueId) -> Shape {
    let mut dims = vec![Dim::Static(1)];
    dims.extend(g.ty(v).shape.dims().iter().cloned());
    Shape(dims)
}

/// `length` inlined bodies; step `t` reads `xs_i[t]` (a `Narrow` and a `Reshape` dropping the
/// length axis). With `save_trajectory` the saved carries are stacked by a `Concat`: all of
/// them, or with `K` checkpoints the rows `⌊j·length/K⌋` of the full trajectory (the carry
/// after step `⌊j·length/K⌋`, counting steps from 0).
fn scan(g: &mut Graph, s: &Scan, x: &[ValueId]) -> Result<ValueId, IrError> {
    let length = s.length as usize;
    check_unroll("Scan", length, s.body.len() + 2 * s.num_xs as usize + 1)?;
    let (bcast, xs) = x[1..].split_at(s.num_bcast as usize);
    let rows = if s.num_checkpoints > 0 { s.num_checkpoints as usize } else { length };
    let saved: Vec<usize> = (0..rows).map(|j| j * length / rows).collect();
    let mut carry = x[0];
    let mut trajectory = Vec::new();
    for t in 0..length {
        let mut args = vec![carry];
        args.extend_from_slice(bcast);
        for &xs_i in xs {
            let step = g.narrow(xs_i, 0, t, 1)?;
            let shape = Shape(g.ty(step).shape.dims()[1..].to_vec());
            args.push(g.reshape_to(step, &shape)?);
        }
        carry = inline(g, &s.body, &args)?[0];
        if s.save_trajectory && saved.binary_search(&t).is_ok() {
            let shape = row_shape(g, carry);
            trajectory.push(g.reshape_to(carry, &shape)?);
        }
    }
    if !s.save_trajectory {
        return Ok(carry);
    }
    match trajectory.as_slice() {
        [] => Err(IrError::Invalid("a scan of length 0 has no trajectory rows".into())),
        [row] => Ok(*row),
        rows => g.concat(rows, 0),
    }
}

/// Row `t` of `v [rows, ..]`, without the row axis.
fn row(g: &mut Graph, v: ValueId, t: usize) -> Result<ValueId, IrError> {
    let r = g.narrow(v, 0, t, 1)?;
    let shape = Shape(g.ty(r).shape.dims()[1..].to_vec());
    g.reshape_to(r, &shape)
}

/// What the two scan gradients share, and which result they take.
struct Sweep<'a> {
    body_vjp: &'a Graph,
    length: u32,
    save_trajectory: bool,
    num_checkpoints: u32,
    /// `None` for `d_init`, else the xs whose stacked gradient is the result.
    xs_idx: Option<usize>,
}

impl<'a> Sweep<'a> {
    fn of_init(b: &'a ScanBackward) -> Sweep<'a> {
        let ScanBackward { body_vjp, length, save_trajectory, num_checkpoints, .. } = b;
        Sweep {
            body_vjp,
            length: *length,
            save_trajectory: *save_trajectory,
            num_checkpoints: *num_checkpoints,
            xs_idx: None,
        }
    }

    fn of_xs(b: &'a ScanBackwardXs) -> Sweep<'a> {
        let ScanBackwardXs { body_vjp, length, save_trajectory, num_checkpoints, xs_idx, .. } = b;
        let xs_idx = Some(*xs_idx as usize);
        Sweep {
            body_vjp,
            length: *length,
            save_trajectory: *save_trajectory,
            num_checkpoints: *num_checkpoints,
            xs_idx,
        }
    }
}

/// The reverse sweep of OPS.md §22 unrolled, inputs `[init, trajectory, upstream, xs..]`: for
/// `t = length−1 … 0`, add the upstream row of step `t` (every row with `save_trajectory`,
/// else the final-carry cotangent at the last step), then `(g, dx_t..) = body_vjp(carry_in,
/// x_t.., g)` with `carry_in` = `init` at `t = 0`, else trajectory row `t−1`. Returns `g`, or
/// the `dx_t[xs_idx]` stacked. `None` for checkpointed trajectories and empty scans.
fn scan_backward(g: &mut Graph, s: &Sweep, x: &[ValueId]) -> Option<Result<ValueId, IrError>> {
    let length = s.length as usize;
    let checkpointed = 0 < s.num_checkpoints && s.num_checkpoints < s.length;
    if checkpointed || length == 0 {
        return None;
    }
    let run = |g: &mut Graph| -> Result<ValueId, IrError> {
        let [init, trajectory, upstream, xs @ ..] = x else {
            return Err(IrError::Invalid(format!("a scan gradient takes at least 3 inputs, got {}", x.len())));
        };
        check_unroll("scan gradient", length, s.body_vjp.len() + 2 * xs.len() + 4)?;
        let mut grad: Option<ValueId> = None;
        let mut dxs = Vec::with_capacity(length);
        for t in (0..length).rev() {
            let up = match (s.save_trajectory, t + 1 == length) {
                (true, _) => Some(row(g, *upstream, t)?),
                (false, true) => Some(*upstream),
                (false, false) => None,
            };
            let d = match (grad, up) {
                (Some(a), Some(u)) => g.binary(BinaryOp::Add, a, u)?,
                (a, u) => a.or(u).ok_or_else(|| IrError::Invalid("the sweep starts without a cotangent".into()))?,
            };
            let mut args = vec![if t == 0 { *init } else { row(g, *trajectory, t - 1)? }];
            for &xs_i in xs {
                args.push(row(g, xs_i, t)?);
            }
            args.push(d);
            let outs = inline(g, s.body_vjp, &args)?;
            grad = Some(outs[0]);
            if let Some(i) = s.xs_idx {
                let dx = *outs
                    .get(1 + i)
                    .ok_or_else(|| IrError::Invalid(format!("body_vjp returns no gradient for xs {i}")))?;
                let shape = row_shape(g, dx);
                dxs.push(g.reshape_to(dx, &shape)?);
            }
        }
        if s.xs_idx.is_none() {
            return grad.ok_or_else(|| IrError::Invalid("empty sweep".into()));
        }
        dxs.reverse();
        if dxs.len() == 1 {
            Ok(dxs[0])
        } else {
            g.concat(&dxs, 0)
        }
    };
    Some(run(g))
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower, lower_text};
    use rlx_ir::ops::control::{Scan, ScanBackward, ScanBackwardXs};
    use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
    use rlx_ir::{DType, Dim, Graph, OpKind, Shape, TensorType};

    fn f32s(dims: &[Dim]) -> TensorType {
        TensorType::new(DType::F32, Shape(dims.to_vec()))
    }

    /// `x ↦ act(x)` as a one-input body.
    fn unary(ty: &TensorType, kind: ActivationKind) -> Graph {
        let mut b = Graph::new();
        let x = b.input("x", ty.clone());
        let y = b.activation(kind, x).unwrap();
        b.set_outputs(vec![y]).unwrap();
        b
    }

    #[test]
    fn if_selects_between_both_branches() {
        let ty = f32s(&["B".into(), 4.into()]);
        let mut g = Graph::new();
        let p = g.input("p", TensorType::of(DType::Bool, &[1, 1]));
        let x = g.input("x", ty.clone());
        let y = g.if_else(p, &[x], unary(&ty, ActivationKind::Relu), unary(&ty, ActivationKind::Neg)).unwrap();
        g.set_outputs(y).unwrap();
        let out = lower(&g, &[]);
        assert_eq!(count(&out, OpKind::If), 0);
        assert_eq!((count(&out, OpKind::Activation), count(&out, OpKind::Where)), (2, 1));
    }

    #[test]
    fn while_unrolls_to_its_bound_with_an_active_flag() {
        // while i < 10 { i += 1; acc = acc·acc }, at most 3 times.
        let i_ty = TensorType::of(DType::I32, &[1]);
        let acc_ty = f32s(&["B".into(), 4.into()]);
        let mut cond = Graph::new();
        let i = cond.input("i", i_ty.clone());
        cond.input("acc", acc_ty.clone());
        let ten = cond.constant(i_ty.clone(), 10i32.to_le_bytes().to_vec()).unwrap();
        let lt = cond.compare(CmpOp::Lt, i, ten).unwrap();
        cond.set_outputs(vec![lt]).unwrap();
        let mut body = Graph::new();
        let i = body.input("i", i_ty.clone());
        let acc = body.input("acc", acc_ty.clone());
        let one = body.constant(i_ty.clone(), 1i32.to_le_bytes().to_vec()).unwrap();
        let i1 = body.binary(BinaryOp::Add, i, one).unwrap();
        let sq = body.binary(BinaryOp::Mul, acc, acc).unwrap();
        body.set_outputs(vec![i1, sq]).unwrap();

        let mut g = Graph::new();
        let i = g.input("i", i_ty);
        let acc = g.input("acc", acc_ty);
        let out = g.while_loop(&[i, acc], cond.clone(), body.clone(), Some(3)).unwrap();
        g.set_outputs(out).unwrap();
        let out = lower(&g, &[]);
        assert_eq!(count(&out, OpKind::Compare), 3);
        // Two carries per iteration, plus the flag after the first.
        assert_eq!(count(&out, OpKind::Where), 3 * 2 + 2);

        let mut unbounded = Graph::new();
        let i = unbounded.input("i", TensorType::of(DType::I32, &[1]));
        let acc = unbounded.input("acc", f32s(&["B".into(), 4.into()]));
        let out = unbounded.while_loop(&[i, acc], cond, body, None).unwrap();
        unbounded.set_outputs(out).unwrap();
        let err = crate::legalize(&unbounded, "test", super::super::PRIMITIVES).unwrap_err().to_string();
        assert!(err.starts_with("backend `test` cannot run While"), "{err}");
    }

    fn fma_scan(save_trajectory: bool, num_checkpoints: u32) -> Graph {
        let carry = f32s(&["B".into(), 4.into()]);
        let mut body = Graph::new();
        let c = body.input("carry", carry.clone());
        let w = body.input("w", f32s(&[4.into()]));
        let x = body.input("x_t", carry.clone());
        let w2 = body.param("w2", f32s(&[4.into()]));
        let cw = body.binary(BinaryOp::Mul, c, w).unwrap();
        let cw = body.binary(BinaryOp::Mul, cw, w2).unwrap();
        let y = body.binary(BinaryOp::Add, cw, x).unwrap();
        body.set_outputs(vec![y]).unwrap();
        let mut g = Graph::new();
        let init = g.input("init", carry);
        let w = g.param("w", f32s(&[4.into()]));
        let w2 = g.param("w2", f32s(&[4.into()]));
        let xs = g.input("xs", f32s(&[5.into(), "B".into(), 4.into()]));
        let attrs = Scan { body, length: 5, save_trajectory, num_bcast: 0, num_xs: 0, num_checkpoints };
        let y = g.scan(attrs, init, &[w], &[xs]).unwrap();
        let z = g.binary(BinaryOp::Mul, w2, w2).unwrap();
        g.set_outputs(vec![y, z]).unwrap();
        g
    }

    #[test]
    fn scan_unrolls_fully() {
        let out = lower(&fma_scan(false, 0), &[]);
        assert_eq!((count(&out, OpKind::Scan), count(&out, OpKind::Narrow)), (0, 5));
        // The body's parameter is the outer graph's, not a second copy.
        assert_eq!(count(&out, OpKind::Param), 2);
        let out = lower(&fma_scan(true, 0), &[]);
        assert_eq!(out.nodes().iter().find(|n| n.op.kind() == OpKind::Concat).unwrap().inputs.len(), 5);
        let out = lower(&fma_scan(true, 2), &[]);
        assert_eq!(out.nodes().iter().find(|n| n.op.kind() == OpKind::Concat).unwrap().inputs.len(), 2);
    }

    /// `c' = c·x_t` has the VJP `(d·x_t, d·c)`; the scan gradients of 4 steps over `[3]`.
    fn product_scan_gradients(save_trajectory: bool) -> Graph {
        let t = f32s(&[3.into()]);
        let mut vjp = Graph::new();
        let c = vjp.input("carry", t.clone());
        let x = vjp.input("x_t", t.clone());
        let d = vjp.input("d_output", t.clone());
        let dc = vjp.binary(BinaryOp::Mul, d, x).unwrap();
        let dx = vjp.binary(BinaryOp::Mul, d, c).unwrap();
        vjp.set_outputs(vec![dc, dx]).unwrap();
        let mut g = Graph::new();
        let init = g.input("init", t.clone());
        let traj = g.input("trajectory", f32s(&[4.into(), 3.into()]));
        let up = if save_trajectory { traj } else { init };
        let xs = g.input("xs", f32s(&[4.into(), 3.into()]));
        let b = ScanBackward {
            body_vjp: vjp.clone(),
            length: 4,
            save_trajectory,
            num_xs: 0,
            num_checkpoints: 0,
            forward_body: None,
        };
        let d_init = g.scan_backward(b, init, traj, up, &[xs]).unwrap();
        let b = ScanBackwardXs {
            body_vjp: vjp,
            length: 4,
            save_trajectory,
            num_xs: 0,
            num_checkpoints: 4,
            forward_body: None,
            xs_idx: 0,
        };
        let d_xs = g.scan_backward_xs(b, init, traj, up, &[xs]).unwrap();
        g.set_outputs(vec![d_init, d_xs]).unwrap();
        g
    }

    #[test]
    fn scan_gradients_unroll_the_reverse_sweep() {
        for save_trajectory in [false, true] {
            let out = lower(&product_scan_gradients(save_trajectory), &[]);
            // Two products per step, per gradient op; upstream rows add at all but the last step.
            let adds = if save_trajectory { 2 * 3 } else { 0 };
            assert_eq!(count(&out, OpKind::Binary), 2 * 4 * 2 + adds, "{out}");
            assert_eq!(out.nodes().iter().find(|n| n.op.kind() == OpKind::Concat).unwrap().inputs.len(), 4);
        }
    }

    #[test]
    fn control_kinds_of_the_ir_sample_lower() {
        let src = include_str!("../../../rlx-ir/tests/data/control.rlx");
        // The sample's ScanBackward is checkpointed, which stays the backend's.
        let out = lower_text(src, OpKind::If, &[OpKind::ScanBackward]);
        assert_eq!(count(&out, OpKind::ScanBackward), 1);
        for kind in super::KINDS.iter().filter(|k| **k != OpKind::ScanBackward) {
            assert_eq!(count(&out, *kind), 0, "{kind} left in\n{out}");
        }
    }
}
