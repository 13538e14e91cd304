//! Matrix products (OPS.md §4): batched `MatMul`, XLA's `DotGeneral`, the MoE expert GEMM,
//! LoRA, and codebook-synthesized weights.
//!
//! Contracted dims must agree: two different static sizes are an error, a symbolic dim is
//! assumed to match (as broadcasting assumes equal symbols are equal).

use super::{Arity, OpDef};
use crate::{broadcast, DType, Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// `a [.., M, K] · b [.., K, N] → [batch.., M, N]` with NumPy-broadcast batch dims
/// (`jnp.matmul` without rank-1 promotion: importers reshape vectors to matrices first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MatMul {}

/// `jax.lax.dot_general`: `lhs_contracting[i]` pairs with `rhs_contracting[i]` and
/// `lhs_batch[i]` with `rhs_batch[i]` (paired sizes equal, no broadcasting). The output is
/// XLA's order: batch dims (lhs order) ++ lhs free dims ++ rhs free dims (each ascending).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DotGeneral {
    pub lhs_contracting: Vec<usize>,
    pub rhs_contracting: Vec<usize>,
    pub lhs_batch: Vec<usize>,
    pub rhs_batch: Vec<usize>,
}

/// MoE expert GEMM: `out[i] = input[i] · weight[expert_idx[i]]` with `input [M, K]`,
/// `weight [E, K, N]` (K second) and integer `expert_idx [M]`; rank > 2 inputs are flattened
/// by the caller first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupedMatMul {}

/// `x·w + scale·((x·a)·b)` with `w [k, n]`, `a [k, r]`, `b [r, n]`; `scale` = α/rank.
/// [def] `x` may carry leading batch dims (`[.., m, k]`), as `MatMul` with a rank-2 rhs does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraMatMul {
    pub scale: f32,
}

/// How a synthesized weight is encoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SynthKind {
    /// Each run of `entry_dim` weights along K is the codebook row picked by one U8 index,
    /// so the codebook holds at most 256 entries.
    Codebook { entry_dim: usize, num_entries: usize },
}

/// `x [.., m, k] · w_btᵀ` where `w_bt[n, j·d + e] = codebook[indices[n, j], e]` is never
/// materialized (`indices [n, k/d]` U8, `codebook [E, d]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SynthMatMul {
    pub kind: SynthKind,
}

/// Materializes the synthesized weight `w_bt [n, k]` (the `[n, k]` layout the backward
/// prefers; callers transpose to `W [k, n]`). Output dtype is the codebook's (F32 in practice).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SynthReconstruct {
    pub kind: SynthKind,
}

/// False only when both dims are static and differ (symbols are assumed to match).
pub(crate) fn dims_agree(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Static(p), Dim::Static(q)) => p == q,
        _ => true,
    }
}

/// Of two agreeing dims, the static one if either is.
pub(crate) fn pick_dim(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Sym(_), Dim::Static(_)) => b.clone(),
        _ => a.clone(),
    }
}

/// The dtype of a product `a·b`: equal numeric dtypes, or two real floats (mixed precision,
/// e.g. F16-resident weights with F32 activations) giving `a`'s dtype.
pub(crate) fn product_dtype(a: &TensorType, b: &TensorType) -> Result<DType, String> {
    let ok = if a.dtype == b.dtype {
        a.dtype != DType::Bool
    } else {
        a.dtype.is_float() && b.dtype.is_float()
    };
    if ok {
        Ok(a.dtype)
    } else {
        Err(format!("operand dtypes {} and {} do not multiply", a.dtype, b.dtype))
    }
}

/// Checks that `t` has exactly `rank` axes; `what` names the operand and its expected layout.
pub(crate) fn need_rank(what: &str, t: &TensorType, rank: usize) -> Result<(), String> {
    if t.rank() == rank {
        Ok(())
    } else {
        Err(format!("{what} must have rank {rank}, got {t}"))
    }
}

