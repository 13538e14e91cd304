//! Control flow (OPS.md §20; the scan gradients of §22): ops whose bodies are sub-graphs.
//!
//! A sub-graph's `Input` nodes bind positionally (creation order, [`Graph::inputs`]) to the
//! values listed for it and its results are [`Graph::outputs`]. Inference checks both against
//! the operands' types exactly (symbols included); the verifier checks the bodies themselves.

use super::{Arity, OpDef};
use crate::{DType, Dim, Graph, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `lax.cond`: `then_branch` on the captures if `predicate` holds, else `else_branch`.
/// Inputs `(predicate, captures..)` with a one-element Bool predicate; both branches take the
/// captures and return the same types, which are the op's outputs (all of them, OPS.md §0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct If {
    pub then_branch: Graph,
    pub else_branch: Graph,
}

/// `lax.while_loop`: while `cond(carries)` (a one-element Bool), `carries = body(carries)`.
/// Outputs the final carries, in order. `max_iterations` bounds the static unroll; `None`
/// needs a runtime executor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct While {
    pub cond: Graph,
    pub body: Graph,
    pub max_iterations: Option<usize>,
}

/// `lax.scan`: inputs `[init, bcast_0.., xs_0..]`, each `xs_i` `[length, per_step_i..]`;
/// `body(carry, bcast.., x_t..)` returns the next carry. Output: the final carry, or with
/// `save_trajectory` the carries after every step, `[length, carry..]`; with
/// `0 < num_checkpoints = K < length` only `K` rows (steps `⌊t·length/K⌋`), `[K, carry..]`.
/// Checkpoints without `save_trajectory` are rejected (they would not be output).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    pub body: Graph,
    pub length: u32,
    pub save_trajectory: bool,
    pub num_bcast: u32,
    pub num_xs: u32,
    pub num_checkpoints: u32,
}

/// Gradient of [`Scan`] w.r.t. `init`: inputs `[init, trajectory, upstream, xs_0..]` (bcast
/// operands already materialized as xs). `trajectory` holds the forward's saved rows
/// (`[K, carry..]` when checkpointed, else `[length, carry..]`); `upstream` has the forward
/// output's type (`[rows, carry..]` with `save_trajectory`, else the carry's). `body_vjp` takes
/// `(carry, x_t.., "d_output")` and returns `(d_carry, d_x_t..)`; `forward_body` (`(carry,
/// x_t..)` → carry) recomputes carries between checkpoints and is required when checkpointed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanBackward {
    pub body_vjp: Graph,
    pub length: u32,
    pub save_trajectory: bool,
    pub num_xs: u32,
    pub num_checkpoints: u32,
    pub forward_body: Option<Graph>,
}

/// Gradient of [`Scan`] w.r.t. `xs[xs_idx]`: the same inputs and sweep as [`ScanBackward`],
/// output the stacked `dx_t` with the type of that xs operand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanBackwardXs {
    pub body_vjp: Graph,
    pub length: u32,
    pub save_trajectory: bool,
    pub num_xs: u32,
    pub num_checkpoints: u32,
    pub forward_body: Option<Graph>,
    pub xs_idx: u32,
}

/// `f32[2], i64[3]`, the way error messages list types.
fn list(types: &[TensorType]) -> String {
    types.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// A sub-graph's `Input` nodes as `(name, type)`, in creation (binding) order.
pub(crate) fn input_types<'g>(what: &str, g: &'g Graph) -> Result<Vec<(&'g str, &'g TensorType)>, String> {
    g.inputs()
        .into_iter()
        .map(|(name, v)| g.try_ty(v).map(|t| (name, t)).ok_or_else(|| format!("{what} input {name} has no type")))
        .collect()
}

/// A sub-graph's result types; a dangling output is an error.
pub(crate) fn output_types(what: &str, g: &Graph) -> Result<Vec<TensorType>, String> {
    g.outputs()
        .iter()
        .map(|v| g.try_ty(*v).cloned().ok_or_else(|| format!("{what} output {v} does not exist")))
        .collect()
}

/// Checks that the values of types `want` bind one to one to `g`'s inputs.
fn check_binds(what: &str, g: &Graph, want: &[TensorType]) -> Result<(), String> {
    let have = input_types(what, g)?;
    if have.len() != want.len() {
        return Err(format!("{what} has {} inputs, but {} values bind to it ({})", have.len(), want.len(), list(want)));
    }
    for (i, ((name, t), w)) in have.iter().zip(want).enumerate() {
        if *t != w {
            return Err(format!("{what} input {i} (\"{name}\") is {t}, but the value bound to it is {w}"));
        }
    }
    Ok(())
}

