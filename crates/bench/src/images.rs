//! Images of a run: each task's images are built once and shared by its trials, and
//! Terminal-Bench base images are mapped to local stand-ins that carry what the
//! tasks' scripts expect of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agent_sandbox::Engine;
use tokio::sync::OnceCell;

use super::compose::{ImageSource, Service};
use super::error::ImageError;
use super::task::BenchTask;
use agent_sandbox::{BuildEnv, ImageMap};

/// A bench stand-in: a sandbox stand-in plus what the tasks' scripts expect of the
/// image they name.
struct BenchStandin {
    pattern: &'static str,
    tag: &'static str,
    /// Dockerfile lines after `FROM` (empty: the tag is only an alias).
    body: &'static str,
    /// The image it is built `FROM` (resolved to the sandbox's stand-in).
    from: &'static str,
    description: &'static str,
}

/// These add `uv` from PyPI to the sandbox's stand-ins: the tasks' scripts fetch it
/// from astral.sh, which air-gapped hosts cannot reach.
const BENCH_STANDINS: &[BenchStandin] = &[
    BenchStandin {
        pattern: "ghcr.io/laude-institute/t-bench/python-3-13:*",
        tag: "agent-bench-python-3-13:cpython-bookworm",
        body: "RUN python3 -m pip install --no-cache-dir -q uv",
        from: "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
        description: "Debian bookworm with CPython 3.13 in /usr/local (as python:3.13-slim-bookworm), tmux and uv",
    },
    BenchStandin {
        pattern: "python:3.11*",
        tag: "agent-bench-python-3-11:bookworm",
        body: "RUN python3 -m pip install --no-cache-dir -q uv",
        from: "python:3.11-slim",
        description: "Debian bookworm with its own CPython 3.11 (3.11.2), pip, venv and uv, as python:3.11-slim",
    },
    BenchStandin {
        pattern: "python:3*",
        tag: "agent-bench-python-3-13:cpython-bookworm",
        body: "",
        from: "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
        description: "Debian bookworm with CPython 3.13 in /usr/local (as python:3.13-slim-bookworm), tmux and uv",
    },
    BenchStandin {
        pattern: "ghcr.io/laude-institute/t-bench/ubuntu-24-04:*",
        tag: "agent-bench-ubuntu-24-04:trixie",
        body: "RUN python3 -m pip install --no-cache-dir -q uv",
        from: "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624",
        description: "Debian trixie (not Ubuntu 24.04) with Python 3.13, tmux and uv",
    },
];

/// What `agent bench` stands in for an image it cannot pull, first match wins: (pattern,
/// local tag, what it is); the config's `[image_map]` comes before all of them.
pub fn standin_table() -> Vec<(&'static str, &'static str, &'static str)> {
    let bench = BENCH_STANDINS.iter().map(|s| (s.pattern, s.tag, s.description));
    let sandbox = agent_sandbox::standins().iter().map(|s| (s.pattern, s.tag, s.description));
    bench.chain(sandbox).collect()
}

/// The run's image substitutions in the order they are tried: every entry of the
/// config's `[image_map]` first (the most specific pattern first: an exact name, then the
/// longest literal prefix), then the bench's stand-ins in their table's order.
#[derive(Debug, Clone, Default)]
struct MapOrder {
    /// The config's entries, one per map, in the order they are tried.
    user: Vec<ImageMap>,
}

impl MapOrder {
    /// The config's entries of `user_map`, most specific first.
    fn new(user_map: &ImageMap) -> Self {
        let mut entries: Vec<(&String, &String)> = user_map.0.iter().collect();
        entries.sort_by_key(|(pattern, _)| specificity(pattern));
        Self { user: entries.into_iter().map(|(p, t)| ImageMap(BTreeMap::from([(p.clone(), t.clone())]))).collect() }
    }

    /// The substitute for `image`: the config's, else a bench stand-in's tag.
    fn lookup(&self, image: &str) -> Option<String> {
        self.lookup_user(image).or_else(|| {
            BENCH_STANDINS.iter().find_map(|s| {
                ImageMap(BTreeMap::from([(s.pattern.to_string(), s.tag.to_string())])).lookup(image).map(str::to_string)
            })
        })
    }

    /// The config's substitute for `image`, if any.
    fn lookup_user(&self, image: &str) -> Option<String> {
        self.user.iter().find_map(|m| m.lookup(image)).map(str::to_string)
    }

