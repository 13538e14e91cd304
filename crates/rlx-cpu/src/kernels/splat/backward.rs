//! The chain rule from a splat's screen quantities back to its scene inputs: colour → colours
//! and SH (and the view direction), opacity → logit, conic → screen covariance → 3D
//! covariance and camera-space centre → position, scales and quaternion.

use super::camera::Camera;
use super::project::{direction, geometry, raw_color, sh_basis, sh_basis_grad, Shading, Splat};
use super::raster::ScreenGrad;
use super::Scene;

/// `d(positions, scales, rotations, opacities, colors, sh_coeffs)` from each splat's screen
/// gradient (culled splats get zeros).
pub fn scene_gradients(sc: &Scene, cam: &Camera, shading: Shading, splats: &[Splat], screen: &[ScreenGrad]) -> Result<[Vec<f64>; 6], String> {
    let n = sc.n;
    let mut out = [vec![0.0; 3 * n], vec![0.0; 3 * n], vec![0.0; 4 * n], vec![0.0; n], vec![0.0; 3 * n], vec![0.0; sc.sh.len()]];
    let kk = shading.coefficients(sc.k);
    for (i, (sp, g)) in splats.iter().zip(screen).enumerate() {
        if !sp.visible() {
            continue;
        }
        let Some(geo) = geometry(sc, i, cam, shading)? else { continue };
        let mut d_pos = [0.0; 3];

        // colour = max(colors + Σ_k Y_k(dir)·sh[k], 0)
        let raw = raw_color(sc, i, cam, kk);
        let d_col = [0, 1, 2].map(|ch| if raw[ch] > 0.0 { g[6 + ch] } else { 0.0 });
        out[4][3 * i..3 * i + 3].copy_from_slice(&d_col);
        if kk > 0 {
            let (dir, len) = direction(sc, i, cam);
            let (basis, basis_grad) = (sh_basis(dir), sh_basis_grad(dir));
            let mut d_dir = [0.0; 3];
            for k in 0..kk {
                let at = (i * sc.k + k) * 3;
                let mut d_y = 0.0;
                for ch in 0..3 {
                    out[5][at + ch] = basis[k] * d_col[ch];
                    d_y += sc.sh[at + ch] as f64 * d_col[ch];
                }
                for (d, b) in d_dir.iter_mut().zip(basis_grad[k]) {
                    *d += b * d_y;
                }
            }
            let along = dir[0] * d_dir[0] + dir[1] * d_dir[1] + dir[2] * d_dir[2];
            for a in 0..3 {
                d_pos[a] += (d_dir[a] - dir[a] * along) / len;
            }
        }

        // opacity = sigmoid(logit)
        out[3][i] = g[5] * sp.opacity * (1.0 - sp.opacity);

        // conic = Σ'⁻¹: dΣ' = −Q·G·Q with G the symmetric gradient of Q = [[a, b], [b, c]]
        let [qa, qb, qc] = sp.conic;
        let q = [[qa, qb], [qb, qc]];
        let gq = [[g[2], g[3] / 2.0], [g[3] / 2.0, g[4]]];
        let qg = mat2(q, gq);
        let d_cov = mat2(qg, q).map(|r| r.map(|v| -v));
        // Σ' = (J·V)·Σ·(J·V)ᵀ + 0.3·I with symmetric upstream g2
        let g2 = [[d_cov[0][0], d_cov[0][1]], [d_cov[1][0], d_cov[1][1]]];
        let jv = geo.jv;
        let d_sigma = [0, 1, 2].map(|r| {
            [0, 1, 2].map(|c| (0..2).map(|a| (0..2).map(|b| jv[a][r] * g2[a][b] * jv[b][c]).sum::<f64>()).sum::<f64>())
        });
        // dL/d(J·V) = 2·g2·(J·V)·Σ
        let jvs = [0, 1].map(|a| [0, 1, 2].map(|c| (0..3).map(|k| jv[a][k] * geo.sigma[k][c]).sum::<f64>()));
        let d_jv = [0, 1].map(|a| [0, 1, 2].map(|c| 2.0 * (g2[a][0] * jvs[0][c] + g2[a][1] * jvs[1][c])));
        // dL/dJ = dL/d(J·V)·Vᵀ
        let v = cam.view;
        let d_j = [0, 1].map(|a| [0, 1, 2].map(|r| (0..3).map(|c| d_jv[a][c] * v[r][c]).sum::<f64>()));
        let [tx, ty, tz] = geo.t;
        let mut d_t = [0.0; 3];
        // J = [[fx/tz, 0, −fx·ux/tz], [0, fy/tz, −fy·uy/tz]], u = clamp(t_xy/tz)
        d_t[2] += -cam.fx / (tz * tz) * d_j[0][0] - cam.fy / (tz * tz) * d_j[1][1];
        for (axis, f) in [(0, cam.fx), (1, cam.fy)] {
            let dj = d_j[axis][2];
            d_t[2] += f * geo.u[axis] / (tz * tz) * dj;
            if geo.u_free[axis] {
                let d_u = -f / tz * dj;
                d_t[axis] += d_u / tz;
                d_t[2] -= d_u * geo.t[axis] / (tz * tz);
            }
        }
        // mean = (fx·tx/tz + cx, fy·ty/tz + cy)
        d_t[0] += g[0] * cam.fx / tz;
        d_t[1] += g[1] * cam.fy / tz;
        d_t[2] -= (g[0] * cam.fx * tx + g[1] * cam.fy * ty) / (tz * tz);
        // t = V·(p − eye)
        for (a, d) in d_pos.iter_mut().enumerate() {
            *d += (0..3).map(|r| v[r][a] * d_t[r]).sum::<f64>();
        }
        out[0][3 * i..3 * i + 3].copy_from_slice(&d_pos);

        // Σ = M·Mᵀ, M = R·diag(s): dM = 2·dΣ·M
        let m = geo.rot.map(|row| [row[0] * geo.scale[0], row[1] * geo.scale[1], row[2] * geo.scale[2]]);
        let d_m = [0, 1, 2].map(|r| [0, 1, 2].map(|c| 2.0 * (0..3).map(|k| d_sigma[r][k] * m[k][c]).sum::<f64>()));
        for c in 0..3 {
            let d_s = (0..3).map(|r| geo.rot[r][c] * d_m[r][c]).sum::<f64>();
            out[1][3 * i + geo.scale_source[c]] += d_s * geo.scale[c];
        }
        let d_rot = [0, 1, 2].map(|r| [0, 1, 2].map(|c| d_m[r][c] * geo.scale[c]));
        let d_quat = quaternion_vjp(geo.quat, d_rot);
        let along: f64 = (0..4).map(|k| geo.quat[k] * d_quat[k]).sum();
        for k in 0..4 {
            out[2][4 * i + k] = (d_quat[k] - geo.quat[k] * along) / geo.quat_norm;
        }
    }
    Ok(out)
}