/// Checks that `g` returns exactly the types `want`.
fn check_returns(what: &str, g: &Graph, want: &[TensorType]) -> Result<(), String> {
    let have = output_types(what, g)?;
    if have != want {
        return Err(format!("{what} returns ({}) but must return ({})", list(&have), list(want)));
    }
    Ok(())
}

/// One-element Bool (`[]`, `[1]`, `[1, 1]`, ...).
fn is_flag(t: &TensorType) -> bool {
    t.dtype == DType::Bool && t.shape.dims().iter().all(|d| *d == Dim::Static(1))
}

/// The per-step types `x_t` of the xs operands, after checking their leading `length` axis.
fn per_step(length: u32, xs: &[TensorType]) -> Result<Vec<TensorType>, String> {
    xs.iter()
        .enumerate()
        .map(|(i, t)| match t.shape.dims().split_first() {
            Some((Dim::Static(n), _)) if *n != length as usize => {
                Err(format!("xs {i} {t} must have {length} rows (the scan length), got {n}"))
            }
            Some((_, rest)) => Ok(TensorType::new(t.dtype, Shape(rest.to_vec()))),
            None => Err(format!("xs {i} {t} needs a leading length axis")),
        })
        .collect()
}

/// The number of saved carry rows: `K` when checkpointed, else `length`.
fn saved_rows(length: u32, checkpoints: u32) -> Result<usize, String> {
    if checkpoints > length {
        return Err(format!("num_checkpoints {checkpoints} exceeds the length {length}"));
    }
    let rows = if checkpoints > 0 { checkpoints } else { length };
    Ok(rows as usize)
}

/// `[rows, carry..]`.
fn stacked(rows: usize, carry: &TensorType) -> TensorType {
    let mut dims = vec![Dim::Static(rows)];
    dims.extend(carry.shape.dims().iter().cloned());
    TensorType::new(carry.dtype, Shape(dims))
}

impl OpDef for If {
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (pred, captures) = inputs.split_first().ok_or("needs a predicate")?;
        if !is_flag(pred) {
            return Err(format!("the predicate {pred} must be a one-element Bool"));
        }
        check_binds("then_branch", &self.then_branch, captures)?;
        check_binds("else_branch", &self.else_branch, captures)?;
        let out = output_types("then_branch", &self.then_branch)?;
        if out.is_empty() {
            return Err("then_branch returns nothing".into());
        }
        check_returns("else_branch", &self.else_branch, &out)?;
        Ok(out)
    }
    fn subgraphs(&self) -> Vec<&Graph> {
        vec![&self.then_branch, &self.else_branch]
    }
}

impl OpDef for While {
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_binds("cond", &self.cond, inputs)?;
        match output_types("cond", &self.cond)?.as_slice() {
            [flag] if is_flag(flag) => {}
            other => return Err(format!("cond returns ({}) but must return one one-element Bool", list(other))),
        }
        check_binds("body", &self.body, inputs)?;
        check_returns("body", &self.body, inputs)?;
        Ok(inputs.to_vec())
    }
    fn subgraphs(&self) -> Vec<&Graph> {
        vec![&self.cond, &self.body]
    }
}

impl OpDef for Scan {
    fn arity(&self) -> Arity {
        Arity::Exact(1 + self.num_bcast as usize + self.num_xs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (init, rest) = inputs.split_first().ok_or("needs an initial carry")?;
        let (bcast, xs) = rest.split_at((self.num_bcast as usize).min(rest.len()));
        let mut binds = vec![init.clone()];
        binds.extend(bcast.iter().cloned());
        binds.extend(per_step(self.length, xs)?);
        check_binds("body", &self.body, &binds)?;
        check_returns("body", &self.body, std::slice::from_ref(init))?;
        if !self.save_trajectory {
            if self.num_checkpoints > 0 {
                return Err("num_checkpoints needs save_trajectory (checkpoints are trajectory rows)".into());
            }
            return Ok(vec![init.clone()]);
        }
        Ok(vec![stacked(saved_rows(self.length, self.num_checkpoints)?, init)])
    }
    fn subgraphs(&self) -> Vec<&Graph> {
        vec![&self.body]
    }
}

/// The attributes the two scan gradients share.
struct ScanGrad<'a> {
    body_vjp: &'a Graph,
    length: u32,
    save_trajectory: bool,
    num_checkpoints: u32,
    forward_body: Option<&'a Graph>,
}