    /// A map naming each of `images` exactly, with the substitute `lookup` gives it: the
    /// sandbox, which tries a map's patterns in name order, then finds the same one.
    fn exact<'a>(images: impl IntoIterator<Item = &'a str>, lookup: impl Fn(&str) -> Option<String>) -> ImageMap {
        ImageMap(images.into_iter().filter_map(|i| lookup(i).map(|tag| (i.to_string(), tag))).collect())
    }
}

/// How a pattern sorts among the config's: an exact name first, then the longest literal
/// prefix (before the first `*`), then the most literal characters, then by name.
fn specificity(pattern: &str) -> (bool, std::cmp::Reverse<usize>, std::cmp::Reverse<usize>, String) {
    let prefix = pattern.find('*').unwrap_or(pattern.len());
    let literal = pattern.chars().filter(|c| *c != '*').count();
    (pattern.contains('*'), std::cmp::Reverse(prefix), std::cmp::Reverse(literal), pattern.to_string())
}

/// The images of one task's environment: service name → image.
#[derive(Debug, Clone)]
pub struct TaskImages {
    pub by_service: HashMap<String, String>,
    /// Seconds the build took (0 when every layer was cached).
    pub build_secs: f64,
    /// Image substitutions and builder fallbacks, for the trial's record.
    pub notices: Vec<String>,
    /// Images of the task that were stood in for: task image → stand-in and what it is.
    pub standins: BTreeMap<String, String>,
}

type Slot = Arc<OnceCell<Result<TaskImages, ImageError>>>;
type StandinSlot = Arc<OnceCell<Result<(), ImageError>>>;

/// The run's images on each engine of its pool: an [`ImageCache`] per engine, made when
/// a trial is first placed there (each engine builds a task's images once, from the same
/// context, map, host overrides and CA bundle).
pub struct EngineImages {
    map: ImageMap,
    build_env: BuildEnv,
    caches: Mutex<HashMap<String, Arc<ImageCache>>>,
}

impl EngineImages {
    /// `user_map` wins over the bench's own stand-ins, as in [`ImageCache::new`].
    pub fn new(user_map: &ImageMap, build_env: BuildEnv) -> Self {
        Self { map: user_map.clone(), build_env, caches: Mutex::new(HashMap::new()) }
    }

    /// The cache of `engine`'s images.
    pub fn on(&self, engine: &Engine) -> Arc<ImageCache> {
        let mut caches = match self.caches.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        caches
            .entry(engine.name().to_string())
            .or_insert_with(|| Arc::new(ImageCache::new(engine.clone(), &self.map, self.build_env.clone())))
            .clone()
    }
}

/// Builds task images once per run.
pub struct ImageCache {
    docker: Engine,
    map: MapOrder,
    build_env: BuildEnv,
    tasks: Mutex<HashMap<String, Slot>>,
    standins: Mutex<HashMap<String, StandinSlot>>,
}

