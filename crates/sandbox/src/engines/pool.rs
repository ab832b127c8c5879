//! The engines a run places its sandboxes on: each with a capacity in containers, marked
//! down when it stops answering, probed again later and used again once it answers (after
//! the run's own clean-up hook has swept what it still holds).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::super::docker::{connect, Engine};
use super::super::error::SandboxError;
use super::connect::connect_engine;
use super::spec::{check_names, EngineSpec};

/// How often a down engine is asked again whether it answers.
const PROBE_EVERY: Duration = Duration::from_secs(10);
/// How long a ping may take before an engine counts as not answering: long, because a
/// busy engine (builds, many containers starting) can be slow to answer and is not lost.
/// An engine that is gone refuses at once.
const PING_LIMIT: Duration = Duration::from_secs(15);
/// How often a trial's engine is pinged while the trial runs.
const WATCH_EVERY: Duration = Duration::from_secs(5);
/// How long a placement waits while every engine is down before it gives up.
const ALL_DOWN_WAIT: Duration = Duration::from_secs(60);

/// Runs when a down engine answers again, before anything is placed on it.
pub type ReviveHook = Arc<dyn Fn(Engine) -> BoxFuture<'static, ()> + Send + Sync>;

/// A pool of Docker engines; clones share it.
#[derive(Clone)]
pub struct EnginePool {
    inner: Arc<Inner>,
}

struct Inner {
    members: Vec<Member>,
    changed: tokio::sync::Notify,
    on_revive: Mutex<Option<ReviveHook>>,
    /// The local engine, which the others copy missing images from.
    seed: Option<Engine>,
}

struct Member {
    spec: EngineSpec,
    name: String,
    state: Mutex<State>,
}

impl Member {
    /// Whether the engine runs on this host (a Unix socket, not an ssh forward).
    fn on_this_host(&self) -> bool {
        matches!(self.spec.transport(), Ok(super::spec::Transport::Unix(_)))
    }
}

#[derive(Default)]
struct State {
    engine: Option<Engine>,
    in_use: usize,
    placed: u64,
    down: Option<Down>,
    probing: bool,
}

#[derive(Clone)]
struct Down {
    reason: String,
    next_probe: Instant,
}

/// One engine of the pool as `agent sandbox engines` shows it.
#[derive(Debug, Clone)]
pub struct EngineStatus {
    pub name: String,
    pub url: String,
    /// The engine's version when it answers.
    pub version: Option<String>,
    /// Why it is down, when it is.
    pub down: Option<String>,
    pub max_containers: usize,
    /// Containers of this process's placements on it now.
    pub in_use: usize,
}

/// A claim on an engine's capacity for one sandbox (a task's services stay on it);
/// dropping it gives the capacity back.
pub struct Placement {
    inner: Arc<Inner>,
    index: usize,
    weight: usize,
    engine: Engine,
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement").field("engine", &self.engine.name()).field("weight", &self.weight).finish()
    }
}

impl Placement {
    /// The engine to create the sandbox on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Some(m) = self.inner.members.get(self.index) {
            if let Ok(mut s) = m.state.lock() {
                s.in_use = s.in_use.saturating_sub(self.weight);
            }
        }
        self.inner.changed.notify_waiters();
    }
}

impl std::fmt::Debug for EnginePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.inner.members.iter().map(|m| &m.name)).finish()
    }
}

impl EnginePool {
    /// Connects to the configured engines; with none configured, the local engine alone
    /// (`DOCKER_HOST` or the default socket), unbounded as before. Engines that do not
    /// answer start down and are probed again; at least one must answer.
    pub async fn connect(specs: &[EngineSpec]) -> Result<EnginePool, SandboxError> {
        if specs.is_empty() {
            return Ok(EnginePool::single(connect().await?));
        }
        check_names(specs)?;
        for s in specs {
            s.transport()?;
        }
        let seed = connect().await.ok();
        let connected = futures_util::future::join_all(specs.iter().map(connect_engine)).await;
        let mut failures = Vec::new();
        let members: Vec<Member> = specs
            .iter()
            .zip(connected)
            .map(|(spec, result)| {
                let name = spec.display_name();
                let state = match result {
                    Ok(engine) => State { engine: Some(seeded(engine, seed.as_ref())), ..Default::default() },
                    Err(e) => {
                        failures.push(format!("{name}: {e}"));
                        State {
                            down: Some(Down { reason: e.to_string(), next_probe: Instant::now() + PROBE_EVERY }),
                            ..Default::default()
                        }
                    }
                };
                Member { spec: spec.clone(), name, state: Mutex::new(state) }
            })
            .collect();
        if failures.len() == members.len() {
            return Err(SandboxError::NoEngine(failures.join("; ")));
        }
        for f in &failures {
            tracing::warn!("engine down at start (probed again every {} s): {f}", PROBE_EVERY.as_secs());
        }
        Ok(EnginePool::from_members(members, seed))
    }

