//! The builder role: an episode of our agent, in a sandbox with the draft's folder
//! mounted at `/task`, writes the task from an idea; the harness validates it, and
//! while it is invalid the next episode starts from the same folder with the
//! validation's findings, up to the plan's rounds.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::episode::RoleEpisode;
use super::idea::Idea;
use super::index::{TokenCost, ValidationSummary};
use super::queue::{Item, Outcome, Role};
use super::run::{RoleOutput, SynthCtx};
use super::{scaffold, slug};
use crate::validate::{TaskReport, Verdict};

/// A review item's input: a validated draft.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Built {
    pub idea: Idea,
    /// The build item's id.
    pub build_id: String,
    /// The task's name once accepted.
    pub name: String,
    pub draft: std::path::PathBuf,
    pub rounds: u32,
    pub validation: ValidationSummary,
    pub tokens: TokenCost,
}

/// The task folder name of a build: its title's slug and a hash of the build id.
pub fn task_name(title: &str, build_id: &str) -> String {
    let hash = format!("{:x}", Sha256::digest(build_id.as_bytes()));
    let stem = slug(title, 40);
    if stem.is_empty() {
        format!("task-{}", &hash[..6])
    } else {
        format!("{stem}-{}", &hash[..6])
    }
}

/// The findings of a validation, as the builder's next round reads them.
pub fn feedback(report: &TaskReport) -> String {
    let mut s = format!("- verdict: {} — {}", report.verdict.as_str(), report.reason);
    for w in &report.warnings {
        s.push_str(&format!("\n- also: {w}"));
    }
    s.push_str("\n(the runs' logs are outside your container; the failing check says what to fix)");
    s
}

/// What validation said, kept with the task.
pub fn summary(report: &TaskReport) -> ValidationSummary {
    ValidationSummary {
        verdict: report.verdict,
        nop_score: report.nop_score,
        oracle_passes: report.oracle_passes,
        oracle_runs: report.oracle_runs,
        warnings: report.warnings.clone(),
        times: report.times.clone(),
    }
}

/// Runs a build item.
pub async fn run(ctx: &SynthCtx, item: &Item) -> RoleOutput {
    let idea: Idea = match serde_json::from_value(item.payload.clone()) {
        Ok(i) => i,
        Err(e) => return RoleOutput::failed(format!("the item's input is not an idea: {e}")),
    };
    let work = ctx.dirs.work(&item.id);
    // Its own name: the task's images are tagged by the folder's name, and drafts are
    // built side by side.
    let draft = work.join(format!("draft-{}", slug(&item.id, 60)));
    if let Err(e) = scaffold::write_draft(&draft, &format!("# {}\n\n{}\n", idea.title, idea.idea)) {
        return RoleOutput::failed(e.to_string());
    }
    let base = include_str!("prompts/builder.md").replace("{idea}", &format!("{}\n{}", idea.title, idea.idea));
    let mut tokens = 0;
    let mut last: Option<TaskReport> = None;
    for round in 1..=ctx.plan.build_rounds.max(1) {
        let mut instruction = base.clone();
        if let Some(report) = &last {
            instruction.push_str(&include_str!("prompts/builder_feedback.md").replace("{report}", &feedback(report)));
        }
        let episode = RoleEpisode {
            docker: &ctx.docker,
            config: &ctx.config,
            model: &ctx.models.builder,
            run_id: &ctx.run_id,
            episode_id: format!("{}-b{round}-c{}", item.id, item.claims),
            binds: vec![(draft.clone(), "/task")],
            workdir: "/task",
            instruction,
            max_turns: ctx.plan.episode_turns,
            wall_clock_secs: ctx.plan.episode_secs,
            logs: work.join(format!("build-{round}")),
        }
        .run()
        .await;
        tokens += episode.tokens();
        if episode.end.is_none() {
            let why = episode.error.unwrap_or_else(|| "the episode ended without an end event".into());
            return RoleOutput {
                outcome: Outcome::Failed { reason: format!("the builder's episode failed: {why}") },
                children: vec![],
                tokens,
            };
        }
        let report = ctx.validator.validate_dir(&draft, &work.join(format!("validate-{round}"))).await;
        if report.verdict == Verdict::Valid {
            let built = Built {
                name: task_name(&idea.title, &item.id),
                build_id: item.id.clone(),
                draft: draft.clone(),
                rounds: round,
                validation: summary(&report),
                tokens: TokenCost { idea: idea.idea_tokens, build: tokens, ..Default::default() },
                idea,
            };
            let child = item.child("review", Role::Review, &built);
            return RoleOutput {
                outcome: Outcome::Done {
                    result: serde_json::json!({ "rounds": round, "validation": built.validation }),
                },
                children: vec![child],
                tokens,
            };
        }
        last = Some(report);
    }
    let reason = match &last {
        Some(r) => format!(
            "invalid after {} builder round(s): {}: {}",
            ctx.plan.build_rounds.max(1),
            r.verdict.as_str(),
            r.reason.chars().take(400).collect::<String>()
        ),
        None => "the builder made nothing".into(),
    };
    RoleOutput { outcome: Outcome::Rejected { reason }, children: vec![], tokens }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_are_slugs_with_a_stable_hash() {
        let a = task_name("Count the words", "hello-world.1");
        assert!(a.starts_with("count-the-words-") && a.len() == "count-the-words-".len() + 6, "{a}");
        assert_eq!(a, task_name("Count the words", "hello-world.1"));
        assert_ne!(a, task_name("Count the words", "hello-world.2"));
        assert!(task_name("!!!", "x").starts_with("task-"));
    }
}
