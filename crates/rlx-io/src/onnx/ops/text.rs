//! `TfIdfVectorizer` over integer tokens: every pooled n-gram's count is a sum over start
//! positions of the product of token matches, one `Narrow` per gram position and skip.

use super::elementwise::{bin, bin_scalar, cast_to};
use super::shape::reshape_static;
use super::{invalid, unsupported, Convert, Cx, OnnxNode, OpResult};
use rlx_ir::ops::elementwise::{BinaryOp, CmpOp, Compare};
use rlx_ir::ops::reduce::{Reduce, ReduceOp};
use rlx_ir::ops::shape::{Concat, Narrow};
use rlx_ir::{DType, ValueId};
use std::collections::hash_map::{Entry, HashMap};

pub const CONVERTERS: &[(&str, Convert)] = &[("TfIdfVectorizer", tfidf)];

/// The pooled n-grams in pool order, from `pool_int64s` split by `ngram_counts` (the start of
/// each gram length's run).
fn pooled_grams(pool: &[i64], starts: &[i64]) -> OpResult<Vec<Vec<i64>>> {
    let mut grams = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(pool.len() as i64);
        let n = i + 1;
        let (start, end) = (usize::try_from(start).unwrap_or(usize::MAX), usize::try_from(end).unwrap_or(usize::MAX));
        if start > end || end > pool.len() || (end - start) % n != 0 {
            return invalid(format!("ngram_counts {starts:?} do not split a pool of {}", pool.len()));
        }
        grams.extend(pool[start..end].chunks(n).map(<[i64]>::to_vec));
    }
    Ok(grams)
}

/// `TfIdfVectorizer(X [L] or [B, L])` → `[out]` or `[B, out]` F32: n-grams of
/// `min_gram_length..=max_gram_length` tokens `d` apart, `d` in `1..=max_skip_count + 1`
/// (unigrams once), counted per pooled gram; TF counts, IDF weighs presence, TFIDF both.
fn tfidf(cx: &mut Cx<'_>, n: &OnnxNode<'_, '_>) -> OpResult<Vec<ValueId>> {
    let x = n.input(0)?;
    if n.attr("pool_strings").is_some() {
        return unsupported("string pools");
    }
    let dims = cx.dims(x)?;
    if dims.is_empty() || dims.len() > 2 {
        return invalid(format!("X {dims:?} must be [L] or [B, L]"));
    }
    let len = dims[dims.len() - 1];
    let axis = dims.len() - 1;
    let (min_n, max_n) = (n.int("min_gram_length", 1).max(1) as usize, n.int("max_gram_length", 1).max(1) as usize);
    let max_skip = n.int("max_skip_count", 0).max(0) as usize;
    let grams = pooled_grams(&n.ints("pool_int64s").unwrap_or_default(), &n.ints("ngram_counts").unwrap_or_default())?;
    let indexes = n.ints("ngram_indexes").unwrap_or_default();
    if indexes.len() != grams.len() || indexes.iter().any(|&i| i < 0) {
        return invalid(format!("ngram_indexes {indexes:?} must map the {} pooled grams", grams.len()));
    }
    let weights = n.floats("weights");
    let mode = n.string("mode", "TF");
    let out_size = indexes.iter().max().map_or(0, |&m| m as usize + 1);
    let xi = cast_to(cx, x, DType::I64)?;
    let mut matches: HashMap<i64, ValueId> = HashMap::new();
    let mut columns: Vec<Option<ValueId>> = vec![None; out_size];
    for (g, gram) in grams.iter().enumerate() {
        let size = gram.len();
        if size < min_n || size > max_n {
            continue;
        }
        for &token in gram {
            if let Entry::Vacant(slot) = matches.entry(token) {
                let t = cx.scalar(DType::I64, token as f64)?;
                let eq = cx.add1(Compare { op: CmpOp::Eq }, &[xi, t])?;
                slot.insert(cast_to(cx, eq, DType::F32)?);
            }
        }
        let skips = if size == 1 { 1 } else { max_skip + 1 };
        let mut count: Option<ValueId> = None;
        for d in 1..=skips {
            let span = (size - 1) * d;
            if span >= len {
                break;
            }
            let mut product: Option<ValueId> = None;
            for (k, token) in gram.iter().enumerate() {
                let m = cx.add1(Narrow { axis, start: k * d, len: len - span }, &[matches[token]])?;
                product = Some(match product {
                    Some(p) => bin(cx, BinaryOp::Mul, p, m)?,
                    None => m,
                });
            }
            let Some(product) = product else { continue };
            let c = cx.add1(Reduce { op: ReduceOp::Sum, axes: vec![axis], keep_dim: true }, &[product])?;
            count = Some(match count {
                Some(a) => bin(cx, BinaryOp::Add, a, c)?,
                None => c,
            });
        }
        let Some(mut count) = count else { continue };
        let weight = weights.as_ref().and_then(|w| w.get(g)).copied().unwrap_or(1.0) as f64;
        count = match mode.as_str() {
            "TF" => count,
            "IDF" | "TFIDF" => {
                let c = if mode == "IDF" {
                    let zero = cx.scalar(DType::F32, 0.0)?;
                    let seen = cx.add1(Compare { op: CmpOp::Gt }, &[count, zero])?;
                    cast_to(cx, seen, DType::F32)?
                } else {
                    count
                };
                bin_scalar(cx, BinaryOp::Mul, c, weight)?
            }
            m => return invalid(format!("mode `{m}`")),
        };
        let slot = &mut columns[indexes[g] as usize];
        *slot = Some(match *slot {
            Some(a) => bin(cx, BinaryOp::Add, a, count)?,
            None => count,
        });
    }
    let mut col_dims = dims.clone();
    col_dims[axis] = 1;
    let zero_col = cx.values(DType::F32, &col_dims, &vec![0.0; col_dims.iter().product()])?;
    let cols: Vec<ValueId> = columns.into_iter().map(|c| c.unwrap_or(zero_col)).collect();
    if cols.is_empty() {
        return invalid("no output columns");
    }
    let y = if cols.len() == 1 { cols[0] } else { cx.add1(Concat { axis }, &cols)? };
    let mut out_dims = dims.clone();
    out_dims[axis] = out_size;
    Ok(vec![reshape_static(cx, y, &out_dims)?])
}