    /// A pool of one engine already connected, unbounded.
    pub fn single(engine: Engine) -> EnginePool {
        let name = engine.name().to_string();
        let spec = EngineSpec { name: Some(name.clone()), ..EngineSpec::local() };
        let state = State { engine: Some(engine), ..Default::default() };
        EnginePool::from_members(vec![Member { spec, name, state: Mutex::new(state) }], None)
    }

    fn from_members(members: Vec<Member>, seed: Option<Engine>) -> EnginePool {
        let inner = Inner { members, changed: tokio::sync::Notify::new(), on_revive: Mutex::new(None), seed };
        EnginePool { inner: Arc::new(inner) }
    }

    /// Sets what runs when a down engine answers again (a run sweeps its own leftovers
    /// there), before anything new is placed on it.
    pub fn on_revive(&self, hook: ReviveHook) {
        if let Ok(mut h) = self.inner.on_revive.lock() {
            *h = Some(hook);
        }
    }

    /// How many engines the pool has.
    pub fn len(&self) -> usize {
        self.inner.members.len()
    }

    /// Whether the pool has no engines (never: at least one is needed to build it).
    pub fn is_empty(&self) -> bool {
        self.inner.members.is_empty()
    }

    /// The engines that answer now, first the first configured: for sweeps and images.
    pub fn engines(&self) -> Vec<Engine> {
        self.inner
            .members
            .iter()
            .filter_map(|m| m.state.lock().ok().filter(|s| s.down.is_none()).and_then(|s| s.engine.clone()))
            .collect()
    }

    /// The engines that answer, after asking the down ones again (and sweeping those that
    /// answer with the revive hook): for the clean-up at the end of a run, which must
    /// not skip an engine that was only slow.
    pub async fn reachable(&self) -> Vec<Engine> {
        self.probe(true).await;
        self.engines()
    }

    /// Each engine's state, asking the down ones again first.
    pub async fn status(&self) -> Vec<EngineStatus> {
        self.probe(true).await;
        self.inner
            .members
            .iter()
            .map(|m| {
                let s = m.state.lock().map(|s| (s.engine.clone(), s.down.clone(), s.in_use)).ok();
                let (engine, down, in_use) = s.unwrap_or((None, None, 0));
                EngineStatus {
                    name: m.name.clone(),
                    url: m.spec.url.clone(),
                    version: engine.filter(|_| down.is_none()).map(|e| e.version().to_string()),
                    down: down.map(|d| d.reason),
                    max_containers: m.spec.max_containers,
                    in_use,
                }
            })
            .collect()
    }

    /// Waits for an engine with room for `containers` (capped at an engine's capacity,
    /// so that a large task still runs alone) and claims it: the one with the most room,
    /// the first configured on a tie. Fails when every engine has been down for a while.
    pub async fn place(&self, containers: usize) -> Result<Placement, SandboxError> {
        self.place_on(containers, false).await
    }

    /// [`Self::place`] on an engine of this host (a Unix socket): a sandbox with bind
    /// mounts of this host's folders (the TUI's workspace) cannot run anywhere else.
    pub async fn place_local(&self, containers: usize) -> Result<Placement, SandboxError> {
        if !self.inner.members.iter().any(Member::on_this_host) {
            return Err(SandboxError::NoEngine(
                "this session mounts a folder of this host, and no engine of [[sandbox.engines]] runs on this host \
                 (add one with url = \"unix:///var/run/docker.sock\")"
                    .into(),
            ));
        }
        self.place_on(containers, true).await
    }

    async fn place_on(&self, containers: usize, local_only: bool) -> Result<Placement, SandboxError> {
        let want = containers.max(1);
        let mut all_down_since: Option<Instant> = None;
        loop {
            // Registered before looking, so that a release in between is not missed.
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            self.probe(false).await;
            let mut best: Option<(usize, usize)> = None;
            let mut any_up = false;
            for (i, m) in self.inner.members.iter().enumerate() {
                let Ok(s) = m.state.lock() else { continue };
                if s.down.is_some() || s.engine.is_none() || (local_only && !m.on_this_host()) {
                    continue;
                }
                any_up = true;
                let max = m.spec.max_containers;
                let w = want.min(max);
                let free = max.saturating_sub(s.in_use);
                if free >= w && best.is_none_or(|(_, f)| free > f) {
                    best = Some((i, free));
                }
            }
            if let Some((i, _)) = best {
                let m = &self.inner.members[i];
                let Ok(mut s) = m.state.lock() else { continue };
                let w = want.min(m.spec.max_containers);
                let (Some(engine), None) = (s.engine.clone(), &s.down) else { continue };
                if m.spec.max_containers.saturating_sub(s.in_use) < w {
                    continue;
                }
                s.in_use += w;
                s.placed += 1;
                return Ok(Placement { inner: self.inner.clone(), index: i, weight: w, engine });
            }
            if any_up {
                all_down_since = None;
            } else {
                let since = *all_down_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= ALL_DOWN_WAIT {
                    return Err(SandboxError::NoEngine(self.down_reasons()));
                }
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep(PROBE_EVERY.min(Duration::from_secs(2))) => {}
            }
        }
    }

