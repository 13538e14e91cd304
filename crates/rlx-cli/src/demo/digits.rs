//! `rlx demo digits`: trains a small CNN ([`rlx::models::cnn`]) on the 8×8 handwritten digits
//! shipped with the binary, with AdamW in mini-batches, and reports its test accuracy.

use indicatif::{ProgressBar, ProgressStyle};
use rlx::models::cnn::{cnn, Cnn, CnnConfig};
use rlx::prelude::*;
use rlx::train::init::Rng;
use rlx::train::{Optimizer, Schedule, TrainConfig, Trainer};
use rlx::RuntimeError;
use std::error::Error;
use std::time::Instant;

/// The UCI 8×8 digits (see `data/README.md`): per row 64 pixel counts in 0..=16, then the label.
const CSV: &str = include_str!("../../data/digits.csv");
const SIDE: usize = 8;
const PIXELS: usize = SIDE * SIDE;
const CLASSES: usize = 10;
/// Rows held out for testing (a fifth of the 1,797).
const TEST_ROWS: usize = 360;

/// How to train.
#[derive(Clone, Debug)]
pub struct DigitsOptions {
    pub epochs: usize,
    /// Stop after this many steps even within an epoch (the reduced run of the tests).
    pub max_steps: Option<usize>,
    pub batch: usize,
    /// Peak learning rate of the warm-up + cosine schedule.
    pub lr: f32,
    /// Seeds the train/test split, the batch order and the initial weights.
    pub seed: u64,
    /// Train silently: no progress bar, no per-epoch lines.
    pub quiet: bool,
}

impl Default for DigitsOptions {
    fn default() -> DigitsOptions {
        DigitsOptions { epochs: 12, max_steps: None, batch: 32, lr: 3e-3, seed: 0, quiet: false }
    }
}

/// What a training run gave.
#[derive(Clone, Debug)]
pub struct DigitsReport {
    /// The loss of every step, before its update.
    pub losses: Vec<f32>,
    /// Fraction of the held-out rows classified correctly after training.
    pub test_accuracy: f64,
    pub train_rows: usize,
    /// The held-out rows of the dataset.
    pub test_rows: Vec<usize>,
    /// `(label, prediction)` of each of `test_rows`.
    pub predictions: Vec<(i64, i64)>,
}

/// Images as `f32` pixels scaled to `[0, 1]` with their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Digits {
    /// `[rows, 64]`, row-major.
    pub pixels: Vec<f32>,
    pub labels: Vec<i64>,
}

impl Digits {
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// The rows at `idx`, in that order: `x` as `[n, 1, 8, 8]` and `labels` as `[n]`.
    fn batch(&self, idx: &[usize]) -> Result<(Tensor, Tensor), RuntimeError> {
        let pixels = idx.iter().flat_map(|&i| self.pixels[i * PIXELS..(i + 1) * PIXELS].iter().copied()).collect();
        let labels = idx.iter().map(|&i| self.labels[i]).collect();
        Ok((Tensor::from_vec(pixels, &[idx.len(), 1, SIDE, SIDE])?, Tensor::from_vec(labels, &[idx.len()])?))
    }
}

/// Parses digits CSV text: per line 64 integer pixels in `0..=16` and a label in `0..=9`.
pub fn parse(csv: &str) -> Result<Digits, String> {
    let mut d = Digits { pixels: Vec::new(), labels: Vec::new() };
    for (n, line) in csv.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != PIXELS + 1 {
            return Err(format!("digits.csv line {}: {} fields, want {} pixels and a label", n + 1, fields.len(), PIXELS));
        }
        for (i, f) in fields.iter().enumerate() {
            let (what, max) = if i < PIXELS { ("pixel", 16) } else { ("label", CLASSES as u8 - 1) };
            let v = f.parse::<u8>().ok().filter(|v| *v <= max);
            let v = v.ok_or_else(|| format!("digits.csv line {}: {what} `{f}` is not an integer in 0..={max}", n + 1))?;
            if i < PIXELS {
                d.pixels.push(f32::from(v) / 16.0);
            } else {
                d.labels.push(i64::from(v));
            }
        }
    }
    Ok(d)
}

/// Fisher–Yates shuffle driven by `rng`.
fn shuffle(v: &mut [usize], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
}

