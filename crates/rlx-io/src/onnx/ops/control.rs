//! Control-flow ONNX ops onto rlx's sub-graph ops: `If` → rlx `If`; `Loop` and `Scan` → rlx
//! `While` over an iteration counter (rlx `Scan` carries one value and returns one, where ONNX
//! carries several and stacks per-step outputs; those are carried as buffers written row by
//! row with `ScatterNd`).
//!
//! A body imports as its own rlx graph. The outer values it reads become explicit inputs
//! bound to the op's operands (constants are copied in, so they still fold). An `If` whose
//! condition is known at import imports the taken branch in place; a `Loop` carrying
//! sequences or optionals, or whose carried values change type, cannot be a `While` and is
//! unrolled at import instead, with its trip count and conditions known then.

use super::elementwise::bin;
use super::shape::{reshape_static, transpose_to};
use super::{invalid, unsupported, ConvertValues, Cx, OpError, OpResult, ValueNode};
use crate::onnx::build::Value;
use crate::onnx::import::{free_names, run_body, Scope};
use crate::onnx::proto::GraphProto;
use crate::onnx::Layout;
use rlx_ir::ops::control::{If, While};
use rlx_ir::ops::elementwise::{BinaryOp, CmpOp};
use rlx_ir::ops::index::{Gather, ScatterNd, ScatterReduction};
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::{DType, Graph, TensorType, ValueId};

pub const CONVERTERS: &[(&str, ConvertValues)] = &[("If", if_else), ("Loop", loop_op), ("Scan", scan)];

/// Most iterations a `Loop` without a trip count is unrolled for at import.
const MAX_UNROLL: i64 = 1 << 16;

/// A body being built as its own rlx graph: each `Input`, in creation order, is bound to the
/// outer value at the same place in `outer`.
struct Sub<'e> {
    cx: Cx<'e>,
    inputs: Vec<ValueId>,
    outer: Vec<ValueId>,
}

impl<'e> Sub<'e> {
    fn new(cx: &Cx<'e>) -> Sub<'e> {
        Sub { cx: cx.sub(), inputs: Vec::new(), outer: Vec::new() }
    }

    /// A new input of the type of `outer` (a value of `cx`), bound to it.
    fn bind(&mut self, cx: &Cx<'_>, name: &str, outer: ValueId) -> ValueId {
        let v = self.cx.g.input(name, cx.ty(outer));
        self.inputs.push(v);
        self.outer.push(outer);
        v
    }

    /// A scope holding the outer values `names` as values of this graph: constants copied,
    /// other tensors bound as inputs.
    fn capture(&mut self, cx: &Cx<'_>, names: &[String], scope: &Scope<'_>) -> OpResult<Scope<'static>> {
        let mut caps = Scope::root();
        for name in names {
            let Some(v) = scope.get(name) else { continue };
            let mut one = |t: ValueId| -> OpResult<ValueId> {
                match cx.constant(t) {
                    Some(c) => Ok(self.cx.g.constant(c.ty.clone(), c.data.clone())?),
                    None => Ok(self.bind(cx, name, t)),
                }
            };
            let inner = match v {
                Value::Tensor(t) => Value::Tensor(one(*t)?),
                Value::Sequence(vs) => Value::Sequence(vs.iter().map(|&t| one(t)).collect::<OpResult<_>>()?),
                Value::Absent => Value::Absent,
            };
            caps.insert(name, inner);
        }
        Ok(caps)
    }
}

/// The single boolean of constant `v`, if it is one.
fn const_flag(cx: &Cx<'_>, v: ValueId) -> Option<bool> {
    match cx.const_f64s(v)?.as_slice() {
        [f] => Some(*f != 0.0),
        _ => None,
    }
}

/// `v` as a rank-0 value (it must have one element).
fn scalar_of(cx: &mut Cx<'_>, v: ValueId, what: &str) -> OpResult<ValueId> {
    match cx.dims(v)?.iter().product::<usize>() {
        1 => reshape_static(cx, v, &[]),
        n => invalid(format!("{what} must have one element, got {n}")),
    }
}

/// Values of `layouts` from the flat list `flat`, in order.
fn unflatten(layouts: &[Layout], flat: &[ValueId]) -> Vec<Value> {
    let mut at = 0;
    let mut take = |n: usize| {
        at += n;
        flat[at - n..at].to_vec()
    };
    layouts
        .iter()
        .map(|l| match l {
            Layout::Tensor => Value::Tensor(take(1)[0]),
            Layout::Sequence(n) => Value::Sequence(take(*n)),
            Layout::Absent => Value::Absent,
        })
        .collect()
}