/// Checks that `t` is an integer (or F32-encoded, OPS.md §0) index vector of length `len`.
pub(crate) fn need_index_vector(what: &str, t: &TensorType, len: &Dim) -> Result<(), String> {
    if !t.dtype.is_index() {
        return Err(format!("{what} must be an integer index tensor, got {t}"));
    }
    need_rank(what, t, 1)?;
    if !dims_agree(t.shape.dim(0), len) {
        return Err(format!("{what} {t} must have one entry per row ({len})"));
    }
    Ok(())
}

/// `[.., M, K] x [.., K, N]`: the output type of a batched matrix product.
pub(crate) fn matmul_type(a: &TensorType, b: &TensorType) -> Result<TensorType, String> {
    let dtype = product_dtype(a, b)?;
    let (ra, rb) = (a.rank(), b.rank());
    if ra < 2 || rb < 2 {
        return Err(format!(
            "both operands need rank >= 2 (reshape vectors to [1, K] or [K, 1] first): {} x {}",
            a.shape, b.shape
        ));
    }
    let (da, db) = (a.shape.dims(), b.shape.dims());
    if !dims_agree(&da[ra - 1], &db[rb - 2]) {
        return Err(format!("inner dims differ: {} x {}", a.shape, b.shape));
    }
    let batch = broadcast(&Shape(da[..ra - 2].to_vec()), &Shape(db[..rb - 2].to_vec()))
        .map_err(|_| format!("batch dims do not broadcast: {} x {}", a.shape, b.shape))?;
    let mut dims = batch.0;
    dims.push(da[ra - 2].clone());
    dims.push(db[rb - 1].clone());
    Ok(TensorType::new(dtype, Shape(dims)))
}

impl OpDef for MatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![matmul_type(&inputs[0], &inputs[1])?])
    }
}

impl DotGeneral {
    /// Checks one side's axes (in range, none repeated) and returns its free axes, ascending.
    fn free_axes(side: &str, t: &TensorType, contracting: &[usize], batch: &[usize]) -> Result<Vec<usize>, String> {
        let mut used = vec![false; t.rank()];
        for &axis in contracting.iter().chain(batch) {
            match used.get_mut(axis) {
                None => return Err(format!("{side} axis {axis} is out of range for {t}")),
                Some(true) => return Err(format!("{side} axis {axis} is used twice")),
                Some(u) => *u = true,
            }
        }
        Ok((0..t.rank()).filter(|&i| !used[i]).collect())
    }
}

impl OpDef for DotGeneral {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (l, r) = (&inputs[0], &inputs[1]);
        let dtype = product_dtype(l, r)?;
        if self.lhs_contracting.len() != self.rhs_contracting.len() || self.lhs_batch.len() != self.rhs_batch.len() {
            return Err(format!(
                "dimension lists must pair up: contracting {:?} vs {:?}, batch {:?} vs {:?}",
                self.lhs_contracting, self.rhs_contracting, self.lhs_batch, self.rhs_batch
            ));
        }
        let l_free = Self::free_axes("lhs", l, &self.lhs_contracting, &self.lhs_batch)?;
        let r_free = Self::free_axes("rhs", r, &self.rhs_contracting, &self.rhs_batch)?;
        let (ld, rd) = (l.shape.dims(), r.shape.dims());
        for (&i, &j) in self.lhs_contracting.iter().zip(&self.rhs_contracting) {
            if !dims_agree(&ld[i], &rd[j]) {
                return Err(format!("contracting dims differ: lhs axis {i} of {} vs rhs axis {j} of {}", l.shape, r.shape));
            }
        }
        let mut dims = Vec::new();
        for (&i, &j) in self.lhs_batch.iter().zip(&self.rhs_batch) {
            if !dims_agree(&ld[i], &rd[j]) {
                return Err(format!("batch dims differ: lhs axis {i} of {} vs rhs axis {j} of {}", l.shape, r.shape));
            }
            dims.push(pick_dim(&ld[i], &rd[j]));
        }
        dims.extend(l_free.iter().map(|&i| ld[i].clone()));
        dims.extend(r_free.iter().map(|&j| rd[j].clone()));
        Ok(vec![TensorType::new(dtype, Shape(dims))])
    }
}

