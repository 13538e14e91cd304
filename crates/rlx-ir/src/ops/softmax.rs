//! Softmax and cross-entropy losses (OPS.md §11; `SoftmaxCrossEntropyBackward` §22).
//!
//! The losses take logits `[.., C]` (classes on the last axis) and give one loss per row, shaped
//! like the leading axes. OPS.md states them for `[N, C]` and says rows are the flattened leading
//! axes; keeping the leading axes instead (optax's `softmax_cross_entropy*`) is the same buffer,
//! and needs no product of possibly symbolic dims. Callers reshape when they want `[N]`.

use super::{Arity, OpDef};
use crate::{norm_axis, Graph, Shape, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// `exp(x − max)/Σ exp(x − max)` along `axis` (max-subtracted, stable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Softmax {
    /// The normalized axis, Python-style.
    pub axis: i32,
}

/// Cross-entropy against dense (soft) targets: `loss = −Σ_c targets·log_softmax(logits)`
/// (PyTorch `cross_entropy` with probability targets); inputs `(logits [.., C], targets [.., C])`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropy {}

/// Cross-entropy against integer class ids: `loss = logsumexp(logits) − logits[label]`;
/// inputs `(logits [.., C], labels [..])`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropyWithLogits {
    /// Rows with this label give loss 0 and zero gradient (PyTorch's default is −100). Any other
    /// label outside `[0, C)` is a run-time error naming the row.
    #[serde(default)]
    pub ignore_index: Option<i64>,
}

/// Gradient of `SoftmaxCrossEntropyWithLogits` w.r.t. the logits:
/// `(softmax(logits) − onehot(label))·d_loss` per row, zero for rows whose label is outside
/// `[0, C)` or equals `ignore_index`; inputs `(logits, labels, d_loss)`.
///
/// OPS.md gives this op no attributes; it carries the forward's `ignore_index` so that an
/// in-range ignored label (a padding id such as 0) also gets zero gradient.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftmaxCrossEntropyBackward {
    #[serde(default)]
    pub ignore_index: Option<i64>,
}

/// Checks float `logits [.., C]` and returns the row shape (the leading axes).
fn rows(logits: &TensorType) -> Result<Shape, String> {
    if !logits.dtype.is_float() {
        return Err(format!("logits {logits} must be a float tensor"));
    }
    match logits.shape.dims().split_last() {
        Some((_, leading)) => Ok(Shape(leading.to_vec())),
        None => Err(format!("logits {logits} need a class axis")),
    }
}

/// Checks integer `labels` of the row shape (F32-encoded ids are accepted, OPS.md §0).
fn check_labels(labels: &TensorType, logits: &TensorType, rows: &Shape) -> Result<(), String> {
    if !labels.dtype.is_index() {
        return Err(format!("labels {labels} must hold integer class ids"));
    }
    if labels.shape != *rows {
        return Err(format!("labels {labels} must have shape {rows}, the rows of logits {logits}"));
    }
    Ok(())
}

impl OpDef for Softmax {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        if !x.dtype.is_float() {
            return Err(format!("x {x} must be a float tensor"));
        }
        norm_axis(self.axis as i64, x.rank()).map_err(|e| format!("{e} of x {x}"))?;
        Ok(vec![x.clone()])
    }
}

impl OpDef for SoftmaxCrossEntropy {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (logits, targets) = (&inputs[0], &inputs[1]);
        let rows = rows(logits)?;
        if targets != logits {
            return Err(format!("targets {targets} must have the type of logits {logits}"));
        }
        Ok(vec![TensorType::new(logits.dtype, rows)])
    }
}

impl OpDef for SoftmaxCrossEntropyWithLogits {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let logits = &inputs[0];
        let rows = rows(logits)?;
        check_labels(&inputs[1], logits, &rows)?;
        Ok(vec![TensorType::new(logits.dtype, rows)])
    }
}

impl OpDef for SoftmaxCrossEntropyBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let (logits, d_loss) = (&inputs[0], &inputs[2]);
        let rows = rows(logits)?;
        check_labels(&inputs[1], logits, &rows)?;
        let want = TensorType::new(logits.dtype, rows);
        if *d_loss != want {
            return Err(format!("d_loss {d_loss} must be {want}, the loss of logits {logits}"));
        }
        Ok(vec![logits.clone()])
    }
}

