//! `rlx tune`'s measurement of the f32 GEMM on this machine: every SIMD register tile it runs ×
//! a few `kc`, then a few `nc` for the fastest of those, each timed on a handful of
//! representative products (the median of interleaved rounds, so that a burst of other load
//! falls on every candidate alike). A candidate replaces the default only when it is clearly
//! faster ([`MARGIN`]), so that noise does not flip the choice.

use super::choice::Choice;
use super::sgemm::{sgemm_with, Blocking, Mat, MatMut};
use super::tile::Tile;
use std::fmt;
use std::time::Instant;

/// The products timed, `[m, k, n]`: two square ones (one whose `b` outgrows L2) and a
/// transformer's (MiniLM's 128 tokens × 384 → 1536).
pub const SHAPES: [[usize; 3]; 3] = [[512, 512, 512], [1024, 1024, 1024], [128, 384, 1536]];
/// The `kc` values tried on every tile.
pub const KCS: [usize; 3] = [256, 384, 512];
/// The `nc` values tried on the fastest tile and `kc`.
pub const NCS: [usize; 3] = [256, 512, 1024];
/// Timed rounds per candidate and shape (the median is kept), after one round of warm-up.
pub const ROUNDS: usize = 5;
/// How much faster (geometric mean of GFLOP/s) a candidate must be to replace the one it is
/// measured against.
pub const MARGIN: f64 = 1.03;
/// Multiply-adds per timed sample: a small product is run several times (at most
/// [`SAMPLE_CALLS`]), so that a sample lasts milliseconds rather than the clock's resolution.
const SAMPLE_FLOPS: usize = 1 << 28;
/// Most calls per timed sample.
const SAMPLE_CALLS: usize = 64;

/// One candidate's speed on each shape.
#[derive(Clone)]
pub struct Measured {
    pub choice: Choice,
    /// GFLOP/s per shape of [`Tuning::shapes`] (the median over the rounds).
    pub gflops: Vec<f64>,
}

impl Measured {
    /// The geometric mean of the GFLOP/s over the shapes (0 when there are none).
    pub fn score(&self) -> f64 {
        if self.gflops.is_empty() {
            return 0.0;
        }
        (self.gflops.iter().map(|g| g.max(f64::MIN_POSITIVE).ln()).sum::<f64>() / self.gflops.len() as f64).exp()
    }
}

/// What a tuning run measured and chose.
pub struct Tuning {
    pub shapes: Vec<[usize; 3]>,
    /// Threads the products ran on.
    pub threads: usize,
    pub rounds: usize,
    /// Every measurement in the order taken: the tiles × `kc` at the default `nc`, then the
    /// `nc` values on the fastest of those (remeasured beside them).
    pub measured: Vec<Measured>,
    /// Index in `measured` of the CPU's default ([`Choice::default_here`]).
    pub default: usize,
    /// Index in `measured` of the choice made.
    pub chosen: usize,
}

impl Tuning {
    /// The choice made.
    pub fn choice(&self) -> Choice {
        self.measured[self.chosen].choice
    }

    /// The chosen candidate's speed over the default's (geometric means).
    pub fn gain(&self) -> f64 {
        self.measured[self.chosen].score() / self.measured[self.default].score().max(f64::MIN_POSITIVE)
    }
}

