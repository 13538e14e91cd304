//! Per-splat projection to the screen (EWA splatting) and colour from SH.

use super::camera::{dot, sub, Camera};
use super::{Scene, Settings};

/// What shapes the colour and covariance: `Render` (band 0, raw scales) or the backward's
/// re-run forward (bands `0..=band`, scales capped at `max_anisotropy`).
#[derive(Clone, Copy, Debug)]
pub enum Shading {
    Render,
    Train { band: usize, max_anisotropy: f64 },
}

impl Shading {
    /// SH coefficients per channel this shading reads from a scene with `k` of them.
    pub fn coefficients(self, k: usize) -> usize {
        let band = match self {
            Shading::Render => 0,
            Shading::Train { band, .. } => band,
        };
        if k == 0 { 0 } else { ((band + 1) * (band + 1)).min(k) }
    }

    fn max_anisotropy(self) -> Option<f64> {
        match self {
            Shading::Render => None,
            Shading::Train { max_anisotropy, .. } => Some(max_anisotropy),
        }
    }
}

/// A projected splat; culled ones have `radius == 0` and are never binned.
#[derive(Clone, Copy, Debug, Default)]
pub struct Splat {
    /// Pixel coordinates of the centre.
    pub mean: [f64; 2],
    pub depth: f64,
    pub radius: f64,
    /// The inverse screen covariance `[[a, b], [b, c]]` as `(a, b, c)`.
    pub conic: [f64; 3],
    pub opacity: f64,
    pub color: [f64; 3],
    /// Tiles `x0..x1` × `y0..y1` as `[x0, y0, x1, y1]`.
    pub rect: [usize; 4],
}

impl Splat {
    pub fn visible(&self) -> bool {
        self.radius > 0.0
    }

    /// `exp(−½·dᵀ·conic·d)` with `d = mean − p`.
    pub fn gauss(&self, p: [f64; 2]) -> f64 {
        let (dx, dy) = (self.mean[0] - p[0], self.mean[1] - p[1]);
        let [a, b, c] = self.conic;
        (-0.5 * (a * dx * dx + c * dy * dy) - b * dx * dy).exp()
    }
}

/// The intermediates of one visible splat's projection, for the forward and the backward.
pub struct Geometry {
    /// Per axis, the log-scale axis it was taken from (itself, or the longest when raised to
    /// the anisotropy cap).
    pub scale_source: [usize; 3],
    pub scale: [f64; 3],
    /// The normalized quaternion (x, y, z, w) and the input's norm.
    pub quat: [f64; 4],
    pub quat_norm: f64,
    pub rot: [[f64; 3]; 3],
    pub sigma: [[f64; 3]; 3],
    /// Camera coordinates of the centre.
    pub t: [f64; 3],
    /// `t_x/t_z`, `t_y/t_z` clamped to the camera's limits, and whether each was inside them.
    pub u: [f64; 2],
    pub u_free: [bool; 2],
    /// `J·V`: the Jacobian of the perspective projection times the view rotation.
    pub jv: [[f64; 3]; 2],
    /// The dilated screen covariance `(a, b, c)`.
    pub cov: [f64; 3],
}

