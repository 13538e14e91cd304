//! Indexing: gathers and scatters (OPS.md §9; `GatherBackward` §22).
//!
//! Index operands are integer tensors (I32/I64 is the contract; F32-encoded indices are
//! accepted and truncated, per OPS.md §0). Negative or out-of-range indices are run-time
//! errors for `Gather`, `GatherBackward` and `ScatterAdd`; the ONNX-derived ops (`GatherNd`,
//! `GatherElements`, `ScatterNd`, `ScatterElements`) read a negative index `i` as `i + dim`.

use super::{Arity, OpDef};
use crate::{norm_axis, DType, Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// How `ScatterNd` / `ScatterElements` combine an update with the cell it lands on
/// (ONNX `reduction`, opset 16+).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScatterReduction {
    /// Overwrite; with duplicate indices the later update (in index order) wins.
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// `table` indexed along `axis` by `indices`:
/// `out = table[:axis] ++ indices.shape ++ table[axis+1:]` (ONNX `Gather`, `jnp.take`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gather {
    pub axis: usize,
}

/// Gradient of `Gather` w.r.t. its table: zeros of `table_shape`, then
/// `table[.., idx[p], ..] += ȳ[.., p, ..]` along `axis`; inputs `(ȳ, indices)`.
/// The table shape is declared here because `ȳ` does not determine its extent at `axis`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherBackward {
    pub axis: i32,
    pub table_shape: Shape,
}

/// ONNX `GatherND`: the last index axis (`k` wide) addresses the first `k` non-batch
/// axes of `data`; `out = indices.shape[:-1] ++ data.shape[batch_dims+k:]`.
/// A negative `batch_dims` counts from the indices' rank (`-1` = every index axis but the
/// last is a batch axis).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherNd {
    pub batch_dims: i32,
}

/// ONNX `GatherElements` / `torch.gather` / `np.take_along_axis`: `out` has the shape of
/// `indices` and `out[i] = data[i with coord(axis) := indices[i]]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherElements {
    pub axis: i32,
}

/// `out = zeros[out_dim, T..]; out[idx[u]] += updates[u]` for `updates [U, T..]` and
/// `indices [U]`; duplicates accumulate (MoE un-permute, embedding gradients).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScatterAdd {
    pub out_dim: Dim,
}

/// ONNX `ScatterND`: a copy of `data` with `updates` combined in at the `k`-tuples of
/// `indices [.., k]`; `updates` is `indices.shape[:-1] ++ data.shape[k:]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScatterNd {
    pub reduction: ScatterReduction,
}

/// ONNX `ScatterElements`: a copy of `data` with `updates[i]` combined in at
/// `i with coord(axis) := indices[i]`; `indices` and `updates` share one shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScatterElements {
    pub axis: i32,
    pub reduction: ScatterReduction,
}

/// Rejects index operands that are not integers (or F32-encoded integers).
fn check_indices(idx: &TensorType) -> Result<(), String> {
    if idx.dtype.is_index() {
        Ok(())
    } else {
        Err(format!("indices must be integers, got {idx}"))
    }
}

/// Rejects reductions that the data dtype cannot carry out.
fn check_reduction(r: ScatterReduction, data: &TensorType) -> Result<(), String> {
    let bad = match r {
        ScatterReduction::Add | ScatterReduction::Mul => data.dtype == DType::Bool,
        ScatterReduction::Max | ScatterReduction::Min => data.dtype == DType::C64,
        ScatterReduction::None => false,
    };
    if bad {
        Err(format!("reduction {r:?} does not apply to {data}"))
    } else {
        Ok(())
    }
}

/// Checks `updates` against `data`'s dtype.
fn same_dtype(data: &TensorType, updates: &TensorType) -> Result<(), String> {
    if data.dtype == updates.dtype {
        Ok(())
    } else {
        Err(format!("updates {updates} must have the dtype of data {data}"))
    }
}

/// `table[:axis] ++ indices ++ table[axis+1:]`, the shape `Gather` produces.
fn gathered(table: &Shape, axis: usize, indices: &Shape) -> Shape {
    let d = table.dims();
    Shape([&d[..axis], indices.dims(), &d[axis + 1..]].concat())
}