impl OpDef for GroupedMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, w, idx) = (&inputs[0], &inputs[1], &inputs[2]);
        let dtype = product_dtype(x, w)?;
        need_rank("input [M, K] (flatten leading axes first)", x, 2)?;
        need_rank("weight [E, K, N]", w, 3)?;
        let (xd, wd) = (x.shape.dims(), w.shape.dims());
        if !dims_agree(&xd[1], &wd[1]) {
            return Err(format!("inner dims differ: input {} x weight {} (the bank must be [E, K, N])", x.shape, w.shape));
        }
        need_index_vector("expert_idx", idx, &xd[0])?;
        Ok(vec![TensorType::new(dtype, Shape(vec![xd[0].clone(), wd[2].clone()]))])
    }
}

impl OpDef for LoraMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(4)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, w, a, b) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3]);
        if !self.scale.is_finite() {
            return Err(format!("scale must be finite, got {}", self.scale));
        }
        need_rank("w [k, n]", w, 2)?;
        need_rank("a [k, r]", a, 2)?;
        need_rank("b [r, n]", b, 2)?;
        let base = matmul_type(x, w)?;
        matmul_type(&matmul_type(x, a)?, b).map_err(|e| format!("low-rank path x·a·b: {e}"))?;
        let (wd, bd) = (w.shape.dims(), b.shape.dims());
        if !dims_agree(&wd[1], &bd[1]) {
            return Err(format!("w {} and b {} must share n", w.shape, b.shape));
        }
        Ok(vec![base])
    }
}

impl SynthKind {
    /// `(entry_dim, num_entries)`, validated: `d ≥ 1` and `1 ≤ E ≤ 256` (U8 indices).
    fn codebook(&self) -> Result<(usize, usize), String> {
        let SynthKind::Codebook { entry_dim, num_entries } = *self;
        if entry_dim == 0 || num_entries == 0 || num_entries > 256 {
            return Err(format!(
                "codebook needs entry_dim >= 1 and 1..=256 entries (U8 indices), got entry_dim {entry_dim}, num_entries {num_entries}"
            ));
        }
        Ok((entry_dim, num_entries))
    }

    /// Checks `indices [n, k/d]` U8 and `codebook [E, d]`; returns `n`, `k/d` and `d`.
    fn check(&self, indices: &TensorType, codebook: &TensorType) -> Result<(Dim, Dim, usize), String> {
        let (d, e) = self.codebook()?;
        if indices.dtype != DType::U8 {
            return Err(format!("indices must be u8, got {indices}"));
        }
        need_rank("indices [n, k/d]", indices, 2)?;
        if !codebook.dtype.is_float() {
            return Err(format!("codebook must be float, got {codebook}"));
        }
        need_rank("codebook [E, d]", codebook, 2)?;
        let cd = codebook.shape.dims();
        if !dims_agree(&cd[0], &Dim::Static(e)) || !dims_agree(&cd[1], &Dim::Static(d)) {
            return Err(format!("codebook {} must be [{e}, {d}] (num_entries, entry_dim)", codebook.shape));
        }
        let id = indices.shape.dims();
        Ok((id[0].clone(), id[1].clone(), d))
    }
}

impl OpDef for SynthMatMul {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (x, indices, codebook) = (&inputs[0], &inputs[1], &inputs[2]);
        let (n, groups, d) = self.kind.check(indices, codebook)?;
        product_dtype(x, codebook)?;
        if x.rank() < 2 {
            return Err(format!("x must be [.., m, k], got {x}"));
        }
        let mut dims = x.shape.0.clone();
        let k = dims.pop().unwrap_or(Dim::Static(0));
        if let (Dim::Static(k), Dim::Static(g)) = (&k, &groups) {
            if *k != g * d {
                return Err(format!(
                    "x {} has k = {k} but indices {} encode {g}·{d} = {} weights per row",
                    x.shape,
                    indices.shape,
                    g * d
                ));
            }
        }
        dims.push(n);
        Ok(vec![TensorType::new(x.dtype, Shape(dims))])
    }
}

