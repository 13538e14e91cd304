//! 3D Gaussian splatting (OPS.md §18, backward §22): tile-binned, depth-sorted, front-to-back
//! alpha compositing of `N` projected Gaussians into a linear RGBA image with display gamma.
//!
//! The scene is seven flat F32 inputs: `positions [3N]`, `scales [3N]` (log), `rotations [4N]`
//! (xyzw), `opacities [N]` (logits), `colors [3N]`, `sh_coeffs [N·S·3]`, `meta [23]` (camera
//! and render settings as plain float values). Every op carries the rasterizer settings
//! `width … max_list_entries`; splat ops are fusion boundaries.

use super::{Arity, OpDef};
use crate::{DType, Shape, TensorType};
use serde::{Deserialize, Serialize};

/// Renders the scene to `[height·width·4]` RGBA; `≡ Rasterize(Prepare(scene), meta)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatRender {
    pub width: u32,
    pub height: u32,
    pub tile_size: u32,
    pub radius_scale: f32,
    pub alpha_cutoff: f32,
    pub max_splat_steps: u32,
    pub transmittance_threshold: f32,
    pub max_list_entries: u32,
}

impl GaussianSplatRender {
    /// The backward op of this render, with the training adjustments given.
    pub fn backward(&self, loss_grad_clip: f32, sh_band: u32, max_anisotropy: f32) -> GaussianSplatRenderBackward {
        GaussianSplatRenderBackward {
            width: self.width,
            height: self.height,
            tile_size: self.tile_size,
            radius_scale: self.radius_scale,
            alpha_cutoff: self.alpha_cutoff,
            max_splat_steps: self.max_splat_steps,
            transmittance_threshold: self.transmittance_threshold,
            max_list_entries: self.max_list_entries,
            loss_grad_clip,
            sh_band,
            max_anisotropy,
        }
    }
}

/// Gradient of `GaussianSplatRender`: inputs the 7 scene inputs + `d_rgba [H·W·4]` (RGB used);
/// outputs `d(positions, scales, rotations, opacities, colors, sh_coeffs)`, each of its
/// input's type (the multi-output form of the original's packed buffer).
///
/// `loss_grad_clip` clamps the per-pixel upstream magnitude, `sh_band` is the active SH
/// degree, `max_anisotropy` caps the scale ratio in the covariance gradient.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatRenderBackward {
    pub width: u32,
    pub height: u32,
    pub tile_size: u32,
    pub radius_scale: f32,
    pub alpha_cutoff: f32,
    pub max_splat_steps: u32,
    pub transmittance_threshold: f32,
    pub max_list_entries: u32,
    pub loss_grad_clip: f32,
    pub sh_band: u32,
    pub max_anisotropy: f32,
}

/// The projection / binning / sorting stage: the 7 scene inputs → a packed prepare buffer of
/// `15N + max_list_entries + 2·tiles + 3·W·H + 11` floats, whose layout is private to one
/// implementation's Prepare/Rasterize pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatPrepare {
    pub width: u32,
    pub height: u32,
    pub tile_size: u32,
    pub radius_scale: f32,
    pub alpha_cutoff: f32,
    pub max_splat_steps: u32,
    pub transmittance_threshold: f32,
    pub max_list_entries: u32,
}

/// The compositing stage: `(prep, meta)` → `[height·width·4]` RGBA.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GaussianSplatRasterize {
    pub width: u32,
    pub height: u32,
    pub tile_size: u32,
    pub radius_scale: f32,
    pub alpha_cutoff: f32,
    pub max_splat_steps: u32,
    pub transmittance_threshold: f32,
    pub max_list_entries: u32,
}

/// Length of `meta`.
const META_LEN: usize = 23;

/// A bound on `width·height` that keeps every buffer length far from overflow.
const MAX_PIXELS: usize = 1 << 40;