impl<'a> ScanGrad<'a> {
    /// Checks `[init, trajectory, upstream, xs..]` and the bodies.
    fn check(&self, inputs: &[TensorType]) -> Result<(), String> {
        let [init, trajectory, upstream, xs @ ..] = inputs else {
            return Err(format!("needs init, trajectory and upstream, got {} inputs", inputs.len()));
        };
        let rows = saved_rows(self.length, self.num_checkpoints)?;
        let want = stacked(rows, init);
        if *trajectory != want {
            return Err(format!("trajectory {trajectory} must be {want} (the saved carries)"));
        }
        let want = if self.save_trajectory { want } else { init.clone() };
        if *upstream != want {
            return Err(format!("upstream {upstream} must have the forward output's type {want}"));
        }
        let steps = per_step(self.length, xs)?;
        let mut binds = vec![init.clone()];
        binds.extend(steps.iter().cloned());
        if let Some(fwd) = self.forward_body {
            check_binds("forward_body", fwd, &binds)?;
            check_returns("forward_body", fwd, std::slice::from_ref(init))?;
        } else if 0 < self.num_checkpoints && self.num_checkpoints < self.length {
            return Err(format!(
                "num_checkpoints {} < length {} needs a forward_body to recompute carries",
                self.num_checkpoints, self.length
            ));
        }
        binds.push(init.clone());
        check_binds("body_vjp", self.body_vjp, &binds)?;
        if let Some((name, _)) = input_types("body_vjp", self.body_vjp)?.last() {
            if *name != "d_output" {
                return Err(format!("the last input of body_vjp must be \"d_output\", got \"{name}\""));
            }
        }
        binds.pop();
        check_returns("body_vjp", self.body_vjp, &binds)
    }

    fn subgraphs(self) -> Vec<&'a Graph> {
        let mut out = vec![self.body_vjp];
        out.extend(self.forward_body);
        out
    }
}

impl ScanBackward {
    fn grad(&self) -> ScanGrad<'_> {
        ScanGrad {
            body_vjp: &self.body_vjp,
            length: self.length,
            save_trajectory: self.save_trajectory,
            num_checkpoints: self.num_checkpoints,
            forward_body: self.forward_body.as_ref(),
        }
    }
}

impl ScanBackwardXs {
    fn grad(&self) -> ScanGrad<'_> {
        ScanGrad {
            body_vjp: &self.body_vjp,
            length: self.length,
            save_trajectory: self.save_trajectory,
            num_checkpoints: self.num_checkpoints,
            forward_body: self.forward_body.as_ref(),
        }
    }
}

impl OpDef for ScanBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3 + self.num_xs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        self.grad().check(inputs)?;
        Ok(vec![inputs[0].clone()])
    }
    fn subgraphs(&self) -> Vec<&Graph> {
        self.grad().subgraphs()
    }
}

impl OpDef for ScanBackwardXs {
    fn arity(&self) -> Arity {
        Arity::Exact(3 + self.num_xs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        self.grad().check(inputs)?;
        let xs = inputs.get(3 + self.xs_idx as usize).filter(|_| self.xs_idx < self.num_xs);
        let xs = xs.ok_or_else(|| format!("xs_idx {} is not one of the {} xs", self.xs_idx, self.num_xs))?;
        Ok(vec![xs.clone()])
    }
    fn subgraphs(&self) -> Vec<&Graph> {
        self.grad().subgraphs()
    }
}

/// The values of all outputs of node `id`.
fn all_outputs(g: &Graph, id: crate::NodeId) -> Vec<ValueId> {
    (0..g.node(id).outputs.len() as u32).map(|i| ValueId::new(id, i)).collect()
}

/// Builders for control flow; multi-output kinds return one value per output.
impl Graph {
    /// `then_branch(captures)` if `pred` else `else_branch(captures)`.
    pub fn if_else(
        &mut self,
        pred: ValueId,
        captures: &[ValueId],
        then_branch: Graph,
        else_branch: Graph,
    ) -> crate::Result<Vec<ValueId>> {
        let mut inputs = vec![pred];
        inputs.extend_from_slice(captures);
        let id = self.add(If { then_branch, else_branch }, &inputs)?;
        Ok(all_outputs(self, id))
    }

    /// The final carries of `while cond(c) { c = body(c) }`.
    pub fn while_loop(
        &mut self,
        carries: &[ValueId],
        cond: Graph,
        body: Graph,
        max_iterations: Option<usize>,
    ) -> crate::Result<Vec<ValueId>> {
        let id = self.add(While { cond, body, max_iterations }, carries)?;
        Ok(all_outputs(self, id))
    }

