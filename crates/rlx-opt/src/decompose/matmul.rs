//! Decompositions of the matmul family (OPS.md §4) into `MatMul`, `Transpose`, `Reshape`,
//! `Gather`, `Cast` and `Binary`.

use super::build::{reshape_if, scalar};
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_ir::ops::matmul::{DotGeneral, SynthKind};
use rlx_ir::{DType, Dim, Graph, IrError, Op, OpKind, Shape, ValueId};

pub const KINDS: &[OpKind] =
    &[OpKind::DotGeneral, OpKind::GroupedMatMul, OpKind::LoraMatMul, OpKind::SynthMatMul, OpKind::SynthReconstruct];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::DotGeneral(d) => dot_general(g, d, x[0], x[1]),
        Op::GroupedMatMul(_) => grouped_matmul(g, x[0], x[1], x[2]),
        Op::LoraMatMul(l) => lora_matmul(g, l.scale, x),
        Op::SynthMatMul(s) => synth_matmul(g, &s.kind, x[0], x[1], x[2]),
        Op::SynthReconstruct(s) => synth_reconstruct(g, &s.kind, x[0], x[1]),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// `x` with its axes permuted by `perm`, unless that is the identity.
fn transpose_if(g: &mut Graph, x: ValueId, perm: &[usize]) -> Result<ValueId, IrError> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        Ok(x)
    } else {
        g.transpose(x, perm)
    }
}

/// The one dim that `dims` flatten into: 1 for none, the dim itself for one, the product when
/// all are static. Several dims with a symbol among them have no single-dim spelling.
fn flat(dims: &[Dim]) -> Result<Dim, IrError> {
    match dims {
        [] => Ok(Dim::Static(1)),
        [d] => Ok(d.clone()),
        _ => match Shape(dims.to_vec()).numel() {
            Some(n) => Ok(Dim::Static(n)),
            None => Err(IrError::Invalid(format!(
                "DotGeneral decomposition: the axes {} hold a symbol and cannot be flattened into one",
                Shape(dims.to_vec())
            ))),
        },
    }
}

/// Transposes lhs to `[batch.., free.., contract..]` and rhs to `[batch.., contract.., free..]`,
/// flattens each group to one axis (leaving the batch axes, which `MatMul` batches over),
/// multiplies, and reshapes to XLA's output order. Identity transposes and reshapes are skipped.
fn dot_general(g: &mut Graph, d: &DotGeneral, l: ValueId, r: ValueId) -> Result<ValueId, IrError> {
    let out = g.infer(&d.clone().into(), &[l, r])?.remove(0);
    let free = |rank: usize, used: &[&[usize]]| -> Vec<usize> {
        (0..rank).filter(|a| used.iter().all(|u| !u.contains(a))).collect()
    };
    let l_free = free(g.ty(l).rank(), &[&d.lhs_contracting, &d.lhs_batch]);
    let r_free = free(g.ty(r).rank(), &[&d.rhs_contracting, &d.rhs_batch]);
    let l_perm: Vec<usize> = [&d.lhs_batch[..], &l_free, &d.lhs_contracting].concat();
    let r_perm: Vec<usize> = [&d.rhs_batch[..], &d.rhs_contracting, &r_free].concat();
    let nb = d.lhs_batch.len();
    let side = |g: &mut Graph, v: ValueId, perm: &[usize], first: usize| -> Result<ValueId, IrError> {
        let v = transpose_if(g, v, perm)?;
        let dims = g.ty(v).shape.dims().to_vec();
        let mut target = dims[..nb].to_vec();
        target.push(flat(&dims[nb..nb + first])?);
        target.push(flat(&dims[nb + first..])?);
        reshape_if(g, v, &Shape(target))
    };
    let l3 = side(g, l, &l_perm, l_free.len())?;
    let r3 = side(g, r, &r_perm, d.rhs_contracting.len())?;
    let y = g.matmul(l3, r3)?;
    reshape_if(g, y, &out.shape)
}

/// `Gather(weight, expert_idx) → [M, K, N]`, `input` as `[M, 1, K]`, batched `MatMul`,
/// `Reshape [M, N]` (memory-hungry, as OPS.md says; fine as a fallback).
fn grouped_matmul(g: &mut Graph, input: ValueId, weight: ValueId, idx: ValueId) -> Result<ValueId, IrError> {
    let w = g.gather(weight, idx, 0)?;
    let [m, k] = match g.ty(input).shape.dims() {
        [m, k] => [m.clone(), k.clone()],
        _ => return Err(IrError::Invalid(format!("GroupedMatMul input must be [M, K], got {}", g.ty(input)))),
    };
    let rows = g.reshape_to(input, &Shape(vec![m.clone(), Dim::Static(1), k]))?;
    let y = g.matmul(rows, w)?;
    let n = g.ty(y).shape.dims()[2].clone();
    g.reshape_to(y, &Shape(vec![m, n]))
}

