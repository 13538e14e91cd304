//! Loss curves as standalone SVG: lines over a step axis with a few labelled ticks, and
//! optional horizontal reference lines (e.g. the unigram entropy a model must beat).

use std::fmt::Write;

/// One curve: a label, a colour and its `(x, y)` points.
pub struct Series<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub points: &'a [(f64, f64)],
}

/// A horizontal dashed line at `y`.
pub struct Reference<'a> {
    pub label: &'a str,
    pub y: f64,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 48.0;

/// The SVG text of a chart titled `title` with axis labels `x_label` / `y_label`.
pub fn svg(title: &str, x_label: &str, y_label: &str, series: &[Series], references: &[Reference]) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(references.iter().map(|r| r.y));
    let (x0, x1) = bounds(xs);
    let (y0, y1) = bounds(ys.filter(|y| y.is_finite()));
    let (y0, y1) = (y0.min(0.0), y1 * 1.05);
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#, W / 2.0, escape(title));
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, H - BOTTOM, W - RIGHT, H - BOTTOM);
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#, H - BOTTOM);
    for t in ticks(x0, x1) {
        let _ = writeln!(s, r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#, px(t), H - BOTTOM + 16.0, number(t));
    }
    for t in ticks(y0, y1) {
        let y = py(t);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e4e4e4"/>"##, W - RIGHT);
        let _ = writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, number(t));
    }
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, (LEFT + W - RIGHT) / 2.0, H - 10.0, escape(x_label));
    let _ = writeln!(s, r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#, H / 2.0, H / 2.0, escape(y_label));
    for r in references {
        let y = py(r.y);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#888" stroke-dasharray="6 4"/>"##, W - RIGHT);
        let _ = writeln!(s, r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##, W - RIGHT - 4.0, y - 5.0, escape(r.label));
    }
    for (i, series) in series.iter().enumerate() {
        let path: Vec<String> = series.points.iter().filter(|p| p.1.is_finite()).map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{}" stroke-width="1.6" points="{}"/>"#, series.color, path.join(" "));
        let ly = TOP + 8.0 + 16.0 * i as f64;
        let _ = writeln!(s, r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="3"/>"#, W - 190.0, W - 170.0, series.color);
        let _ = writeln!(s, r#"<text x="{}" y="{}">{}</text>"#, W - 164.0, ly + 4.0, escape(series.label));
    }
    s.push_str("</svg>\n");
    s
}

/// The range of `values`, widened when empty or flat so the chart has an extent.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

/// Round tick values (1, 2 or 5 times a power of ten apart, at most nine) within `[lo, hi]`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let raw = (hi - lo) / 8.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw).unwrap_or(10.0 * p);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

fn number(v: f64) -> String {
    if v.abs() >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside_the_range() {
        assert_eq!(ticks(0.0, 3.3), vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]);
        assert_eq!(ticks(0.0, 600.0), vec![0.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0]);
    }

    #[test]
    fn the_chart_holds_one_polyline_per_series_within_the_canvas() {
        let a = [(0.0, 4.0), (10.0, 2.0), (20.0, 1.5)];
        let b = [(0.0, 4.1), (20.0, 1.7)];
        let svg = svg("t <1>", "step", "loss", &[Series { label: "train", color: "red", points: &a }, Series { label: "val", color: "blue", points: &b }], &[Reference { label: "unigram", y: 3.3 }]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("t &lt;1&gt;") && svg.contains("stroke-dasharray"));
        for pair in svg.split("points=\"").skip(1).flat_map(|p| p.split('"').next().unwrap().split(' ')) {
            let (x, y) = pair.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!((LEFT..=W - RIGHT).contains(&x) && (TOP..=H - BOTTOM).contains(&y), "{x},{y}");
        }
    }
}