impl fmt::Display for Tuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "f32 GEMM, GFLOP/s on {} thread{} (median of {} rounds):", self.threads, if self.threads == 1 { "" } else { "s" }, self.rounds)?;
        let shape = |[m, k, n]: [usize; 3]| format!("{m}×{k}×{n}");
        let widths: Vec<usize> = self.shapes.iter().map(|&s| shape(s).chars().count().max(7)).collect();
        write!(f, "{:<14} {:>5} {:>5}", "tile", "KC", "NC")?;
        for (&s, &w) in self.shapes.iter().zip(&widths) {
            write!(f, "  {:>w$}", shape(s))?;
        }
        writeln!(f, "  {:>7}", "geomean")?;
        for (i, m) in self.measured.iter().enumerate() {
            write!(f, "{:<14} {:>5} {:>5}", m.choice.tile.name, m.choice.blocking.kc, m.choice.blocking.nc)?;
            for (g, &w) in m.gflops.iter().zip(&widths) {
                write!(f, "  {g:>w$.1}")?;
            }
            write!(f, "  {:>7.1}", m.score())?;
            let marks: Vec<&str> = [(i == self.default, "default"), (i == self.chosen, "chosen")].into_iter().filter_map(|(on, s)| on.then_some(s)).collect();
            writeln!(f, "{}", if marks.is_empty() { String::new() } else { format!("  {}", marks.join(", ")) })?;
        }
        Ok(())
    }
}

/// The tiles worth timing here: every SIMD tile this CPU runs, or the portable one when it
/// has none (with SIMD, the portable tile is several times slower and never the pick).
pub fn tiles() -> Vec<Tile> {
    let all = Tile::available();
    let simd: Vec<Tile> = all.iter().copied().filter(|t| t.isa != "portable").collect();
    if simd.is_empty() {
        all
    } else {
        simd
    }
}

/// Times the candidates on `shapes` over `rounds` rounds on the current rayon pool and picks
/// one: the fastest tile × `kc` ([`KCS`]) if it beats the default by [`MARGIN`], then the
/// fastest `nc` ([`NCS`]) for it if that beats it by [`MARGIN`]. Errors when a shape is empty.
pub fn tune(shapes: &[[usize; 3]], rounds: usize) -> Result<Tuning, String> {
    if let Some(s) = shapes.iter().find(|s| s.contains(&0)) {
        return Err(format!("tune: the shape {s:?} has nothing to multiply"));
    }
    let rounds = rounds.max(1);
    let default = Choice::default_here();
    let nc = default.blocking.nc;
    let mut first: Vec<Choice> = vec![default];
    for tile in tiles() {
        for kc in KCS {
            let c = Choice { tile, blocking: Blocking { kc, nc } };
            if !c.same(&default) {
                first.push(c);
            }
        }
    }
    // The pool's workers spin between the products, as during a compiled graph's run.
    crate::awake::run(|| {
        let mut operands: Vec<Operands> = shapes.iter().map(|&s| Operands::new(s)).collect();
        let mut measured = measure(&first, &mut operands, rounds)?;
        let best = pick(&measured, 0);
        let base = measured[best].choice;
        let second: Vec<Choice> = NCS.into_iter().map(|nc| Choice { blocking: Blocking { nc, ..base.blocking }, ..base }).collect();
        let offset = measured.len();
        measured.extend(measure(&second, &mut operands, rounds)?);
        let again = offset + NCS.iter().position(|&n| n == base.blocking.nc).unwrap_or(0);
        // Where `best` holds against the other `nc` on its new row, it is marked on its first
        // row (the default's own, when that is it).
        let chosen = match offset + pick(&measured[offset..], again - offset) {
            c if c == again => best,
            c => c,
        };
        Ok(Tuning { shapes: shapes.to_vec(), threads: rayon::current_num_threads(), rounds, measured, default: 0, chosen })
    })
}

/// The index of the candidate to keep: the fastest by [`Measured::score`] where it is at least
/// [`MARGIN`] faster than `measured[base]`, else `base`.
pub fn pick(measured: &[Measured], base: usize) -> usize {
    let fastest = (0..measured.len()).max_by(|&a, &b| measured[a].score().total_cmp(&measured[b].score())).unwrap_or(base);
    if measured[fastest].score() >= MARGIN * measured[base].score() {
        fastest
    } else {
        base
    }
}

/// One shape's operands, filled with values in [-1, 1), and its output.
struct Operands {
    shape: [usize; 3],
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Operands {
    fn new(shape: [usize; 3]) -> Operands {
        let [m, k, n] = shape;
        let fill = |len: usize, seed: u32| (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1u32 << 23) as f32 - 1.0).collect();
        Operands { shape, a: fill(m * k, 1), b: fill(k * n, 2), c: vec![0.0; m * n] }
    }