/// A branch as its own graph reading the outer values `names`, with its output layouts.
fn branch(cx: &Cx<'_>, n: &ValueNode<'_, '_, '_>, g: &GraphProto<'_>, names: &[String]) -> OpResult<(Graph, Vec<Layout>, Vec<ValueId>)> {
    let mut sub = Sub::new(cx);
    let caps = sub.capture(cx, names, n.scope)?;
    let outs = run_body(&mut sub.cx, g, &caps, n.env, Vec::new())?;
    let flat: Vec<ValueId> = outs.iter().flat_map(Value::tensors).collect();
    sub.cx.g.set_outputs(flat)?;
    Ok((sub.cx.g, outs.iter().map(Layout::of).collect(), sub.outer))
}

/// With a condition known at import, the taken branch imported in place; else an rlx `If`
/// whose branches take the outer values either reads.
fn if_else(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let cond = n.onnx.input(0)?;
    let (then_g, else_g) = (n.graph("then_branch")?, n.graph("else_branch")?);
    if then_g.output.len() != else_g.output.len() {
        return invalid(format!("then_branch returns {} outputs, else_branch {}", then_g.output.len(), else_g.output.len()));
    }
    if let Some(taken) = const_flag(cx, cond) {
        return run_body(cx, if taken { then_g } else { else_g }, n.scope, n.env, Vec::new());
    }
    let mut names = free_names(then_g);
    for name in free_names(else_g) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let (then_branch, layouts, captured) = branch(cx, n, then_g, &names)?;
    let (else_branch, else_layouts, _) = branch(cx, n, else_g, &names)?;
    let types = |g: &Graph| g.outputs().iter().map(|v| g.ty(*v).clone()).collect::<Vec<_>>();
    if layouts != else_layouts || types(&then_branch) != types(&else_branch) {
        return unsupported(format!(
            "the branches return different values ({layouts:?} {:?} vs {else_layouts:?} {:?}), which one rlx If cannot; the condition must be known at import (a constant)",
            types(&then_branch),
            types(&else_branch)
        ));
    }
    if layouts.iter().all(|l| *l == Layout::Absent) {
        return Ok(layouts.iter().map(|_| Value::Absent).collect());
    }
    let mut inputs = vec![cond];
    inputs.extend(captured);
    let outs = cx.add(If { then_branch, else_branch }, &inputs)?;
    Ok(unflatten(&layouts, &outs))
}

/// A cond graph over carries of `types`: `i < count` (carry 0 against carry `count`, when
/// given) and the flag carry `flag`, when given.
fn cond_graph(types: &[TensorType], count: Option<usize>, flag: Option<usize>) -> OpResult<Graph> {
    let mut g = Graph::new();
    let ins: Vec<ValueId> = types.iter().enumerate().map(|(k, t)| g.input(&format!("#carry{k}"), t.clone())).collect();
    let below = count.map(|m| g.compare(CmpOp::Lt, ins[0], ins[m])).transpose()?;
    let out = match (below, flag.map(|f| ins[f])) {
        (Some(b), Some(f)) => g.select(f, b, f)?,
        (Some(b), None) => b,
        (None, Some(f)) => f,
        (None, None) => return invalid("a loop needs a trip count or a condition"),
    };
    g.set_outputs(vec![out])?;
    Ok(g)
}

/// The largest buffer a loop's scan output is stacked into at import (256 MiB).
const MAX_SCAN_BYTES: usize = 1 << 28;

