//! The summary table for the terminal and a self-contained HTML report with inline
//! SVG plots (per-task bars, time and token distributions).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::results::ResultsFile;
use agent_core::tools::ToolFormat;

/// The terminal summary.
pub fn summary_table(r: &ResultsFile, wall_secs: Option<f64>) -> String {
    let s = &r.stats;
    let mut o = String::new();
    let model = r.model.as_deref().map(|m| format!(", model {m}")).unwrap_or_default();
    let _ = writeln!(o, "run {} — agent {:?}{model}", r.run_id, r.agent);
    let _ = writeln!(o, "  tasks {}   trials {}   resolved {}", s.n_tasks, s.n_trials, s.n_resolved);
    let _ = writeln!(o, "  accuracy   {:>6.1}% ± {:.1}% (standard error)", s.accuracy * 100.0, s.stderr * 100.0);
    for (k, v) in &s.pass_at_k {
        let _ = writeln!(o, "  pass@{k:<4}   {:>6.1}%", v * 100.0);
    }
    for (title, groups) in [("category", &s.by_category), ("difficulty", &s.by_difficulty)] {
        let _ = writeln!(o, "  by {title}:");
        for (name, g) in groups {
            let _ = writeln!(o, "    {name:<24} {:>3}/{:<3} {:>6.1}%", g.resolved, g.trials, g.accuracy * 100.0);
        }
    }
    let modes: Vec<String> = s.failure_modes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(o, "  failure modes: {}", modes.join(", "));
    let verified: Vec<String> = s.verified_by.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(o, "  verified by:   {}", verified.join(", "));
    let _ = writeln!(
        o,
        "  tokens: {} prompt + {} completion   trial time: {:.1} s total, {:.1} s mean{}",
        s.tokens.prompt_tokens,
        s.tokens.completion_tokens,
        s.trial_secs_total,
        s.trial_secs_mean,
        wall_secs.map(|w| format!(", wall {w:.1} s")).unwrap_or_default()
    );
    if s.turns > 0 {
        let formats: std::collections::BTreeSet<&str> =
            r.trials.iter().filter_map(|t| t.tool_format).map(ToolFormat::as_str).collect();
        let formats: Vec<&str> = formats.into_iter().collect();
        let _ = writeln!(
            o,
            "  turns: {}   with a parse error: {} ({:.1}% of turns)   tool format: {}",
            s.turns,
            s.parse_error_turns,
            s.parse_error_rate * 100.0,
            if formats.is_empty() { "-".to_string() } else { formats.join(", ") }
        );
        let _ = writeln!(
            o,
            "  repeated calls: {} (in {} of {} trials)",
            s.repeated_calls, s.trials_with_repeated_calls, s.n_trials
        );
        if s.foreign_letter_turns > 0 {
            let _ = writeln!(
                o,
                "  turns writing letters nothing showed: {} (see `foreign_letters` in the trajectories: a damaged model?)",
                s.foreign_letter_turns
            );
        }
    }
    let _ = writeln!(o, "  per task:");
    let mut per_task: BTreeMap<&str, Vec<&super::results::TrialRecord>> = BTreeMap::new();
    for t in &r.trials {
        per_task.entry(&t.task).or_default().push(t);
    }
    for (task, trials) in per_task {
        let marks: String = trials.iter().map(|t| if t.resolved { '✓' } else { '✗' }).collect();
        let why: Vec<String> = trials
            .iter()
            .filter(|t| t.failure_mode != super::results::FailureMode::Unset)
            .map(|t| {
                format!(
                    "#{} {}: {}",
                    t.attempt,
                    t.failure_mode.as_str(),
                    t.reason.chars().take(120).collect::<String>()
                )
            })
            .collect();
        let _ = writeln!(o, "    {marks:<4} {task:<28} {}", why.join("; "));
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Horizontal bars: one row per (label, value in 0..=1, text).
fn bars_svg(rows: &[(String, f64, String)]) -> String {
    let row_h = 18;
    let label_w = 220;
    let bar_w = 360;
    let h = rows.len() * row_h + 10;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{h}" font-family="sans-serif" font-size="12">"#,
        label_w + bar_w + 90
    );
    for (i, (label, v, text)) in rows.iter().enumerate() {
        let y = i * row_h + 5;
        let w = (v.clamp(0.0, 1.0) * bar_w as f64).round();
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{label_w}" y="{y}" width="{bar_w}" height="{}" fill="#eee"/><rect x="{label_w}" y="{y}" width="{w}" height="{}" fill="#3a7"/><text x="{}" y="{}">{}</text>"##,
            label_w - 6,
            y + 12,
            esc(label),
            row_h - 4,
            row_h - 4,
            label_w + bar_w + 6,
            y + 12,
            esc(text)
        );
    }
    s.push_str("</svg>");
    s
}

