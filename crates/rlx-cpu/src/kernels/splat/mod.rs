//! 3D Gaussian splatting (OPS.md §18; backward §22): the rasterizer of Kerbl et al. 2023,
//! computed in f64 from the F32 scene and rounded to F32 once.
//!
//! Scene (flat F32, `N` splats): `positions [3N]`, `scales [3N]` (log), `rotations [4N]`
//! (quaternion x, y, z, w; normalized here), `opacities [N]` (logits), `colors [3N]` (linear
//! RGB), `sh_coeffs [N·S·3]` (coefficient-major, RGB last), `meta [23]` (camera and settings,
//! see `camera.rs`). Output `[H·W·4]`, row-major pixels of `(R, G, B, A)`.
//!
//! Pipeline (`camera.rs`, `project.rs`, `raster.rs`; the backward's chain rule in `backward.rs`):
//! 1. camera from `meta` (look-at, OpenCV axes: x right, y down, z forward; pixel `(x, y)` sits
//!    at integer coordinates, principal point `((W−1)/2, (H−1)/2)`, square pixels);
//! 2. per splat: visible iff `near < t_z < far`; `Σ = R·S·Sᵀ·Rᵀ`, `Σ' = J·V·Σ·Vᵀ·Jᵀ + 0.3·I`
//!    (the paper's EWA projection and its 0.3 px² low-pass dilation, without opacity
//!    compensation, as the reference implementation does; `J` is taken at `t_x/t_z`, `t_y/t_z`
//!    clamped to ±1.3·tan(half fov), as there too); `conic = Σ'⁻¹`; screen radius
//!    `ceil(radius_scale·√λ_max(Σ'))`; opacity `sigmoid(logit)`;
//! 3. tile rectangles and (tile, depth) pairs, at most `max_list_entries`, stably sorted;
//! 4. per pixel, front to back over its tile's list: `α = min(0.99, o·exp(−½·dᵀ·conic·d))`,
//!    skip `α < alpha_cutoff`, stop before a splat that would take the transmittance below
//!    `transmittance_threshold` and after `max_splat_steps` list entries;
//!    `C = Σ c·α·T + T_final·background`; out `(sRGB(C), 1 − T_final)`.
//!
//! Colour: `c = max(colors + Σ_k Y_k(dir)·sh[k], 0)` with `dir = normalize(position − eye)` and
//! the reference implementation's real SH basis; `Render` (and Prepare) use band 0 only (the DC
//! term `0.2821·sh[0]`, which is why autodiff's default `sh_band` is 0); the backward re-runs
//! the forward with bands `0..=sh_band` (degree ≤ 3). A scene without SH (`S = 0`) uses
//! `colors` alone. Display gamma is the sRGB transfer curve (IEC 61966-2-1): its linear toe
//! keeps the gradient finite at black, which a pure power curve would not.
//!
//! Data errors (`Err`, never a panic): non-finite scene or `meta` values, `meta` settings that
//! disagree with the op's attributes (they fix the output size), a degenerate camera (eye on
//! the target, `up` along the view, fov outside (0°, 180°), `near ≤ 0` or `far ≤ near`), a
//! zero quaternion, a projection that overflows, and more tile-splat pairs than
//! `max_list_entries` (the renderer does not drop splats silently).
//!
//! `Render` is a kernel rather than the decomposition `Rasterize(Prepare(·))`: both stages are
//! native here anyway, and the fused kernel keeps the intermediates in f64 instead of packing
//! them into an F32 buffer of `15N + max_list_entries + 2·tiles + 3·W·H + 11` floats. The two
//! agree up to that rounding (`pack.rs` has the buffer layout).

mod backward;
mod camera;
mod pack;
mod project;
mod raster;

use crate::view::{In, Out};
use camera::Camera;
use rlx_ir::ops::splat::{GaussianSplatPrepare, GaussianSplatRasterize, GaussianSplatRender, GaussianSplatRenderBackward};

/// The rasterizer settings every splat op carries, as the kernels use them.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub width: usize,
    pub height: usize,
    pub tile: usize,
    pub radius_scale: f64,
    pub alpha_cutoff: f64,
    pub max_steps: usize,
    pub t_min: f64,
    pub max_list: usize,
    /// The attributes as `meta[15..23]` must repeat them.
    attrs: [f32; 8],
}

macro_rules! settings {
    ($a:expr) => {
        Settings {
            width: $a.width as usize,
            height: $a.height as usize,
            tile: $a.tile_size as usize,
            radius_scale: $a.radius_scale as f64,
            alpha_cutoff: $a.alpha_cutoff as f64,
            max_steps: $a.max_splat_steps as usize,
            t_min: $a.transmittance_threshold as f64,
            max_list: $a.max_list_entries as usize,
            attrs: [
                $a.width as f32,
                $a.height as f32,
                $a.tile_size as f32,
                $a.radius_scale,
                $a.alpha_cutoff,
                $a.max_splat_steps as f32,
                $a.transmittance_threshold,
                $a.max_list_entries as f32,
            ],
        }
    };
}

impl Settings {
    pub fn tiles_x(&self) -> usize {
        self.width.div_ceil(self.tile)
    }

    pub fn tiles_y(&self) -> usize {
        self.height.div_ceil(self.tile)
    }

    pub fn pixels(&self) -> usize {
        self.width * self.height
    }
}

/// The six per-splat inputs; `k` SH coefficients per splat and colour channel.
#[derive(Clone, Copy)]
pub struct Scene<'a> {
    pub n: usize,
    pub k: usize,
    pub positions: &'a [f32],
    pub scales: &'a [f32],
    pub rotations: &'a [f32],
    pub opacities: &'a [f32],
    pub colors: &'a [f32],
    pub sh: &'a [f32],
}

