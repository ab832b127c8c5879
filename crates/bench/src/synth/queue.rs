//! The synthesis pipeline's work queue, on disk so that a killed run loses nothing:
//! an item is a file that moves `pending/` → `claimed/` (a rename: one worker wins the
//! claim) and ends when its record appears in `done/` (created with link semantics:
//! the first ending counts, a second one is refused). The done record lists the
//! item's children; they are pushed after it is written and again on recovery, so a
//! crash between the two loses no child and a repeated push adds none.
//!
//! A claimed item whose claim is older than the timeout (its worker stopped touching
//! it) goes back to `pending/`; after `max_attempts` claims it ends as timed out.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::SynthError;

/// What a worker does with an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Brainstorm task variations from a seed task and choose some.
    Idea,
    /// Write a task from an idea and validate it.
    Build,
    /// Read a built task, fix or judge it.
    Review,
    /// Measure a solver model's pass rate on an approved task.
    Calibrate,
}

impl Role {
    /// Later stages first: finishing tasks beats starting new ones.
    fn priority(self) -> u8 {
        match self {
            Role::Calibrate => 0,
            Role::Review => 1,
            Role::Build => 2,
            Role::Idea => 3,
        }
    }

    /// The role's name in files and lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Idea => "idea",
            Role::Build => "build",
            Role::Review => "review",
            Role::Calibrate => "calibrate",
        }
    }
}

/// One unit of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Unique; a child's id extends its parent's (`seed-x.2.review`).
    pub id: String,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The role's input.
    pub payload: serde_json::Value,
    /// Claims so far (a claim that timed out counts).
    #[serde(default)]
    pub claims: u32,
}

impl Item {
    /// A child of this item: its id extends the parent's with `suffix`.
    pub fn child(&self, suffix: &str, role: Role, payload: &impl Serialize) -> Item {
        Item {
            id: format!("{}.{suffix}", self.id),
            role,
            parent: Some(self.id.clone()),
            payload: serde_json::to_value(payload).unwrap_or_default(),
            claims: 0,
        }
    }
}

/// How an item ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// It did its work; `result` is the role's output.
    Done { result: serde_json::Value },
    /// Its work was judged and refused (an invalid task, a reviewer's rejection, a
    /// near-duplicate).
    Rejected { reason: String },
    /// It could not do its work (a model or engine error, claims timed out).
    Failed { reason: String },
}

/// An ended item: the item, its outcome and its children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoneRecord {
    pub item: Item,
    pub outcome: Outcome,
    #[serde(default)]
    pub children: Vec<Item>,
    /// Tokens the item's models used.
    #[serde(default)]
    pub tokens: u64,
    pub secs: f64,
}

/// The queue's folders under the synth output.
#[derive(Debug, Clone)]
pub struct Queue {
    root: PathBuf,
    /// A claim not touched for this long returns to `pending/`.
    pub timeout: Duration,
    /// Claims an item may have before it ends as failed.
    pub max_claims: u32,
}

impl Queue {
    /// The queue under `root` (`root/queue/{pending,claimed,done}`), created if missing.
    pub fn open(root: &Path, timeout: Duration, max_claims: u32) -> Result<Queue, SynthError> {
        let q = Queue { root: root.join("queue"), timeout, max_claims };
        for d in ["pending", "claimed", "done"] {
            let p = q.root.join(d);
            std::fs::create_dir_all(&p).map_err(|e| SynthError::io(&p, e))?;
        }
        Ok(q)
    }

    fn path(&self, state: &str, id: &str) -> PathBuf {
        self.root.join(state).join(format!("{id}.json"))
    }

    /// Adds an item unless one with its id exists in any state (so pushing twice is harmless).
    pub fn push(&self, item: &Item) -> Result<bool, SynthError> {
        if ["pending", "claimed", "done"].iter().any(|s| self.path(s, &item.id).exists()) {
            return Ok(false);
        }
        create_new(&self.path("pending", &item.id), &json(item)?)
    }

