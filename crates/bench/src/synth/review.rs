//! The reviewer role: an episode that reads a validated task (mounted at `/task`), may
//! fix it, and writes its decision to `/review/verdict.json`. A task it changed is
//! validated again; an approved one is checked for near-duplicates and lands in
//! `tasks/` (then calibration, when the plan has it).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::build::{summary, Built};
use super::episode::RoleEpisode;
use super::index::IndexEntry;
use super::queue::{Item, Outcome, Role};
use super::run::{RoleOutput, SynthCtx};
use super::scaffold;
use super::similar::{nearest, Fingerprint};
use crate::validate::Verdict;

/// Difficulties a reviewer may give.
const DIFFICULTIES: &[&str] = &["easy", "medium", "hard"];

/// What a reviewer decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewVerdict {
    pub verdict: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub category: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub difficulty: String,
}

impl ReviewVerdict {
    /// Reads `verdict.json`; what a model would get slightly wrong is normalised
    /// (case, a difficulty out of the scale), what it cannot mean is an error.
    pub fn parse(text: &str) -> Result<ReviewVerdict, String> {
        let start = text.find('{').ok_or("no JSON object")?;
        let end = text.rfind('}').ok_or("no JSON object")?;
        let mut v: ReviewVerdict =
            serde_json::from_str(&text[start..=end]).map_err(|e| format!("not a verdict object: {e}"))?;
        v.verdict = v.verdict.trim().to_lowercase();
        if !["approve", "reject"].contains(&v.verdict.as_str()) {
            return Err(format!("\"verdict\" is `{}`, not approve or reject", v.verdict));
        }
        v.difficulty = v.difficulty.trim().to_lowercase();
        if !DIFFICULTIES.contains(&v.difficulty.as_str()) {
            v.difficulty = "medium".into();
        }
        v.category = super::slug(&v.category, 40);
        if v.category.is_empty() {
            v.category = "uncategorised".into();
        }
        v.tags = v.tags.iter().map(|t| super::slug(t, 30)).filter(|t| !t.is_empty()).take(8).collect();
        Ok(v)
    }
}

