//! Writes the trajectory: one JSON record per line, of the types of
//! `agent_protocol::trajectory` (the contract every reader uses; docs/trajectory.md).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub use agent_protocol::trajectory::{
    EpisodeEndRecord, EpisodeStart, ObservationRecord, TrajectoryLine, TurnFinish, TurnRecord,
};

/// Appends records to a JSONL file, flushing each line so a crash loses nothing written.
pub struct TrajectoryWriter {
    out: Option<BufWriter<File>>,
}

impl TrajectoryWriter {
    /// A writer to `path` (created with its parent directories), or one that drops everything.
    pub fn create(path: Option<&Path>) -> std::io::Result<Self> {
        let out = match path {
            Some(p) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                Some(BufWriter::new(File::create(p)?))
            }
            None => None,
        };
        Ok(Self { out })
    }

    /// A writer that records nothing.
    pub fn disabled() -> Self {
        Self { out: None }
    }

    fn write(&mut self, line: &TrajectoryLine) {
        if let Some(out) = self.out.as_mut() {
            let res = serde_json::to_writer(&mut *out, line)
                .map_err(std::io::Error::other)
                .and_then(|_| out.write_all(b"\n"))
                .and_then(|_| out.flush());
            if let Err(e) = res {
                tracing::warn!("cannot write the trajectory: {e}");
            }
        }
    }

    /// Records the start.
    pub fn start(&mut self, rec: &EpisodeStart) {
        self.write(&TrajectoryLine::EpisodeStart(rec.clone()));
    }

    /// Records a turn.
    pub fn turn(&mut self, rec: &TurnRecord) {
        self.write(&TrajectoryLine::Turn(Box::new(rec.clone())));
    }

    /// Records the end.
    pub fn end(&mut self, rec: &EpisodeEndRecord) {
        self.write(&TrajectoryLine::EpisodeEnd(rec.clone()));
    }
}
