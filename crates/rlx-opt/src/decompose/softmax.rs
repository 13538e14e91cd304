//! Decompositions of the softmax family (OPS.md §11, §22): max-subtracted softmax and
//! log-softmax from `Reduce`/`Binary`/`Activation`, one-hot labels from `Compare` against an
//! iota. The losses work on the class (last) axis.
//!
//! Unlike the kernels, the lowered sparse loss cannot report a label outside `[0, C)`: such a
//! row has an all-zero one-hot and gives loss 0.

use super::reduce::{and, iota, scalar, static_dim, unsqueeze};
use rlx_ir::ops::elementwise::{ActivationKind, BinaryOp, CmpOp};
use rlx_ir::ops::reduce::ReduceOp;
use rlx_ir::{norm_axis, DType, Graph, IrError, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[
    OpKind::Softmax,
    OpKind::SoftmaxCrossEntropy,
    OpKind::SoftmaxCrossEntropyWithLogits,
    OpKind::SoftmaxCrossEntropyBackward,
];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    let out = match op {
        Op::Softmax(a) => norm_axis(a.axis as i64, g.ty(x[0]).rank()).map_err(IrError::Invalid).and_then(|axis| softmax(g, x[0], axis)),
        Op::SoftmaxCrossEntropy(_) => dense(g, x[0], x[1]),
        Op::SoftmaxCrossEntropyWithLogits(a) => sparse(g, x[0], x[1], a.ignore_index),
        Op::SoftmaxCrossEntropyBackward(a) => sparse_grad(g, x[0], x[1], x[2], a.ignore_index),
        _ => return None,
    };
    Some(out.map(|v| vec![v]))
}

/// `x − max(x)` along `axis` (kept).
fn shifted(g: &mut Graph, x: ValueId, axis: usize) -> Result<ValueId, IrError> {
    let m = g.reduce(ReduceOp::Max, x, &[axis], true)?;
    g.binary(BinaryOp::Sub, x, m)
}

/// `Reduce Max(keep)`, `Sub`, `Exp`, `Reduce Sum(keep)`, `Div`.
fn softmax(g: &mut Graph, x: ValueId, axis: usize) -> Result<ValueId, IrError> {
    let d = shifted(g, x, axis)?;
    let e = g.activation(ActivationKind::Exp, d)?;
    let s = g.reduce(ReduceOp::Sum, e, &[axis], true)?;
    g.binary(BinaryOp::Div, e, s)
}

/// `log_softmax` along the last axis: `(x − m) − ln Σ exp(x − m)`.
fn log_softmax(g: &mut Graph, x: ValueId) -> Result<ValueId, IrError> {
    let last = g.ty(x).rank() - 1;
    let d = shifted(g, x, last)?;
    let e = g.activation(ActivationKind::Exp, d)?;
    let s = g.reduce(ReduceOp::Sum, e, &[last], true)?;
    let ls = g.activation(ActivationKind::Log, s)?;
    g.binary(BinaryOp::Sub, d, ls)
}

/// `−Σ_c w·log_softmax(logits)` over the class axis, for weights `w` of the logits' shape.
fn weighted_nll(g: &mut Graph, logits: ValueId, w: ValueId) -> Result<ValueId, IrError> {
    let last = g.ty(logits).rank() - 1;
    let ls = log_softmax(g, logits)?;
    let p = g.binary(BinaryOp::Mul, w, ls)?;
    let s = g.reduce(ReduceOp::Sum, p, &[last], false)?;
    g.activation(ActivationKind::Neg, s)
}

/// Dense targets: the targets are the weights.
fn dense(g: &mut Graph, logits: ValueId, targets: ValueId) -> Result<ValueId, IrError> {
    weighted_nll(g, logits, targets)
}

/// Labels as I64 (F32 ids truncate toward zero, as in the kernels).
fn labels_i64(g: &mut Graph, labels: ValueId) -> Result<ValueId, IrError> {
    if g.ty(labels).dtype == DType::I64 {
        Ok(labels)
    } else {
        g.cast(labels, DType::I64)
    }
}