/// The rasterizer settings every splat op carries.
struct Raster {
    width: u32,
    height: u32,
    tile_size: u32,
    radius_scale: f32,
    alpha_cutoff: f32,
    max_splat_steps: u32,
    transmittance_threshold: f32,
    max_list_entries: u32,
}

macro_rules! raster_of {
    ($op:expr) => {
        Raster {
            width: $op.width,
            height: $op.height,
            tile_size: $op.tile_size,
            radius_scale: $op.radius_scale,
            alpha_cutoff: $op.alpha_cutoff,
            max_splat_steps: $op.max_splat_steps,
            transmittance_threshold: $op.transmittance_threshold,
            max_list_entries: $op.max_list_entries,
        }
    };
}

impl Raster {
    fn check(&self) -> Result<(), String> {
        let counts = [
            ("width", self.width),
            ("height", self.height),
            ("tile_size", self.tile_size),
            ("max_splat_steps", self.max_splat_steps),
            ("max_list_entries", self.max_list_entries),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.pixels() > MAX_PIXELS {
            return Err(format!("a {}×{} image exceeds {MAX_PIXELS} pixels", self.width, self.height));
        }
        if !(self.radius_scale > 0.0 && self.radius_scale.is_finite()) {
            return Err(format!("radius_scale {} must be positive and finite", self.radius_scale));
        }
        for (name, v) in [("alpha_cutoff", self.alpha_cutoff), ("transmittance_threshold", self.transmittance_threshold)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} {v} must lie in [0, 1]"));
            }
        }
        Ok(())
    }

    fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// The RGBA image `[H·W·4]`.
    fn image(&self) -> TensorType {
        TensorType::of(DType::F32, &[self.pixels() * 4])
    }

    /// Length of the prepare buffer without its `15N` per-splat part.
    fn prep_fixed(&self) -> usize {
        let tiles = |n: u32| n.div_ceil(self.tile_size) as usize;
        self.max_list_entries as usize + 2 * tiles(self.width) * tiles(self.height) + 3 * self.pixels() + 11
    }
}

/// Checks that `t` is the flat F32 vector `[len]`.
fn flat(name: &str, t: &TensorType, len: usize, what: &str) -> Result<(), String> {
    if t.dtype != DType::F32 || t.shape != Shape::of(&[len]) {
        return Err(format!("{name} {t} must be f32[{len}] ({what})"));
    }
    Ok(())
}

/// Checks the 7 scene inputs; returns `(N, S)`.
fn check_scene(inputs: &[TensorType]) -> Result<(usize, usize), String> {
    let opacities = &inputs[3];
    if opacities.rank() != 1 {
        return Err(format!("opacities {opacities} must be f32[N]"));
    }
    let n = opacities.static_dim(0)?;
    if n.checked_mul(15).is_none_or(|v| v > usize::MAX / 2) {
        return Err(format!("{n} splats overflow the buffer sizes"));
    }
    for (i, (name, per)) in [("positions", 3), ("scales", 3), ("rotations", 4), ("opacities", 1), ("colors", 3)].into_iter().enumerate() {
        flat(name, &inputs[i], per * n, &format!("{per}·N for N = {n} splats"))?;
    }
    let sh = &inputs[5];
    let sh_len = match (sh.dtype, sh.shape.as_static().as_deref()) {
        (DType::F32, Some([len])) => *len,
        _ => return Err(format!("sh_coeffs {sh} must be f32[N·S·3]")),
    };
    let s = match (n, sh_len) {
        (0, 0) => 0,
        (0, _) => return Err(format!("sh_coeffs {sh} must be empty for an empty scene")),
        (n, len) if len % (3 * n) == 0 => len / (3 * n),
        (n, _) => return Err(format!("sh_coeffs {sh} must be f32[N·S·3], a multiple of 3·N = {}", 3 * n)),
    };
    flat("meta", &inputs[6], META_LEN, "camera and render settings")?;
    Ok((n, s))
}

