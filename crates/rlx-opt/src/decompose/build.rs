//! Small graph-building helpers shared by the decompositions (and by rlx-autodiff's rules
//! and rlx-train's updates): typed scalar and vector constants, per-axis parameter shapes,
//! un-broadcasting, summed inner products, and the legalize-and-check harness of the
//! decompositions' unit tests.

use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{DType, Dim, Graph, IrError, Shape, TensorType, ValueId};

/// A rank-0 constant `v` of `dtype` (floats round to the nearest value of the dtype, integers
/// truncate as Rust `as` does; F16/BF16 and the narrow types go through an F32 constant and a
/// `Cast`).
pub fn scalar(g: &mut Graph, dtype: DType, v: f64) -> Result<ValueId, IrError> {
    let bytes: Vec<u8> = match dtype {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::F16
        | DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => {
            let c = scalar(g, DType::F32, v)?;
            return g.cast(c, dtype);
        }
        DType::I8 => (v as i8).to_le_bytes().to_vec(),
        DType::U8 => (v as u8).to_le_bytes().to_vec(),
        DType::I16 => (v as i16).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::I64 => (v as i64).to_le_bytes().to_vec(),
        DType::U32 => (v as u32).to_le_bytes().to_vec(),
        DType::U16 => (v as u16).to_le_bytes().to_vec(),
        DType::U64 => (v as u64).to_le_bytes().to_vec(),
        DType::Bool => vec![u8::from(v != 0.0)],
        DType::C64 => [v as f32, 0.0].iter().flat_map(|f| f.to_le_bytes()).collect(),
    };
    g.constant(TensorType::of(dtype, &[]), bytes)
}

/// A rank-1 float constant of `dtype` holding `values` (F16/BF16 through F32 and a `Cast`).
pub fn vector(g: &mut Graph, dtype: DType, values: &[f64]) -> Result<ValueId, IrError> {
    let bytes: Vec<u8> = match dtype {
        DType::F64 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F32 => values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
        DType::F16 | DType::BF16 => {
            let c = vector(g, DType::F32, values)?;
            return g.cast(c, dtype);
        }
        d => return Err(IrError::Invalid(format!("a float vector constant cannot be {d}"))),
    };
    g.constant(TensorType::of(dtype, &[values.len()]), bytes)
}

/// `[1, .., c, .., 1]` of `rank` with `c` at `axis`: the shape that broadcasts one value per
/// channel along `axis` (all ones without an axis).
pub fn channel_shape(rank: usize, axis: Option<usize>, c: Dim) -> Shape {
    Shape((0..rank).map(|i| if Some(i) == axis { c.clone() } else { Dim::Static(1) }).collect())
}

/// `v` reshaped to `shape` unless it already has it.
pub fn reshape_if(g: &mut Graph, v: ValueId, shape: &Shape) -> Result<ValueId, IrError> {
    if g.ty(v).shape == *shape {
        Ok(v)
    } else {
        g.reshape_to(v, shape)
    }
}

/// Sums `v` down to `target` (a shape that broadcasts to `v`'s): the reverse of NumPy
/// broadcasting, as the gradient of a broadcast operand needs.
pub fn unbroadcast(g: &mut Graph, v: ValueId, target: &Shape) -> Result<ValueId, IrError> {
    let have = g.ty(v).shape.clone();
    let lead = have
        .rank()
        .checked_sub(target.rank())
        .ok_or_else(|| IrError::Invalid(format!("cannot sum {have} down to the higher-rank {target}")))?;
    let axes: Vec<usize> = (0..have.rank())
        .filter(|&a| a < lead || (*target.dim(a - lead) == Dim::Static(1) && *have.dim(a) != Dim::Static(1)))
        .collect();
    let summed = if axes.is_empty() { v } else { g.reduce(ReduceOp::Sum, v, &axes, true)? };
    reshape_if(g, summed, target)
}

/// `Σ_pairs Σ a·b` over every axis of each pair; `None` without pairs.
pub fn inner_sum(g: &mut Graph, pairs: &[(ValueId, ValueId)]) -> Result<Option<ValueId>, IrError> {
    let mut total = None;
    for &(a, b) in pairs {
        let p = g.binary(BinaryOp::Mul, a, b)?;
        let axes: Vec<usize> = (0..g.ty(p).rank()).collect();
        let term = g.reduce(ReduceOp::Sum, p, &axes, false)?;
        total = Some(match total {
            Some(acc) => g.binary(BinaryOp::Add, acc, term)?,
            None => term,
        });
    }
    Ok(total)
}

#[cfg(test)]
pub mod testing {
    use crate::decompose::PRIMITIVES;
    use rlx_ir::{Graph, OpKind};

    /// Non-primitive kinds that other families' kernels claim, which decompositions here emit.
    pub const CLAIMED_ELSEWHERE: &[OpKind] = &[
        OpKind::LayerNorm,
        OpKind::RmsNorm,
        OpKind::LayerNormBackwardInput,
        OpKind::RmsNormBackwardInput,
        OpKind::Attention,
        OpKind::Rope,
        OpKind::Softmax,
    ];

    /// Legalizes `g` for a backend claiming the primitives, [`CLAIMED_ELSEWHERE`] and
    /// `extra`; checks that every node is claimed and that the result verifies.
    pub fn lower(g: &Graph, extra: &[OpKind]) -> Graph {
        let mut claims: Vec<OpKind> = PRIMITIVES.iter().chain(CLAIMED_ELSEWHERE).chain(extra).copied().collect();
        claims.sort();
        claims.dedup();
        let (out, _) = crate::legalize(g, "test", &claims[..]).unwrap_or_else(|e| panic!("{e}\nin\n{g}"));
        assert!(out.nodes().iter().all(|n| claims.contains(&n.op.kind())), "{out}");
        rlx_ir::verify(&out).unwrap_or_else(|e| panic!("{e}\nin\n{out}"));
        out
    }

    /// [`lower`] of the graph in `src` (text IR); also checks that no node of `kind` is left
    /// and that the outputs kept their types.
    pub fn lower_text(src: &str, kind: OpKind, extra: &[OpKind]) -> Graph {
        let g = rlx_ir::text::parse(src).unwrap_or_else(|e| panic!("{e}\nin\n{src}"));
        let out = lower(&g, extra);
        assert!(out.nodes().iter().all(|n| n.op.kind() != kind), "{kind} left in\n{out}");
        let types = |g: &Graph| g.outputs().iter().map(|v| g.ty(*v).clone()).collect::<Vec<_>>();
        assert_eq!(types(&g), types(&out));
        out
    }

    /// How many nodes of `kind` `g` has.
    pub fn count(g: &Graph, kind: OpKind) -> usize {
        g.nodes().iter().filter(|n| n.op.kind() == kind).count()
    }
}