impl ImageCache {
    /// `user_map` wins over the bench's own stand-ins: each of its entries is tried before
    /// any stand-in, the most specific first.
    pub fn new(docker: Engine, user_map: &ImageMap, build_env: BuildEnv) -> Self {
        let map = MapOrder::new(user_map);
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

    /// Builds every service's image; one that fails does not stop the others, so that
    /// the error names every image of the task that does not build.
    async fn build(&self, task: &BenchTask) -> Result<TaskImages, ImageError> {
        let started = Instant::now();
        let mut by_service = HashMap::new();
        let mut notices = Vec::new();
        let mut standins = BTreeMap::new();
        let mut failures = Vec::new();
        for service in &task.environment.services {
            match self.build_service(task, service, &mut notices, &mut standins).await {
                Ok(image) => {
                    by_service.insert(service.name.clone(), image);
                }
                Err(e) => failures.push(e),
            }
        }
        match failures.len() {
            0 => Ok(TaskImages { by_service, build_secs: started.elapsed().as_secs_f64(), notices, standins }),
            1 => Err(failures.remove(0)),
            _ => Err(ImageError::Several(failures)),
        }
    }

    async fn build_service(
        &self,
        task: &BenchTask,
        service: &Service,
        notices: &mut Vec<String>,
        standins: &mut BTreeMap<String, String>,
    ) -> Result<String, ImageError> {
        let (context, dockerfile) = match &service.image {
            ImageSource::Named(name) => {
                self.ensure_standin_for(name).await?;
                self.note_standin(name, standins);
                let mut on_notice = |n: String| notices.push(n);
                let map = MapOrder::exact([name.as_str()], |i| self.map.lookup(i));
                return agent_sandbox::resolve_image_with(&self.docker, &map, name, &self.build_env, &mut on_notice)
                    .await
                    .map_err(|e| ImageError::Resolve { service: service.name.clone(), source: Arc::new(e) });
            }
            ImageSource::Build { context, dockerfile } => (context, dockerfile),
        };
        let text = std::fs::read_to_string(dockerfile).unwrap_or_default();
        let froms = agent_sandbox::dockerfile_from_images(&text);
        for from in &froms {
            self.ensure_standin_for(from).await?;
            self.note_standin(from, standins);
        }
        let map = MapOrder::exact(froms.iter().map(String::as_str), |i| self.map.lookup(i));
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
        let build = agent_sandbox::build_task_image_with(
            &self.docker,
            &map,
            context,
            dockerfile,
            &tag,
            &self.build_env,
            &mut on_notice,
            &mut on_log,
        );
        // Dropping the build closes its connection, which cancels it in the engine.
        let built = match task.build_timeout {
            Some(limit) => match tokio::time::timeout(limit, build).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(ImageError::BuildTimeout { service: service.name.clone(), secs: limit.as_secs_f64() })
                }
            },
            None => build.await,
        };
        // The engine's message names the failed step; the cause is usually an earlier
        // line (a failed download, a missing host).
        built.map_err(|e| {
            // BuildKit's own message already names each failed step; keep only the
            // lines it does not repeat.
            let message = e.to_string();
            errors.retain(|l| !message.contains(step_text(l)));
            ImageError::Build {
                service: service.name.clone(),
                dockerfile: dockerfile.display().to_string(),
                first_errors: errors,
                source: Arc::new(e),
            }
        })
    }

    /// The stand-ins the task's images take (task image → stand-in and what it is),
    /// read from its services and Dockerfiles without building: a trial whose build
    /// failed records them too, since a stand-in is often why.
    pub fn standins_of(&self, task: &BenchTask) -> BTreeMap<String, String> {
        standins_with(&self.map, task)
    }

    fn note_standin(&self, image: &str, standins: &mut BTreeMap<String, String>) {
        note_standin(&self.map, image, standins);
    }

    /// Builds the bench stand-in `image` maps to, if it maps to one.
    async fn ensure_standin_for(&self, image: &str) -> Result<(), ImageError> {
        let Some(tag) = self.map.lookup(image) else { return Ok(()) };
        if !BENCH_STANDINS.iter().any(|s| s.tag == tag && !s.body.is_empty()) {
            return Ok(());
        }
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
        let Some(standin) = BENCH_STANDINS.iter().find(|s| s.tag == tag && !s.body.is_empty()) else {
            return Ok(());
        };
        let dir = tempfile::tempdir().map_err(|e| ImageError::StandinDir { tag: tag.clone(), source: Arc::new(e) })?;
        let df = dir.path().join("Dockerfile");
        std::fs::write(&df, format!("FROM {}\n{}\n", standin.from, standin.body))
            .map_err(|e| ImageError::StandinDockerfile { path: df.display().to_string(), source: Arc::new(e) })?;
        // The stand-in's own FROM goes through the user's map only, not to itself.
        let map = MapOrder::exact([standin.from], |i| self.map.lookup_user(i));
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

/// A build output line without BuildKit's step prefix (`#12 `, `#12 ERROR: `).
fn step_text(line: &str) -> &str {
    let rest = line.strip_prefix('#').map(|r| r.trim_start_matches(|c: char| c.is_ascii_digit())).unwrap_or(line);
    let rest = rest.trim_start();
    rest.strip_prefix("ERROR: ").unwrap_or(rest)
}

/// Build output lines that usually carry the cause of a failed build.
fn looks_like_error(line: &str) -> bool {
    let l = line.to_lowercase();
    ["could not resolve", "unable to access", "fatal:", "error:", "err:", "no matching distribution", "not found"]
        .iter()
        .any(|p| l.contains(p))
}

/// [`ImageCache::standins_of`] with the map `map`.
fn standins_with(map: &MapOrder, task: &BenchTask) -> BTreeMap<String, String> {
    let mut standins = BTreeMap::new();
    for service in &task.environment.services {
        match &service.image {
            ImageSource::Named(name) => note_standin(map, name, &mut standins),
            ImageSource::Build { dockerfile, .. } => {
                let text = std::fs::read_to_string(dockerfile).unwrap_or_default();
                for from in agent_sandbox::dockerfile_from_images(&text) {
                    note_standin(map, &from, &mut standins);
                }
            }
        }
    }
    standins
}

/// Records `image` → its stand-in when it is stood in for (a bench stand-in through
/// the map, or one of the sandbox's for an image the map does not name).
fn note_standin(map: &MapOrder, image: &str, standins: &mut BTreeMap<String, String>) {
    match map.lookup(image) {
        Some(tag) => {
            if let Some(s) = BENCH_STANDINS.iter().find(|s| s.tag == tag) {
                standins.insert(image.to_string(), format!("{} ({})", s.tag, s.description));
            }
        }
        None => {
            if let Some(s) = agent_sandbox::standin_for(image) {
                standins.insert(image.to_string(), format!("{} ({})", s.tag, s.description));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standins_of_a_task_are_known_without_building() {
        let d = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("task.toml", "");
        write("instruction.md", "Do it.\n");
        write("environment/Dockerfile", "FROM python:3.11-slim\nRUN false\n");
        write("tests/test.sh", "true\n");
        let task = BenchTask::load(d.path()).unwrap();
        let got = standins_with(&MapOrder::new(&ImageMap::default()), &task);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["python:3.11-slim"], "{got:?}");
        let mine = ImageMap(BTreeMap::from([("python:3.11*".to_string(), "my-py311".to_string())]));
        assert!(standins_with(&MapOrder::new(&mine), &task).is_empty(), "the config's own image is no stand-in");
    }

    #[test]
    fn error_lines_are_recognised() {
        assert!(looks_like_error("fatal: unable to access 'https://github.com/x/': Could not resolve host"));
        assert!(!looks_like_error("Step 3/5 : RUN make"));
        assert_eq!(step_text("#14 ERROR: \"/task-deps\" not found"), "\"/task-deps\" not found");
        assert_eq!(step_text("#9 fatal: unable to access"), "fatal: unable to access");
        assert_eq!(step_text("E: Unable to locate package x"), "E: Unable to locate package x");
    }

    #[test]
    fn the_configs_map_wins_over_the_stand_ins_most_specific_first() {
        let py = "agent-bench-python-3-13:cpython-bookworm";
        let one = ImageMap(BTreeMap::from([("python:3.11*".to_string(), "my-py311".to_string())]));
        let order = MapOrder::new(&one);
        // The built-in `python:3*` sorts before `python:3.11*` but must not win.
        assert_eq!(order.lookup("python:3.11-slim").as_deref(), Some("my-py311"));
        assert_eq!(order.lookup("docker.io/library/python:3.11-slim").as_deref(), Some("my-py311"));
        assert_eq!(order.lookup("python:3.12-slim").as_deref(), Some(py), "the stand-in still serves the rest");
        let builtin = MapOrder::default();
        assert_eq!(builtin.lookup("python:3.11-slim").as_deref(), Some("agent-bench-python-3-11:bookworm"));
        assert_eq!(builtin.lookup("python:3.12").as_deref(), Some(py), "no 3.12 here: 3.13 stands in");
        assert_eq!(order.lookup("debian:bookworm"), None);
        let several = ImageMap(BTreeMap::from([
            ("*".to_string(), "any".to_string()),
            ("python:*".to_string(), "py".to_string()),
            ("python:3.11*".to_string(), "py311".to_string()),
            ("python:3.11-slim".to_string(), "exact".to_string()),
        ]));
        let order = MapOrder::new(&several);
        assert_eq!(order.lookup("python:3.11-slim").as_deref(), Some("exact"));
        assert_eq!(order.lookup("python:3.11-bookworm").as_deref(), Some("py311"));
        assert_eq!(order.lookup("python:3.12").as_deref(), Some("py"), "a broad entry of the config beats a stand-in");
        assert_eq!(order.lookup("alpine").as_deref(), Some("any"));
        // What the sandbox is handed gives the same answers.
        let exact =
            MapOrder::exact(["python:3.11-slim", "python:3.12", "scratch-ish"], |i| MapOrder::new(&one).lookup(i));
        assert_eq!(exact.lookup("python:3.11-slim"), Some("my-py311"));
        assert_eq!(exact.lookup("python:3.12"), Some(py));
        assert_eq!(exact.0.len(), 2);
        assert_eq!(MapOrder::new(&one).lookup_user("python:3.12"), None);
    }

    #[test]
    fn every_bench_standin_alias_names_a_built_one() {
        for s in BENCH_STANDINS.iter().filter(|s| s.body.is_empty()) {
            assert!(BENCH_STANDINS.iter().any(|b| b.tag == s.tag && !b.body.is_empty()), "{}", s.tag);
        }
    }
}