impl OpDef for GaussianSplatRender {
    fn arity(&self) -> Arity {
        Arity::Exact(7)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let r = raster_of!(self);
        r.check()?;
        check_scene(inputs)?;
        Ok(vec![r.image()])
    }
}

impl OpDef for GaussianSplatRenderBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(8)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let r = raster_of!(self);
        r.check()?;
        if self.loss_grad_clip.is_nan() || self.loss_grad_clip <= 0.0 {
            return Err(format!("loss_grad_clip {} must be positive", self.loss_grad_clip));
        }
        if self.max_anisotropy.is_nan() || self.max_anisotropy < 1.0 {
            return Err(format!("max_anisotropy {} must be at least 1", self.max_anisotropy));
        }
        let (_, s) = check_scene(inputs)?;
        let need = (self.sh_band as usize + 1).pow(2);
        if s > 0 && need > s {
            return Err(format!("sh_band {} needs {need} SH coefficients per splat, the scene has {s}", self.sh_band));
        }
        flat("d_rgba", &inputs[7], r.pixels() * 4, "the rendered image's cotangent")?;
        Ok(inputs[..6].to_vec())
    }
}

impl OpDef for GaussianSplatPrepare {
    fn arity(&self) -> Arity {
        Arity::Exact(7)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let r = raster_of!(self);
        r.check()?;
        let (n, _) = check_scene(inputs)?;
        Ok(vec![TensorType::of(DType::F32, &[15 * n + r.prep_fixed()])])
    }
}

impl OpDef for GaussianSplatRasterize {
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let r = raster_of!(self);
        r.check()?;
        let prep = &inputs[0];
        let fixed = r.prep_fixed();
        let ok = match (prep.dtype, prep.shape.as_static().as_deref()) {
            (DType::F32, Some([len])) => *len >= fixed && (len - fixed) % 15 == 0,
            _ => false,
        };
        if !ok {
            return Err(format!(
                "prep {prep} must be f32[15·N + {fixed}], a prepare buffer for these settings"
            ));
        }
        flat("meta", &inputs[1], META_LEN, "camera and render settings")?;
        Ok(vec![r.image()])
    }
}