/// Argmax of each row of `[n, CLASSES]` logits.
fn argmax_rows(logits: &[f32]) -> Vec<i64> {
    logits
        .chunks(CLASSES)
        .map(|row| row.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0 as i64)
        .collect()
}

/// The CNN's test predictions with the trainer's current weights.
fn predict(forward: &mut CompiledGraph, trainer: &Trainer, x: &Tensor) -> Result<Vec<i64>, Box<dyn Error>> {
    for name in trainer.params() {
        forward.set_param(name, trainer.param(name)?)?;
    }
    Ok(argmax_rows(&forward.run(&[("x", x)])?[0].to_vec::<f32>()?))
}

fn accuracy(labels: &[i64], predictions: &[i64]) -> f64 {
    labels.iter().zip(predictions).filter(|(a, b)| a == b).count() as f64 / labels.len().max(1) as f64
}

fn progress(total: u64, quiet: bool) -> Result<ProgressBar, Box<dyn Error>> {
    if quiet {
        return Ok(ProgressBar::hidden());
    }
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} steps, {msg} ({elapsed})")?.progress_chars("=> ");
    Ok(ProgressBar::new(total).with_style(style))
}

/// Splits the shipped digits, trains the CNN on the training rows and evaluates it on the rest.
pub fn train(opts: &DigitsOptions) -> Result<DigitsReport, Box<dyn Error>> {
    if opts.batch == 0 || opts.epochs == 0 {
        return Err("digits: the batch size and the number of epochs must be positive".into());
    }
    let data = parse(CSV)?;
    let mut rng = Rng::new(opts.seed);
    let mut order: Vec<usize> = (0..data.rows()).collect();
    shuffle(&mut order, &mut rng);
    let (test, mut train_idx) = (order[..TEST_ROWS].to_vec(), order[TEST_ROWS..].to_vec());
    let (test_x, test_y) = data.batch(&test)?;
    let test_labels = test_y.to_vec::<i64>()?;

    let Cnn { forward, train: train_graph, loss, params, .. } = cnn(&CnnConfig::digits())?;
    let per_epoch = train_idx.len() / opts.batch;
    if per_epoch == 0 {
        return Err(format!("digits: the batch size {} exceeds the {} training rows", opts.batch, train_idx.len()).into());
    }
    let total = opts.max_steps.unwrap_or(usize::MAX).min(per_epoch * opts.epochs);
    let schedule = Schedule::WarmupCosine { peak: opts.lr, min: opts.lr / 50.0, warmup: (total / 20) as u64, total: total as u64 };
    let config = TrainConfig::new(Optimizer::adamw(1e-4), schedule).with_clip_norm(5.0);
    let session = Session::new(Device::Cpu)?;
    let mut trainer = Trainer::new(&session, &train_graph, loss, config)?;
    for spec in &params {
        trainer.set_param(&spec.name, spec.init.tensor(&spec.shape, &mut rng))?;
    }
    let mut forward = session.compile(&forward)?;

    let bar = progress(total as u64, opts.quiet)?;
    let mut losses = Vec::with_capacity(total);
    'epochs: for epoch in 1..=opts.epochs {
        bar.set_prefix(format!("epoch {epoch}/{}", opts.epochs));
        shuffle(&mut train_idx, &mut rng);
        for idx in train_idx.chunks_exact(opts.batch) {
            if losses.len() == total {
                break 'epochs;
            }
            let (x, y) = data.batch(idx)?;
            let l = trainer.step(&[("x", &x), ("labels", &y)])?;
            losses.push(l);
            bar.set_message(format!("loss {l:.4}"));
            bar.inc(1);
        }
        if !opts.quiet {
            let acc = accuracy(&test_labels, &predict(&mut forward, &trainer, &test_x)?);
            let tail = &losses[losses.len().saturating_sub(per_epoch)..];
            let mean = tail.iter().sum::<f32>() / tail.len() as f32;
            bar.suspend(|| println!("epoch {epoch:>2}: mean loss {mean:.4}, test accuracy {:.1}%", acc * 100.0));
        }
    }
    bar.finish_and_clear();

    let predictions = predict(&mut forward, &trainer, &test_x)?;
    Ok(DigitsReport {
        test_accuracy: accuracy(&test_labels, &predictions),
        predictions: test_labels.into_iter().zip(predictions).collect(),
        losses,
        train_rows: train_idx.len(),
        test_rows: test,
    })
}

