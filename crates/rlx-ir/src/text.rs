//! The text format: one node per line, `return` names the outputs.
//!
//! ```text
//! %0 = Input(name:"x",ty:(dtype:F32,shape:["B",4]))() : f32[B, 4]
//! %1 = Activation(kind:Relu)(%0) : f32[B, 4]
//! %2 = TopK(k:2)(%1) : f32[B, 2], i64[B, 2]
//! return %1, %2.1
//! ```
//!
//! An op and its attributes are written in RON (the `Op` enum's serde form, newtype variants
//! unwrapped), followed by its inputs in parentheses and, after ` : `, its output types. The
//! types are optional when parsing (they are inferred); when present they must match.
//! `#` starts a comment line. Printing then parsing gives back an equal graph.

use crate::error::{IrError, Result};
use crate::{Graph, NodeId, Op, TensorType, ValueId};
use std::collections::HashMap;
use std::fmt;

fn ron_options() -> ron::Options {
    ron::Options::default().with_default_extension(ron::extensions::Extensions::UNWRAP_VARIANT_NEWTYPES)
}

/// The RON text of an op and its attributes, as the text format prints it.
pub fn op_to_string(op: &Op) -> String {
    ron_options()
        .to_string(op)
        .expect("every op attribute serializes to RON")
}

/// Parses an op written as [`op_to_string`] prints it.
pub fn parse_op(text: &str) -> std::result::Result<Op, String> {
    ron_options().from_str(text).map_err(|e| format!("bad op `{text}`: {e}"))
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for id in self.node_ids() {
            let node = self.node(id);
            let inputs: Vec<String> = node.inputs.iter().map(ToString::to_string).collect();
            let types: Vec<String> = node.outputs.iter().map(ToString::to_string).collect();
            writeln!(
                f,
                "%{} = {}({}) : {}",
                id.0,
                op_to_string(&node.op),
                inputs.join(", "),
                types.join(", ")
            )?;
        }
        let outs: Vec<String> = self.outputs().iter().map(ToString::to_string).collect();
        writeln!(f, "return {}", outs.join(", "))
    }
}

/// Parses a graph from the text format.
pub fn parse(text: &str) -> Result<Graph> {
    let mut g = Graph::new();
    let mut names: HashMap<String, NodeId> = HashMap::new();
    let mut returned = false;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |msg: String| IrError::Parse { line: line_no, msg };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if returned {
            return Err(err("nothing may follow `return`".into()));
        }
        if let Some(rest) = line.strip_prefix("return") {
            let outs = parse_values(rest.trim(), &names).map_err(err)?;
            g.set_outputs(outs).map_err(|e| err(e.to_string()))?;
            returned = true;
            continue;
        }
        let (lhs, rhs) = line
            .split_once(" = ")
            .ok_or_else(|| err("expected `%name = Op(attrs)(inputs) : types`".into()))?;
        let name = lhs
            .trim()
            .strip_prefix('%')
            .filter(|n| !n.is_empty() && !n.contains('.'))
            .ok_or_else(|| err(format!("bad node name `{lhs}`")))?;
        if names.contains_key(name) {
            return Err(err(format!("node %{name} is defined twice")));
        }
        let (call, declared) = split_types(rhs).map_err(err)?;
        let open = call
            .strip_suffix(')')
            .and_then(|c| c.rfind('('))
            .ok_or_else(|| err(format!("expected `(inputs)` at the end of `{call}`")))?;
        let op = parse_op(&call[..open]).map_err(err)?;
        let inputs = parse_values(&call[open + 1..call.len() - 1], &names).map_err(err)?;
        let id = g.add(op, &inputs).map_err(|e| err(e.to_string()))?;
        if let Some(declared) = declared {
            let inferred = &g.node(id).outputs;
            if &declared != inferred {
                return Err(err(format!(
                    "declared types {} differ from the inferred {}",
                    join(&declared),
                    join(inferred)
                )));
            }
        }
        names.insert(name.to_string(), id);
    }
    Ok(g)
}

fn join(types: &[TensorType]) -> String {
    types.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Splits `Op(..)(..) : t0, t1` into the call and its declared types, if any.
fn split_types(rhs: &str) -> std::result::Result<(&str, Option<Vec<TensorType>>), String> {
    let Some(at) = rhs.rfind(" : ") else {
        return Ok((rhs.trim(), None));
    };
    let (call, types) = (rhs[..at].trim(), &rhs[at + 3..]);
    if !call.ends_with(')') {
        return Ok((rhs.trim(), None));
    }
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in types.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(TensorType::parse(&types[start..i])?);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(TensorType::parse(&types[start..])?);
    Ok((call, Some(out)))
}

fn parse_values(text: &str, names: &HashMap<String, NodeId>) -> std::result::Result<Vec<ValueId>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let body = t.strip_prefix('%').ok_or_else(|| format!("bad value `{t}`"))?;
            let (name, output) = match body.split_once('.') {
                Some((n, k)) => (n, k.parse::<u32>().map_err(|_| format!("bad output index in `{t}`"))?),
                None => (body, 0),
            };
            let node = names
                .get(name)
                .ok_or_else(|| format!("value `{t}` is used before it is defined"))?;
            Ok(ValueId::new(*node, output))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn prints_and_parses_sources() {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, crate::Shape(vec!["B".into(), 4.into()])));
        let c = g.constant_f32(&[2], &[1.5, -2.0]).unwrap();
        g.set_outputs(vec![x, c]).unwrap();
        let text = g.to_string();
        assert!(text.contains("%0 = Input(name:\"x\",ty:(dtype:F32,shape:[\"B\",4]))() : f32[B, 4]"), "{text}");
        let back = parse(&text).unwrap();
        assert_eq!(back, g);
        assert_eq!(back.to_string(), text);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let e = parse("%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))()\nreturn %1").unwrap_err();
        assert!(matches!(e, IrError::Parse { line: 2, .. }), "{e}");
        let e = parse("%0 = Input(name:\"x\",ty:(dtype:F32,shape:[2]))() : f32[3]").unwrap_err();
        assert!(e.to_string().contains("differ from the inferred f32[2]"), "{e}");
        let e = parse("%0 = NoSuchOp()()").unwrap_err();
        assert!(e.to_string().contains("bad op"), "{e}");
    }
}
