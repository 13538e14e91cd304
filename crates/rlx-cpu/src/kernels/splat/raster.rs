//! Tile binning, per-pixel front-to-back compositing, and its reverse pass down to the
//! screen-space quantities of each splat.

use super::project::Splat;
use super::Settings;
use crate::kernels::PAR_MIN;
use rayon::prelude::*;

/// Each tile's depth-sorted splats: tile `t` (row-major) owns `list[ranges[t][0]..ranges[t][1]]`.
#[derive(Debug)]
pub struct Bins {
    pub ranges: Vec<[usize; 2]>,
    pub list: Vec<usize>,
}

/// Pairs every visible splat with the tiles of its rectangle (splat order, then tile
/// row-major), stably sorted by (tile, depth): equal depths keep splat order, as the
/// reference's radix sort does. More than `max_list_entries` pairs is an error.
pub fn bin(splats: &[Splat], s: &Settings) -> Result<Bins, String> {
    let area = |sp: &Splat| (sp.rect[2] - sp.rect[0]) * (sp.rect[3] - sp.rect[1]);
    let total: usize = splats.iter().filter(|sp| sp.visible()).map(area).sum();
    if total > s.max_list {
        return Err(format!("the splats cover {total} tile-splat pairs, more than max_list_entries {}", s.max_list));
    }
    let tiles_x = s.tiles_x();
    let mut pairs = Vec::with_capacity(total);
    for (i, sp) in splats.iter().enumerate().filter(|(_, sp)| sp.visible()) {
        let [x0, y0, x1, y1] = sp.rect;
        for ty in y0..y1 {
            for tx in x0..x1 {
                pairs.push((ty * tiles_x + tx, sp.depth, i));
            }
        }
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut ranges = vec![[0, 0]; tiles_x * s.tiles_y()];
    for (at, &(tile, _, _)) in pairs.iter().enumerate() {
        if ranges[tile][1] == 0 {
            ranges[tile][0] = at;
        }
        ranges[tile][1] = at + 1;
    }
    Ok(Bins { ranges, list: pairs.into_iter().map(|p| p.2).collect() })
}

/// The sRGB transfer curve (linear toe below 0.0031308) and its derivative.
fn srgb(v: f64) -> (f64, f64) {
    if v <= 0.003_130_8 {
        (12.92 * v, 12.92)
    } else {
        let p = v.powf(1.0 / 2.4);
        (1.055 * p - 0.055, 1.055 / 2.4 * p / v)
    }
}

/// One pixel's walk over its tile's `entries`: calls `hit(j, α, T)` for every entry `j` it
/// blends (with the transmittance in front of it) and returns the accumulated colour and the
/// final transmittance.
fn walk(p: [f64; 2], entries: &[usize], splats: &[Splat], s: &Settings, mut hit: impl FnMut(usize, f64, f64)) -> ([f64; 3], f64) {
    let (mut c, mut t) = ([0.0; 3], 1.0);
    for (j, &i) in entries.iter().enumerate().take(s.max_steps) {
        let sp = &splats[i];
        let alpha = (sp.opacity * sp.gauss(p)).min(0.99);
        if alpha < s.alpha_cutoff {
            continue;
        }
        let next = t * (1.0 - alpha);
        if next < s.t_min {
            break;
        }
        for (acc, col) in c.iter_mut().zip(sp.color) {
            *acc += col * alpha * t;
        }
        hit(j, alpha, t);
        t = next;
    }
    (c, t)
}

/// Runs `f(tile)` for every tile, on rayon threads when `work` pays for them.
fn per_tile<R: Send>(bins: &Bins, s: &Settings, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    let work = bins.list.len() * s.tile * s.tile;
    if bins.ranges.len() > 1 && work >= PAR_MIN {
        (0..bins.ranges.len()).into_par_iter().map(f).collect()
    } else {
        (0..bins.ranges.len()).map(f).collect()
    }
}

/// The pixels `(x, y)` of tile `t`, row-major.
fn tile_pixels(t: usize, s: &Settings) -> impl Iterator<Item = (usize, usize)> {
    let (ty, tx) = (t / s.tiles_x(), t % s.tiles_x());
    let (x0, y0) = (tx * s.tile, ty * s.tile);
    let (x1, y1) = ((x0 + s.tile).min(s.width), (y0 + s.tile).min(s.height));
    (y0..y1).flat_map(move |y| (x0..x1).map(move |x| (x, y)))
}

/// Composites every pixel over `background` into `out [H·W·4]`: `(sRGB(C), 1 − T_final)`.
pub fn render(splats: &[Splat], bins: &Bins, background: &[f64; 3], s: &Settings, out: &mut [f32]) {
    let shaded = per_tile(bins, s, |t| {
        let entries = &bins.list[bins.ranges[t][0]..bins.ranges[t][1]];
        tile_pixels(t, s)
            .map(|(x, y)| {
                let (c, tf) = walk([x as f64, y as f64], entries, splats, s, |_, _, _| {});
                let rgb = [0, 1, 2].map(|ch| srgb(c[ch] + tf * background[ch]).0 as f32);
                (y * s.width + x, [rgb[0], rgb[1], rgb[2], (1.0 - tf) as f32])
            })
            .collect::<Vec<_>>()
    });
    for (p, rgba) in shaded.into_iter().flatten() {
        out[4 * p..4 * p + 4].copy_from_slice(&rgba);
    }
}

/// Gradient of one splat's screen quantities: `mean (2), conic (3), opacity (1), colour (3)`.
pub type ScreenGrad = [f64; 9];

/// The reverse of [`render`] for the upstream `d_rgba` (RGB, each pixel's vector clipped to
/// L2 norm `clip`): the gradient of every splat's screen quantities, summed over pixels in a
/// fixed order.
pub fn backward(splats: &[Splat], bins: &Bins, background: &[f64; 3], s: &Settings, d_rgba: &[f32], clip: f64) -> Vec<ScreenGrad> {
    let per_entry = per_tile(bins, s, |t| {
        let entries = &bins.list[bins.ranges[t][0]..bins.ranges[t][1]];
        let mut acc = vec![[0.0; 9]; entries.len()];
        let mut hits = Vec::new();
        for (x, y) in tile_pixels(t, s) {
            let pix = y * s.width + x;
            let mut g = [0, 1, 2].map(|ch| d_rgba[4 * pix + ch] as f64);
            let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
            if norm > clip {
                g = g.map(|v| v * clip / norm);
            }
            let p = [x as f64, y as f64];
            hits.clear();
            let (c, tf) = walk(p, entries, splats, s, |j, alpha, t| hits.push((j, alpha, t)));
            let dc = [0, 1, 2].map(|ch| g[ch] * srgb(c[ch] + tf * background[ch]).1);
            let mut behind = *background;
            for &(j, alpha, t) in hits.iter().rev() {
                let sp = &splats[entries[j]];
                let a = &mut acc[j];
                let mut d_alpha = 0.0;
                for ch in 0..3 {
                    d_alpha += t * (sp.color[ch] - behind[ch]) * dc[ch];
                    a[6 + ch] += alpha * t * dc[ch];
                    behind[ch] = alpha * sp.color[ch] + (1.0 - alpha) * behind[ch];
                }
                let gauss = sp.gauss(p);
                if sp.opacity * gauss >= 0.99 {
                    continue;
                }
                a[5] += gauss * d_alpha;
                let d_power = sp.opacity * gauss * d_alpha;
                let (dx, dy) = (sp.mean[0] - p[0], sp.mean[1] - p[1]);
                let [ca, cb, cc] = sp.conic;
                a[0] -= d_power * (ca * dx + cb * dy);
                a[1] -= d_power * (cc * dy + cb * dx);
                a[2] -= d_power * 0.5 * dx * dx;
                a[3] -= d_power * dx * dy;
                a[4] -= d_power * 0.5 * dy * dy;
            }
        }
        acc
    });
    let mut grads = vec![[0.0; 9]; splats.len()];
    for (t, acc) in per_entry.iter().enumerate() {
        for (&i, a) in bins.list[bins.ranges[t][0]..bins.ranges[t][1]].iter().zip(acc) {
            for (g, v) in grads[i].iter_mut().zip(a) {
                *g += v;
            }
        }
    }
    grads
}
