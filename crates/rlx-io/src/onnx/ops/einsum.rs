//! `Einsum`: each operand first sums the letters no one else needs, then operands combine
//! pairwise through `DotGeneral` (shared letters kept for later are batch axes, shared
//! letters needed by no one later are contracted), and a final `Transpose` orders the output.
//! Ellipses expand to one letter per broadcast axis; a letter repeated within one operand
//! takes the diagonal (a product with an identity mask, summed over the second axis).

use super::shape::transpose_to;
use super::{invalid, Convert, Cx, OnnxNode, OpError, OpResult};
use rlx_ir::ops::matmul::DotGeneral;
use rlx_ir::ops::reduce::{Reduce, ReduceOp};
use rlx_ir::ValueId;

pub const CONVERTERS: &[(&str, Convert)] = &[("Einsum", einsum)];

/// An operand: its value and the letter of each axis.
struct Term {
    v: ValueId,
    letters: Vec<char>,
}

/// The letters of one side of the equation, with `...` expanded for an operand of `rank`.
fn letters(spec: &str, rank: usize) -> OpResult<Vec<char>> {
    let named = spec.replace("...", "").chars().count();
    let mut out = Vec::new();
    let mut rest = spec;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            let broadcast = rank.checked_sub(named).ok_or_else(|| OpError::Invalid(format!("`{spec}` names more axes than rank {rank}")))?;
            out.extend((0..broadcast).map(|i| char::from(b'A' + i as u8)));
            rest = r;
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            if !c.is_ascii_lowercase() {
                return invalid(format!("`{c}` in `{spec}`"));
            }
            out.push(c);
            rest = &rest[1..];
        }
    }
    Ok(out)
}

/// Sums the axes of `t` whose letters are not in `keep`.
fn sum_away(cx: &mut Cx<'_>, t: Term, keep: &[char]) -> OpResult<Term> {
    let axes: Vec<usize> = (0..t.letters.len()).filter(|&i| !keep.contains(&t.letters[i])).collect();
    if axes.is_empty() {
        return Ok(t);
    }
    let v = cx.add1(Reduce { op: ReduceOp::Sum, axes: axes.clone(), keep_dim: false }, &[t.v])?;
    let letters = t.letters.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &c)| c).collect();
    Ok(Term { v, letters })
}

/// `t` with every repeated letter reduced to its diagonal: `Σ_j t[…i…j…]·[i = j]`.
fn diagonals(cx: &mut Cx<'_>, mut t: Term) -> OpResult<Term> {
    while let Some(j) = (1..t.letters.len()).find(|&j| t.letters[..j].contains(&t.letters[j])) {
        let i = t.letters.iter().position(|&c| c == t.letters[j]).unwrap_or(0);
        let dims = cx.dims(t.v)?;
        if dims[i] != dims[j] {
            return invalid(format!("diagonal of axes {i} and {j} with extents {} and {}", dims[i], dims[j]));
        }
        let d = dims[i];
        let mut eye_dims = vec![1; dims.len()];
        eye_dims[i] = d;
        eye_dims[j] = d;
        let eye: Vec<f64> = (0..d * d).map(|k| if k / d == k % d { 1.0 } else { 0.0 }).collect();
        let eye = cx.values(cx.dtype(t.v), &eye_dims, &eye)?;
        let masked = super::elementwise::bin(cx, rlx_ir::ops::elementwise::BinaryOp::Mul, t.v, eye)?;
        let v = cx.add1(Reduce { op: ReduceOp::Sum, axes: vec![j], keep_dim: false }, &[masked])?;
        t.letters.remove(j);
        t = Term { v, letters: t.letters };
    }
    Ok(t)
}

fn einsum(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let eq: String = n.string("equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let inputs = n.present_inputs();
    let specs: Vec<&str> = lhs.split(',').collect();
    if specs.len() != inputs.len() {
        return invalid(format!("equation `{eq}` has {} operands, the node {}", specs.len(), inputs.len()));
    }
    let mut terms = Vec::new();
    let mut written: Vec<char> = Vec::new();
    let mut max_rank = 0;
    for (spec, &v) in specs.iter().zip(&inputs) {
        let rank = cx.rank(v);
        let l = letters(spec, rank)?;
        if l.len() != rank {
            return invalid(format!("`{spec}` does not match rank {rank}"));
        }
        max_rank = max_rank.max(l.iter().filter(|c| c.is_ascii_uppercase()).count());
        written.extend(&l);
        terms.push(diagonals(cx, Term { v, letters: l })?);
    }
    let out: Vec<char> = match rhs {
        Some(r) => letters(&r, max_rank + r.replace("...", "").len())?,
        None => {
            let mut counts = std::collections::BTreeMap::new();
            for &c in &written {
                *counts.entry(c).or_insert(0) += 1;
            }
            let mut o: Vec<char> = counts.iter().filter(|(c, &k)| k == 1 && c.is_ascii_lowercase()).map(|(&c, _)| c).collect();
            let mut caps: Vec<char> = counts.keys().copied().filter(char::is_ascii_uppercase).collect();
            caps.append(&mut o);
            caps
        }
    };
    let needed_after = |terms: &[Term], from: usize| -> Vec<char> {
        let mut need: Vec<char> = out.clone();
        for t in &terms[from..] {
            need.extend(&t.letters);
        }
        need
    };
    let mut acc = {
        let first = terms.remove(0);
        let keep = needed_after(&terms, 0);
        sum_away(cx, first, &keep)?
    };
    while !terms.is_empty() {
        let next = terms.remove(0);
        let keep = needed_after(&terms, 0);
        let mut keep_next = keep.clone();
        keep_next.extend(&acc.letters);
        let next = sum_away(cx, next, &keep_next)?;
        let mut keep_acc = keep.clone();
        keep_acc.extend(&next.letters);
        let a = sum_away(cx, acc, &keep_acc)?;
        let shared: Vec<char> = a.letters.iter().copied().filter(|c| next.letters.contains(c)).collect();
        let batch: Vec<char> = shared.iter().copied().filter(|c| keep.contains(c)).collect();
        let contract: Vec<char> = shared.iter().copied().filter(|c| !keep.contains(c)).collect();
        let pos = |l: &[char], c: char| l.iter().position(|&x| x == c).unwrap_or(0);
        let attrs = DotGeneral {
            lhs_contracting: contract.iter().map(|&c| pos(&a.letters, c)).collect(),
            rhs_contracting: contract.iter().map(|&c| pos(&next.letters, c)).collect(),
            lhs_batch: batch.iter().map(|&c| pos(&a.letters, c)).collect(),
            rhs_batch: batch.iter().map(|&c| pos(&next.letters, c)).collect(),
        };
        let v = cx.add1(attrs, &[a.v, next.v])?;
        let mut letters = batch.clone();
        letters.extend(a.letters.iter().copied().filter(|c| !shared.contains(c)));
        letters.extend(next.letters.iter().copied().filter(|c| !shared.contains(c)));
        acc = Term { v, letters };
    }
    let acc = sum_away(cx, acc, &out)?;
    if acc.letters.len() != out.len() {
        return invalid(format!("output `{}` names letters the operands lack", out.iter().collect::<String>()));
    }
    let perm: Vec<usize> = out.iter().map(|c| acc.letters.iter().position(|x| x == c).ok_or_else(|| OpError::Invalid(format!("output letter `{c}` is not in the operands")))).collect::<OpResult<_>>()?;
    Ok(vec![transpose_to(cx, acc.v, &perm)?])
}
