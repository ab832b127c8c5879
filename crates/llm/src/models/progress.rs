//! What a model download reports while it runs. This crate never draws: the caller hands
//! in a [`Progress`] whose sink receives [`PullProgress`] updates, and a front end draws
//! them as it likes (the CLI as a progress bar on stderr; a hidden one drops them).

use std::fmt;
use std::sync::Arc;

/// One update of a download in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullProgress {
    /// What is happening now, e.g. `qwen2.5-coder-0.5b: downloading`.
    Message(String),
    /// The byte count the current stage will reach.
    Length(u64),
    /// The bytes done so far in the current stage.
    Position(u64),
    /// The download ended (done, failed or found already cached): clear what was drawn.
    Finished,
}

type Sink = Arc<dyn Fn(PullProgress) + Send + Sync>;

/// Where a download's progress goes; cloning shares the sink.
#[derive(Clone, Default)]
pub struct Progress(Option<Sink>);

impl Progress {
    /// Progress nobody looks at.
    pub fn hidden() -> Progress {
        Progress(None)
    }

    /// Progress reported to `sink`.
    pub fn new(sink: impl Fn(PullProgress) + Send + Sync + 'static) -> Progress {
        Progress(Some(Arc::new(sink)))
    }

    /// Whether updates go anywhere.
    pub fn is_hidden(&self) -> bool {
        self.0.is_none()
    }

    fn send(&self, update: PullProgress) {
        if let Some(sink) = &self.0 {
            sink(update);
        }
    }

    /// Says what is happening now.
    pub fn set_message(&self, message: impl Into<String>) {
        self.send(PullProgress::Message(message.into()));
    }

    /// Sets the byte count of the current stage.
    pub fn set_length(&self, len: u64) {
        self.send(PullProgress::Length(len));
    }

    /// Sets the bytes done in the current stage.
    pub fn set_position(&self, pos: u64) {
        self.send(PullProgress::Position(pos));
    }

    /// Ends the report.
    pub fn finish(&self) {
        self.send(PullProgress::Finished);
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_hidden() { "Progress(hidden)" } else { "Progress(shown)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn updates_reach_the_sink_in_order_and_a_hidden_progress_drops_them() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let p = Progress::new(move |u| log.lock().unwrap().push(u));
        p.set_message("m: downloading");
        p.set_length(10);
        p.clone().set_position(4);
        p.finish();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                PullProgress::Message("m: downloading".into()),
                PullProgress::Length(10),
                PullProgress::Position(4),
                PullProgress::Finished
            ]
        );
        assert!(Progress::hidden().is_hidden());
        Progress::hidden().set_position(3);
    }
}