/// `Cast(Compare(Eq, labels[.., 1], iota(C)))` in the logits' dtype, with the labels as I64.
fn one_hot(g: &mut Graph, logits: ValueId, labels: ValueId) -> Result<(ValueId, ValueId, usize), IrError> {
    let ty = g.ty(logits).clone();
    let c = static_dim(g, logits, ty.rank() - 1, "the class axis must be static")?;
    let lab = labels_i64(g, labels)?;
    let lr = unsqueeze(g, lab, ty.rank() - 1)?;
    let classes = iota(g, c, 0)?;
    let hot = g.compare(CmpOp::Eq, lr, classes)?;
    Ok((g.cast(hot, ty.dtype)?, lab, c))
}

/// Sparse labels: the one-hot rows are the weights; an in-range `ignore_index` is masked
/// (an out-of-range one already has an all-zero one-hot).
fn sparse(g: &mut Graph, logits: ValueId, labels: ValueId, ignore_index: Option<i64>) -> Result<ValueId, IrError> {
    let (hot, lab, c) = one_hot(g, logits, labels)?;
    let loss = weighted_nll(g, logits, hot)?;
    match ignore_index {
        Some(i) if (0..c as i64).contains(&i) => {
            let ii = scalar(g, DType::I64, i as f64)?;
            let keep = g.compare(CmpOp::Ne, lab, ii)?;
            let zero = scalar(g, g.ty(logits).dtype, 0.0)?;
            g.select(keep, loss, zero)
        }
        _ => Ok(loss),
    }
}

/// `(softmax − onehot)·d_loss[.., 1]`, zero in rows whose label is ignored or outside `[0, C)`.
fn sparse_grad(g: &mut Graph, logits: ValueId, labels: ValueId, d_loss: ValueId, ignore_index: Option<i64>) -> Result<ValueId, IrError> {
    let last = g.ty(logits).rank() - 1;
    let dtype = g.ty(logits).dtype;
    let (hot, lab, c) = one_hot(g, logits, labels)?;
    let p = softmax(g, logits, last)?;
    let diff = g.binary(BinaryOp::Sub, p, hot)?;
    let dl = unsqueeze(g, d_loss, last)?;
    let grad = g.binary(BinaryOp::Mul, diff, dl)?;
    let (zero, cc) = (scalar(g, DType::I64, 0.0)?, scalar(g, DType::I64, c as f64)?);
    let ge = g.compare(CmpOp::Ge, lab, zero)?;
    let lt = g.compare(CmpOp::Lt, lab, cc)?;
    let mut valid = and(g, ge, lt)?;
    if let Some(i) = ignore_index {
        let ii = scalar(g, DType::I64, i as f64)?;
        let ne = g.compare(CmpOp::Ne, lab, ii)?;
        valid = and(g, valid, ne)?;
    }
    let valid = unsqueeze(g, valid, last)?;
    let fzero = scalar(g, dtype, 0.0)?;
    g.select(valid, grad, fzero)
}

#[cfg(test)]
mod tests {
    use super::super::reduce::tests::lowered;

    #[test]
    fn softmax_lowers_along_any_axis() {
        let t = lowered(
            "%0 = Input(name:\"x\",ty:(dtype:F16,shape:[\"B\",4,\"S\"]))()
             %1 = Softmax(axis:-2)(%0)
             return %1",
            &[],
            "Softmax",
        );
        assert!(t.contains("Reduce(op:Max,axes:[1],keep_dim:true)") && t.contains("Reduce(op:Sum,axes:[1],keep_dim:true)"), "{t}");
        assert!(t.contains("Binary(op:Div)"), "{t}");
    }

    #[test]
    fn losses_lower_to_log_softmax_and_one_hot() {
        let t = lowered(
            "%0 = Input(name:\"logits\",ty:(dtype:F32,shape:[\"B\",\"S\",11]))()
             %1 = Input(name:\"labels\",ty:(dtype:I32,shape:[\"B\",\"S\"]))()
             %2 = SoftmaxCrossEntropyWithLogits(ignore_index:Some(0))(%0, %1)
             %3 = SoftmaxCrossEntropy()(%0, %0)
             %4 = SoftmaxCrossEntropyBackward(ignore_index:Some(-100))(%0, %1, %2)
             return %2, %3, %4",
            &[],
            "SoftmaxCrossEntropy",
        );
        assert!(t.contains("Cast(to:I64)") && t.contains("Compare(op:Eq)") && t.contains("Activation(kind:Log)"), "{t}");
        assert!(t.contains("Reduce(op:Sum,axes:[2],keep_dim:false)"), "{t}");
    }
}