    /// Runs the product `calls` times on `choice`; the seconds per call.
    fn time(&mut self, choice: Choice, calls: usize) -> Result<f64, String> {
        let [m, k, n] = self.shape;
        let start = Instant::now();
        for _ in 0..calls {
            let (a, b) = (Mat::row_major(&self.a, m, k), Mat::row_major(&self.b, k, n));
            sgemm_with(choice, a, b, MatMut::row_major(&mut self.c, m, n), false, true, None)?;
        }
        Ok(start.elapsed().as_secs_f64() / calls as f64)
    }
}

/// The median GFLOP/s of each candidate on each shape: a warm-up round, then `rounds` rounds,
/// each timing every candidate on every shape in turn.
fn measure(candidates: &[Choice], operands: &mut [Operands], rounds: usize) -> Result<Vec<Measured>, String> {
    let mut seconds = vec![vec![Vec::with_capacity(rounds); operands.len()]; candidates.len()];
    for round in 0..=rounds {
        for (c, &choice) in candidates.iter().enumerate() {
            for (s, ops) in operands.iter_mut().enumerate() {
                let [m, k, n] = ops.shape;
                let t = ops.time(choice, SAMPLE_FLOPS.div_ceil(m * k * n).min(SAMPLE_CALLS))?;
                if round > 0 {
                    seconds[c][s].push(t);
                }
            }
        }
    }
    Ok(candidates
        .iter()
        .zip(seconds)
        .map(|(&choice, per_shape)| {
            let gflops = per_shape
                .into_iter()
                .zip(operands.iter())
                .map(|(mut ts, ops)| {
                    ts.sort_by(f64::total_cmp);
                    let [m, k, n] = ops.shape;
                    2.0 * (m * k * n) as f64 / ts[ts.len() / 2].max(1e-12) / 1e9
                })
                .collect();
            Measured { choice, gflops }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(scores: &[f64]) -> Vec<Measured> {
        scores.iter().map(|&g| Measured { choice: Choice::default_here(), gflops: vec![g, g] }).collect()
    }

    #[test]
    fn the_base_is_kept_unless_a_candidate_is_clearly_faster() {
        assert_eq!(pick(&measured(&[100.0, 102.9, 90.0]), 0), 0);
        assert_eq!(pick(&measured(&[100.0, 103.1, 104.0]), 0), 2);
        assert_eq!(pick(&measured(&[100.0, 50.0]), 1), 0);
        assert_eq!(pick(&measured(&[100.0]), 0), 0);
        let uneven = Measured { choice: Choice::default_here(), gflops: vec![50.0, 200.0] };
        assert!((uneven.score() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn the_tuner_picks_among_the_tiles_and_blockings_this_cpu_runs() {
        let shapes = [[16, 40, 40], [24, 20, 50]];
        let tuning = tune(&shapes, 1).unwrap();
        let names: Vec<&str> = tiles().iter().map(|t| t.name).collect();
        assert_eq!(tuning.measured.len(), tiles().len() * KCS.len() + NCS.len());
        assert!(tuning.measured[tuning.default].choice.same(&Choice::default_here()));
        for m in &tuning.measured {
            assert!(names.contains(&m.choice.tile.name) && KCS.contains(&m.choice.blocking.kc) && NCS.contains(&m.choice.blocking.nc));
            assert!(m.gflops.len() == shapes.len() && m.gflops.iter().all(|g| g.is_finite() && *g > 0.0), "{}: {:?}", m.choice, m.gflops);
        }
        assert!(tuning.chosen < tuning.measured.len());
        let table = tuning.to_string();
        assert!(table.contains("16×40×40") && table.contains("default") && table.contains("chosen"), "{table}");
        assert!(tune(&[[4, 0, 4]], 1).is_err());
    }
}