    fn down_reasons(&self) -> String {
        let reasons: Vec<String> = self
            .inner
            .members
            .iter()
            .filter_map(|m| {
                let s = m.state.lock().ok()?;
                s.down.as_ref().map(|d| format!("{}: {}", m.name, d.reason))
            })
            .collect();
        format!("every engine has stopped answering ({})", reasons.join("; "))
    }

    /// Asks the placement's engine whether it still answers; if not, marks it down and
    /// says why. A trial that failed calls this to tell a lost sandbox from its own failure.
    /// With one engine there is nowhere else to go: nothing is ever called lost (a busy
    /// engine's slow ping must not turn a trial's own failure into a lost sandbox).
    pub async fn lost(&self, placement: &Placement) -> Option<String> {
        if self.inner.members.len() < 2 {
            return None;
        }
        let m = self.inner.members.get(placement.index)?;
        if let Some(d) = m.state.lock().ok().and_then(|s| s.down.clone()) {
            return Some(d.reason);
        }
        match placement.engine.answers(PING_LIMIT).await {
            Ok(()) => None,
            Err(reason) => {
                self.mark_down(placement.index, &reason);
                Some(reason)
            }
        }
    }

    /// Resolves when the placement's engine stops answering (three pings in a row fail),
    /// with the reason; a trial races its phases against it so that a lost engine ends
    /// the trial at once instead of after its timeouts. Never resolves in a pool of one.
    pub async fn watch(&self, placement: &Placement) -> String {
        if self.inner.members.len() < 2 {
            return std::future::pending().await;
        }
        let mut failures = 0;
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if let Some(d) = self.inner.members.get(placement.index).and_then(|m| m.state.lock().ok()?.down.clone()) {
                return d.reason;
            }
            match placement.engine.answers(PING_LIMIT).await {
                Ok(()) => failures = 0,
                Err(reason) => {
                    failures += 1;
                    if failures >= 3 {
                        self.mark_down(placement.index, &reason);
                        return reason;
                    }
                }
            }
        }
    }

    fn mark_down(&self, index: usize, reason: &str) {
        let Some(m) = self.inner.members.get(index) else { return };
        if let Ok(mut s) = m.state.lock() {
            if s.down.is_none() {
                tracing::warn!("engine {} stopped answering ({reason}); its sandboxes are lost", m.name);
                s.down = Some(Down { reason: reason.to_string(), next_probe: Instant::now() + PROBE_EVERY });
            }
        }
        self.inner.changed.notify_waiters();
    }

    /// Asks down engines whose probe is due (all of them with `now`) whether they answer;
    /// one that does is swept by the revive hook and then used again.
    async fn probe(&self, now: bool) {
        for m in &self.inner.members {
            let engine = {
                let Ok(mut s) = m.state.lock() else { continue };
                match &s.down {
                    Some(d) if !s.probing && (now || Instant::now() >= d.next_probe) => {
                        s.probing = true;
                        s.engine.clone()
                    }
                    _ => continue,
                }
            };
            let answered = match engine {
                Some(e) if e.answers(PING_LIMIT).await.is_ok() => Ok(e),
                // Never connected, or reached through a tunnel that died: connect anew.
                _ => connect_engine(&m.spec)
                    .await
                    .map(|e| seeded(e, self.inner.seed.as_ref()))
                    .map_err(|e| e.to_string()),
            };
            match answered {
                Ok(engine) => {
                    let hook = self.inner.on_revive.lock().ok().and_then(|h| h.clone());
                    if let Some(hook) = hook {
                        hook(engine.clone()).await;
                    }
                    tracing::info!("engine {} answers again", m.name);
                    if let Ok(mut s) = m.state.lock() {
                        s.engine = Some(engine);
                        s.down = None;
                        s.probing = false;
                    }
                    self.inner.changed.notify_waiters();
                }
                Err(reason) => {
                    if let Ok(mut s) = m.state.lock() {
                        s.down = Some(Down { reason, next_probe: Instant::now() + PROBE_EVERY });
                        s.probing = false;
                    }
                }
            }
        }
    }

    /// Sandboxes placed on each engine so far: (name, count), in config order.
    pub fn placed(&self) -> Vec<(String, u64)> {
        self.inner.members.iter().map(|m| (m.name.clone(), m.state.lock().map(|s| s.placed).unwrap_or(0))).collect()
    }
}

/// `engine`, copying the images it lacks from `seed` unless it is the seed itself.
fn seeded(engine: Engine, seed: Option<&Engine>) -> Engine {
    match seed {
        Some(s) if !engine.same_endpoint(s) => engine.with_seed(s.clone()),
        _ => engine,
    }
}