/// Per-step outputs stacked as `[rows, ..]` buffers: for each `(value, row)` a zero buffer
/// bound to a new input of `sub`, with `value` written at `row`. Returns the written buffers.
fn stack_rows(cx: &mut Cx<'_>, sub: &mut Sub<'_>, steps: &[(ValueId, ValueId)], rows: usize) -> OpResult<Vec<ValueId>> {
    let mut written = Vec::with_capacity(steps.len());
    for (k, &(s, row)) in steps.iter().enumerate() {
        let at = reshape_static(&mut sub.cx, row, &[1, 1])?;
        let ty = sub.cx.ty(s);
        let dims = sub.cx.dims(s)?;
        let mut buf_dims = vec![rows];
        buf_dims.extend(&dims);
        let bytes = buf_dims.iter().try_fold(ty.dtype.size(), |n, &d| n.checked_mul(d)).filter(|&n| n <= MAX_SCAN_BYTES);
        let Some(bytes) = bytes else {
            return unsupported(format!("scan output {k} stacks {rows} rows of {dims:?}, more than {MAX_SCAN_BYTES} bytes"));
        };
        let zeros = cx.bytes(ty.dtype, &buf_dims, vec![0; bytes])?;
        let buf = sub.bind(cx, &format!("#scan{k}"), zeros);
        let mut one = vec![1];
        one.extend(&dims);
        let update = reshape_static(&mut sub.cx, s, &one)?;
        written.push(sub.cx.add1(ScatterNd { reduction: ScatterReduction::None }, &[buf, at, update])?);
    }
    Ok(written)
}

/// `Loop`: an rlx `While` when every carried value is a tensor that keeps its type, else
/// unrolled at import; also unrolled when the body needs a value known at import that only
/// the iteration number makes known (a `Slice` bounded by it) and the trip count is known.
fn loop_op(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let body = n.graph("body")?;
    let states: Vec<Value> = (2..n.values.len())
        .map(|i| n.value(i).cloned())
        .collect::<OpResult<_>>()
        .map_err(|_| OpError::Invalid("a loop-carried input is omitted".into()))?;
    let Some(n_scan) = body.output.len().checked_sub(1 + states.len()) else {
        return invalid(format!("the body returns {} outputs, fewer than the condition and {} carried values", body.output.len(), states.len()));
    };
    let tensors: Option<Vec<ValueId>> = states.iter().map(|v| if let Value::Tensor(t) = v { Some(*t) } else { None }).collect();
    if let Some(tensors) = tensors {
        match loop_while(cx, n, body, &tensors, n_scan) {
            Ok(Some(outs)) => return Ok(outs),
            Ok(None) => {}
            Err(OpError::Unsupported(r)) if r.contains("known at import") && trip_known(cx, n) => {}
            Err(e) => return Err(e),
        }
    }
    loop_unrolled(cx, n, body, states, n_scan)
}

/// Whether the `Loop`'s trip count is a constant.
fn trip_known(cx: &Cx<'_>, n: &ValueNode<'_, '_, '_>) -> bool {
    n.onnx.opt_input(0).is_some_and(|m| cx.constant(m).is_some())
}

/// The general `Loop`: carries `[i, cond, (trip count), states.., captures.., scan buffers..]`.
/// `None` when the body changes a carried value's type. Scan outputs need the trip count at
/// import and a loop that cannot stop early (their length would depend on the data).
fn loop_while(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>, body: &GraphProto<'_>, states: &[ValueId], n_scan: usize) -> OpResult<Option<Vec<Value>>> {
    let trip = n.onnx.opt_input(0).map(|m| scalar_of(cx, m, "the trip count")).transpose()?;
    let cond = n.onnx.opt_input(1).map(|c| scalar_of(cx, c, "the condition")).transpose()?;
    let zero = cx.scalar(DType::I64, 0.0)?;
    let cond0 = match cond {
        Some(c) => c,
        None => cx.values(DType::Bool, &[], &[1.0])?,
    };
    let mut sub = Sub::new(cx);
    let i = sub.bind(cx, "#iteration", zero);
    let c = sub.bind(cx, "#condition", cond0);
    let m = trip.map(|t| sub.bind(cx, "#trip_count", t));
    let first_state = sub.inputs.len();
    let st: Vec<ValueId> = states.iter().enumerate().map(|(k, &s)| sub.bind(cx, &format!("#state{k}"), s)).collect();
    let caps = sub.capture(cx, &free_names(body), n.scope)?;
    let mut bindings = vec![Value::Tensor(i), Value::Tensor(c)];
    bindings.extend(st.iter().map(|&s| Value::Tensor(s)));
    let outs = run_body(&mut sub.cx, body, &caps, n.env, bindings)?;
    let flat: Option<Vec<ValueId>> = outs.iter().map(|v| if let Value::Tensor(t) = v { Some(*t) } else { None }).collect();
    let Some(flat) = flat else { return Ok(None) };
    if flat[1..=states.len()].iter().zip(&st).any(|(a, b)| sub.cx.ty(*a) != sub.cx.ty(*b)) {
        return Ok(None);
    }
    let cond_out = scalar_of(&mut sub.cx, flat[0], "the body's condition")?;
    let mut next = sub.inputs.clone();
    let one = sub.cx.scalar(DType::I64, 1.0)?;
    next[0] = bin(&mut sub.cx, BinaryOp::Add, i, one)?;
    next[1] = cond_out;
    next[first_state..first_state + states.len()].copy_from_slice(&flat[1..=states.len()]);
    let count = trip.and_then(|t| cx.const_ints(t, "").ok()).map(|v| v[0].max(0) as usize);
    if n_scan > 0 {
        let Some(rows) = count else {
            return unsupported("the trip count of a Loop with scan outputs must be known at import (a constant)");
        };
        let stays = |x: Option<bool>| x.unwrap_or(false);
        let never_stops = (cond.is_none() || stays(const_flag(cx, cond0))) && (cond_out == c || stays(const_flag(&sub.cx, cond_out)));
        if !never_stops {
            return unsupported("a Loop that can stop early has scan outputs of data-dependent length");
        }
        let steps: Vec<(ValueId, ValueId)> = flat[1 + states.len()..].iter().map(|&s| (s, i)).collect();
        next.extend(stack_rows(cx, &mut sub, &steps, rows)?);
    }
    sub.cx.g.set_outputs(next)?;
    let types: Vec<TensorType> = sub.outer.iter().map(|&v| cx.ty(v)).collect();
    let cond_g = cond_graph(&types, m.map(|_| 2), Some(1))?;
    let outs = cx.add(While { cond: cond_g, body: sub.cx.g, max_iterations: count }, &sub.outer)?;
    let mut values: Vec<Value> = outs[first_state..first_state + states.len()].iter().map(|&v| Value::Tensor(v)).collect();
    values.extend(outs[outs.len() - n_scan..].iter().map(|&v| Value::Tensor(v)));
    Ok(Some(values))
}