/// Runs a review item.
pub async fn run(ctx: &SynthCtx, item: &Item) -> RoleOutput {
    let built: Built = match serde_json::from_value(item.payload.clone()) {
        Ok(b) => b,
        Err(e) => return RoleOutput::failed(format!("the item's input is not a built task: {e}")),
    };
    let work = ctx.dirs.work(&item.id);
    let verdict_dir = work.join("review");
    if let Err(e) = std::fs::create_dir_all(&verdict_dir) {
        return RoleOutput::failed(format!("{}: {e}", verdict_dir.display()));
    }
    let verdict_file = verdict_dir.join("verdict.json");
    let _ = std::fs::remove_file(&verdict_file);
    let before = scaffold::fingerprint(&built.draft);
    let episode = RoleEpisode {
        docker: &ctx.docker,
        config: &ctx.config,
        model: &ctx.models.reviewer,
        run_id: &ctx.run_id,
        episode_id: format!("{}-c{}", item.id, item.claims),
        binds: vec![(built.draft.clone(), "/task"), (verdict_dir.clone(), "/review")],
        workdir: "/task",
        instruction: include_str!("prompts/reviewer.md").to_string(),
        max_turns: ctx.plan.episode_turns,
        wall_clock_secs: ctx.plan.episode_secs,
        logs: work.join("episode"),
    }
    .run()
    .await;
    let mut tokens = built.tokens.clone();
    tokens.review = episode.tokens();
    let reject =
        |reason: String| RoleOutput { outcome: Outcome::Rejected { reason }, children: vec![], tokens: tokens.review };
    if episode.end.is_none() {
        let why = episode.error.unwrap_or_else(|| "the episode ended without an end event".into());
        return RoleOutput {
            outcome: Outcome::Failed { reason: format!("the reviewer's episode failed: {why}") },
            children: vec![],
            tokens: tokens.review,
        };
    }
    // Read with no-follow beneath its folder: the reviewer wrote it and may have left a link.
    let verdict = match agent_sandbox::read_confined(&verdict_dir, Path::new("verdict.json"), 1 << 20, "/review") {
        Ok(None) => return reject("the reviewer wrote no decision to /review/verdict.json".into()),
        Err(e) => return reject(format!("the reviewer's /review/verdict.json is unreadable: {e}")),
        Ok(Some(bytes)) => match ReviewVerdict::parse(&String::from_utf8_lossy(&bytes)) {
            Ok(v) => v,
            Err(e) => return reject(format!("the reviewer's /review/verdict.json is unreadable: {e}")),
        },
    };
    if verdict.verdict == "reject" {
        return reject(format!("the reviewer rejected it: {}", verdict.reason));
    }
    let mut validation = built.validation.clone();
    if scaffold::fingerprint(&built.draft) != before {
        let report = ctx.validator.validate_dir(&built.draft, &work.join("revalidate")).await;
        if report.verdict != Verdict::Valid {
            return reject(format!(
                "the reviewer's changes made it invalid: {}: {}",
                report.verdict.as_str(),
                report.reason.chars().take(300).collect::<String>()
            ));
        }
        validation = summary(&report);
    }

    // Accepting is one at a time: two near-identical tasks approved together must not
    // both pass the duplicate check.
    let mut accepted = ctx.accepted.lock().await;
    // Read beneath the draft with no-follow: the model wrote it.
    let instruction = agent_sandbox::read_confined(&built.draft, Path::new("instruction.md"), 1 << 20, "the draft")
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let print = Fingerprint::of_task(&built.name, &built.draft, &instruction);
    let near = {
        let known: Vec<Fingerprint> = ctx.seeds.iter().chain(accepted.iter()).cloned().collect();
        nearest(&print, &known).map(|(k, s)| (k.name.clone(), s))
    };
    if let Some((name, s)) = &near {
        if *s >= ctx.plan.max_similarity {
            return reject(format!(
                "a near-duplicate of `{name}` (similarity {s:.2} ≥ {:.2})",
                ctx.plan.max_similarity
            ));
        }
    }
    let dest = ctx.dirs.tasks().join(&built.name);
    if let Err(e) = scaffold::copy_task(&built.draft, &dest)
        .and_then(|_| scaffold::set_metadata(&dest, &verdict.category, &verdict.tags, &verdict.difficulty))
    {
        return RoleOutput::failed(format!("cannot write the accepted task: {e}"));
    }
    accepted.push(print);
    drop(accepted);

    tokens.total = tokens.idea + tokens.build + tokens.review;
    let seed = built.idea.seed.clone();
    let parent = built.build_id.rsplit_once('.').map(|(p, _)| p.to_string()).unwrap_or_else(|| seed.clone());
    let entry = IndexEntry {
        id: built.build_id.clone(),
        name: built.name.clone(),
        seed,
        parent,
        title: built.idea.title.clone(),
        category: verdict.category,
        tags: verdict.tags,
        difficulty: verdict.difficulty,
        build_rounds: built.rounds,
        validation,
        pass_rate: None,
        calibration_attempts: None,
        solver: None,
        nearest: near,
        tokens: tokens.clone(),
    };
    if ctx.plan.calibrate > 0 {
        let child = item.child("calibrate", Role::Calibrate, &entry);
        return RoleOutput {
            outcome: Outcome::Done { result: serde_json::json!({ "approved": entry.name }) },
            children: vec![child],
            tokens: tokens.review,
        };
    }
    RoleOutput::indexed(entry, tokens.review)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_leniently_but_must_decide() {
        let v = ReviewVerdict::parse(
            "```json\n{\"verdict\": \"Approve\", \"reason\": \"ok\", \"category\": \"Text Processing\", \"tags\": [\"wc\", \"\"], \"difficulty\": \"trivial\"}\n```",
        )
        .unwrap();
        assert_eq!(
            (v.verdict.as_str(), v.category.as_str(), v.difficulty.as_str()),
            ("approve", "text-processing", "medium")
        );
        assert_eq!(v.tags, vec!["wc"]);
        assert!(ReviewVerdict::parse("{\"verdict\": \"maybe\"}").unwrap_err().contains("maybe"));
        assert!(ReviewVerdict::parse("looks good").is_err());
    }
}