/// A histogram of `values` in `bins` equal bins.
fn histogram_svg(values: &[f64], bins: usize, unit: &str) -> String {
    if values.is_empty() {
        return "<p>(no data)</p>".into();
    }
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let span = (max - min).max(1e-9);
    let mut counts = vec![0usize; bins];
    for v in values {
        let i = (((v - min) / span) * bins as f64).floor() as usize;
        counts[i.min(bins - 1)] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1);
    let (w, h, pad) = (520.0, 160.0, 24.0);
    let bw = w / bins as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">"#,
        w + 2.0 * pad,
        h + 2.0 * pad
    );
    for (i, c) in counts.iter().enumerate() {
        let bh = *c as f64 / top as f64 * h;
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="#47a"><title>{c}</title></rect>"##,
            pad + i as f64 * bw + 1.0,
            pad + h - bh,
            (bw - 2.0).max(1.0)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{pad}" y="{}">{min:.1} {unit}</text><text x="{}" y="{}" text-anchor="end">{max:.1} {unit}</text><text x="{pad}" y="14">max count {top}</text></svg>"#,
        h + pad + 16.0,
        w + pad,
        h + pad + 16.0
    );
    s
}

/// A multi-step trial's steps with their rewards (`create 1 · append 0.5 · count –`);
/// empty for a single-step trial.
fn step_rewards(t: &super::results::TrialRecord) -> String {
    let Some(steps) = &t.steps else { return String::new() };
    steps
        .iter()
        .map(|s| {
            let reward = s.reward.map(|r| format!("{r}")).unwrap_or_else(|| "–".into());
            let cls = if s.reward.is_some_and(|r| r >= 1.0) { "ok" } else { "ko" };
            format!("{} <span class=\"{cls}\">{reward}</span>", esc(&s.name))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The self-contained HTML report.
pub fn html_report(r: &ResultsFile) -> String {
    let s = &r.stats;
    let mut per_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for t in &r.trials {
        let e = per_task.entry(&t.task).or_default();
        e.0 += 1;
        e.1 += t.resolved as usize;
    }
    let task_rows: Vec<(String, f64, String)> =
        per_task.iter().map(|(k, (n, c))| (k.to_string(), *c as f64 / *n as f64, format!("{c}/{n}"))).collect();
    let times: Vec<f64> = r.trials.iter().map(|t| t.timings.total_secs).collect();
    let tokens: Vec<f64> =
        r.trials.iter().map(|t| (t.usage.prompt_tokens + t.usage.completion_tokens) as f64).collect();
    let mode_rows: Vec<(String, f64, String)> =
        s.failure_modes.iter().map(|(k, v)| (k.clone(), *v as f64 / s.n_trials.max(1) as f64, v.to_string())).collect();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>agent bench {id}</title><style>\
         body{{font-family:sans-serif;margin:2em;max-width:1000px}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}}.ok{{color:#171}}.ko{{color:#a22}}</style></head><body>\
         <h1>agent bench — run {id}</h1><p>agent <b>{agent:?}</b>{model}; {n} trials of {tasks} tasks</p>\
         <h2>Score</h2><table><tr><th>accuracy</th><td>{acc:.1}% ± {se:.1}%</td></tr>",
        id = esc(&r.run_id),
        agent = r.agent,
        model = r.model.as_deref().map(|m| format!(", model <code>{}</code>", esc(m))).unwrap_or_default(),
        n = s.n_trials,
        tasks = s.n_tasks,
        acc = s.accuracy * 100.0,
        se = s.stderr * 100.0
    );
    for (k, v) in &s.pass_at_k {
        let _ = write!(h, "<tr><th>pass@{k}</th><td>{:.1}%</td></tr>", v * 100.0);
    }
    let _ = write!(
        h,
        "<tr><th>tokens</th><td>{} prompt, {} completion</td></tr><tr><th>trial time</th><td>{:.1} s total, {:.1} s mean</td></tr>\
         <tr><th>repeated calls</th><td>{} (in {} of {} trials)</td></tr></table>",
        s.tokens.prompt_tokens,
        s.tokens.completion_tokens,
        s.trial_secs_total,
        s.trial_secs_mean,
        s.repeated_calls,
        s.trials_with_repeated_calls,
        s.n_trials
    );
    let _ = write!(h, "<h2>Resolved per task</h2>{}", bars_svg(&task_rows));
    let _ = write!(h, "<h2>Failure modes</h2>{}", bars_svg(&mode_rows));
    for (title, groups) in [("category", &s.by_category), ("difficulty", &s.by_difficulty)] {
        let rows: Vec<(String, f64, String)> =
            groups.iter().map(|(k, g)| (k.clone(), g.accuracy, format!("{}/{}", g.resolved, g.trials))).collect();
        let _ = write!(h, "<h2>By {title}</h2>{}", bars_svg(&rows));
    }
    let _ = write!(h, "<h2>Trial time</h2>{}", histogram_svg(&times, 12, "s"));
    let _ = write!(h, "<h2>Tokens per trial</h2>{}", histogram_svg(&tokens, 12, "tok"));
    h.push_str("<h2>Trials</h2><table><tr><th>task</th><th>#</th><th>resolved</th><th>failure mode</th><th>verified by</th><th>time (s)</th><th>tokens</th><th>repeated calls</th><th>step rewards</th><th>reason</th></tr>");
    for t in &r.trials {
        let verified = t
            .verified_by
            .and_then(|v| serde_json::to_value(v).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<tr><td><a href=\"{task}/attempt-{a}/\">{task}</a></td><td>{a}</td><td class=\"{cls}\">{res}</td><td>{fm}</td><td>{verified}</td><td>{secs:.1}</td><td>{tok}</td><td>{rep}</td><td>{steps}</td><td>{reason}</td></tr>",
            task = esc(&t.task),
            a = t.attempt,
            cls = if t.resolved { "ok" } else { "ko" },
            res = if t.resolved { "yes" } else { "no" },
            fm = t.failure_mode.as_str(),
            secs = t.timings.total_secs,
            tok = t.usage.prompt_tokens + t.usage.completion_tokens,
            rep = t.repeated_calls,
            steps = step_rewards(t),
            reason = esc(&t.reason)
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{FailureMode, Timings, TrialRecord};
    use crate::AgentKind;

    #[test]
    fn report_and_table_show_the_numbers() {
        let trial = |task: &str, resolved: bool| TrialRecord {
            task: task.into(),
            attempt: 0,
            resolved,
            failure_mode: if resolved { FailureMode::Unset } else { FailureMode::ParseError },
            reason: if resolved { String::new() } else { "no <summary>".into() },
            verified_by: None,
            verify_note: None,
            tests: vec![],
            score: 0.0,
            difficulty: Some("easy".into()),
            category: None,
            usage: Default::default(),
            turns: 4,
            parse_error_turns: 0,
            repeated_calls: if resolved { 0 } else { 2 },
            foreign_letter_turns: 0,
            tool_format: None,
            agent_ended: String::new(),
            agent_end_reason: None,
            timings: Timings { total_secs: 1.5, ..Default::default() },
            started_at_unix_ms: 0,
            standins: Default::default(),
            notices: Vec::new(),
            engine: None,
            lost_on: Vec::new(),
            steps: None,
        };
        let mut multi = trial("c", false);
        let step = |name: &str, reward: Option<f64>| crate::results::StepRecord {
            name: name.into(),
            reward,
            ..Default::default()
        };
        multi.steps = Some(vec![step("create", Some(1.0)), step("append", Some(0.5)), step("<count>", None)]);
        let trials = vec![trial("a", true), trial("b", false), multi];
        let stats = crate::stats::summarise(&trials);
        let r = ResultsFile {
            run_id: "r1".into(),
            agent: AgentKind::Oracle,
            model: None,
            n_trials: 3,
            n_resolved: 1,
            accuracy: 1.0 / 3.0,
            stats,
            standins: Default::default(),
            trials,
        };
        let t = summary_table(&r, Some(3.0));
        assert!(t.contains("accuracy     33.3%") && t.contains("parse_error 2") && t.contains("pass@1"), "{t}");
        assert!(t.contains("repeated calls: 4 (in 2 of 3 trials)"), "{t}");
        let h = html_report(&r);
        assert!(h.contains("<svg") && h.contains("no &lt;summary&gt;") && h.contains("33.3%"));
        assert!(h.contains("<th>repeated calls</th><td>4 (in 2 of 3 trials)</td>"), "{h}");
        assert!(h.contains("<td>2</td><td></td><td>no &lt;summary&gt;</td>"), "the trial's count in its row: {h}");
        // A multi-step trial's row has each step's reward; a step that wrote none shows –.
        assert!(h.contains("<th>step rewards</th>"), "{h}");
        let want = "<td>create <span class=\"ok\">1</span> · append <span class=\"ko\">0.5</span> · \
                    &lt;count&gt; <span class=\"ko\">–</span></td>";
        assert!(h.contains(want), "{h}");
        assert!(!h.contains("http://") || h.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    }
}
