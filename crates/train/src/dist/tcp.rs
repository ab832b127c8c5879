//! Ranks as processes joined over TCP in a star around rank 0: the CPU backend of
//! [`Collective`], and the control plane of every multi-process run.
//!
//! Every connection has a reader thread and carries a heartbeat each second. A rank
//! whose connection closes without a goodbye (killed, crashed) or that stays silent
//! past the heartbeat timeout (hung, host gone) aborts the world: rank 0 tells every
//! other rank, each rank's pending and later collectives fail with the reason, and the
//! cancellation token lets work outside collectives (rollouts) stop too.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::wire::{self, decode_list, encode_list, read_frame, write_frame};
use super::Collective;
use crate::error::TrainError;

/// How often a rank says it is alive.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// Silence after which a rank counts as dead (`AGENT_DIST_TIMEOUT_SECS` overrides).
const DEFAULT_SILENCE: Duration = Duration::from_secs(30);

/// The reason a world ended early, shared by its threads.
#[derive(Default)]
pub struct Abort {
    reason: Mutex<Option<String>>,
    token: CancellationToken,
}

impl Abort {
    /// Records the first reason and cancels; later reasons are dropped.
    pub fn set(&self, why: String) -> bool {
        let Ok(mut r) = self.reason.lock() else { return false };
        if r.is_some() {
            return false;
        }
        *r = Some(why);
        self.token.cancel();
        true
    }

    /// Why the world ended, once it has.
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().ok().and_then(|r| r.clone())
    }

    /// Cancelled when the world ends.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

/// One connection to another rank.
pub(crate) struct Link {
    peer: usize,
    who: String,
    writer: Mutex<TcpStream>,
    inbox: Mutex<Receiver<Vec<u8>>>,
    last_seen: Mutex<Instant>,
    said_bye: AtomicBool,
}

impl Link {
    fn send(&self, kind: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().map_err(|_| std::io::Error::other("a writer panicked"))?;
        write_frame(&mut *w, kind, payload)
    }

    fn seen(&self) {
        if let Ok(mut t) = self.last_seen.lock() {
            *t = Instant::now();
        }
    }

    fn silent_for(&self) -> Duration {
        self.last_seen.lock().map(|t| t.elapsed()).unwrap_or_default()
    }
}

struct Inner {
    rank: usize,
    size: usize,
    links: Vec<Arc<Link>>,
    abort: Arc<Abort>,
    leaving: AtomicBool,
}

impl Inner {
    /// Ends the world for everyone: rank 0 forwards the reason to every other rank.
    fn abort_all(&self, why: String) {
        if self.abort.set(why.clone()) {
            for l in &self.links {
                let _ = l.send(wire::ABORT, why.as_bytes());
            }
        }
    }
}

/// A rank of a world of processes connected over TCP (see the module docs).
pub struct TcpWorld {
    inner: Arc<Inner>,
}

impl TcpWorld {
    /// Starts the world over established connections: for rank 0 one per other rank,
    /// for the others one to rank 0. `peers` holds (rank, description, stream).
    pub(crate) fn start(rank: usize, size: usize, peers: Vec<(usize, String, TcpStream)>) -> Result<Self, TrainError> {
        let mut links = Vec::new();
        let mut readers = Vec::new();
        for (peer, who, stream) in peers {
            let reader = stream.try_clone().map_err(|e| TrainError::Distributed(format!("socket to {who}: {e}")))?;
            let _ = stream.set_nodelay(true);
            // A peer that stops reading (stopped, host gone) must not block a write forever.
            let _ = stream.set_write_timeout(Some(silence()));
            let _ = reader.set_read_timeout(None);
            let (tx, rx) = channel();
            links.push(Arc::new(Link {
                peer,
                who,
                writer: Mutex::new(stream),
                inbox: Mutex::new(rx),
                last_seen: Mutex::new(Instant::now()),
                said_bye: AtomicBool::new(false),
            }));
            readers.push((reader, tx));
        }
        let inner =
            Arc::new(Inner { rank, size, links, abort: Arc::new(Abort::default()), leaving: AtomicBool::new(false) });
        for (i, (stream, tx)) in readers.into_iter().enumerate() {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(format!("rank-link-{i}"))
                .spawn(move || read_loop(&inner, i, stream, tx))
                .map_err(|e| TrainError::Distributed(format!("cannot start a reader thread: {e}")))?;
        }
        let beat = inner.clone();
        std::thread::Builder::new()
            .name("rank-heartbeat".into())
            .spawn(move || heartbeat_loop(&beat))
            .map_err(|e| TrainError::Distributed(format!("cannot start the heartbeat thread: {e}")))?;
        Ok(TcpWorld { inner })
    }

    /// The world's end, shared with whoever must stop work when a rank dies.
    pub fn abort(&self) -> Arc<Abort> {
        self.inner.abort.clone()
    }

    fn recv(&self, link: &Link) -> Result<Vec<u8>, TrainError> {
        let inbox = link.inbox.lock().map_err(|_| TrainError::Distributed("an inbox lock was poisoned".into()))?;
        // Data that arrived before an abort is still delivered: a peer that finished
        // and left may have sent its last payload just before.
        loop {
            match inbox.recv_timeout(Duration::from_millis(100)) {
                Ok(v) => return Ok(v),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(why) = self.inner.abort.reason() {
                        return Err(TrainError::Distributed(why));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let why =
                        self.inner.abort.reason().unwrap_or_else(|| format!("the connection to {} closed", link.who));
                    return Err(TrainError::Distributed(why));
                }
            }
        }
    }

