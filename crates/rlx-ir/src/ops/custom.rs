//! Extension ops (OPS.md §21): registry-dispatched `Custom` kernels and `CustomFn`, a body
//! with its own gradient rules (`jax.custom_vjp` / `custom_jvp`).

use super::control::{input_types, output_types};
use super::{Arity, OpDef};
use crate::{Graph, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// A kernel looked up by `name` in a process-wide registry (shape inference, optional VJP,
/// per-backend kernels); `attrs` is an opaque blob forwarded to it. The IR cannot run the
/// registry's shape rule, so the builder declares the output types in `outputs`; lowering
/// fails if the target backend has no kernel registered under `name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Custom {
    pub name: String,
    pub num_inputs: u32,
    pub attrs: Vec<u8>,
    pub outputs: Vec<TensorType>,
}

/// A function with custom derivatives. `fwd_body` takes the `num_inputs` operands (its
/// `Input`s in creation order) and returns the single output `y`; it is inlined to execute.
///
/// `vjp_body` takes the primal inputs (the `Input`s with ordinary names, in order) plus the
/// reserved-name inputs `"d_output"` (ȳ, required) and `"primal_output"` (`y`, optional), and
/// returns one gradient per primal input, each of that input's type. `jvp_body` takes the
/// primal inputs, `"tangent_0".."tangent_{n−1}"` (all required, typed as the primals) and
/// optionally `"primal_output"`, and returns the tangent of `y`. Absent bodies mean
/// differentiating `fwd_body`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CustomFn {
    pub fwd_body: Graph,
    pub vjp_body: Option<Graph>,
    pub jvp_body: Option<Graph>,
    pub num_inputs: u32,
}

/// What a sub-body input stands for, by its name (OPS.md §21's reserved names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Primal,
    PrimalOutput,
    DOutput,
    Tangent(usize),
}

fn role(name: &str) -> Role {
    match name {
        "primal_output" => Role::PrimalOutput,
        "d_output" => Role::DOutput,
        _ => match name.strip_prefix("tangent_").and_then(|i| i.parse().ok()) {
            Some(i) => Role::Tangent(i),
            None => Role::Primal,
        },
    }
}

/// Which derivative body is being checked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Vjp,
    Jvp,
}

/// Checks the inputs of a derivative body against the primal operands and the output `y`.
fn check_ad_inputs(what: &str, g: &Graph, mode: Mode, primals: &[TensorType], y: &TensorType) -> Result<(), String> {
    let mut primal: Vec<&TensorType> = Vec::new();
    let mut seen: Vec<Role> = Vec::new();
    for (name, t) in input_types(what, g)? {
        let r = role(name);
        let want = match r {
            Role::Primal => {
                primal.push(t);
                continue;
            }
            Role::PrimalOutput => y,
            Role::DOutput if mode == Mode::Vjp => y,
            Role::Tangent(i) if mode == Mode::Jvp => primals
                .get(i)
                .ok_or_else(|| format!("{what} input \"{name}\" names no primal input (there are {})", primals.len()))?,
            Role::DOutput | Role::Tangent(_) => return Err(format!("{what} may not take the reserved input \"{name}\"")),
        };
        if seen.contains(&r) {
            return Err(format!("{what} takes \"{name}\" twice"));
        }
        if t != want {
            return Err(format!("{what} input \"{name}\" is {t}, but must be {want}"));
        }
        seen.push(r);
    }
    if primal.len() != primals.len() || primal.iter().zip(primals).any(|(a, b)| *a != b) {
        let have: Vec<String> = primal.iter().map(ToString::to_string).collect();
        let want: Vec<String> = primals.iter().map(ToString::to_string).collect();
        return Err(format!("{what} primal inputs ({}) must be the operands ({})", have.join(", "), want.join(", ")));
    }
    match mode {
        Mode::Vjp if !seen.contains(&Role::DOutput) => Err(format!("{what} needs a \"d_output\" input")),
        Mode::Jvp => match (0..primals.len()).find(|i| !seen.contains(&Role::Tangent(*i))) {
            Some(i) => Err(format!("{what} needs a \"tangent_{i}\" input")),
            None => Ok(()),
        },
        Mode::Vjp => Ok(()),
    }
}

/// Checks that `g` returns exactly `want`.
fn check_returns(what: &str, g: &Graph, want: &[TensorType]) -> Result<(), String> {
    let have = output_types(what, g)?;
    if have != want {
        let list = |ts: &[TensorType]| ts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        return Err(format!("{what} returns ({}) but must return ({})", list(&have), list(want)));
    }
    Ok(())
}

impl OpDef for Custom {
    fn fresh(&self) -> bool {
        true
    }
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.outputs.iter_mut().for_each(|t| t.shape.bind(sizes));
    }
    fn arity(&self) -> Arity {
        Arity::Exact(self.num_inputs as usize)
    }
    fn infer(&self, _: &[TensorType]) -> Result<Vec<TensorType>, String> {
        if self.name.is_empty() {
            return Err("a custom op needs a registry name".into());
        }
        if self.outputs.is_empty() {
            return Err(format!("custom op \"{}\" declares no outputs", self.name));
        }
        Ok(self.outputs.clone())
    }
}