/// `x·w + scale·((x·a)·b)`.
fn lora_matmul(g: &mut Graph, scale: f32, x: &[ValueId]) -> Result<ValueId, IrError> {
    let base = g.matmul(x[0], x[1])?;
    let xa = g.matmul(x[0], x[2])?;
    let low = g.matmul(xa, x[3])?;
    let s = scalar(g, g.ty(low).dtype, f64::from(scale))?;
    let low = g.binary(BinaryOp::Mul, low, s)?;
    g.binary(BinaryOp::Add, base, low)
}

/// `w_bt [n, k]` → `Transpose` → `x · W`.
fn synth_matmul(
    g: &mut Graph,
    kind: &SynthKind,
    x: ValueId,
    indices: ValueId,
    codebook: ValueId,
) -> Result<ValueId, IrError> {
    let w_bt = g.synth_reconstruct(kind.clone(), indices, codebook)?;
    let w = g.transpose(w_bt, &[1, 0])?;
    g.matmul(x, w)
}

/// `Cast(indices → I32)`, `Gather(codebook, axis 0) → [n, k/d, d]`, `Reshape [n, k]` (the
/// gather takes the rank-2 indices whole, so no flattening of a symbolic `n` is needed).
fn synth_reconstruct(g: &mut Graph, kind: &SynthKind, indices: ValueId, codebook: ValueId) -> Result<ValueId, IrError> {
    let SynthKind::Codebook { entry_dim, .. } = *kind;
    let idx = g.cast(indices, DType::I32)?;
    let rows = g.gather(codebook, idx, 0)?;
    let it = g.ty(indices).clone();
    let groups = it.static_dim(1).map_err(IrError::Invalid)?;
    g.reshape_to(rows, &Shape(vec![it.shape.dim(0).clone(), Dim::Static(groups * entry_dim)]))
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn dot_general_attention_scores_need_one_transpose() {
        // [B, H, S, D]·[B, H, T, D] contracting D: q stays, k becomes [B, H, D, T].
        let out = lower_text(
            r#"%0 = Input(name:"q",ty:(dtype:F32,shape:["B",8,"S",16]))()
            %1 = Input(name:"k",ty:(dtype:F32,shape:["B",8,"T",16]))()
            %2 = DotGeneral(lhs_contracting:[3],rhs_contracting:[3],lhs_batch:[0,1],rhs_batch:[0,1])(%0, %1)
            return %2"#,
            OpKind::DotGeneral,
            &[],
        );
        assert_eq!((count(&out, OpKind::Transpose), count(&out, OpKind::Reshape)), (1, 0), "{out}");
    }

    #[test]
    fn dot_general_flattens_groups_and_restores_the_xla_order() {
        // lhs [2, 3, 4, 5]: batch 3, contract {0, 2}, free {1}; rhs [4, 6, 2, 5, 7]: batch 3,
        // contract {2, 0}, free {1, 4} → out [5, 3, 6, 7].
        let out = lower_text(
            r#"%0 = Input(name:"a",ty:(dtype:F32,shape:[2,3,4,5]))()
            %1 = Input(name:"b",ty:(dtype:F32,shape:[4,6,2,5,7]))()
            %2 = DotGeneral(lhs_contracting:[0,2],rhs_contracting:[2,0],lhs_batch:[3],rhs_batch:[3])(%0, %1)
            %3 = Input(name:"m",ty:(dtype:F32,shape:[3,4]))()
            %4 = Input(name:"n",ty:(dtype:F32,shape:[4,5]))()
            %5 = DotGeneral(lhs_contracting:[1],rhs_contracting:[0],lhs_batch:[],rhs_batch:[])(%3, %4)
            %6 = DotGeneral(lhs_contracting:[],rhs_contracting:[],lhs_batch:[],rhs_batch:[])(%3, %4)
            return %2, %5, %6"#,
            OpKind::DotGeneral,
            &[],
        );
        // The plain matrix product is one MatMul with nothing around it.
        assert_eq!(count(&out, OpKind::MatMul), 3);
    }

    #[test]
    fn matmul_kinds_of_the_ir_sample_lower() {
        let g = rlx_ir::text::parse(include_str!("../../../rlx-ir/tests/data/matmul.rlx")).unwrap();
        let out = lower(&g, &[]);
        for kind in super::KINDS {
            assert_eq!(count(&out, *kind), 0, "{kind} left in\n{out}");
        }
        // GroupedMatMul and SynthReconstruct (also inside SynthMatMul) gather.
        assert_eq!(count(&out, OpKind::Gather), 3);
        // MatMul itself, DotGeneral, GroupedMatMul, three for LoRA, SynthMatMul.
        assert_eq!(count(&out, OpKind::MatMul), 7);
    }
}