    /// `lax.scan` of `attrs.body`; `num_bcast` and `num_xs` are set from the slices.
    pub fn scan(&mut self, mut attrs: Scan, init: ValueId, bcast: &[ValueId], xs: &[ValueId]) -> crate::Result<ValueId> {
        attrs.num_bcast = bcast.len() as u32;
        attrs.num_xs = xs.len() as u32;
        let mut inputs = vec![init];
        inputs.extend_from_slice(bcast);
        inputs.extend_from_slice(xs);
        self.add1(attrs, &inputs)
    }

    /// `d_init` of a scan; `num_xs` is set from `xs`.
    pub fn scan_backward(
        &mut self,
        mut attrs: ScanBackward,
        init: ValueId,
        trajectory: ValueId,
        upstream: ValueId,
        xs: &[ValueId],
    ) -> crate::Result<ValueId> {
        attrs.num_xs = xs.len() as u32;
        let mut inputs = vec![init, trajectory, upstream];
        inputs.extend_from_slice(xs);
        self.add1(attrs, &inputs)
    }

    /// `d_xs[attrs.xs_idx]` of a scan; `num_xs` is set from `xs`.
    pub fn scan_backward_xs(
        &mut self,
        mut attrs: ScanBackwardXs,
        init: ValueId,
        trajectory: ValueId,
        upstream: ValueId,
        xs: &[ValueId],
    ) -> crate::Result<ValueId> {
        attrs.num_xs = xs.len() as u32;
        let mut inputs = vec![init, trajectory, upstream];
        inputs.extend_from_slice(xs);
        self.add1(attrs, &inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    /// A graph of one input `x: ty` returning `f(x)`.
    fn unary(ty: TensorType, f: impl FnOnce(&mut Graph, ValueId) -> ValueId) -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", ty);
        let y = f(&mut g, x);
        g.set_outputs(vec![y]).unwrap();
        g
    }

    #[test]
    fn if_binds_captures_and_needs_matching_branches() {
        let mut g = Graph::new();
        let p = g.input("p", TensorType::of(DType::Bool, &[1]));
        let x = g.input("x", f32s(&[3]));
        let relu = unary(f32s(&[3]), |g, x| g.activation(ActivationKind::Relu, x).unwrap());
        let neg = unary(f32s(&[3]), |g, x| g.activation(ActivationKind::Neg, x).unwrap());
        let out = g.if_else(p, &[x], relu.clone(), neg).unwrap();
        assert_eq!(g.ty(out[0]), &f32s(&[3]));
        crate::verify(&g).unwrap();
        let e = g.if_else(x, &[x], relu.clone(), relu.clone()).unwrap_err().to_string();
        assert!(e.contains("predicate f32[3] must be a one-element Bool"), "{e}");
        let wide = unary(f32s(&[3]), |g, x| g.binary(BinaryOp::Add, x, x).unwrap());
        let mut cast = Graph::new();
        let cx = cast.input("x", f32s(&[3]));
        let c = cast.cast(cx, DType::F16).unwrap();
        cast.set_outputs(vec![c]).unwrap();
        let e = g.if_else(p, &[x], wide, cast).unwrap_err().to_string();
        assert!(e.contains("else_branch returns (f16[3]) but must return (f32[3])"), "{e}");
        let e = g.if_else(p, &[x, x], relu.clone(), relu).unwrap_err().to_string();
        assert!(e.contains("then_branch has 1 inputs, but 2 values bind to it"), "{e}");
    }

    #[test]
    fn while_returns_all_carries() {
        let i32s = TensorType::of(DType::I32, &[1]);
        let mut cond = Graph::new();
        let i = cond.input("i", i32s.clone());
        let _acc = cond.input("acc", f32s(&[2]));
        let limit = cond.constant(i32s.clone(), 10i32.to_le_bytes().to_vec()).unwrap();
        let lt = cond.compare(CmpOp::Lt, i, limit).unwrap();
        cond.set_outputs(vec![lt]).unwrap();
        let mut body = Graph::new();
        let i = body.input("i", i32s.clone());
        let acc = body.input("acc", f32s(&[2]));
        let i2 = body.binary(BinaryOp::Add, i, i).unwrap();
        let acc2 = body.binary(BinaryOp::Add, acc, acc).unwrap();
        body.set_outputs(vec![i2, acc2]).unwrap();

        let mut g = Graph::new();
        let i = g.input("i", i32s.clone());
        let acc = g.input("acc", f32s(&[2]));
        let out = g.while_loop(&[i, acc], cond.clone(), body.clone(), Some(16)).unwrap();
        assert_eq!((g.ty(out[0]), g.ty(out[1])), (&i32s, &f32s(&[2])));
        let e = g.while_loop(&[i, acc], body.clone(), body, None).unwrap_err().to_string();
        assert!(e.contains("cond returns (i32[1], f32[2]) but must return one one-element Bool"), "{e}");
    }

    fn fma_body(carry: &TensorType, x_t: &TensorType) -> Graph {
        let mut b = Graph::new();
        let c = b.input("carry", carry.clone());
        let x = b.input("x_t", x_t.clone());
        let y = b.fma(c, x, x).unwrap();
        b.set_outputs(vec![y]).unwrap();
        b
    }

    fn scan_attrs(body: Graph, save_trajectory: bool, num_checkpoints: u32) -> Scan {
        Scan { body, length: 8, save_trajectory, num_bcast: 0, num_xs: 0, num_checkpoints }
    }

    #[test]
    fn scan_outputs_final_carry_or_trajectory() {
        let mut g = Graph::new();
        let init = g.input("init", f32s(&[4]));
        let xs = g.input("xs", f32s(&[8, 4]));
        let body = fma_body(&f32s(&[4]), &f32s(&[4]));
        let last = g.scan(scan_attrs(body.clone(), false, 0), init, &[], &[xs]).unwrap();
        assert_eq!(g.ty(last), &f32s(&[4]));
        let traj = g.scan(scan_attrs(body.clone(), true, 0), init, &[], &[xs]).unwrap();
        assert_eq!(g.ty(traj), &f32s(&[8, 4]));
        let ckpt = g.scan(scan_attrs(body.clone(), true, 2), init, &[], &[xs]).unwrap();
        assert_eq!(g.ty(ckpt), &f32s(&[2, 4]));
        let short = g.input("short", f32s(&[5, 4]));
        let e = g.scan(scan_attrs(body.clone(), false, 0), init, &[], &[short]).unwrap_err().to_string();
        assert!(e.contains("must have 8 rows"), "{e}");
        assert!(g.scan(scan_attrs(body, false, 2), init, &[], &[xs]).is_err());
    }

    fn vjp_body(last: &str) -> Graph {
        let mut b = Graph::new();
        let c = b.input("carry", f32s(&[4]));
        let x = b.input("x_t", f32s(&[4]));
        let d = b.input(last, f32s(&[4]));
        let dc = b.binary(BinaryOp::Mul, d, x).unwrap();
        let dx = b.fma(d, c, d).unwrap();
        b.set_outputs(vec![dc, dx]).unwrap();
        b
    }

    #[test]
    fn scan_gradients_check_trajectory_upstream_and_bodies() {
        let mut g = Graph::new();
        let init = g.input("init", f32s(&[4]));
        let xs = g.input("xs", f32s(&[8, 4]));
        let traj = g.input("traj", f32s(&[2, 4]));
        let attrs = ScanBackward {
            body_vjp: vjp_body("d_output"),
            length: 8,
            save_trajectory: false,
            num_xs: 1,
            num_checkpoints: 2,
            forward_body: Some(fma_body(&f32s(&[4]), &f32s(&[4]))),
        };
        let d_init = g.scan_backward(attrs.clone(), init, traj, init, &[xs]).unwrap();
        assert_eq!(g.ty(d_init), &f32s(&[4]));
        let xs_attrs = ScanBackwardXs {
            body_vjp: attrs.body_vjp.clone(),
            length: 8,
            save_trajectory: false,
            num_xs: 1,
            num_checkpoints: 2,
            forward_body: attrs.forward_body.clone(),
            xs_idx: 0,
        };
        let d_xs = g.scan_backward_xs(xs_attrs.clone(), init, traj, init, &[xs]).unwrap();
        assert_eq!(g.ty(d_xs), &f32s(&[8, 4]));
        crate::verify(&g).unwrap();

        let no_fwd = ScanBackward { forward_body: None, ..attrs.clone() };
        let e = g.scan_backward(no_fwd, init, traj, init, &[xs]).unwrap_err().to_string();
        assert!(e.contains("needs a forward_body"), "{e}");
        let renamed = ScanBackward { body_vjp: vjp_body("dy"), ..attrs.clone() };
        let e = g.scan_backward(renamed, init, traj, init, &[xs]).unwrap_err().to_string();
        assert!(e.contains("must be \"d_output\""), "{e}");
        let e = g.scan_backward(attrs, init, xs, init, &[xs]).unwrap_err().to_string();
        assert!(e.contains("trajectory f32[8, 4] must be f32[2, 4]"), "{e}");
        let e = g.scan_backward_xs(ScanBackwardXs { xs_idx: 1, ..xs_attrs }, init, traj, init, &[xs]);
        assert!(e.unwrap_err().to_string().contains("xs_idx 1 is not one of the 1 xs"));
    }
}