    fn send(&self, link: &Link, payload: &[u8]) -> Result<(), TrainError> {
        if let Some(why) = self.inner.abort.reason() {
            return Err(TrainError::Distributed(why));
        }
        link.send(wire::DATA, payload).map_err(|e| {
            let why = format!("{} stopped receiving ({e})", link.who);
            self.inner.abort_all(why.clone());
            TrainError::Distributed(self.inner.abort.reason().unwrap_or(why))
        })
    }
}

#[cfg(test)]
impl TcpWorld {
    /// Closes every connection without a goodbye, as a killed process does.
    pub(crate) fn vanish(self) {
        self.inner.leaving.store(true, Ordering::SeqCst);
        for l in &self.inner.links {
            if let Ok(w) = l.writer.lock() {
                let _ = w.shutdown(Shutdown::Both);
            }
        }
        std::mem::forget(self);
    }
}

impl Collective for TcpWorld {
    fn rank(&self) -> usize {
        self.inner.rank
    }

    fn world_size(&self) -> usize {
        self.inner.size
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TrainError> {
        if self.inner.size == 1 {
            return Ok(vec![mine.to_vec()]);
        }
        if self.inner.rank != 0 {
            let hub = &self.inner.links[0];
            self.send(hub, mine)?;
            let list = self.recv(hub)?;
            return decode_list(&list).map_err(|e| TrainError::Distributed(format!("rank 0 sent a bad list: {e}")));
        }
        let mut parts = vec![Vec::new(); self.inner.size];
        parts[0] = mine.to_vec();
        for link in &self.inner.links {
            parts[link.peer] = self.recv(link)?;
        }
        let list = encode_list(&parts);
        for link in &self.inner.links {
            self.send(link, &list)?;
        }
        Ok(parts)
    }

    /// Waits for every rank, then says goodbye, so that closing the connections is not
    /// taken for a death.
    fn finish(&self) -> Result<(), TrainError> {
        super::barrier(self)?;
        self.inner.leaving.store(true, Ordering::SeqCst);
        for l in &self.inner.links {
            let _ = l.send(wire::BYE, &[]);
        }
        Ok(())
    }

    fn fail(&self, why: &str) {
        self.inner.abort_all(why.to_string());
    }

    fn aborted(&self) -> Option<CancellationToken> {
        Some(self.inner.abort.token())
    }

    fn abort_reason(&self) -> Option<String> {
        self.inner.abort.reason()
    }
}

impl Drop for TcpWorld {
    fn drop(&mut self) {
        // Leaving without `finish` (an error, a signal) ends the run for everyone.
        if !self.inner.leaving.load(Ordering::SeqCst) {
            self.inner.abort_all(format!("rank {} stopped before the run ended", self.inner.rank));
        }
        self.inner.leaving.store(true, Ordering::SeqCst);
        for l in &self.inner.links {
            if let Ok(w) = l.writer.lock() {
                let _ = w.shutdown(Shutdown::Write);
            }
        }
    }
}

fn silence() -> Duration {
    super::env::seconds_from_env("AGENT_DIST_TIMEOUT_SECS", DEFAULT_SILENCE)
}

fn read_loop(inner: &Inner, index: usize, mut stream: TcpStream, tx: Sender<Vec<u8>>) {
    let link = inner.links[index].clone();
    loop {
        match read_frame(&mut stream, &|| link.seen()) {
            Ok((kind, payload)) => {
                link.seen();
                match kind {
                    wire::DATA => {
                        let _ = tx.send(payload);
                    }
                    wire::ABORT => inner.abort_all(String::from_utf8_lossy(&payload).into_owned()),
                    wire::BYE => link.said_bye.store(true, Ordering::SeqCst),
                    _ => {}
                }
            }
            Err(e) => {
                let normal = link.said_bye.load(Ordering::SeqCst) || inner.leaving.load(Ordering::SeqCst);
                if !normal {
                    let how = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        "its connection closed without a goodbye".to_string()
                    } else {
                        e.to_string()
                    };
                    inner.abort_all(format!("{} died ({how})", link.who));
                }
                return;
            }
        }
    }
}

fn heartbeat_loop(inner: &Inner) {
    let limit = silence();
    while !inner.leaving.load(Ordering::SeqCst) {
        for l in &inner.links {
            // A writer busy with a large frame is proof enough of life on that side.
            if let Ok(mut w) = l.writer.try_lock() {
                let _ = write_frame(&mut *w, wire::HEARTBEAT, &[]);
            }
            if !l.said_bye.load(Ordering::SeqCst) && l.silent_for() > limit {
                inner.abort_all(format!(
                    "{} stopped answering: nothing from it for {} s (hung, stopped, or its host is unreachable)",
                    l.who,
                    limit.as_secs()
                ));
            }
        }
        if inner.abort.reason().is_some() {
            return;
        }
        std::thread::sleep(HEARTBEAT_EVERY);
    }
}
