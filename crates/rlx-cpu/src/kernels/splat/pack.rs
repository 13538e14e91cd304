//! The prepare buffer between `GaussianSplatPrepare` and `GaussianSplatRasterize` (private to
//! this pair; its length `15N + max_list_entries + 2·tiles + 3·W·H + 11` is the IR's):
//!
//! | part | floats | content |
//! |---|---|---|
//! | header | 11 | [`TAG`], N, pairs, width, height, tile_size, tiles_x, tiles_y, 0, 0, 0 |
//! | splats | 15·N | per splat: mean x, y, depth, radius (0 = culled), opacity, conic a, b, c, colour r, g, b, tile rect x0, y0, x1, y1 |
//! | list | max_list_entries | splat index per (tile, depth)-sorted pair; −1 past `pairs` |
//! | ranges | 2·tiles | per tile, its `[start, end)` in the list |
//! | reserved | 3·W·H | zero: this implementation keeps no per-pixel state between the stages |
//!
//! Indices and counts are stored as exact f32 integers, so N and `max_list_entries` must stay
//! below 2²⁴. Rasterize checks the header against its attributes and every index and range,
//! so a foreign or corrupted buffer is an error, not a wrong image.

use super::project::Splat;
use super::raster::Bins;
use super::Settings;

/// Marks a buffer written by [`write()`] (0x3D65, "3DGS").
pub const TAG: f32 = 15717.0;
const HEADER: usize = 11;
const PER_SPLAT: usize = 15;
/// Integers above this are not all exact in f32.
const EXACT: usize = 1 << 24;

/// Packs the projected splats and their bins into `out`.
pub fn write(splats: &[Splat], bins: &Bins, s: &Settings, out: &mut [f32]) -> Result<(), String> {
    let n = splats.len();
    if n > EXACT || s.max_list > EXACT {
        return Err(format!("{n} splats / max_list_entries {}: the prepare buffer stores indices as f32, exact up to 2^24", s.max_list));
    }
    out.fill(0.0);
    let header = [TAG, n as f32, bins.list.len() as f32, s.width as f32, s.height as f32, s.tile as f32, s.tiles_x() as f32, s.tiles_y() as f32];
    out[..header.len()].copy_from_slice(&header);
    for (sp, row) in splats.iter().zip(out[HEADER..].chunks_exact_mut(PER_SPLAT)) {
        let v = [
            sp.mean[0], sp.mean[1], sp.depth, sp.radius, sp.opacity, sp.conic[0], sp.conic[1], sp.conic[2], sp.color[0], sp.color[1],
            sp.color[2], sp.rect[0] as f64, sp.rect[1] as f64, sp.rect[2] as f64, sp.rect[3] as f64,
        ];
        for (o, x) in row.iter_mut().zip(v) {
            *o = x as f32;
        }
    }
    let list = &mut out[HEADER + PER_SPLAT * n..][..s.max_list];
    list.fill(-1.0);
    for (o, &i) in list.iter_mut().zip(&bins.list) {
        *o = i as f32;
    }
    let ranges = &mut out[HEADER + PER_SPLAT * n + s.max_list..][..2 * bins.ranges.len()];
    for (o, r) in ranges.chunks_exact_mut(2).zip(&bins.ranges) {
        o.copy_from_slice(&[r[0] as f32, r[1] as f32]);
    }
    Ok(())
}

/// `v` as an index below `bound`, or an error naming buffer position `at`.
fn index(v: f32, bound: usize, at: usize, what: &str) -> Result<usize, String> {
    if v >= 0.0 && v.fract() == 0.0 && (v as usize) < bound {
        Ok(v as usize)
    } else {
        Err(format!("prep[{at}] = {v} is not a valid {what} (below {bound}): not a prepare buffer of these settings"))
    }
}

/// Unpacks a buffer [`write()`] made for the same settings.
pub fn read(prep: &[f32], s: &Settings) -> Result<(Vec<Splat>, Bins), String> {
    let tiles = s.tiles_x() * s.tiles_y();
    let n = (prep.len() - HEADER - s.max_list - 2 * tiles - 3 * s.pixels()) / PER_SPLAT;
    let want = [TAG, n as f32];
    if prep[..2] != want {
        return Err(format!("prep[0..2] = {:?} is not a prepare buffer header for {n} splats ({want:?})", &prep[..2]));
    }
    let shape = [s.width, s.height, s.tile, s.tiles_x(), s.tiles_y()].map(|v| v as f32);
    if prep[3..8] != shape {
        return Err(format!("prep[3..8] = {:?}: the buffer was prepared for other settings than {shape:?}", &prep[3..8]));
    }
    let pairs = index(prep[2], s.max_list + 1, 2, "pair count")?;
    let splats: Vec<Splat> = prep[HEADER..HEADER + PER_SPLAT * n]
        .chunks_exact(PER_SPLAT)
        .map(|r| {
            let v = r.iter().map(|&x| x as f64).collect::<Vec<_>>();
            Splat {
                mean: [v[0], v[1]],
                depth: v[2],
                radius: v[3],
                opacity: v[4],
                conic: [v[5], v[6], v[7]],
                color: [v[8], v[9], v[10]],
                rect: [r[11], r[12], r[13], r[14]].map(|x| x as usize),
            }
        })
        .collect();
    let list_at = HEADER + PER_SPLAT * n;
    let list = (0..pairs)
        .map(|j| {
            let i = index(prep[list_at + j], n, list_at + j, "splat index")?;
            let row = &prep[HEADER + PER_SPLAT * i..][..PER_SPLAT];
            if splats[i].visible() && row.iter().all(|v| v.is_finite()) {
                Ok(i)
            } else {
                Err(format!("prep[{}] lists splat {i}, which the buffer marks culled or holds non-finite", list_at + j))
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    let ranges_at = list_at + s.max_list;
    let ranges = (0..tiles)
        .map(|t| {
            let at = ranges_at + 2 * t;
            let start = index(prep[at], pairs + 1, at, "list position")?;
            let end = index(prep[at + 1], pairs + 1, at + 1, "list position")?;
            if start > end {
                return Err(format!("prep[{at}..{}] = [{start}, {end}) is not a list range", at + 2));
            }
            Ok([start, end])
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((splats, Bins { ranges, list }))
}
