//! One episode of our agent for a pipeline role: a container of the config's sandbox
//! image with the role's folders mounted, one instruction, run to its end; the same
//! loop as `agent run`, built by the one episode builder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agents::{drive, ModelSource};
use agent_core::config::Config;
use agent_core::episode::{build_episode, ContainerSource, EpisodeRequest, ImageContainer};
use agent_protocol::{EndReason, TokenUsage};
use agent_sandbox::Engine;

/// What a role's episode is.
pub struct RoleEpisode<'a> {
    pub docker: &'a Engine,
    pub config: &'a Config,
    pub model: &'a ModelSource,
    pub run_id: &'a str,
    pub episode_id: String,
    /// `host:container` folders to mount (read-write).
    pub binds: Vec<(PathBuf, &'static str)>,
    pub workdir: &'static str,
    pub instruction: String,
    pub max_turns: u32,
    pub wall_clock_secs: u64,
    /// Where the trajectory and the events go.
    pub logs: PathBuf,
}

/// How it ended.
#[derive(Debug, Clone, Default)]
pub struct EpisodeResult {
    /// `None` when the episode did not start or ended without an end event.
    pub end: Option<EndReason>,
    pub turns: u32,
    pub usage: TokenUsage,
    /// Why it did not start, or its last error.
    pub error: Option<String>,
}

impl EpisodeResult {
    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.usage.prompt_tokens + self.usage.completion_tokens
    }
}

impl RoleEpisode<'_> {
    /// Runs the episode to its end; the container is removed on every path.
    pub async fn run(self) -> EpisodeResult {
        let mut result = EpisodeResult::default();
        let model = match self.model.get().await {
            Ok(m) => m,
            Err(e) => {
                result.error = Some(e);
                return result;
            }
        };
        if let Err(e) = std::fs::create_dir_all(&self.logs) {
            result.error = Some(format!("{}: cannot create the log folder: {e}", self.logs.display()));
            return result;
        }
        let mut wanted = ImageContainer::new(self.config.sandbox.image.clone());
        wanted.binds =
            self.binds.iter().map(|(host, inside)| format!("{}:{inside}", absolute(host).display())).collect();
        wanted.workdir = Some(self.workdir.to_string());
        wanted.name_prefix = "agent-synth".into();
        let mut request =
            EpisodeRequest::headless(self.config, ContainerSource::Image(wanted), self.run_id, &self.episode_id);
        request.limits.max_turns = self.max_turns;
        request.limits.wall_clock_secs = self.wall_clock_secs;
        request.trajectory = Some(self.logs.join("trajectory.jsonl"));
        let episode = match build_episode(self.docker, self.config, model.as_ref(), request, &mut |_| {}).await {
            Ok(e) => e,
            Err(e) => {
                result.error = Some(e.to_string());
                return result;
            }
        };
        let mut running = episode.spawn(model);
        let driven = drive(
            &mut running.handle,
            self.instruction,
            Duration::from_secs(self.wall_clock_secs + 30),
            &self.logs.join("events.jsonl"),
        )
        .await;
        if let Some((reason, turns, usage)) = driven.end {
            result.end = Some(reason);
            result.turns = turns;
            result.usage = usage;
        }
        result.error = driven.last_error;
        running.finish(Duration::from_secs(10)).await;
        result
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