impl OpDef for SynthReconstruct {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (indices, codebook) = (&inputs[0], &inputs[1]);
        let (n, _, d) = self.kind.check(indices, codebook)?;
        let groups = indices.static_dim(1)?;
        Ok(vec![TensorType::new(codebook.dtype, Shape(vec![n, Dim::Static(groups * d)]))])
    }
}

/// Builders for the matmul family.
impl crate::Graph {
    /// `a · b` with broadcast batch dims.
    pub fn matmul(&mut self, a: crate::ValueId, b: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(MatMul {}, &[a, b])
    }

    /// `jax.lax.dot_general(lhs, rhs, dims)`.
    pub fn dot_general(&mut self, lhs: crate::ValueId, rhs: crate::ValueId, dims: DotGeneral) -> crate::Result<crate::ValueId> {
        self.add1(dims, &[lhs, rhs])
    }

    /// Per-row expert GEMM `input[i] · weight[expert_idx[i]]`.
    pub fn grouped_matmul(&mut self, input: crate::ValueId, weight: crate::ValueId, expert_idx: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(GroupedMatMul {}, &[input, weight, expert_idx])
    }

    /// `x·w + scale·((x·a)·b)`.
    pub fn lora_matmul(
        &mut self,
        x: crate::ValueId,
        w: crate::ValueId,
        a: crate::ValueId,
        b: crate::ValueId,
        scale: f32,
    ) -> crate::Result<crate::ValueId> {
        self.add1(LoraMatMul { scale }, &[x, w, a, b])
    }

    /// `x · w_btᵀ` with the weight synthesized from `indices` and `codebook`.
    pub fn synth_matmul(
        &mut self,
        kind: SynthKind,
        x: crate::ValueId,
        indices: crate::ValueId,
        codebook: crate::ValueId,
    ) -> crate::Result<crate::ValueId> {
        self.add1(SynthMatMul { kind }, &[x, indices, codebook])
    }