/// The body imported once per iteration into this graph, for loops carrying sequences or
/// changing types: the trip count and every condition must be known at import.
fn loop_unrolled(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>, body: &GraphProto<'_>, mut states: Vec<Value>, n_scan: usize) -> OpResult<Vec<Value>> {
    let known = |cx: &Cx<'_>, v: ValueId, what: &str| {
        const_flag(cx, v).ok_or_else(|| OpError::Unsupported(format!("{what} of a Loop carrying sequences or changing types must be known at import (a constant)")))
    };
    let trip = match n.onnx.opt_input(0) {
        Some(m) => Some(cx.const_ints(m, "the trip count of a Loop carrying sequences or changing types")?.first().copied().unwrap_or(0)),
        None => None,
    };
    let mut go = match n.onnx.opt_input(1) {
        Some(c) => known(cx, c, "the condition")?,
        None => true,
    };
    let mut steps: Vec<Vec<ValueId>> = vec![Vec::new(); n_scan];
    let mut i = 0;
    while go && trip.is_none_or(|m| i < m) {
        if i >= MAX_UNROLL {
            return unsupported(format!("a Loop without a trip count ran past {MAX_UNROLL} iterations at import"));
        }
        let mut bindings = vec![Value::Tensor(cx.scalar(DType::I64, i as f64)?), Value::Tensor(cx.values(DType::Bool, &[], &[1.0])?)];
        bindings.extend(states.iter().cloned());
        let mut outs = run_body(cx, body, n.scope, n.env, bindings)?;
        let Value::Tensor(c) = outs[0] else { return invalid("the body's condition must be a tensor") };
        go = known(cx, c, "the body's condition")?;
        for (k, v) in outs.drain(1 + states.len()..).enumerate() {
            let Value::Tensor(t) = v else { return invalid(format!("scan output {k} must be a tensor, got {}", v.kind())) };
            let mut dims = vec![1];
            dims.extend(cx.dims(t)?);
            steps[k].push(reshape_static(cx, t, &dims)?);
        }
        states = outs.split_off(1);
        i += 1;
    }
    for rows in steps {
        if rows.is_empty() {
            return unsupported("a Loop that runs no iteration has scan outputs of unknown shape");
        }
        states.push(Value::Tensor(cx.add1(Concat { axis: 0 }, &rows)?));
    }
    Ok(states)
}

/// What a scan over one set of states and inputs needs from the node's attributes.
struct ScanAxes {
    in_axes: Vec<usize>,
    in_reverse: Vec<bool>,
    out_axes: Vec<i64>,
    out_reverse: Vec<bool>,
}