/// Builders for the splat family; `scene` is `[positions, scales, rotations, opacities,
/// colors, sh_coeffs, meta]`.
impl crate::Graph {
    /// Renders the scene to RGBA.
    pub fn gaussian_splat_render(&mut self, attrs: GaussianSplatRender, scene: [crate::ValueId; 7]) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &scene)
    }

    /// Gradients of a render w.r.t. the six per-splat inputs, from `d_rgba`.
    pub fn gaussian_splat_render_backward(
        &mut self,
        attrs: GaussianSplatRenderBackward,
        scene: [crate::ValueId; 7],
        d_rgba: crate::ValueId,
    ) -> crate::Result<Vec<crate::ValueId>> {
        let mut ins = scene.to_vec();
        ins.push(d_rgba);
        let id = self.add(attrs, &ins)?;
        Ok((0..6).map(|i| crate::ValueId::new(id, i)).collect())
    }

    /// The prepare stage: projection, binning and sorting into a packed buffer.
    pub fn gaussian_splat_prepare(&mut self, attrs: GaussianSplatPrepare, scene: [crate::ValueId; 7]) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &scene)
    }

    /// The compositing stage over a prepare buffer.
    pub fn gaussian_splat_rasterize(&mut self, attrs: GaussianSplatRasterize, prep: crate::ValueId, meta: crate::ValueId) -> crate::Result<crate::ValueId> {
        self.add1(attrs, &[prep, meta])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, ValueId};

    fn render() -> GaussianSplatRender {
        GaussianSplatRender {
            width: 64,
            height: 48,
            tile_size: 16,
            radius_scale: 3.0,
            alpha_cutoff: 1.0 / 255.0,
            max_splat_steps: 256,
            transmittance_threshold: 1e-4,
            max_list_entries: 4096,
        }
    }

    fn scene(g: &mut Graph, n: usize, s: usize) -> [ValueId; 7] {
        let mut v = |name: &str, len: usize| g.input(name, TensorType::of(DType::F32, &[len]));
        [
            v("pos", 3 * n),
            v("scale", 3 * n),
            v("rot", 4 * n),
            v("opa", n),
            v("col", 3 * n),
            v("sh", n * s * 3),
            v("meta", META_LEN),
        ]
    }

    #[test]
    fn render_prepare_rasterize_agree() {
        let mut g = Graph::new();
        let sc = scene(&mut g, 100, 16);
        let img = g.gaussian_splat_render(render(), sc).unwrap();
        assert_eq!(g.ty(img), &TensorType::of(DType::F32, &[64 * 48 * 4]));
        let r = render();
        let prep_attrs = GaussianSplatPrepare {
            width: r.width,
            height: r.height,
            tile_size: r.tile_size,
            radius_scale: r.radius_scale,
            alpha_cutoff: r.alpha_cutoff,
            max_splat_steps: r.max_splat_steps,
            transmittance_threshold: r.transmittance_threshold,
            max_list_entries: r.max_list_entries,
        };
        let prep = g.gaussian_splat_prepare(prep_attrs, sc).unwrap();
        // 15·100 + 4096 + 2·(4·3) + 3·3072 + 11
        assert_eq!(g.ty(prep), &TensorType::of(DType::F32, &[1500 + 4096 + 24 + 9216 + 11]));
        let rast = GaussianSplatRasterize {
            width: r.width,
            height: r.height,
            tile_size: r.tile_size,
            radius_scale: r.radius_scale,
            alpha_cutoff: r.alpha_cutoff,
            max_splat_steps: r.max_splat_steps,
            transmittance_threshold: r.transmittance_threshold,
            max_list_entries: r.max_list_entries,
        };
        let out = g.gaussian_splat_rasterize(rast.clone(), prep, sc[6]).unwrap();
        assert_eq!(g.ty(out), g.ty(img));
        let e = g.gaussian_splat_rasterize(GaussianSplatRasterize { tile_size: 8, ..rast }, prep, sc[6]);
        assert!(e.unwrap_err().to_string().contains("must be f32[15·N + "));
    }

    #[test]
    fn backward_returns_one_gradient_per_splat_input() {
        let mut g = Graph::new();
        let sc = scene(&mut g, 10, 4);
        let r = render();
        let attrs = r.backward(1.0, 1, 10.0);
        let d = g.input("d", TensorType::of(DType::F32, &[64 * 48 * 4]));
        let grads = g.gaussian_splat_render_backward(attrs.clone(), sc, d).unwrap();
        assert_eq!(grads.len(), 6);
        for (gr, x) in grads.iter().zip(sc) {
            assert_eq!(g.ty(*gr), g.ty(x));
        }
        let e = g.gaussian_splat_render_backward(GaussianSplatRenderBackward { sh_band: 2, ..attrs }, sc, d);
        assert!(e.unwrap_err().to_string().contains("sh_band 2 needs 9 SH coefficients per splat, the scene has 4"));
    }

    #[test]
    fn scene_lengths_must_agree_with_opacities() {
        let mut g = Graph::new();
        let mut sc = scene(&mut g, 10, 1);
        sc[2] = g.input("rot_bad", TensorType::of(DType::F32, &[30]));
        let e = g.gaussian_splat_render(render(), sc).unwrap_err().to_string();
        assert!(e.contains("rotations f32[30] must be f32[40] (4·N for N = 10 splats)"), "{e}");
        let sc = scene(&mut g, 10, 1);
        let e = g.gaussian_splat_render(GaussianSplatRender { alpha_cutoff: 2.0, ..render() }, sc).unwrap_err();
        assert!(e.to_string().contains("alpha_cutoff 2 must lie in [0, 1]"), "{e}");
    }
}