/// Builders for the softmax family.
impl Graph {
    /// Softmax of `x` along `axis`.
    pub fn softmax(&mut self, x: ValueId, axis: i32) -> crate::Result<ValueId> {
        self.add1(Softmax { axis }, &[x])
    }

    /// Per-row cross-entropy of `logits` against dense `targets`.
    pub fn softmax_cross_entropy(&mut self, logits: ValueId, targets: ValueId) -> crate::Result<ValueId> {
        self.add1(SoftmaxCrossEntropy {}, &[logits, targets])
    }

    /// Per-row cross-entropy of `logits` against class ids `labels`.
    pub fn softmax_cross_entropy_with_logits(&mut self, logits: ValueId, labels: ValueId, ignore_index: Option<i64>) -> crate::Result<ValueId> {
        self.add1(SoftmaxCrossEntropyWithLogits { ignore_index }, &[logits, labels])
    }

    /// The logits gradient of `softmax_cross_entropy_with_logits` for the upstream `d_loss`.
    pub fn softmax_cross_entropy_backward(
        &mut self,
        logits: ValueId,
        labels: ValueId,
        d_loss: ValueId,
        ignore_index: Option<i64>,
    ) -> crate::Result<ValueId> {
        self.add1(SoftmaxCrossEntropyBackward { ignore_index }, &[logits, labels, d_loss])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Dim};

    fn ty(dtype: DType, dims: &[&str]) -> TensorType {
        let dims = dims.iter().map(|d| d.parse::<usize>().map(Dim::Static).unwrap_or_else(|_| Dim::sym(d)));
        TensorType::new(dtype, Shape(dims.collect()))
    }

    #[test]
    fn losses_keep_the_leading_axes() {
        let mut g = Graph::new();
        let logits = g.input("logits", ty(DType::F32, &["B", "S", "32000"]));
        let labels = g.input("labels", ty(DType::I64, &["B", "S"]));
        let loss = g.softmax_cross_entropy_with_logits(logits, labels, Some(-100)).unwrap();
        assert_eq!(g.ty(loss), &ty(DType::F32, &["B", "S"]));
        let dl = g.softmax_cross_entropy_backward(logits, labels, loss, Some(-100)).unwrap();
        assert_eq!(g.ty(dl), g.ty(logits));
        let soft = g.softmax_cross_entropy(logits, logits).unwrap();
        assert_eq!(g.ty(soft), g.ty(loss));
    }

    #[test]
    fn labels_are_integer_ids_of_the_row_shape() {
        let mut g = Graph::new();
        let logits = g.input("logits", ty(DType::F32, &["N", "10"]));
        let wrong = g.input("l", ty(DType::I32, &["M"]));
        let e = g.softmax_cross_entropy_with_logits(logits, wrong, None).unwrap_err().to_string();
        assert!(e.contains("labels i32[M] must have shape [N], the rows of logits f32[N, 10]"), "{e}");
        let b = g.input("b", ty(DType::Bool, &["N"]));
        assert!(g.softmax_cross_entropy_with_logits(logits, b, None).unwrap_err().to_string().contains("integer class ids"));
        let f = g.input("f", ty(DType::F32, &["N"]));
        assert!(g.softmax_cross_entropy_with_logits(logits, f, None).is_ok());
    }

    #[test]
    fn ignore_index_prints_as_an_option() {
        let mut g = Graph::new();
        let logits = g.input("logits", ty(DType::F32, &["N", "10"]));
        let labels = g.input("labels", ty(DType::I64, &["N"]));
        let loss = g.softmax_cross_entropy_with_logits(logits, labels, Some(-100)).unwrap();
        g.set_outputs(vec![loss]).unwrap();
        assert!(g.to_string().contains("SoftmaxCrossEntropyWithLogits(ignore_index:Some(-100))(%0, %1)"), "{g}");
        let back = crate::text::parse("%0 = SoftmaxCrossEntropyBackward()()").unwrap_err().to_string();
        assert!(back.contains("takes 3 inputs"), "{back}");
    }

    #[test]
    fn softmax_checks_its_axis() {
        let mut g = Graph::new();
        let x = g.input("x", ty(DType::F16, &["B", "12", "S", "S"]));
        assert!(g.softmax(x, -1).is_ok());
        assert!(g.softmax(x, 4).unwrap_err().to_string().contains("axis 4 is out of range for rank 4"));
    }
}
