//! Ops whose output shape depends on input values: `NonZero` and `Unique`, imported only when
//! their input is known at import (they become constants), and `Compress`, whose condition
//! must be (it becomes a `Gather` of the kept positions).

use super::shape::reshape_static;
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::index::Gather;
use rlx_ir::{DType, ValueId};
use std::cmp::Ordering;

pub const CONVERTERS: &[(&str, Convert)] = &[("NonZero", non_zero), ("Unique", unique), ("Compress", compress)];

/// The elements of an import-time constant, with its dims.
fn known(cx: &Cx<'_>, v: ValueId, what: &str) -> OpResult<(Vec<f64>, Vec<usize>)> {
    let values = cx.const_f64s(v).ok_or_else(|| OpError::Unsupported(format!("{what} must be known at import (a constant)")))?;
    Ok((values, cx.dims(v)?))
}

/// `NonZero(x)`: `[rank, count]` coordinates of the non-zero elements, row-major order.
fn non_zero(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let (values, dims) = known(cx, n.input(0)?, "NonZero's input")?;
    let hits: Vec<usize> = values.iter().enumerate().filter(|(_, v)| **v != 0.0).map(|(i, _)| i).collect();
    let rank = dims.len();
    let mut coords = vec![0.0; rank * hits.len()];
    for (j, &flat) in hits.iter().enumerate() {
        let mut rest = flat;
        for a in (0..rank).rev() {
            coords[a * hits.len() + j] = (rest % dims[a]) as f64;
            rest /= dims[a];
        }
    }
    Ok(vec![cx.values(DType::I64, &[rank, hits.len()], &coords)?])
}

/// `Unique(x)`: the distinct elements (or slices along `axis`), sorted or in order of first
/// appearance, with their first indices, each input's position among them, and counts.
fn unique(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let (values, dims) = known(cx, x, "Unique's input")?;
    let axis = n.attr("axis").map(|a| n.axis(a.i, dims.len())).transpose()?;
    let (outer, len, inner) = match axis {
        Some(a) => (dims[..a].iter().product::<usize>(), dims[a], dims[a + 1..].iter().product::<usize>()),
        None => (1, values.len(), 1),
    };
    let values = &values;
    let slice = |i: usize| -> Vec<f64> { (0..outer).flat_map(|o| (0..inner).map(move |r| values[(o * len + i) * inner + r])).collect() };
    let slices: Vec<Vec<f64>> = (0..len).map(slice).collect();
    let cmp = |a: &Vec<f64>, b: &Vec<f64>| a.iter().zip(b).map(|(x, y)| x.partial_cmp(y).unwrap_or(Ordering::Equal)).find(|o| *o != Ordering::Equal).unwrap_or(Ordering::Equal);
    let mut firsts: Vec<usize> = Vec::new();
    for i in 0..len {
        if !firsts.iter().any(|&f| cmp(&slices[f], &slices[i]) == Ordering::Equal) {
            firsts.push(i);
        }
    }
    if n.int("sorted", 1) != 0 {
        firsts.sort_by(|&a, &b| cmp(&slices[a], &slices[b]));
    }
    let inverse: Vec<f64> = slices.iter().map(|s| firsts.iter().position(|&f| cmp(&slices[f], s) == Ordering::Equal).unwrap_or(0) as f64).collect();
    let counts: Vec<f64> = (0..firsts.len()).map(|u| inverse.iter().filter(|&&i| i as usize == u).count() as f64).collect();
    let k = firsts.len();
    let (y_dims, y_values) = match axis {
        Some(a) => {
            let mut d = dims.clone();
            d[a] = k;
            let mut out = Vec::with_capacity(outer * k * inner);
            for o in 0..outer {
                for &f in &firsts {
                    out.extend_from_slice(&slices[f][o * inner..(o + 1) * inner]);
                }
            }
            (d, out)
        }
        None => (vec![k], firsts.iter().map(|&f| slices[f][0]).collect()),
    };
    let y = cx.values(cx.dtype(x), &y_dims, &y_values)?;
    let first_idx: Vec<f64> = firsts.iter().map(|&f| f as f64).collect();
    Ok(vec![y, cx.values(DType::I64, &[k], &first_idx)?, cx.values(DType::I64, &[len], &inverse)?, cx.values(DType::I64, &[k], &counts)?])
}

/// `Compress(x, condition)`: the positions along `axis` (of the flattened `x` without one)
/// where the import-time `condition` holds.
fn compress(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    let (cond, _) = known(cx, n.input(1)?, "Compress's condition")?;
    let dims = cx.dims(x)?;
    let (data, axis) = match n.attr("axis") {
        Some(a) => (x, n.axis(a.i, dims.len())?),
        None => (reshape_static(cx, x, &[dims.iter().product()])?, 0),
    };
    let extent = cx.dims(data)?[axis];
    if cond.len() > extent {
        return invalid(format!("condition has {} entries, axis {axis} only {extent}", cond.len()));
    }
    let kept: Vec<f64> = cond.iter().enumerate().filter(|(_, c)| **c != 0.0).map(|(i, _)| i as f64).collect();
    let idx = cx.values(DType::I64, &[kept.len()], &kept)?;
    Ok(vec![cx.add1(Gather { axis }, &[data, idx])?])
}