/// Checks the element-wise index rule of `GatherElements`/`ScatterElements`: same rank as
/// `data`, and off `axis` no extent beyond `data`'s (decided when both are static).
fn check_elementwise_indices(data: &TensorType, idx: &TensorType, axis: usize) -> Result<(), String> {
    if idx.rank() != data.rank() {
        return Err(format!("indices {} must have the rank of data {}", idx.shape, data.shape));
    }
    for a in (0..data.rank()).filter(|&a| a != axis) {
        if let (Dim::Static(i), Dim::Static(d)) = (idx.shape.dim(a), data.shape.dim(a)) {
            if i > d {
                return Err(format!(
                    "indices {} exceed data {} on axis {a} ({i} > {d}), which is not the gather axis {axis}",
                    idx.shape, data.shape
                ));
            }
        }
    }
    Ok(())
}

/// The width `k` of the index tuples in `indices [.., k]`, which must be static and in `1..=max`.
fn tuple_width(idx: &TensorType, max: usize) -> Result<usize, String> {
    let Some(last) = idx.rank().checked_sub(1) else {
        return Err(format!("indices {idx} need a last axis holding the index tuples"));
    };
    let k = idx.static_dim(last).map_err(|e| format!("the index tuple width must be static: {e}"))?;
    if k == 0 || k > max {
        return Err(format!("index tuples of width {k} (last axis of {idx}) must address 1 to {max} data axes"));
    }
    Ok(k)
}

impl OpDef for Gather {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (table, idx) = (&inputs[0], &inputs[1]);
        check_indices(idx)?;
        if self.axis >= table.rank() {
            return Err(format!("axis {} is out of range for the table {table}", self.axis));
        }
        Ok(vec![TensorType::new(table.dtype, gathered(&table.shape, self.axis, &idx.shape))])
    }
}

impl OpDef for GatherBackward {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.table_shape.bind(sizes);
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (dy, idx) = (&inputs[0], &inputs[1]);
        check_indices(idx)?;
        if !dy.dtype.is_float() && dy.dtype != DType::C64 {
            return Err(format!("the upstream gradient must be float or complex, got {dy}"));
        }
        for s in self.table_shape.symbols() {
            super::shape::check_symbol(s)?;
        }
        let axis = norm_axis(self.axis as i64, self.table_shape.rank())
            .map_err(|e| format!("{e} of the table {}", self.table_shape))?;
        let want = gathered(&self.table_shape, axis, &idx.shape);
        if dy.shape != want {
            return Err(format!(
                "the upstream gradient {} must be {want}, the gather of table {} by indices {} on axis {axis}",
                dy.shape, self.table_shape, idx.shape
            ));
        }
        Ok(vec![TensorType::new(dy.dtype, self.table_shape.clone())])
    }
}

impl OpDef for GatherNd {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (data, idx) = (&inputs[0], &inputs[1]);
        check_indices(idx)?;
        let (r, q) = (data.rank() as i64, idx.rank() as i64);
        let b = if self.batch_dims < 0 { self.batch_dims as i64 + q } else { self.batch_dims as i64 };
        if b < 0 || b >= r.min(q) {
            return Err(format!(
                "batch_dims {} must lie in [0, {}) for data {} and indices {}",
                self.batch_dims,
                r.min(q),
                data.shape,
                idx.shape
            ));
        }
        let b = b as usize;
        if data.shape.dims()[..b] != idx.shape.dims()[..b] {
            return Err(format!("the first {b} (batch) dims of data {} and indices {} differ", data.shape, idx.shape));
        }
        let k = tuple_width(idx, data.rank() - b)?;
        let dims = [&idx.shape.dims()[..idx.rank() - 1], &data.shape.dims()[b + k..]].concat();
        Ok(vec![TensorType::new(data.dtype, Shape(dims))])
    }
}

impl OpDef for GatherElements {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (data, idx) = (&inputs[0], &inputs[1]);
        check_indices(idx)?;
        let axis = norm_axis(self.axis as i64, data.rank()).map_err(|e| format!("{e} of data {data}"))?;
        check_elementwise_indices(data, idx, axis)?;
        Ok(vec![TensorType::new(data.dtype, idx.shape.clone())])
    }
}