    /// Claims the pending item of the latest stage (then the oldest id), or `None`.
    pub fn claim(&self) -> Result<Option<Item>, SynthError> {
        let mut pending = self.list("pending")?;
        pending.sort_by(|a, b| a.role.priority().cmp(&b.role.priority()).then(a.id.cmp(&b.id)));
        for mut item in pending {
            if self.path("done", &item.id).exists() {
                // Ended already (returned by a timeout after its worker finished).
                let _ = std::fs::remove_file(self.path("pending", &item.id));
                continue;
            }
            let (from, to) = (self.path("pending", &item.id), self.path("claimed", &item.id));
            if std::fs::rename(&from, &to).is_err() {
                continue; // another worker won it
            }
            item.claims += 1;
            // Rewriting the claimed file also starts its claim clock (its modification time).
            crate::results::write_atomic(&to, &json(&item)?)?;
            return Ok(Some(item));
        }
        Ok(None)
    }

    /// Keeps a claim alive (a long build touches its item every few seconds).
    pub fn touch(&self, id: &str) {
        if let Ok(f) = std::fs::File::options().write(true).open(self.path("claimed", id)) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    /// Ends an item: writes its done record (refused, returning `false`, when it ended
    /// already), pushes its children, drops the claim.
    pub fn finish(&self, record: &DoneRecord) -> Result<bool, SynthError> {
        let id = &record.item.id;
        let first = create_new(&self.path("done", id), &json(record)?)?;
        if first {
            for child in &record.children {
                self.push(child)?;
            }
        }
        let _ = std::fs::remove_file(self.path("claimed", id));
        let _ = std::fs::remove_file(self.path("pending", id));
        Ok(first)
    }

    /// Returns timed-out claims to `pending/`; an item out of claims ends as failed.
    pub fn reap(&self, now: SystemTime) -> Result<Vec<String>, SynthError> {
        let mut returned = Vec::new();
        for item in self.list("claimed")? {
            let path = self.path("claimed", &item.id);
            let touched = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap_or(now);
            if now.duration_since(touched).unwrap_or_default() < self.timeout {
                continue;
            }
            self.release(item, &mut returned)?;
        }
        Ok(returned)
    }

    /// After a killed run (no worker is alive: the caller holds the output's lock):
    /// every claim goes back to `pending/`, and every done record's children are pushed.
    pub fn recover(&self) -> Result<Vec<String>, SynthError> {
        let mut returned = Vec::new();
        for item in self.list("claimed")? {
            self.release(item, &mut returned)?;
        }
        for rec in self.done()? {
            for child in &rec.children {
                self.push(child)?;
            }
            let _ = std::fs::remove_file(self.path("pending", &rec.item.id));
        }
        Ok(returned)
    }

    /// Returns a claimed item whose work was cut off (it ran past the claim timeout).
    pub fn return_claim(&self, item: Item) -> Result<(), SynthError> {
        self.release(item, &mut Vec::new())
    }

    fn release(&self, item: Item, returned: &mut Vec<String>) -> Result<(), SynthError> {
        let path = self.path("claimed", &item.id);
        if self.path("done", &item.id).exists() {
            let _ = std::fs::remove_file(&path);
            return Ok(());
        }
        if item.claims >= self.max_claims {
            let reason = format!("claimed {} times without ending (each claim timed out)", item.claims);
            self.finish(&DoneRecord {
                item,
                outcome: Outcome::Failed { reason },
                children: Vec::new(),
                tokens: 0,
                secs: 0.0,
            })?;
            return Ok(());
        }
        if std::fs::rename(&path, self.path("pending", &item.id)).is_ok() {
            returned.push(item.id);
        }
        Ok(())
    }

    /// Every ended item, by id.
    pub fn done(&self) -> Result<Vec<DoneRecord>, SynthError> {
        let mut out: Vec<DoneRecord> = read_all(&self.root.join("done"))?;
        out.sort_by(|a, b| a.item.id.cmp(&b.item.id));
        Ok(out)
    }

    /// Items pending and claimed.
    pub fn open_items(&self) -> Result<(usize, usize), SynthError> {
        Ok((self.list("pending")?.len(), self.list("claimed")?.len()))
    }

    fn list(&self, state: &str) -> Result<Vec<Item>, SynthError> {
        read_all(&self.root.join(state))
    }
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, SynthError> {
    serde_json::to_vec_pretty(value).map_err(|e| SynthError::Other(format!("cannot encode a queue record: {e}")))
}

/// Reads every `*.json` of a folder; a file being renamed away meanwhile is skipped,
/// and so is a half-written one (writes go through a temporary file, so there is none
/// unless the disk filled).
fn read_all<T: for<'de> Deserialize<'de>>(dir: &Path) -> Result<Vec<T>, SynthError> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| SynthError::io(dir, e))?.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            if let Ok(v) = std::fs::read(&p).map_err(|_| ()).and_then(|b| serde_json::from_slice(&b).map_err(|_| ())) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// Writes `bytes` to `path` only if nothing is there: through a temporary file and a
/// hard link, which fails when the name exists, so a reader never sees half a file.
fn create_new(path: &Path, bytes: &[u8]) -> Result<bool, SynthError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| SynthError::io(dir, e))?;
    std::fs::write(tmp.path(), bytes).map_err(|e| SynthError::io(tmp.path(), e))?;
    match std::fs::hard_link(tmp.path(), path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(SynthError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, role: Role) -> Item {
        Item { id: id.into(), role, parent: None, payload: serde_json::json!({}), claims: 0 }
    }

    fn done(item: Item, children: Vec<Item>) -> DoneRecord {
        DoneRecord { item, outcome: Outcome::Done { result: serde_json::json!(1) }, children, tokens: 0, secs: 0.0 }
    }

    #[test]
    fn later_stages_are_claimed_first_and_a_claim_is_won_once() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path(), Duration::from_secs(60), 3).unwrap();
        assert!(q.push(&item("a", Role::Idea)).unwrap());
        assert!(q.push(&item("b", Role::Review)).unwrap());
        assert!(!q.push(&item("a", Role::Idea)).unwrap(), "a second push of an id adds nothing");
        let first = q.claim().unwrap().unwrap();
        assert_eq!((first.id.as_str(), first.claims), ("b", 1));
        assert_eq!(q.claim().unwrap().unwrap().id, "a");
        assert_eq!(q.claim().unwrap(), None);
    }

    #[test]
    fn an_item_ends_once_and_its_children_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path(), Duration::from_secs(60), 3).unwrap();
        q.push(&item("a", Role::Idea)).unwrap();
        let a = q.claim().unwrap().unwrap();
        let rec = done(a.clone(), vec![item("a.1", Role::Build), item("a.2", Role::Build)]);
        assert!(q.finish(&rec).unwrap());
        assert!(!q.finish(&rec).unwrap(), "the second ending is refused");
        assert_eq!(q.done().unwrap().len(), 1);
        assert_eq!(q.open_items().unwrap(), (2, 0));
    }

    #[test]
    fn a_timed_out_claim_returns_and_then_fails() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path(), Duration::from_secs(10), 2).unwrap();
        q.push(&item("a", Role::Build)).unwrap();
        q.claim().unwrap().unwrap();
        let later = SystemTime::now() + Duration::from_secs(11);
        assert!(q.reap(SystemTime::now()).unwrap().is_empty(), "a fresh claim stays");
        assert_eq!(q.reap(later).unwrap(), vec!["a"]);
        assert_eq!(q.claim().unwrap().unwrap().claims, 2);
        assert!(q.reap(later).unwrap().is_empty());
        let ended = q.done().unwrap();
        assert!(matches!(&ended[0].outcome, Outcome::Failed { reason } if reason.contains("2 times")), "{ended:?}");
    }

    #[test]
    fn recovery_returns_claims_and_pushes_the_children_a_crash_lost() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path(), Duration::from_secs(600), 3).unwrap();
        q.push(&item("a", Role::Idea)).unwrap();
        q.push(&item("b", Role::Idea)).unwrap();
        let a = q.claim().unwrap().unwrap();
        q.claim().unwrap().unwrap();
        // `a` ended but the process died before its children were pushed.
        create_new(&q.path("done", "a"), &json(&done(a, vec![item("a.1", Role::Build)])).unwrap()).unwrap();
        assert_eq!(q.recover().unwrap(), vec!["b"]);
        let mut open: Vec<String> = q.list("pending").unwrap().into_iter().map(|i| i.id).collect();
        open.sort();
        assert_eq!(open, vec!["a.1", "b"]);
        assert_eq!(q.list("claimed").unwrap(), vec![]);
    }
}