/// `Scan`: opset 9 on, over the given axes; opset 8's batched form runs the same scan per
/// batch row and stacks the results.
fn scan(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>) -> OpResult<Vec<Value>> {
    let body = n.graph("body")?;
    let k_in = usize::try_from(n.onnx.int("num_scan_inputs", 0)).map_err(|_| OpError::Invalid("negative num_scan_inputs".into()))?;
    let batched = n.env.opset < 9;
    let ins: Vec<ValueId> = (usize::from(batched)..n.values.len()).map(|i| n.onnx.input(i)).collect::<OpResult<_>>()?;
    let Some(n_states) = ins.len().checked_sub(k_in) else {
        return invalid(format!("num_scan_inputs {k_in} exceeds the {} inputs", ins.len()));
    };
    let Some(n_out) = body.output.len().checked_sub(n_states) else {
        return invalid("the body returns fewer outputs than there are states");
    };
    let flags = |name: &str, len: usize| -> OpResult<Vec<bool>> {
        let v = n.onnx.ints(name).unwrap_or_else(|| vec![0; len]);
        match v.len() == len {
            true => Ok(v.iter().map(|&d| d != 0).collect()),
            false => invalid(format!("{name} has {} entries for {len} values", v.len())),
        }
    };
    let (in_dirs, out_dirs) = if batched { ("directions", "") } else { ("scan_input_directions", "scan_output_directions") };
    let rank = |k: usize| cx.rank(ins[n_states + k]) - usize::from(batched);
    let in_axes = match n.onnx.ints("scan_input_axes") {
        Some(a) if a.len() == k_in => a.iter().enumerate().map(|(k, &x)| n.onnx.axis(x, rank(k))).collect::<OpResult<_>>()?,
        Some(a) => return invalid(format!("scan_input_axes has {} entries for {k_in} inputs", a.len())),
        None => vec![0; k_in],
    };
    let axes = ScanAxes {
        in_axes,
        in_reverse: flags(in_dirs, k_in)?,
        out_axes: n.onnx.ints("scan_output_axes").unwrap_or_else(|| vec![0; n_out]),
        out_reverse: if batched { vec![false; n_out] } else { flags(out_dirs, n_out)? },
    };
    if axes.out_axes.len() != n_out {
        return invalid(format!("scan_output_axes has {} entries for {n_out} outputs", axes.out_axes.len()));
    }
    let outs = if batched { scan_batched(cx, n, body, &ins, n_states, &axes)? } else { scan_once(cx, n, body, &ins, n_states, &axes)? };
    Ok(outs.into_iter().map(Value::Tensor).collect())
}

/// Opset 8: axis 0 of every operand is a batch; without `sequence_lens` (or with it equal to
/// the full length everywhere) each batch row is an independent scan.
fn scan_batched(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>, body: &GraphProto<'_>, ins: &[ValueId], n_states: usize, axes: &ScanAxes) -> OpResult<Vec<ValueId>> {
    let batch = *cx.dims(ins[0])?.first().ok_or_else(|| OpError::Invalid("operands need a batch axis".into()))?;
    if let Some(lens) = n.onnx.opt_input(0) {
        let full = cx.dims(ins[n_states])?.get(1).copied().unwrap_or(0) as i64;
        if cx.const_ints(lens, "sequence_lens")?.iter().any(|&l| l != full) {
            return unsupported("sequence_lens shorter than the sequence");
        }
    }
    let mut rows: Vec<Vec<ValueId>> = Vec::new();
    for b in 0..batch {
        let mut row = Vec::with_capacity(ins.len());
        for &x in ins {
            let dims = cx.dims(x)?;
            let one = cx.add1(Narrow { axis: 0, start: b, len: 1 }, &[x])?;
            row.push(reshape_static(cx, one, &dims[1..])?);
        }
        rows.push(scan_once(cx, n, body, &row, n_states, axes)?);
    }
    let n_out = rows.first().map_or(0, Vec::len);
    (0..n_out)
        .map(|j| {
            let parts = rows
                .iter()
                .map(|r| {
                    let mut dims = vec![1];
                    dims.extend(cx.dims(r[j])?);
                    reshape_static(cx, r[j], &dims)
                })
                .collect::<OpResult<Vec<_>>>()?;
            cx.add1(Concat { axis: 0 }, &parts)
        })
        .collect()
}

