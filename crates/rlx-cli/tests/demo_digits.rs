//! `rlx demo digits` in reduced form: a few dozen steps must lower the loss and beat chance
//! on the held-out digits.

use rlx_cli::demo::digits::{train, DigitsOptions};

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

#[test]
fn a_short_run_lowers_the_loss_and_beats_chance() {
    let opts = DigitsOptions { epochs: 1, max_steps: Some(40), seed: 5, quiet: true, ..Default::default() };
    let report = train(&opts).unwrap();
    assert_eq!(report.losses.len(), 40);
    assert_eq!((report.train_rows, report.test_rows.len()), (1437, 360));
    let mut held_out = report.test_rows.clone();
    held_out.sort_unstable();
    held_out.dedup();
    assert!(held_out.len() == 360 && held_out[359] < 1797, "{held_out:?}");
    assert!(report.losses.iter().all(|l| l.is_finite()), "{:?}", report.losses);
    let (first, last) = (mean(&report.losses[..5]), mean(&report.losses[35..]));
    assert!(last < 0.4 * first, "loss {first} → {last}: {:?}", report.losses);
    let recount = report.predictions.iter().filter(|(label, pred)| label == pred).count() as f64 / 360.0;
    assert_eq!(recount, report.test_accuracy);
    assert!(report.test_accuracy > 0.8, "test accuracy {} after 40 steps", report.test_accuracy);
}