/// Draws the images `rows` of `data` side by side as text, with label and prediction beneath.
fn draw(data: &Digits, rows: &[usize], preds: &[(i64, i64)]) -> String {
    const SHADES: &[u8] = b" .:-=+*#%@";
    let mut out = String::new();
    for y in 0..SIDE {
        for &r in rows {
            let line = &data.pixels[r * PIXELS + y * SIDE..r * PIXELS + (y + 1) * SIDE];
            out.extend(line.iter().map(|&p| SHADES[((p * (SHADES.len() - 1) as f32).round() as usize).min(SHADES.len() - 1)] as char));
            out.push_str("   ");
        }
        out.push('\n');
    }
    for (label, pred) in preds {
        out.push_str(&format!("{:<11}", format!("{pred} ({})", if label == pred { "ok" } else { "wrong" })));
    }
    out.push('\n');
    out
}

/// The CLI job: trains with `opts`, then prints the test accuracy and some predictions.
pub fn run(opts: &DigitsOptions) -> Result<(), Box<dyn Error>> {
    println!("rlx demo digits — a small CNN (conv 16 → conv 32 → max-pool → dense 64 → 10) on the");
    println!("UCI 8×8 handwritten digits, trained with AdamW on the CPU.\n");
    let t = Instant::now();
    let report = train(opts)?;
    let secs = t.elapsed().as_secs_f64();
    let first = report.losses.first().copied().unwrap_or(f32::NAN);
    let last = report.losses.last().copied().unwrap_or(f32::NAN);
    println!(
        "\nTrained on {} images for {} steps in {secs:.1} s (loss {first:.3} → {last:.3}).",
        report.train_rows,
        report.losses.len()
    );
    println!("Test accuracy on {} held-out images: {:.1}%\n", report.test_rows.len(), report.test_accuracy * 100.0);
    let shown = 8.min(report.predictions.len());
    println!("The first {shown} test images and the predicted digit:\n");
    print!("{}", draw(&parse(CSV)?, &report.test_rows[..shown], &report.predictions[..shown]));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_csv_parses_to_all_rows() {
        let d = parse(CSV).unwrap();
        assert_eq!(d.rows(), 1797);
        assert_eq!(d.pixels.len(), 1797 * 64);
        for c in 0..10 {
            let n = d.labels.iter().filter(|&&l| l == c).count();
            assert!((170..=190).contains(&n), "class {c}: {n} rows");
        }
        assert!(d.pixels.iter().all(|p| (0.0..=1.0).contains(p)));
    }

    #[test]
    fn malformed_rows_are_errors_naming_the_line() {
        let good = vec!["0"; 65].join(",");
        let short = vec!["0"; 64].join(",");
        let bright = format!("17,{}", vec!["0"; 64].join(","));
        let label = format!("{},10", vec!["0"; 64].join(","));
        let word = format!("{},x", vec!["0"; 64].join(","));
        for (bad, needle) in [(short, "64 fields"), (bright, "pixel `17`"), (label, "label `10`"), (word, "label `x`")] {
            let err = parse(&format!("{good}\n{bad}\n")).unwrap_err();
            assert!(err.contains("line 2") && err.contains(needle), "{err}");
        }
        assert_eq!(parse(&good).unwrap().labels, vec![0]);
    }

    #[test]
    fn the_shuffle_is_a_seeded_permutation() {
        let mut a: Vec<usize> = (0..100).collect();
        shuffle(&mut a, &mut Rng::new(3));
        let mut b: Vec<usize> = (0..100).collect();
        shuffle(&mut b, &mut Rng::new(3));
        assert_eq!(a, b);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        b.sort_unstable();
        assert_eq!(b, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn argmax_takes_the_first_largest_of_each_row() {
        let mut logits = vec![0.0f32; 20];
        logits[3] = 2.0;
        logits[7] = 2.0;
        logits[19] = -1.0;
        logits[10..19].iter_mut().for_each(|v| *v = -2.0);
        assert_eq!(argmax_rows(&logits), vec![3, 9]);
    }
}
