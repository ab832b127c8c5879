//! Images of a run: each task's images are built once and shared by its trials, and
//! Terminal-Bench base images are mapped to local stand-ins that carry what the
//! tasks' scripts expect of them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agent_sandbox::Engine;
use tokio::sync::OnceCell;

use super::compose::ImageSource;
use super::error::ImageError;
use super::task::BenchTask;
use agent_sandbox::{BuildEnv, ImageMap};

/// Bench stand-ins: (pattern, local tag, Dockerfile body after `FROM`, `FROM` image).
/// The sandbox's stand-ins are Debian's Python; these add `uv` from PyPI (the tasks'
/// scripts fetch it from astral.sh, which air-gapped hosts cannot reach) and, for the
/// Python image, the `/usr/local/lib/python3.13/site-packages` path the tasks use.
const BENCH_STANDINS: &[(&str, &str, &str, &str)] = &[
    (
        "ghcr.io/laude-institute/t-bench/python-3-13:*",
        "agent-bench-python-3-13:local",
        "RUN mkdir -p /usr/local/lib/python3.13 && ln -s /usr/lib/python3/dist-packages /usr/local/lib/python3.13/site-packages && python3 -m pip install --no-cache-dir -q uv",
        "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
    ),
    (
        "python:3*",
        "agent-bench-python-3-13:local",
        "",
        "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
    ),
    (
        "ghcr.io/laude-institute/t-bench/ubuntu-24-04:*",
        "agent-bench-ubuntu-24-04:local",
        "RUN python3 -m pip install --no-cache-dir -q uv",
        "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624",
    ),
];

/// The images of one task's environment: service name → image.
#[derive(Debug, Clone)]
pub struct TaskImages {
    pub by_service: HashMap<String, String>,
    /// Seconds the build took (0 when every layer was cached).
    pub build_secs: f64,
    /// Image substitutions made, for the trial log.
    pub notices: Vec<String>,
}

type Slot = Arc<OnceCell<Result<TaskImages, ImageError>>>;
type StandinSlot = Arc<OnceCell<Result<(), ImageError>>>;

/// Builds task images once per run.
pub struct ImageCache {
    docker: Engine,
    map: ImageMap,
    build_env: BuildEnv,
    tasks: Mutex<HashMap<String, Slot>>,
    standins: Mutex<HashMap<String, StandinSlot>>,
}

impl ImageCache {
    /// `user_map` wins over the bench's own stand-ins.
    pub fn new(docker: Engine, user_map: &ImageMap, build_env: BuildEnv) -> Self {
        let mut map = user_map.clone();
        for (pat, tag, _, _) in BENCH_STANDINS {
            if user_map.lookup(pat.trim_end_matches('*')).is_none() {
                map.0.entry(pat.to_string()).or_insert_with(|| tag.to_string());
            }
        }
        Self { docker, map, build_env, tasks: Mutex::new(HashMap::new()), standins: Mutex::new(HashMap::new()) }
    }

    /// The task's images, built on first use; a failed build fails every later call
    /// for the task the same way.
    pub async fn get(&self, task: &BenchTask) -> Result<TaskImages, ImageError> {
        let slot = {
            let mut tasks = self.tasks.lock().map_err(|_| ImageError::Poisoned)?;
            tasks.entry(task.name.clone()).or_default().clone()
        };
        slot.get_or_init(|| self.build(task)).await.clone()
    }

