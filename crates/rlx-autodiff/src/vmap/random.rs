//! Random draws: a batched template (its values are ignored) gives one draw of the
//! per-example shape, broadcast along the batch axis: what each example of a loop draws with
//! the same key, as `jax.vmap` shares an unbatched key.

use super::Batch;
use crate::Result;
use rlx_ir::ops::random::{RngNormal, RngUniform};
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::RngNormal, OpKind::RngUniform];

pub fn rule(op: &Op, b: &mut Batch) -> Option<Result<Vec<ValueId>>> {
    let shape = Some(b.out(0).shape.clone());
    let op: Op = match op {
        Op::RngNormal(r) => RngNormal { shape, ..r.clone() }.into(),
        Op::RngUniform(r) => RngUniform { shape, ..r.clone() }.into(),
        _ => return None,
    };
    Some((|| {
        let y = b.apply(op, &[])?[0];
        Ok(vec![super::broadcast(b.g, b.size, y)?])
    })())
}