impl OpDef for ScatterAdd {
    fn bind_symbols(&mut self, sizes: &dyn Fn(&str) -> Option<usize>) {
        self.out_dim.bind(sizes);
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (updates, idx) = (&inputs[0], &inputs[1]);
        check_indices(idx)?;
        if updates.dtype == DType::Bool {
            return Err(format!("updates {updates} cannot be added"));
        }
        let rows = updates.shape.dims().first();
        if idx.rank() != 1 || rows != idx.shape.dims().first() {
            return Err(format!(
                "indices {} must be [U] for updates {} of shape [U, ..]",
                idx.shape, updates.shape
            ));
        }
        if let Dim::Sym(s) = &self.out_dim {
            super::shape::check_symbol(s)?;
        }
        let mut dims = updates.shape.0.clone();
        dims[0] = self.out_dim.clone();
        Ok(vec![TensorType::new(updates.dtype, Shape(dims))])
    }
}

impl OpDef for ScatterNd {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (data, idx, updates) = (&inputs[0], &inputs[1], &inputs[2]);
        check_indices(idx)?;
        same_dtype(data, updates)?;
        check_reduction(self.reduction, data)?;
        let k = tuple_width(idx, data.rank())?;
        let want = Shape([&idx.shape.dims()[..idx.rank() - 1], &data.shape.dims()[k..]].concat());
        if updates.shape != want {
            return Err(format!(
                "updates {} must be {want} for data {} and indices {}",
                updates.shape, data.shape, idx.shape
            ));
        }
        Ok(vec![data.clone()])
    }
}

impl OpDef for ScatterElements {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (data, idx, updates) = (&inputs[0], &inputs[1], &inputs[2]);
        check_indices(idx)?;
        same_dtype(data, updates)?;
        check_reduction(self.reduction, data)?;
        let axis = norm_axis(self.axis as i64, data.rank()).map_err(|e| format!("{e} of data {data}"))?;
        if updates.shape != idx.shape {
            return Err(format!("updates {} must have the shape of indices {}", updates.shape, idx.shape));
        }
        check_elementwise_indices(data, idx, axis)?;
        Ok(vec![data.clone()])
    }
}

/// Builders for the index family.
impl crate::Graph {
    /// Rows (or slices along `axis`) of `table` picked by `indices`.
    pub fn gather(&mut self, table: crate::ValueId, indices: crate::ValueId, axis: usize) -> crate::Result<crate::ValueId> {
        self.add1(Gather { axis }, &[table, indices])
    }

    /// Gradient of `Gather{axis}` w.r.t. a table of `table_shape`, from `dy`.
    pub fn gather_backward(&mut self, dy: crate::ValueId, indices: crate::ValueId, axis: i32, table_shape: Shape) -> crate::Result<crate::ValueId> {
        self.add1(GatherBackward { axis, table_shape }, &[dy, indices])
    }

    /// ONNX `GatherND` of `data` at the index tuples of `indices`.
    pub fn gather_nd(&mut self, data: crate::ValueId, indices: crate::ValueId, batch_dims: i32) -> crate::Result<crate::ValueId> {
        self.add1(GatherNd { batch_dims }, &[data, indices])
    }

    /// `torch.gather(data, axis, indices)`.
    pub fn gather_elements(&mut self, data: crate::ValueId, indices: crate::ValueId, axis: i32) -> crate::Result<crate::ValueId> {
        self.add1(GatherElements { axis }, &[data, indices])
    }

    /// Sums the rows of `updates` into `out_dim` zero rows at `indices`.
    pub fn scatter_add(&mut self, updates: crate::ValueId, indices: crate::ValueId, out_dim: Dim) -> crate::Result<crate::ValueId> {
        self.add1(ScatterAdd { out_dim }, &[updates, indices])
    }

    /// ONNX `ScatterND` of `updates` into a copy of `data`.
    pub fn scatter_nd(&mut self, data: crate::ValueId, indices: crate::ValueId, updates: crate::ValueId, reduction: ScatterReduction) -> crate::Result<crate::ValueId> {
        self.add1(ScatterNd { reduction }, &[data, indices, updates])
    }