    async fn build(&self, task: &BenchTask) -> Result<TaskImages, ImageError> {
        let started = Instant::now();
        let mut by_service = HashMap::new();
        let mut notices = Vec::new();
        for service in &task.environment.services {
            let image = match &service.image {
                ImageSource::Named(name) => {
                    self.ensure_standin_for(name).await?;
                    let mut on_notice = |n: String| notices.push(n);
                    agent_sandbox::resolve_image(&self.docker, &self.map, name, &mut on_notice)
                        .await
                        .map_err(|e| ImageError::Resolve { service: service.name.clone(), source: Arc::new(e) })?
                }
                ImageSource::Build { context, dockerfile } => {
                    for from in from_images(dockerfile) {
                        self.ensure_standin_for(&from).await?;
                    }
                    let tag = format!(
                        "agent-bench-{}-{}:latest",
                        agent_sandbox::docker_name_part(&task.name),
                        agent_sandbox::docker_name_part(&service.name)
                    );
                    let mut on_notice = |n: String| notices.push(n);
                    let mut errors: Vec<String> = Vec::new();
                    let mut on_log = |l: &str| {
                        tracing::debug!("build {tag}: {l}");
                        let clean = agent_sandbox::sanitize(l.as_bytes()).trim().to_string();
                        if errors.len() < 3 && looks_like_error(&clean) {
                            errors.push(clean);
                        }
                    };
                    let built = agent_sandbox::build_task_image_with(
                        &self.docker,
                        &self.map,
                        context,
                        dockerfile,
                        &tag,
                        &self.build_env,
                        &mut on_notice,
                        &mut on_log,
                    )
                    .await;
                    // The engine's message names the failed step; the cause is usually
                    // an earlier line (a failed download, a missing host).
                    built.map_err(|e| ImageError::Build {
                        service: service.name.clone(),
                        dockerfile: dockerfile.display().to_string(),
                        first_errors: errors,
                        source: Arc::new(e),
                    })?
                }
            };
            by_service.insert(service.name.clone(), image);
        }
        Ok(TaskImages { by_service, build_secs: started.elapsed().as_secs_f64(), notices })
    }

    /// Builds the bench stand-in `image` maps to, if it maps to one.
    async fn ensure_standin_for(&self, image: &str) -> Result<(), ImageError> {
        let Some(tag) = self.map.lookup(image).map(str::to_string) else { return Ok(()) };
        let Some((_, _, _, _)) = BENCH_STANDINS.iter().find(|(_, t, body, _)| *t == tag && !body.is_empty()) else {
            return Ok(());
        };
        let slot = {
            let mut s = self.standins.lock().map_err(|_| ImageError::Poisoned)?;
            s.entry(tag.clone()).or_default().clone()
        };
        slot.get_or_init(|| self.build_standin(tag.clone())).await.clone()
    }

    async fn build_standin(&self, tag: String) -> Result<(), ImageError> {
        if agent_sandbox::image_exists(&self.docker, &tag).await.unwrap_or(false) {
            return Ok(());
        }
        let Some((_, _, body, from)) = BENCH_STANDINS.iter().find(|(_, t, b, _)| *t == tag && !b.is_empty()) else {
            return Ok(());
        };
        let dir = tempfile::tempdir().map_err(|e| ImageError::StandinDir { tag: tag.clone(), source: Arc::new(e) })?;
        let df = dir.path().join("Dockerfile");
        std::fs::write(&df, format!("FROM {from}\n{body}\n"))
            .map_err(|e| ImageError::StandinDockerfile { path: df.display().to_string(), source: Arc::new(e) })?;
        // The stand-in's own FROM goes through the user's map only, not to itself.
        let mut map = self.map.clone();
        map.0.retain(|_, v| !BENCH_STANDINS.iter().any(|(_, t, _, _)| t == v));
        agent_sandbox::build_task_image_with(
            &self.docker,
            &map,
            dir.path(),
            &df,
            &tag,
            &self.build_env,
            &mut |n| tracing::info!("{n}"),
            &mut |l| tracing::debug!("build {tag}: {l}"),
        )
        .await
        .map(|_| ())
        .map_err(|e| ImageError::Standin { tag: tag.clone(), source: Arc::new(e) })
    }
}

/// The images named by `FROM` lines of a Dockerfile (stage names included; they map
/// to nothing).
fn from_images(dockerfile: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dockerfile).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let t = l.trim_start();
            if t.len() >= 5 && t[..5].eq_ignore_ascii_case("FROM ") {
                t[5..].split_whitespace().find(|w| !w.starts_with("--")).map(str::to_string)
            } else {
                None
            }
        })
        .collect()
}

/// Build output lines that usually carry the cause of a failed build.
fn looks_like_error(line: &str) -> bool {
    let l = line.to_lowercase();
    ["could not resolve", "unable to access", "fatal:", "error:", "err:", "no matching distribution", "not found"]
        .iter()
        .any(|p| l.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_lines_and_names() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("Dockerfile");
        std::fs::write(&p, "FROM --platform=x a:1 AS b\nRUN x\nfrom b\n").unwrap();
        assert_eq!(from_images(&p), ["a:1", "b"]);
        assert!(looks_like_error("fatal: unable to access 'https://github.com/x/': Could not resolve host"));
        assert!(!looks_like_error("Step 3/5 : RUN make"));
    }
}
