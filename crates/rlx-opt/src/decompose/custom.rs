//! Decompositions of the extension ops (OPS.md §21): a `CustomFn` runs its `fwd_body`, so it
//! inlines (its VJP/JVP bodies matter only to autodiff). `Custom` dispatches to a registered
//! kernel and has no decomposition.

use super::control::inline;
use rlx_ir::{Graph, IrError, Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::CustomFn];

pub fn decompose(op: &Op, g: &mut Graph, x: &[ValueId]) -> Option<Result<Vec<ValueId>, IrError>> {
    match op {
        Op::CustomFn(f) => Some(inline(g, &f.fwd_body, x)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::build::testing::{count, lower_text};
    use rlx_ir::OpKind;

    #[test]
    fn custom_fn_runs_its_forward_body() {
        // The sample also holds a registry `Custom` op, which stays the backend's.
        let src = include_str!("../../../rlx-ir/tests/data/custom.rlx");
        let out = lower_text(src, OpKind::CustomFn, &[OpKind::Custom]);
        assert_eq!(count(&out, OpKind::Binary), 1);
        assert_eq!(count(&out, OpKind::Param), 1);
    }
}