/// The rotation matrix of a unit quaternion (x, y, z, w).
pub fn rotation([x, y, z, w]: [f64; 4]) -> [[f64; 3]; 3] {
    [
        [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
        [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
        [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
    ]
}

/// Splat `i`'s geometry, or `None` when it lies outside `near < t_z < far`.
pub fn geometry(sc: &Scene, i: usize, cam: &Camera, shading: Shading) -> Result<Option<Geometry>, String> {
    let f = |x: &[f32], j: usize| x[j] as f64;
    let pos = [f(sc.positions, 3 * i), f(sc.positions, 3 * i + 1), f(sc.positions, 3 * i + 2)];
    let t = cam.to_camera(pos);
    if !(t[2] > cam.near && t[2] < cam.far) {
        return Ok(None);
    }
    let q = [0, 1, 2, 3].map(|j| f(sc.rotations, 4 * i + j));
    let quat_norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    if quat_norm == 0.0 {
        return Err(format!("rotations[{}..{}] of splat {i} is the zero quaternion", 4 * i, 4 * i + 4));
    }
    let quat = q.map(|v| v / quat_norm);
    let log = [0, 1, 2].map(|j| f(sc.scales, 3 * i + j));
    let mut scale_source = [0, 1, 2];
    let mut eff = log;
    if let Some(ratio) = shading.max_anisotropy() {
        let top = (0..3).fold(0, |m, j| if log[j] > log[m] { j } else { m });
        let floor = log[top] - ratio.ln();
        for j in 0..3 {
            if log[j] < floor {
                eff[j] = floor;
                scale_source[j] = top;
            }
        }
    }
    let scale = eff.map(f64::exp);
    let rot = rotation(quat);
    let m = rot.map(|row| [row[0] * scale[0], row[1] * scale[1], row[2] * scale[2]]);
    let sigma = [0, 1, 2].map(|r| [0, 1, 2].map(|c| dot(m[r], m[c])));
    let u = [(t[0] / t[2]).clamp(-cam.lim_x, cam.lim_x), (t[1] / t[2]).clamp(-cam.lim_y, cam.lim_y)];
    let u_free = [(t[0] / t[2]).abs() <= cam.lim_x, (t[1] / t[2]).abs() <= cam.lim_y];
    let j = [[cam.fx / t[2], 0.0, -cam.fx * u[0] / t[2]], [0.0, cam.fy / t[2], -cam.fy * u[1] / t[2]]];
    let v = cam.view;
    let jv = [0, 1].map(|r| [0, 1, 2].map(|c| j[r][0] * v[0][c] + j[r][1] * v[1][c] + j[r][2] * v[2][c]));
    let sj = [0, 1].map(|r| [0, 1, 2].map(|c| dot(sigma[c], jv[r])));
    let cov = [dot(jv[0], sj[0]) + 0.3, dot(jv[0], sj[1]), dot(jv[1], sj[1]) + 0.3];
    Ok(Some(Geometry { scale_source, scale, quat, quat_norm, rot, sigma, t, u, u_free, jv, cov }))
}

/// Tiles `lo..hi` a centre `m` with radius `r` touches on one axis (the reference's
/// `floor((m − r)/T)`, `floor((m + r + T − 1)/T)` clamped to the grid).
fn span(m: f64, r: f64, tile: usize, tiles: usize) -> [usize; 2] {
    let (t, g) = (tile as f64, tiles as f64);
    [((m - r) / t).floor().clamp(0.0, g) as usize, ((m + r + t - 1.0) / t).floor().clamp(0.0, g) as usize]
}

/// The normalized view direction `(p − eye)/|p − eye|` of splat `i` and that length.
pub fn direction(sc: &Scene, i: usize, cam: &Camera) -> ([f64; 3], f64) {
    let p = [0, 1, 2].map(|j| sc.positions[3 * i + j] as f64);
    let d = sub(p, cam.eye);
    let len = dot(d, d).sqrt();
    (if len > 0.0 { d.map(|v| v / len) } else { [0.0; 3] }, len)
}

/// `colors + Σ_k Y_k(dir)·sh[k]` of splat `i` over the first `kk` coefficients (before the clamp).
pub fn raw_color(sc: &Scene, i: usize, cam: &Camera, kk: usize) -> [f64; 3] {
    let mut c = [0, 1, 2].map(|ch| sc.colors[3 * i + ch] as f64);
    if kk > 0 {
        let basis = sh_basis(direction(sc, i, cam).0);
        for (k, y) in basis.iter().enumerate().take(kk) {
            for (ch, v) in c.iter_mut().enumerate() {
                *v += y * sc.sh[(i * sc.k + k) * 3 + ch] as f64;
            }
        }
    }
    c
}

/// Projects every splat (culled ones as `Splat::default()`).
pub fn project(sc: &Scene, cam: &Camera, s: &Settings, shading: Shading) -> Result<Vec<Splat>, String> {
    let kk = shading.coefficients(sc.k);
    (0..sc.n)
        .map(|i| {
            let Some(g) = geometry(sc, i, cam, shading)? else { return Ok(Splat::default()) };
            let [a, b, c] = g.cov;
            let det = a * c - b * b;
            let mean = [cam.fx * g.t[0] / g.t[2] + cam.cx, cam.fy * g.t[1] / g.t[2] + cam.cy];
            let mid = (a + c) / 2.0;
            let radius = (s.radius_scale * (mid + (mid * mid - det).max(0.1).sqrt()).sqrt()).ceil();
            let conic = [c / det, -b / det, a / det];
            if !(radius.is_finite() && conic.iter().chain(&mean).all(|v| v.is_finite())) {
                return Err(format!("splat {i}: its screen covariance overflows (scales {:?})", &sc.scales[3 * i..3 * i + 3]));
            }
            let [x0, x1] = span(mean[0], radius, s.tile, s.tiles_x());
            let [y0, y1] = span(mean[1], radius, s.tile, s.tiles_y());
            if x0 == x1 || y0 == y1 {
                return Ok(Splat::default());
            }
            Ok(Splat {
                mean,
                depth: g.t[2],
                radius,
                conic,
                opacity: 1.0 / (1.0 + (-(sc.opacities[i] as f64)).exp()),
                color: raw_color(sc, i, cam, kk).map(|v| v.max(0.0)),
                rect: [x0, y0, x1, y1],
            })
        })
        .collect()
}

const C0: f64 = 0.282_094_791_773_878_14;
const C1: f64 = 0.488_602_511_902_919_9;
const C2: [f64; 5] = [1.092_548_430_592_079_2, -1.092_548_430_592_079_2, 0.315_391_565_252_520_05, -1.092_548_430_592_079_2, 0.546_274_215_296_039_6];
const C3: [f64; 7] = [
    -0.590_043_589_926_643_5,
    2.890_611_442_640_554,
    -0.457_045_799_464_465_8,
    0.373_176_332_590_115_4,
    -0.457_045_799_464_465_8,
    1.445_305_721_320_277,
    -0.590_043_589_926_643_5,
];

/// The real SH basis of degree ≤ 3 at direction `d`, in the reference implementation's order
/// and signs.
pub fn sh_basis([x, y, z]: [f64; 3]) -> [f64; 16] {
    let (xx, yy, zz) = (x * x, y * y, z * z);
    [
        C0,
        -C1 * y,
        C1 * z,
        -C1 * x,
        C2[0] * x * y,
        C2[1] * y * z,
        C2[2] * (2.0 * zz - xx - yy),
        C2[3] * x * z,
        C2[4] * (xx - yy),
        C3[0] * y * (3.0 * xx - yy),
        C3[1] * x * y * z,
        C3[2] * y * (4.0 * zz - xx - yy),
        C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
        C3[4] * x * (4.0 * zz - xx - yy),
        C3[5] * z * (xx - yy),
        C3[6] * x * (xx - 3.0 * yy),
    ]
}

/// `∂ sh_basis[k] / ∂(x, y, z)` for every `k`.
pub fn sh_basis_grad([x, y, z]: [f64; 3]) -> [[f64; 3]; 16] {
    let (xx, yy, zz) = (x * x, y * y, z * z);
    [
        [0.0, 0.0, 0.0],
        [0.0, -C1, 0.0],
        [0.0, 0.0, C1],
        [-C1, 0.0, 0.0],
        [C2[0] * y, C2[0] * x, 0.0],
        [0.0, C2[1] * z, C2[1] * y],
        [-2.0 * C2[2] * x, -2.0 * C2[2] * y, 4.0 * C2[2] * z],
        [C2[3] * z, 0.0, C2[3] * x],
        [2.0 * C2[4] * x, -2.0 * C2[4] * y, 0.0],
        [6.0 * C3[0] * x * y, C3[0] * (3.0 * xx - 3.0 * yy), 0.0],
        [C3[1] * y * z, C3[1] * x * z, C3[1] * x * y],
        [-2.0 * C3[2] * x * y, C3[2] * (4.0 * zz - xx - 3.0 * yy), 8.0 * C3[2] * y * z],
        [-6.0 * C3[3] * x * z, -6.0 * C3[3] * y * z, C3[3] * (6.0 * zz - 3.0 * xx - 3.0 * yy)],
        [C3[4] * (4.0 * zz - 3.0 * xx - yy), -2.0 * C3[4] * x * y, 8.0 * C3[4] * x * z],
        [2.0 * C3[5] * x * z, -2.0 * C3[5] * y * z, C3[5] * (xx - yy)],
        [C3[6] * (3.0 * xx - 3.0 * yy), -6.0 * C3[6] * x * y, 0.0],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_basis_grad_matches_central_differences() {
        let d = [0.3, -0.5, 0.8];
        let g = sh_basis_grad(d);
        let h = 1e-6;
        for axis in 0..3 {
            let (mut p, mut m) = (d, d);
            p[axis] += h;
            m[axis] -= h;
            let (bp, bm) = (sh_basis(p), sh_basis(m));
            for k in 0..16 {
                let fd = (bp[k] - bm[k]) / (2.0 * h);
                assert!((fd - g[k][axis]).abs() < 1e-8, "basis {k} axis {axis}: {fd} vs {}", g[k][axis]);
            }
        }
    }

    #[test]
    fn rotation_of_a_unit_quaternion_is_orthonormal() {
        let n = (0.1f64 * 0.1 + 0.7 * 0.7 + 0.2 * 0.2 + 0.5 * 0.5).sqrt();
        let r = rotation([0.1 / n, -0.7 / n, 0.2 / n, 0.5 / n]);
        for i in 0..3 {
            for j in 0..3 {
                let d = dot(r[i], r[j]);
                assert!((d - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
    }
}