/// One scan as an rlx `While` over `i < length`: carries `[i, states.., scan inputs..,
/// captures.., output buffers..]`; step `i` reads row `i` (or `length-1-i` reversed) of each
/// scan input along its axis and writes its outputs the same way.
fn scan_once(cx: &mut Cx<'_>, n: &ValueNode<'_, '_, '_>, body: &GraphProto<'_>, ins: &[ValueId], n_states: usize, axes: &ScanAxes) -> OpResult<Vec<ValueId>> {
    let (states, xs) = ins.split_at(n_states);
    let mut length = None;
    for (k, &x) in xs.iter().enumerate() {
        let len = cx.dims(x)?[axes.in_axes[k]];
        if *length.get_or_insert(len) != len {
            return invalid(format!("scan input {k} has {len} steps, scan input 0 has {}", length.unwrap_or(0)));
        }
    }
    let Some(length) = length else { return invalid("a Scan needs a scan input") };
    let zero = cx.scalar(DType::I64, 0.0)?;
    let count = cx.scalar(DType::I64, length as f64)?;
    let mut sub = Sub::new(cx);
    let i = sub.bind(cx, "#iteration", zero);
    sub.bind(cx, "#length", count);
    let st: Vec<ValueId> = states.iter().enumerate().map(|(k, &s)| sub.bind(cx, &format!("#state{k}"), s)).collect();
    let xs_in: Vec<ValueId> = xs.iter().enumerate().map(|(k, &x)| sub.bind(cx, &format!("#xs{k}"), x)).collect();
    let caps = sub.capture(cx, &free_names(body), n.scope)?;
    let reversed = match axes.in_reverse.iter().chain(&axes.out_reverse).any(|&r| r) {
        true => {
            let last = sub.cx.scalar(DType::I64, length as f64 - 1.0)?;
            bin(&mut sub.cx, BinaryOp::Sub, last, i)?
        }
        false => i,
    };
    let mut bindings: Vec<Value> = st.iter().map(|&s| Value::Tensor(s)).collect();
    for (k, &x) in xs_in.iter().enumerate() {
        let at = if axes.in_reverse[k] { reversed } else { i };
        bindings.push(Value::Tensor(sub.cx.add1(Gather { axis: axes.in_axes[k] }, &[x, at])?));
    }
    let outs = run_body(&mut sub.cx, body, &caps, n.env, bindings)?;
    let flat: Vec<ValueId> = outs
        .iter()
        .map(|v| if let Value::Tensor(t) = v { Ok(*t) } else { invalid(format!("body outputs must be tensors, got {}", v.kind())) })
        .collect::<OpResult<_>>()?;
    if let Some(k) = (0..n_states).find(|&k| sub.cx.ty(flat[k]) != sub.cx.ty(st[k])) {
        return unsupported(format!("state {k} changes from {} to {} in the body", sub.cx.ty(st[k]), sub.cx.ty(flat[k])));
    }
    let mut next = sub.inputs.clone();
    let one = sub.cx.scalar(DType::I64, 1.0)?;
    next[0] = bin(&mut sub.cx, BinaryOp::Add, i, one)?;
    next[2..2 + n_states].copy_from_slice(&flat[..n_states]);
    let first_buf = next.len();
    let steps: Vec<(ValueId, ValueId)> =
        flat[n_states..].iter().zip(&axes.out_reverse).map(|(&s, &rev)| (s, if rev { reversed } else { i })).collect();
    next.extend(stack_rows(cx, &mut sub, &steps, length)?);
    sub.cx.g.set_outputs(next)?;
    let types: Vec<TensorType> = sub.outer.iter().map(|&v| cx.ty(v)).collect();
    let cond_g = cond_graph(&types, Some(1), None)?;
    let outs = cx.add(While { cond: cond_g, body: sub.cx.g, max_iterations: Some(length) }, &sub.outer)?;
    let mut result = outs[2..2 + n_states].to_vec();
    for (k, &buf) in outs[first_buf..].iter().enumerate() {
        let rank = cx.rank(buf);
        let axis = n.onnx.axis(axes.out_axes[k], rank)?;
        let perm: Vec<usize> = (1..=axis).chain([0]).chain(axis + 1..rank).collect();
        result.push(transpose_to(cx, buf, &perm)?);
    }
    Ok(result)
}
