//! The judge-eval report: a terminal ranking, and Markdown and self-contained HTML files
//! with one strip per case (the expected range as a band, each judgement as a dot).

use std::fmt::Write as _;

use super::eval::JudgeResult;

/// The ranking as a plain-text table.
pub fn ranking_table(results: &[JudgeResult]) -> String {
    let mut out = String::from("rank  pass rate  mean distance  variance  failures  judge\n");
    for (i, r) in results.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:>4}  {:>8.1}%  {:>13.3}  {:>8.4}  {:>8}  {}",
            i + 1,
            r.pass_rate * 100.0,
            r.mean_distance,
            r.mean_variance,
            r.failures,
            r.judge
        );
    }
    out
}

fn scores_text(scores: &[Option<f64>]) -> String {
    scores.iter().map(|s| s.map_or_else(|| "failed".to_string(), |s| format!("{s:.2}"))).collect::<Vec<_>>().join(", ")
}

/// The Markdown report.
pub fn markdown(results: &[JudgeResult], attempts: u32) -> String {
    let mut out = format!("# Judge evaluation\n\n{attempts} judgement(s) per case and judge.\n\n```\n");
    out.push_str(&ranking_table(results));
    out.push_str("```\n");
    for r in results {
        let _ = write!(out, "\n## {}\n\n| case | expected | scores | in range |\n|---|---|---|---|\n", r.judge);
        for c in &r.cases {
            let inside = c.scores.iter().flatten().filter(|s| **s >= c.expected[0] && **s <= c.expected[1]).count();
            let _ = writeln!(
                out,
                "| {} | {:.2}–{:.2} | {} | {}/{} |",
                c.case,
                c.expected[0],
                c.expected[1],
                scores_text(&c.scores),
                inside,
                c.scores.len()
            );
        }
        for c in r.cases.iter().filter(|c| !c.failures.is_empty()) {
            for f in &c.failures {
                let _ = writeln!(out, "\n- `{}` failed: {}", c.case, f.replace('\n', " "));
            }
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One case as an SVG strip 0..1: the expected band and a dot per judgement.
fn strip(expected: [f64; 2], scores: &[Option<f64>]) -> String {
    const W: f64 = 300.0;
    let mut svg = format!(
        "<svg width=\"{W}\" height=\"18\" viewBox=\"0 0 {W} 18\"><rect x=\"0\" y=\"8\" width=\"{W}\" height=\"2\" fill=\"#ddd\"/>\
         <rect x=\"{:.1}\" y=\"2\" width=\"{:.1}\" height=\"14\" fill=\"#b7e4c7\"/>",
        expected[0] * W,
        ((expected[1] - expected[0]) * W).max(2.0)
    );
    for s in scores.iter().flatten() {
        let inside = *s >= expected[0] && *s <= expected[1];
        let _ = write!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"9\" r=\"4\" fill=\"{}\"><title>{s:.2}</title></circle>",
            s.clamp(0.0, 1.0) * W,
            if inside { "#2d6a4f" } else { "#d00000" }
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The self-contained HTML report.
pub fn html(results: &[JudgeResult], attempts: u32) -> String {
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Judge evaluation</title><style>\
         body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}\
         table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
         th{background:#f4f4f4}.num{text-align:right}</style></head><body><h1>Judge evaluation</h1>",
    );
    let _ = write!(
        out,
        "<p>{attempts} judgement(s) per case and judge. Green band: the expected range; dots: judgements \
         (red outside the range).</p><table><tr><th>rank</th><th>judge</th><th>pass rate</th>\
         <th>mean distance</th><th>variance</th><th>failures</th></tr>"
    );
    for (i, r) in results.iter().enumerate() {
        let _ = write!(
            out,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{:.1}%</td><td class=\"num\">{:.3}</td>\
             <td class=\"num\">{:.4}</td><td class=\"num\">{}</td></tr>",
            i + 1,
            escape(&r.judge),
            r.pass_rate * 100.0,
            r.mean_distance,
            r.mean_variance,
            r.failures
        );
    }
    out.push_str("</table>");
    for r in results {
        let _ = write!(
            out,
            "<h2>{}</h2><table><tr><th>case</th><th>expected</th><th>0 … 1</th><th>scores</th></tr>",
            escape(&r.judge)
        );
        for c in &r.cases {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{:.2}–{:.2}</td><td>{}</td><td>{}</td></tr>",
                escape(&c.case),
                c.expected[0],
                c.expected[1],
                strip(c.expected, &c.scores),
                escape(&scores_text(&c.scores))
            );
        }
        out.push_str("</table>");
        for c in r.cases.iter().filter(|c| !c.failures.is_empty()) {
            for f in &c.failures {
                let _ = write!(out, "<p><b>{}</b> failed: {}</p>", escape(&c.case), escape(f));
            }
        }
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::eval::{summarise, CaseResult};

    #[test]
    fn reports_show_ranking_scores_and_failures() {
        let r = summarise(
            "openai:http://h/v1#m".into(),
            vec![CaseResult {
                case: "perfect-agent".into(),
                expected: [0.8, 1.0],
                scores: vec![Some(0.9), None],
                failures: vec!["the judge failed after 3 attempt(s): <bad>".into()],
            }],
        );
        let md = markdown(std::slice::from_ref(&r), 2);
        assert!(md.contains("| perfect-agent | 0.80–1.00 | 0.90, failed | 1/2 |"), "{md}");
        assert!(md.contains("50.0%"));
        let page = html(&[r], 2);
        assert!(page.contains("<svg") && page.contains("&lt;bad&gt;") && !page.contains("<bad>"));
    }
}