    /// ONNX `ScatterElements` of `updates` into a copy of `data` along `axis`.
    pub fn scatter_elements(
        &mut self,
        data: crate::ValueId,
        indices: crate::ValueId,
        updates: crate::ValueId,
        axis: i32,
        reduction: ScatterReduction,
    ) -> crate::Result<crate::ValueId> {
        self.add1(ScatterElements { axis, reduction }, &[data, indices, updates])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn infer(op: impl OpDef, inputs: &[&str]) -> Result<String, String> {
        let types: Vec<TensorType> = inputs.iter().map(|t| TensorType::parse(t).unwrap()).collect();
        op.infer(&types).map(|out| out.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
    }

    fn shape(text: &str) -> Shape {
        TensorType::parse(&format!("f32{text}")).unwrap().shape
    }

    #[test]
    fn gather_and_its_backward() {
        assert_eq!(infer(Gather { axis: 0 }, &["bf16[32000, 768]", "i32[B, S]"]).unwrap(), "bf16[B, S, 768]");
        assert_eq!(infer(Gather { axis: 1 }, &["f32[4, 5, 6]", "i64[]"]).unwrap(), "f32[4, 6]");
        assert!(infer(Gather { axis: 0 }, &["f32[4]", "f16[2]"]).unwrap_err().contains("indices must be integers"));
        assert!(infer(Gather { axis: 0 }, &["f32[4]", "bool[2]"]).is_err());
        assert_eq!(infer(Gather { axis: 0 }, &["f32[4]", "f32[2]"]).unwrap(), "f32[2]");
        assert!(infer(Gather { axis: 1 }, &["f32[4]", "i32[2]"]).unwrap_err().contains("out of range"));
        let gb = |axis| GatherBackward { axis, table_shape: shape("[4, 5, 6]") };
        assert_eq!(infer(gb(-2), &["f32[4, B, 2, 6]", "i32[B, 2]"]).unwrap(), "f32[4, 5, 6]");
        assert!(infer(gb(1), &["f32[4, B, 6]", "i32[B, 2]"]).unwrap_err().contains("must be [4, B, 2, 6]"));
        assert!(infer(gb(3), &["f32[4, 6]", "i32[]"]).unwrap_err().contains("out of range"));
    }

    #[test]
    fn gather_nd_follows_onnx() {
        let g = |b| GatherNd { batch_dims: b };
        // ONNX examples: data [2, 2], indices [2, 2] → [2]; indices [2, 1] → [2, 2].
        assert_eq!(infer(g(0), &["f32[2, 2]", "i64[2, 2]"]).unwrap(), "f32[2]");
        assert_eq!(infer(g(0), &["f32[2, 2]", "i64[2, 1]"]).unwrap(), "f32[2, 2]");
        // batch_dims = 1: data [2, 2, 2], indices [2, 1] → [2, 2].
        assert_eq!(infer(g(1), &["f32[2, 2, 2]", "i64[2, 1]"]).unwrap(), "f32[2, 2]");
        assert!(infer(g(-1), &["f32[B, 5, 7]", "i32[B, 3, 1]"]).unwrap_err().contains("(batch) dims"));
        assert_eq!(infer(g(-1), &["f32[B, 5, 7]", "i32[B, 1]"]).unwrap(), "f32[B, 7]");
        assert!(infer(g(0), &["f32[2, 2]", "i64[2, 3]"]).unwrap_err().contains("width 3"));
        assert!(infer(g(0), &["f32[2, 2]", "i64[2, K]"]).unwrap_err().contains("static"));
        assert!(infer(g(1), &["f32[3, 2]", "i64[2, 1]"]).unwrap_err().contains("batch) dims"));
        assert!(infer(g(2), &["f32[2, 2]", "i64[2, 1]"]).unwrap_err().contains("batch_dims 2"));
        assert!(infer(g(0), &["f32[2]", "i64[]"]).unwrap_err().contains("batch_dims 0"));
    }

    #[test]
    fn element_gathers_and_scatters() {
        assert_eq!(infer(GatherElements { axis: -1 }, &["f32[B, 10]", "i64[B, 3]"]).unwrap(), "f32[B, 3]");
        assert!(infer(GatherElements { axis: 1 }, &["f32[2, 10]", "i64[3, 3]"]).unwrap_err().contains("3 > 2"));
        assert!(infer(GatherElements { axis: 1 }, &["f32[2, 10]", "i64[2]"]).unwrap_err().contains("rank"));
        let se = |reduction| ScatterElements { axis: 0, reduction };
        assert_eq!(infer(se(ScatterReduction::Add), &["f32[5, 3]", "i32[2, 3]", "f32[2, 3]"]).unwrap(), "f32[5, 3]");
        assert!(infer(se(ScatterReduction::None), &["f32[5, 3]", "i32[2, 3]", "f32[2, 2]"]).unwrap_err().contains("shape of indices"));
        assert!(infer(se(ScatterReduction::Max), &["c64[5]", "i32[2]", "c64[2]"]).unwrap_err().contains("Max"));
        assert!(infer(se(ScatterReduction::Mul), &["f32[5]", "i32[2]", "f16[2]"]).unwrap_err().contains("dtype"));
    }

    #[test]
    fn scatter_add_and_nd() {
        let sa = ScatterAdd { out_dim: Dim::Static(32000) };
        assert_eq!(infer(sa.clone(), &["f32[N, 768]", "i32[N]"]).unwrap(), "f32[32000, 768]");
        assert!(infer(sa.clone(), &["f32[N, 768]", "i32[M]"]).unwrap_err().contains("must be [U]"));
        assert!(infer(sa.clone(), &["f32[4, 768]", "i32[4, 1]"]).is_err());
        assert!(infer(sa, &["f32[]", "i32[1]"]).is_err());
        let bad = ScatterAdd { out_dim: Dim::sym("T+1") };
        assert!(infer(bad, &["f32[U, 64]", "i64[U]"]).unwrap_err().contains("not a symbol name"));
        let tokens = ScatterAdd { out_dim: Dim::sym("T") };
        assert_eq!(infer(tokens, &["f16[U, 64]", "i64[U]"]).unwrap(), "f16[T, 64]");
        let nd = ScatterNd { reduction: ScatterReduction::None };
        assert_eq!(infer(nd.clone(), &["f32[4, 4, 4]", "i64[2, 1]", "f32[2, 4, 4]"]).unwrap(), "f32[4, 4, 4]");
        assert_eq!(infer(nd.clone(), &["f32[8]", "i64[4, 1]", "f32[4]"]).unwrap(), "f32[8]");
        assert!(infer(nd.clone(), &["f32[8]", "i64[4, 1]", "f32[4, 1]"]).unwrap_err().contains("must be [4]"));
        assert!(infer(nd, &["f32[8]", "i64[4, 2]", "f32[4]"]).unwrap_err().contains("width 2"));
        let add = ScatterNd { reduction: ScatterReduction::Add };
        assert!(infer(add, &["bool[8]", "i64[4, 1]", "bool[4]"]).unwrap_err().contains("Add"));
    }

    #[test]
    fn builders_round_trip() {
        let mut g = Graph::new();
        let ids = g.input("ids", TensorType::parse("i32[B, S]").unwrap());
        let emb = g.param("emb", TensorType::parse("f32[1000, 64]").unwrap());
        let x = g.gather(emb, ids, 0).unwrap();
        let db = g.gather_backward(x, ids, 0, shape("[1000, 64]")).unwrap();
        let upd = g.param("u", TensorType::parse("f32[4, 64]").unwrap());
        let at = g.input("at", TensorType::parse("i64[4]").unwrap());
        let sa = g.scatter_add(upd, at, Dim::sym("T")).unwrap();
        g.set_outputs(vec![db, sa]).unwrap();
        let text = g.to_string();
        assert!(text.contains("GatherBackward(axis:0,table_shape:[1000,64])(%2, %0) : f32[1000, 64]"), "{text}");
        assert!(text.contains("ScatterAdd(out_dim:\"T\")(%4, %5) : f32[T, 64]"), "{text}");
        assert_eq!(crate::text::parse(&text).unwrap(), g);
    }
}