fn mat2(a: [[f64; 2]; 2], b: [[f64; 2]; 2]) -> [[f64; 2]; 2] {
    [0, 1].map(|r| [0, 1].map(|c| a[r][0] * b[0][c] + a[r][1] * b[1][c]))
}

/// `Σ_jk dR_jk · ∂R_jk/∂(x, y, z, w)` for the rotation matrix of a quaternion.
fn quaternion_vjp([x, y, z, w]: [f64; 4], d: [[f64; 3]; 3]) -> [f64; 4] {
    let dx = [[0.0, 2.0 * y, 2.0 * z], [2.0 * y, -4.0 * x, -2.0 * w], [2.0 * z, 2.0 * w, -4.0 * x]];
    let dy = [[-4.0 * y, 2.0 * x, 2.0 * w], [2.0 * x, 0.0, 2.0 * z], [-2.0 * w, 2.0 * z, -4.0 * y]];
    let dz = [[-4.0 * z, -2.0 * w, 2.0 * x], [2.0 * w, -4.0 * z, 2.0 * y], [2.0 * x, 2.0 * y, 0.0]];
    let dw = [[0.0, -2.0 * z, 2.0 * y], [2.0 * z, 0.0, -2.0 * x], [-2.0 * y, 2.0 * x, 0.0]];
    [dx, dy, dz, dw].map(|p| (0..3).map(|r| (0..3).map(|c| p[r][c] * d[r][c]).sum::<f64>()).sum())
}
