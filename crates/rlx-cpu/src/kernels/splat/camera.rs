//! The pinhole camera of `meta [23]`: position (0..3), target (3..6), up (6..9), fov-y in
//! degrees (9), near (10), far (11), background RGB (12..15), then the op's settings again:
//! width, height, tile_size, radius_scale, alpha_cutoff, max_splat_steps,
//! transmittance_threshold, max_list_entries (15..23), which must equal the attributes.

use super::Settings;

/// A look-at camera in OpenCV axes: `t = view·(p − eye)` has x right, y down, z forward.
#[derive(Clone, Debug)]
pub struct Camera {
    pub eye: [f64; 3],
    /// Rows: right, down, forward.
    pub view: [[f64; 3]; 3],
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
    /// `1.3·tan(half fov)` per axis: the bound on `t_x/t_z`, `t_y/t_z` inside the EWA Jacobian.
    pub lim_x: f64,
    pub lim_y: f64,
    pub near: f64,
    pub far: f64,
    pub background: [f64; 3],
}

const SETTING_NAMES: [&str; 8] =
    ["width", "height", "tile_size", "radius_scale", "alpha_cutoff", "max_splat_steps", "transmittance_threshold", "max_list_entries"];

pub fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

pub fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

pub fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn scaled(a: [f64; 3], s: f64) -> [f64; 3] {
    [a[0] * s, a[1] * s, a[2] * s]
}

impl Camera {
    /// The camera of `meta`, checked: every value finite, the settings equal to `s`'s
    /// attributes, a well-defined view.
    pub fn from_meta(meta: &[f32], s: &Settings) -> Result<Camera, String> {
        if let Some(i) = meta.iter().position(|v| !v.is_finite()) {
            return Err(format!("meta[{i}] = {} must be finite", meta[i]));
        }
        for (j, (name, want)) in SETTING_NAMES.iter().zip(s.attrs).enumerate() {
            if meta[15 + j] != want {
                return Err(format!("meta[{}] ({name}) = {} must equal the op's {name} {want}", 15 + j, meta[15 + j]));
            }
        }
        let m: Vec<f64> = meta.iter().map(|&v| v as f64).collect();
        let v3 = |i: usize| [m[i], m[i + 1], m[i + 2]];
        let (eye, target, up) = (v3(0), v3(3), v3(6));
        let (fovy, near, far) = (m[9], m[10], m[11]);
        if !(fovy > 0.0 && fovy < 180.0) {
            return Err(format!("meta[9] (fov_y) = {fovy} must lie in (0, 180) degrees"));
        }
        if !(near > 0.0 && far > near) {
            return Err(format!("meta[10..12] (near, far) = ({near}, {far}) need 0 < near < far"));
        }
        let ahead = sub(target, eye);
        let dist = dot(ahead, ahead).sqrt();
        if dist == 0.0 {
            return Err(format!("camera position {eye:?} equals the target: no view direction"));
        }
        let forward = scaled(ahead, 1.0 / dist);
        let side = cross(forward, up);
        let len = dot(side, side).sqrt();
        if len <= 1e-12 * dot(up, up).sqrt() {
            return Err(format!("camera up {up:?} is zero or parallel to the view direction {forward:?}"));
        }
        let right = scaled(side, 1.0 / len);
        let down = cross(forward, right);
        let (w, h) = (s.width as f64, s.height as f64);
        let tan_y = (fovy.to_radians() / 2.0).tan();
        let tan_x = tan_y * w / h;
        Ok(Camera {
            eye,
            view: [right, down, forward],
            fx: w / (2.0 * tan_x),
            fy: h / (2.0 * tan_y),
            cx: (w - 1.0) / 2.0,
            cy: (h - 1.0) / 2.0,
            lim_x: 1.3 * tan_x,
            lim_y: 1.3 * tan_y,
            near,
            far,
            background: v3(12),
        })
    }

    /// Camera coordinates `view·(p − eye)`.
    pub fn to_camera(&self, p: [f64; 3]) -> [f64; 3] {
        let d = sub(p, self.eye);
        [dot(self.view[0], d), dot(self.view[1], d), dot(self.view[2], d)]
    }
}