const SCENE_NAMES: [&str; 6] = ["positions", "scales", "rotations", "opacities", "colors", "sh_coeffs"];

/// Errs on the first non-finite element of `x`, naming it.
fn finite(name: &str, x: &[f32]) -> Result<(), String> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(format!("{name}[{i}] = {} must be finite", x[i])),
        None => Ok(()),
    }
}

/// The scene of `ins[..6]`, every value finite.
fn scene<'a>(ins: &[In<'a>]) -> Result<Scene<'a>, String> {
    let v: Vec<&'a [f32]> = ins[..6].iter().map(|i| i.get::<f32>()).collect();
    for (name, x) in SCENE_NAMES.iter().zip(&v) {
        finite(name, x)?;
    }
    let n = v[3].len();
    let k = if n == 0 { 0 } else { v[5].len() / (3 * n) };
    Ok(Scene { n, k, positions: v[0], scales: v[1], rotations: v[2], opacities: v[3], colors: v[4], sh: v[5] })
}

/// `GaussianSplatRender`: the 7 scene inputs → `[H·W·4]` RGBA (see the module doc).
pub fn gaussian_splat_render(a: &GaussianSplatRender, ins: &[In], out: &mut Out) -> Result<(), String> {
    let s = settings!(a);
    let cam = Camera::from_meta(ins[6].get::<f32>(), &s)?;
    let sc = scene(ins)?;
    let splats = project::project(&sc, &cam, &s, project::Shading::Render)?;
    let bins = raster::bin(&splats, &s)?;
    raster::render(&splats, &bins, &cam.background, &s, out.get::<f32>());
    Ok(())
}

/// `GaussianSplatPrepare`: the 7 scene inputs → the prepare buffer (layout in `pack.rs`).
pub fn gaussian_splat_prepare(a: &GaussianSplatPrepare, ins: &[In], out: &mut Out) -> Result<(), String> {
    let s = settings!(a);
    let cam = Camera::from_meta(ins[6].get::<f32>(), &s)?;
    let sc = scene(ins)?;
    let splats = project::project(&sc, &cam, &s, project::Shading::Render)?;
    let bins = raster::bin(&splats, &s)?;
    pack::write(&splats, &bins, &s, out.get::<f32>())
}

/// `GaussianSplatRasterize`: `(prep, meta)` → `[H·W·4]` RGBA; `prep` must come from
/// `GaussianSplatPrepare` with the same attributes (its header and indices are checked).
pub fn gaussian_splat_rasterize(a: &GaussianSplatRasterize, ins: &[In], out: &mut Out) -> Result<(), String> {
    let s = settings!(a);
    let cam = Camera::from_meta(ins[1].get::<f32>(), &s)?;
    let (splats, bins) = pack::read(ins[0].get::<f32>(), &s)?;
    raster::render(&splats, &bins, &cam.background, &s, out.get::<f32>());
    Ok(())
}

/// `GaussianSplatRenderBackward`: the 7 scene inputs and `d_rgba [H·W·4]` → the gradients of
/// the six per-splat inputs (`meta` gets none). It differentiates the forward re-run with
///
/// - `loss_grad_clip`: each pixel's upstream RGB vector scaled down to at most this L2 norm
///   (`d_rgba`'s alpha channel is ignored: the loss sees the RGB image);
/// - `sh_band`: SH bands `0..=sh_band` shaping the colour (band 0 is `Render` itself; at most
///   degree 3); coefficients above the band get zero gradient;
/// - `max_anisotropy`: each splat's log-scales raised to at least `max(log-scales) −
///   ln(max_anisotropy)` before the covariance is built, so no axis is more than
///   `max_anisotropy` times shorter than the longest; a raised axis passes its gradient to the
///   longest one. Splats within the ratio see `Render`'s exact gradient.
///
/// Every discrete decision (visibility, radius, tiles, order, alpha and transmittance tests,
/// the 0.99 alpha clamp, the colour clamp) is held fixed and its branch differentiated: a
/// clamped alpha or colour channel passes no gradient.
pub fn gaussian_splat_render_backward(a: &GaussianSplatRenderBackward, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let s = settings!(a);
    let cam = Camera::from_meta(ins[6].get::<f32>(), &s)?;
    let sc = scene(ins)?;
    let d_rgba = ins[7].get::<f32>();
    if let Some(i) = (0..d_rgba.len()).find(|&i| i % 4 != 3 && !d_rgba[i].is_finite()) {
        return Err(format!("d_rgba[{i}] = {} must be finite", d_rgba[i]));
    }
    if a.sh_band > 3 {
        return Err(format!("sh_band {} is above degree 3, the highest SH degree this kernel evaluates", a.sh_band));
    }
    let shading = project::Shading::Train { band: a.sh_band as usize, max_anisotropy: a.max_anisotropy as f64 };
    let splats = project::project(&sc, &cam, &s, shading)?;
    let bins = raster::bin(&splats, &s)?;
    let screen = raster::backward(&splats, &bins, &cam.background, &s, d_rgba, a.loss_grad_clip as f64);
    let grads = backward::scene_gradients(&sc, &cam, shading, &splats, &screen)?;
    for (out, g) in outs.iter_mut().zip(&grads) {
        for (o, v) in out.get::<f32>().iter_mut().zip(g) {
            *o = *v as f32;
        }
    }
    Ok(())
}
