//! VJP of the Gaussian splat renderer (OPS.md §18): the seed's `GaussianSplatRenderBackward`
//! (§22) with its training-only adjustments switched off, so it is `Render`'s exact gradient.
//! That backward op is listed in `NOT_DIFFERENTIATED`: forward mode and second order through the
//! renderer are refused rather than given a zero tangent.

use super::Vjp;
use crate::Result;
use rlx_ir::ops::splat::GaussianSplatRender;
use rlx_ir::{Op, OpKind, ValueId};

pub const KINDS: &[OpKind] = &[OpKind::GaussianSplatRender];

pub fn vjp(op: &Op, v: &mut Vjp) -> Option<Result<Vec<Option<ValueId>>>> {
    Some(match op {
        Op::GaussianSplatRender(r) => render(r, v),
        _ => return None,
    })
}

/// The six per-splat gradients from `GaussianSplatRenderBackward` with
/// - `loss_grad_clip = ∞`: no pixel's upstream is scaled down;
/// - `max_anisotropy = ∞`: no log-scale is raised, so the covariance is `Render`'s own;
/// - `sh_band = 0`: `Render` shades with the DC coefficient only, so higher SH coefficients
///   get zero, their true gradient.
///
/// What gets none: `meta` (camera and settings; OPS.md §18 "meta: zero", the kernel has no
/// camera gradient) and the alpha channel of `ȳ` (the backward reads RGB only, OPS.md §22: a
/// loss on the rendered alpha passes no gradient through this rule).
fn render(r: &GaussianSplatRender, v: &mut Vjp) -> Result<Vec<Option<ValueId>>> {
    let mut grads = vec![None; v.inputs.len()];
    if !(0..6).any(|i| v.wants(i)) {
        return Ok(grads);
    }
    let attrs = r.backward(f32::INFINITY, 0, f32::INFINITY);
    let dy = v.ct(0)?;
    let scene: [ValueId; 7] = std::array::from_fn(|i| v.inputs[i]);
    let d = v.g.gaussian_splat_render_backward(attrs, scene, dy)?;
    for (i, di) in d.into_iter().enumerate() {
        grads[i] = v.wants(i).then_some(di);
    }
    Ok(grads)
}