    /// The synthesized weight `w_bt [n, k]`.
    pub fn synth_reconstruct(&mut self, kind: SynthKind, indices: crate::ValueId, codebook: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(SynthReconstruct { kind }, &[indices, codebook])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    fn t(dtype: DType, dims: &[Dim]) -> TensorType {
        TensorType::new(dtype, Shape(dims.to_vec()))
    }

    fn f32s(dims: &[usize]) -> TensorType {
        TensorType::of(DType::F32, dims)
    }

    #[test]
    fn matmul_broadcasts_batch_dims() {
        let mut g = Graph::new();
        let a = g.input("a", f32s(&[2, 1, 4, 8]));
        let b = g.input("b", f32s(&[3, 8, 5]));
        let c = g.matmul(a, b).unwrap();
        assert_eq!(g.ty(c), &f32s(&[2, 3, 4, 5]));
        let w = g.input("w", f32s(&[8, 5]));
        let y = g.matmul(a, w).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 1, 4, 5]));
        let bad = g.input("bad", f32s(&[4, 3, 8, 5]));
        let e = g.matmul(a, bad).unwrap_err().to_string();
        assert!(e.contains("batch dims do not broadcast"), "{e}");
    }

    #[test]
    fn matmul_names_inner_dims() {
        let mut g = Graph::new();
        let a = g.input("a", f32s(&[4, 384]));
        let b = g.input("b", f32s(&[512, 1536]));
        let e = g.matmul(a, b).unwrap_err().to_string();
        assert_eq!(e, "MatMul(%0: f32[4, 384], %1: f32[512, 1536]): inner dims differ: [4, 384] x [512, 1536]");
        let v = g.input("v", f32s(&[384]));
        assert!(g.matmul(a, v).unwrap_err().to_string().contains("rank >= 2"));
    }

    #[test]
    fn matmul_dtypes_and_symbols() {
        let mut g = Graph::new();
        let a = g.input("a", t(DType::F32, &["B".into(), "S".into(), 64.into()]));
        let w = g.input("w", TensorType::of(DType::F16, &[64, 32]));
        let y = g.matmul(a, w).unwrap();
        assert_eq!(g.ty(y), &t(DType::F32, &["B".into(), "S".into(), 32.into()]));
        let k = g.input("k", t(DType::F32, &["K".into(), 32.into()]));
        assert!(g.matmul(a, k).is_ok(), "a symbolic K is assumed to match");
        let i = g.input("i", TensorType::of(DType::I32, &[64, 32]));
        assert!(g.matmul(a, i).unwrap_err().to_string().contains("do not multiply"));
    }

    #[test]
    fn dot_general_uses_xla_output_order() {
        let mut g = Graph::new();
        // lhs [b=2, m=3, k=4, x=5], rhs [k=4, b=2, n=6]
        let l = g.input("l", f32s(&[2, 3, 4, 5]));
        let r = g.input("r", f32s(&[4, 2, 6]));
        let dims = DotGeneral { lhs_contracting: vec![2], rhs_contracting: vec![0], lhs_batch: vec![0], rhs_batch: vec![1] };
        let y = g.dot_general(l, r, dims.clone()).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 3, 5, 6]));
        let bad = DotGeneral { lhs_contracting: vec![1], ..dims.clone() };
        assert!(g.dot_general(l, r, bad).unwrap_err().to_string().contains("contracting dims differ"));
        let twice = DotGeneral { lhs_contracting: vec![0], ..dims.clone() };
        assert!(g.dot_general(l, r, twice).unwrap_err().to_string().contains("used twice"));
        let range = DotGeneral { rhs_contracting: vec![3], ..dims };
        assert!(g.dot_general(l, r, range).unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn grouped_matmul_checks_bank_layout() {
        let mut g = Graph::new();
        let x = g.input("x", t(DType::F32, &["T".into(), 64.into()]));
        let w = g.input("w", f32s(&[8, 64, 128]));
        let i = g.input("i", t(DType::I32, &["T".into()]));
        let y = g.grouped_matmul(x, w, i).unwrap();
        assert_eq!(g.ty(y), &t(DType::F32, &["T".into(), 128.into()]));
        let wt = g.input("wt", f32s(&[8, 128, 64]));
        assert!(g.grouped_matmul(x, wt, i).unwrap_err().to_string().contains("[E, K, N]"));
    }

    #[test]
    fn lora_and_synth_shapes() {
        let mut g = Graph::new();
        let x = g.input("x", f32s(&[2, 7, 64]));
        let w = g.input("w", f32s(&[64, 32]));
        let a = g.input("a", f32s(&[64, 4]));
        let b = g.input("b", f32s(&[4, 32]));
        let y = g.lora_matmul(x, w, a, b, 0.5).unwrap();
        assert_eq!(g.ty(y), &f32s(&[2, 7, 32]));
        assert!(g.lora_matmul(x, w, a, a, 0.5).unwrap_err().to_string().contains("low-rank"));

        let kind = SynthKind::Codebook { entry_dim: 8, num_entries: 16 };
        let idx = g.input("idx", TensorType::of(DType::U8, &[32, 8]));
        let cb = g.input("cb", f32s(&[16, 8]));
        let s = g.synth_matmul(kind.clone(), x, idx, cb).unwrap();
        assert_eq!(g.ty(s), &f32s(&[2, 7, 32]));
        let wb = g.synth_reconstruct(kind.clone(), idx, cb).unwrap();
        assert_eq!(g.ty(wb), &f32s(&[32, 64]));
        let short = g.input("short", TensorType::of(DType::U8, &[32, 4]));
        assert!(g.synth_matmul(kind, x, short, cb).unwrap_err().to_string().contains("encode 4·8 = 32"));
        let big = SynthKind::Codebook { entry_dim: 8, num_entries: 300 };
        assert!(g.synth_reconstruct(big, idx, cb).unwrap_err().to_string().contains("1..=256"));
    }
}