impl OpDef for CustomFn {
    fn arity(&self) -> Arity {
        Arity::Exact(self.num_inputs as usize)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let fwd = input_types("fwd_body", &self.fwd_body)?;
        if fwd.len() != inputs.len() {
            return Err(format!("fwd_body has {} inputs, but {} values bind to it", fwd.len(), inputs.len()));
        }
        for (i, ((name, t), w)) in fwd.iter().zip(inputs).enumerate() {
            if *t != w {
                return Err(format!("fwd_body input {i} (\"{name}\") is {t}, but the value bound to it is {w}"));
            }
        }
        let y = match output_types("fwd_body", &self.fwd_body)?.as_slice() {
            [y] => y.clone(),
            other => return Err(format!("fwd_body must return one value, got {}", other.len())),
        };
        if let Some(vjp) = &self.vjp_body {
            check_ad_inputs("vjp_body", vjp, Mode::Vjp, inputs, &y)?;
            check_returns("vjp_body", vjp, inputs)?;
        }
        if let Some(jvp) = &self.jvp_body {
            check_ad_inputs("jvp_body", jvp, Mode::Jvp, inputs, &y)?;
            check_returns("jvp_body", jvp, std::slice::from_ref(&y))?;
        }
        Ok(vec![y])
    }
    fn subgraphs(&self) -> Vec<&Graph> {
        let mut out = vec![&self.fwd_body];
        out.extend(self.vjp_body.as_ref());
        out.extend(self.jvp_body.as_ref());
        out
    }
}

/// Builders for the extension ops.
impl Graph {
    /// A registry kernel with declared output types; returns one value per output.
    pub fn custom(
        &mut self,
        name: &str,
        inputs: &[ValueId],
        attrs: Vec<u8>,
        outputs: Vec<TensorType>,
    ) -> crate::Result<Vec<ValueId>> {
        let n = outputs.len() as u32;
        let op = Custom { name: name.into(), num_inputs: inputs.len() as u32, attrs, outputs };
        let id = self.add(op, inputs)?;
        Ok((0..n).map(|i| ValueId::new(id, i)).collect())
    }

    /// `fwd_body(inputs)` with optional custom VJP / JVP bodies.
    pub fn custom_fn(
        &mut self,
        inputs: &[ValueId],
        fwd_body: Graph,
        vjp_body: Option<Graph>,
        jvp_body: Option<Graph>,
    ) -> crate::Result<ValueId> {
        let num_inputs = inputs.len() as u32;
        self.add1(CustomFn { fwd_body, vjp_body, jvp_body, num_inputs }, inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::{ActivationKind, BinaryOp};
    use crate::DType;

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    #[test]
    fn custom_returns_its_declared_outputs() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[4]));
        let outs = g.custom("my.topk", &[x], vec![2], vec![f32s(&[2]), TensorType::of(DType::I64, &[2])]).unwrap();
        assert_eq!(g.ty(outs[1]), &TensorType::of(DType::I64, &[2]));
        assert!(g.custom("", &[x], vec![], vec![f32s(&[2])]).unwrap_err().to_string().contains("registry name"));
        assert!(g.custom("k", &[x], vec![], vec![]).unwrap_err().to_string().contains("declares no outputs"));
    }

    /// `y = x·w`, with a VJP `(d·w, d·x)` that reads `d_output` between the primals.
    fn bodies() -> (Graph, Graph, Graph) {
        let mut fwd = Graph::new();
        let x = fwd.input("x", f32s(&[3]));
        let w = fwd.input("w", f32s(&[3]));
        let y = fwd.binary(BinaryOp::Mul, x, w).unwrap();
        fwd.set_outputs(vec![y]).unwrap();
        let mut vjp = Graph::new();
        let x = vjp.input("x", f32s(&[3]));
        let d = vjp.input("d_output", f32s(&[3]));
        let w = vjp.input("w", f32s(&[3]));
        let dx = vjp.binary(BinaryOp::Mul, d, w).unwrap();
        let dw = vjp.binary(BinaryOp::Mul, d, x).unwrap();
        vjp.set_outputs(vec![dx, dw]).unwrap();
        let mut jvp = Graph::new();
        let x = jvp.input("x", f32s(&[3]));
        let w = jvp.input("w", f32s(&[3]));
        let tx = jvp.input("tangent_0", f32s(&[3]));
        let tw = jvp.input("tangent_1", f32s(&[3]));
        let _y = jvp.input("primal_output", f32s(&[3]));
        let a = jvp.binary(BinaryOp::Mul, tx, w).unwrap();
        let t = jvp.fma(x, tw, a).unwrap();
        jvp.set_outputs(vec![t]).unwrap();
        (fwd, vjp, jvp)
    }

    #[test]
    fn custom_fn_checks_bodies_against_operands() {
        let (fwd, vjp, jvp) = bodies();
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[3]));
        let w = g.param("w", f32s(&[3]));
        let y = g.custom_fn(&[x, w], fwd.clone(), Some(vjp.clone()), Some(jvp.clone())).unwrap();
        assert_eq!(g.ty(y), &f32s(&[3]));
        crate::verify(&g).unwrap();
        let e = g.custom_fn(&[x, w], fwd.clone(), Some(jvp.clone()), None).unwrap_err().to_string();
        assert!(e.contains("vjp_body may not take the reserved input \"tangent_0\""), "{e}");
        let e = g.custom_fn(&[x, w], fwd.clone(), None, Some(vjp)).unwrap_err().to_string();
        assert!(e.contains("jvp_body may not take the reserved input \"d_output\""), "{e}");
        let e = g.custom_fn(&[x], fwd.clone(), None, None).unwrap_err().to_string();
        assert!(e.contains("fwd_body has 2 inputs, but 1 values bind to it"), "{e}");
        let mut no_d = Graph::new();
        let a = no_d.input("x", f32s(&[3]));
        let _b = no_d.input("w", f32s(&[3]));
        let r = no_d.activation(ActivationKind::Neg, a).unwrap();
        no_d.set_outputs(vec![r, r]).unwrap();
        let e = g.custom_fn(&[x, w], fwd, Some(no_d), None).unwrap_err().to_string();
        assert!(e.contains("vjp_body needs a \"d_output\" input"), "{e}");
    }
}
