//! The reward curve of a run as a self-contained SVG (no plotting crate, opens in any browser).

use std::path::{Path, PathBuf};

use super::metrics::{write_atomic, StepMetrics};

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 450.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 45.0;
const BOTTOM: f64 = 50.0;
/// Above this many steps the per-point markers would only clutter the lines.
const MAX_MARKERS: usize = 60;

/// A line of the chart: legend label, colour, and the value it plots.
type Series = (&'static str, &'static str, fn(&StepMetrics) -> f64);

/// Failure writing the chart.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The file could not be written.
    #[error("cannot write the reward chart {path}: {source}. Check that the directory exists and is writable")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes `metrics` as an SVG line chart of reward_mean and pass_rate against step, atomically.
pub fn write_reward_svg(path: &Path, metrics: &[StepMetrics], title: &str) -> Result<(), PlotError> {
    let svg = reward_svg(metrics, title);
    write_atomic(path, svg.as_bytes()).map_err(|source| PlotError::Write { path: path.to_path_buf(), source })
}

/// The SVG text of the chart.
pub fn reward_svg(metrics: &[StepMetrics], title: &str) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let first = metrics.iter().map(|m| m.step).min().unwrap_or(0);
    let last = metrics.iter().map(|m| m.step).max().unwrap_or(1);
    // One step still needs a non-empty x range.
    let (x0, x1) = (first as f64, if last > first { last as f64 } else { first as f64 + 1.0 });
    let x = |step: u64| LEFT + (step as f64 - x0) / (x1 - x0) * plot_w;
    let y = |v: f64| TOP + (1.0 - v.clamp(0.0, 1.0)) * plot_h;

    let mut s = String::new();
    s.push_str(&format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" "#
    ));
    s.push_str("font-family=\"sans-serif\" font-size=\"12\">\n");
    s.push_str(&format!("<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>\n"));
    text(&mut s, WIDTH / 2.0, 25.0, "middle", r#"font-size="16""#, title);

    for i in 0..=4 {
        let v = i as f64 / 4.0;
        line(&mut s, (LEFT, y(v)), (LEFT + plot_w, y(v)), "#ddd", 1.0);
        text(&mut s, LEFT - 6.0, y(v) + 4.0, "end", "", &format!("{v:.2}"));
    }
    let tick = tick_interval(x1 - x0);
    let mut t = (x0 / tick).ceil() * tick;
    while t <= x1 + 1e-9 {
        let xx = x(t as u64);
        line(&mut s, (xx, TOP), (xx, TOP + plot_h), "#eee", 1.0);
        text(&mut s, xx, TOP + plot_h + 16.0, "middle", "", &(t as u64).to_string());
        t += tick;
    }
    s.push_str(&format!(
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#444\"/>\n"
    ));
    text(&mut s, LEFT + plot_w / 2.0, HEIGHT - 10.0, "middle", "", "step");
    if metrics.is_empty() {
        text(&mut s, LEFT + plot_w / 2.0, TOP + plot_h / 2.0, "middle", r##"fill="#888""##, "no steps yet");
    }

    let series: [Series; 2] =
        [("reward mean", "#1f77b4", |m| m.reward_mean), ("pass rate", "#ff7f0e", |m| m.pass_rate)];
    for (i, (label, colour, value)) in series.iter().enumerate() {
        // A NaN (no rollouts scored that step) is left out rather than drawn as 0.
        let points: Vec<(f64, f64)> =
            metrics.iter().filter(|m| value(m).is_finite()).map(|m| (x(m.step), y(value(m)))).collect();
        let list: Vec<String> = points.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n",
            list.join(" ")
        ));
        if points.len() <= MAX_MARKERS {
            for (px, py) in &points {
                s.push_str(&format!("<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"2.5\" fill=\"{colour}\"/>\n"));
            }
        }
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let lx = LEFT + plot_w - 120.0;
        line(&mut s, (lx, ly - 4.0), (lx + 20.0, ly - 4.0), colour, 2.0);
        text(&mut s, lx + 26.0, ly, "start", "", label);
    }
    s.push_str("</svg>\n");
    s
}

/// A line segment from `a` to `b`.
fn line(s: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), stroke: &str, width: f64) {
    s.push_str(&format!("<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" "));
    s.push_str(&format!("stroke=\"{stroke}\" stroke-width=\"{width}\"/>\n"));
}

/// A text element; `content` is escaped, `attrs` is written as is.
fn text(s: &mut String, x: f64, y: f64, anchor: &str, attrs: &str, content: &str) {
    s.push_str(&format!(
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\" {attrs}>{}</text>\n",
        escape(content)
    ));
}

/// A tick spacing of 1, 2 or 5 × 10^k giving at most ten ticks over `span`.
fn tick_interval(span: f64) -> f64 {
    let mut unit = 1.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if span / (m * unit) <= 10.0 {
                return m * unit;
            }
        }
        unit *= 10.0;
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(n: u64) -> Vec<StepMetrics> {
        (1..=n)
            .map(|i| StepMetrics { step: i, reward_mean: i as f64 / n as f64, pass_rate: 0.5, ..Default::default() })
            .collect()
    }

    fn points_of(polyline: &str) -> usize {
        let start = polyline.find("points=\"").unwrap() + 8;
        let end = start + polyline[start..].find('"').unwrap();
        polyline[start..end].split_whitespace().count()
    }

    #[test]
    fn two_series_with_one_point_per_step() {
        let svg = reward_svg(&steps(30), "run <1> & co");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let polylines: Vec<&str> = svg.lines().filter(|l| l.contains("<polyline")).collect();
        assert_eq!(polylines.len(), 2);
        for p in polylines {
            assert_eq!(points_of(p), 30);
        }
        assert!(svg.contains("run &lt;1&gt; &amp; co"));
        assert!(svg.contains("reward mean") && svg.contains("pass rate") && svg.contains(">0.50<"));
        // Every opened element is closed (self-closing or matched): a cheap well-formedness check.
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        let opened = svg.matches('<').count();
        let closed = svg.matches("/>").count() + svg.matches("</").count() * 2;
        assert_eq!(opened, closed);
    }

    #[test]
    fn nan_points_are_left_out_and_empty_runs_draw() {
        let mut m = steps(3);
        m[1].pass_rate = f64::NAN;
        let svg = reward_svg(&m, "t");
        let counts: Vec<usize> = svg.lines().filter(|l| l.contains("<polyline")).map(points_of).collect();
        assert_eq!(counts, vec![3, 2]);
        assert!(reward_svg(&[], "t").contains("no steps yet"));
        assert!(!reward_svg(&steps(1), "t").contains("NaN"));
    }

    #[test]
    fn written_atomically() {
        let d = std::env::temp_dir().join(format!("plot-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("reward.svg");
        std::fs::write(&path, "old").unwrap();
        write_reward_svg(&path, &steps(5), "t").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("<svg"));
        let names: Vec<String> =
            std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, vec!["reward.svg".to_string()], "no temp file is left behind");
        let err = write_reward_svg(&d.join("missing/reward.svg"), &steps(1), "t").unwrap_err().to_string();
        assert!(err.contains("missing/reward.svg"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_interval(1.0), 1.0);
        assert_eq!(tick_interval(29.0), 5.0);
        assert_eq!(tick_interval(200.0), 20.0);
    }
}
