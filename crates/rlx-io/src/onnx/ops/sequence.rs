//! Sequence and optional ONNX ops. A sequence is a list of rlx tensors whose length is known
//! at import, so these ops rearrange that list (`SequenceInsert`, `SequenceAt`, ...) or lower
//! to ordinary rlx ops on its elements (`ConcatFromSequence`, `SplitToSequence`);
//! `SequenceMap` imports its body once per element. An optional is its value or
//! [`Value::Absent`]. Positions must be known at import.

use super::shape::reshape_static;
use super::{invalid, ConvertValues, Cx, OpError, OpResult, ValueNode};
use crate::onnx::build::Value;
use crate::onnx::import::run_body;
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::{DType, ValueId};

pub const CONVERTERS: &[(&str, ConvertValues)] = &[
    ("Identity", |_, n| Ok(vec![n.value(0)?.clone()])),
    ("SequenceConstruct", sequence_construct),
    ("SequenceEmpty", |_, _| Ok(vec![Value::Sequence(Vec::new())])),
    ("SequenceAt", sequence_at),
    ("SequenceInsert", sequence_insert),
    ("SequenceErase", sequence_erase),
    ("SequenceLength", sequence_length),
    ("ConcatFromSequence", concat_from_sequence),
    ("SplitToSequence", split_to_sequence),
    ("SequenceMap", sequence_map),
    ("Optional", |_, n| Ok(vec![n.values.first().cloned().flatten().unwrap_or(Value::Absent)])),
    ("OptionalHasElement", optional_has_element),
    ("OptionalGetElement", optional_get_element),
];

fn sequence_construct(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let xs = n.onnx.present_inputs();
    if xs.len() != n.values.len() {
        return invalid("every input must be a tensor");
    }
    if let Some(x) = xs.iter().find(|&&x| cx.dtype(x) != cx.dtype(xs[0])) {
        return invalid(format!("elements of one sequence must share a dtype, got {} and {}", cx.ty(xs[0]), cx.ty(*x)));
    }
    Ok(vec![Value::Sequence(xs)])
}

/// The constant position input `i` normalized against a sequence of `len` (`-len..=len-1`,
/// or up to `len` itself when `end_ok`), `default` when omitted.
fn position(cx: &Cx<'_>, n: &ValueNode<'_, '_, '_>, i: usize, len: usize, end_ok: bool, default: usize) -> OpResult<usize> {
    let Some(p) = n.onnx.opt_input(i) else { return Ok(default) };
    let [p] = cx.const_ints(p, "the position")?[..] else {
        return invalid("the position must be one integer");
    };
    let top = len as i64 + i64::from(end_ok);
    match (-(len as i64)..top).contains(&p) {
        true => Ok(if p < 0 { p + len as i64 } else { p } as usize),
        false => invalid(format!("position {p} is outside a sequence of {len}")),
    }
}

fn sequence_at(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let seq = n.sequence(0)?;
    let at = position(cx, n, 1, seq.len(), false, 0)?;
    Ok(vec![Value::Tensor(seq[at])])
}

fn sequence_insert(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let mut seq = n.sequence(0)?.to_vec();
    let x = n.onnx.input(1)?;
    if let Some(&first) = seq.first() {
        if cx.dtype(first) != cx.dtype(x) {
            return invalid(format!("inserting {} into a sequence of {}", cx.ty(x), cx.ty(first)));
        }
    }
    let at = position(cx, n, 2, seq.len(), true, seq.len())?;
    seq.insert(at, x);
    Ok(vec![Value::Sequence(seq)])
}

fn sequence_erase(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let mut seq = n.sequence(0)?.to_vec();
    if seq.is_empty() {
        return invalid("erasing from an empty sequence");
    }
    let at = position(cx, n, 1, seq.len(), false, seq.len() - 1)?;
    seq.remove(at);
    Ok(vec![Value::Sequence(seq)])
}

fn sequence_length(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let len = n.sequence(0)?.len();
    Ok(vec![Value::Tensor(cx.scalar(DType::I64, len as f64)?)])
}

/// `Concat` of the elements along `axis`, or with `new_axis` their stack on a new `axis`.
fn concat_from_sequence(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let seq = n.sequence(0)?;
    let Some(&first) = seq.first() else { return invalid("concatenating an empty sequence") };
    let rank = cx.rank(first);
    let new_axis = n.onnx.int("new_axis", 0) != 0;
    let axis = n.onnx.axis(n.onnx.int("axis", 0), rank + usize::from(new_axis))?;
    let mut parts = Vec::with_capacity(seq.len());
    for &x in seq {
        parts.push(if new_axis {
            let mut dims = cx.dims(x)?;
            dims.insert(axis, 1);
            reshape_static(cx, x, &dims)?
        } else {
            x
        });
    }
    Ok(vec![Value::Tensor(cx.add1(Concat { axis }, &parts)?)])
}

/// Pieces of `split` sizes along `axis`: the sizes given, chunks of a scalar size (the last
/// may be shorter), or single rows (without the axis unless `keepdims`).
fn split_to_sequence(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let x = n.onnx.input(0)?;
    let dims = cx.dims(x)?;
    let axis = n.onnx.axis(n.onnx.int("axis", 0), dims.len())?;
    let total = dims[axis];
    let (sizes, squeeze): (Vec<usize>, bool) = match n.onnx.opt_input(1) {
        None => (vec![1; total], n.onnx.int("keepdims", 1) == 0),
        Some(s) => {
            let values = cx.const_ints(s, "split")?;
            let sizes: Vec<usize> = match (cx.rank(s), values.as_slice()) {
                (0, &[chunk]) if chunk > 0 => {
                    let chunk = chunk as usize;
                    (0..total.div_ceil(chunk)).map(|i| chunk.min(total - i * chunk)).collect()
                }
                (1, sizes) if sizes.iter().all(|&s| s >= 0) => sizes.iter().map(|&s| s as usize).collect(),
                _ => return invalid(format!("split must be a positive scalar or non-negative sizes, got {values:?}")),
            };
            if sizes.iter().sum::<usize>() != total {
                return invalid(format!("split sizes {sizes:?} do not add up to axis {axis}'s {total}"));
            }
            (sizes, false)
        }
    };
    let mut pieces = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for len in sizes {
        let mut piece = cx.add1(Narrow { axis, start, len }, &[x])?;
        if squeeze {
            let mut d = dims.clone();
            d.remove(axis);
            piece = reshape_static(cx, piece, &d)?;
        }
        pieces.push(piece);
        start += len;
    }
    Ok(vec![Value::Sequence(pieces)])
}

/// The body imported once per element: sequence inputs bind their `k`-th element, tensor
/// inputs bind whole; output `j` is the sequence of the body's `j`-th outputs.
fn sequence_map(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let body = n.graph("body")?;
    let len = n.sequence(0)?.len();
    let mut outs: Vec<Vec<ValueId>> = vec![Vec::with_capacity(len); body.output.len()];
    for k in 0..len {
        let mut bindings = Vec::with_capacity(n.values.len());
        for (i, v) in n.values.iter().enumerate() {
            bindings.push(match v {
                Some(Value::Sequence(vs)) if vs.len() == len => Value::Tensor(vs[k]),
                Some(Value::Sequence(vs)) => return invalid(format!("input {i} has {} elements, input 0 has {len}", vs.len())),
                Some(Value::Tensor(t)) => Value::Tensor(*t),
                _ => return invalid(format!("input {i} must be a tensor or a sequence")),
            });
        }
        for (j, v) in run_body(cx, body, n.scope, n.env, bindings)?.into_iter().enumerate() {
            match v {
                Value::Tensor(t) => outs[j].push(t),
                other => return invalid(format!("body output {j} must be a tensor, got {}", other.kind())),
            }
        }
    }
    Ok(outs.into_iter().map(Value::Sequence).collect())
}

fn optional_has_element(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let present = matches!(n.values.first(), Some(Some(v)) if *v != Value::Absent);
    Ok(vec![Value::Tensor(cx.values(DType::Bool, &[], &[f64::from(u8::from(present))])?)])
}

fn optional_get_element(_: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    match n.value(0)? {
        Value::Absent => Err(OpError::Invalid("the optional is empty".into())),
        v => Ok(vec![v.clone()]),
    }
}
