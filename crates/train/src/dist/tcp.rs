//! Ranks as processes joined over TCP: the CPU backend of [`Collective`], and the control
//! plane of every multi-process run.
//!
//! Two sets of connections. A star around rank 0 carries the control plane (byte gathers
//! for rollouts, statistics and barriers, heartbeats, aborts). A ring (each rank to the
//! next) carries the tensors: reduce-scatter and all-gather pass one chunk a step around
//! it (Patarasuk & Yuan 2009), so an all-reduce of N bytes sends 2·(W−1)/W·N bytes from
//! every rank, where the star made rank 0 send (W−1)·W·N. Each chunk is summed in one
//! fixed order by its owner and copied to the others, so every rank holds the same bits.
//!
//! Every connection has a reader thread and carries a heartbeat each second. A rank
//! whose connection closes without a goodbye (killed, crashed) or that stays silent
//! past the heartbeat timeout (hung, host gone) aborts the world: rank 0 tells every
//! other rank, each rank's pending and later collectives fail with the reason, and the
//! cancellation token lets work outside collectives (rollouts) stop too.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use candle_core::{DType, Tensor};

use super::wire::{self, decode_list, encode_list, read_frame, write_frame};
use super::Collective;
use crate::error::{TensorContext, TrainError};

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

    /// A collective's payload, in frames of at most [`wire::MAX_FRAME`] bytes.
    fn send_message(&self, payload: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().map_err(|_| std::io::Error::other("a writer panicked"))?;
        wire::write_message(&mut *w, payload)
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
    /// The ring: the connection this rank writes to rank + 1 on, and the one it reads rank − 1's from.
    ring: Option<(Arc<Link>, Arc<Link>)>,
    hosts: Vec<String>,
    abort: Arc<Abort>,
    leaving: AtomicBool,
    /// Payload bytes of collectives this rank has sent (not heartbeats or frame headers).
    sent: AtomicU64,
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
    /// for the others one to rank 0. `peers` holds (rank, description, stream); `ring` the
    /// streams to the next rank and from the previous one (None for a world of one);
    /// `hosts` every rank's host name, in rank order.
    pub(crate) fn start(
        rank: usize,
        size: usize,
        peers: Vec<(usize, String, TcpStream)>,
        ring: Option<(TcpStream, TcpStream)>,
        hosts: Vec<String>,
    ) -> Result<Self, TrainError> {
        let mut links = Vec::new();
        let mut readers = Vec::new();
        for (peer, who, stream) in peers {
            let (link, reader) = open_link(peer, who, stream)?;
            readers.push((link.clone(), reader));
            links.push(link);
        }
        let ring = match ring {
            Some((next, prev)) => {
                let (n, p) = ((rank + 1) % size, (rank + size - 1) % size);
                let (next, _) = open_link(n, format!("rank {n} (next in the ring)"), next)?;
                let (prev, reader) = open_link(p, format!("rank {p} (previous in the ring)"), prev)?;
                readers.push((prev.clone(), reader));
                Some((next, prev))
            }
            None => None,
        };
        let inner = Arc::new(Inner {
            rank,
            size,
            links,
            ring,
            hosts,
            abort: Arc::new(Abort::default()),
            leaving: AtomicBool::new(false),
            sent: AtomicU64::new(0),
        });
        for (i, ((link, tx), stream)) in readers.into_iter().map(|(l, (s, tx))| ((l, tx), s)).enumerate() {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(format!("rank-link-{i}"))
                .spawn(move || read_loop(&inner, &link, stream, tx))
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

    /// Every rank's host name, in rank order (what places ranks on their hosts' GPUs).
    pub fn hosts(&self) -> &[String] {
        &self.inner.hosts
    }

    /// Payload bytes this rank has sent in collectives so far.
    pub fn bytes_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::SeqCst)
    }

    /// Sends `data[chunk]` to the next rank and receives the previous rank's chunk.
    fn ring_step(&self, send: &[f32]) -> Result<Vec<f32>, TrainError> {
        let Some((next, prev)) = &self.inner.ring else {
            return Err(TrainError::Distributed("this world has no ring".into()));
        };
        let bytes: Vec<u8> = send.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.send(next, &bytes)?;
        let got = self.recv(prev)?;
        if got.len() % 4 != 0 {
            return Err(TrainError::Distributed(format!("{} sent a chunk of {} bytes", prev.who, got.len())));
        }
        Ok(got.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Ring reduce-scatter in place: afterwards `data[bounds[rank]]` holds the sum over ranks of that chunk
    /// (the other chunks hold partial sums).
    fn ring_reduce_scatter(&self, data: &mut [f32], bounds: &[std::ops::Range<usize>]) -> Result<(), TrainError> {
        let (r, w) = (self.inner.rank, self.inner.size);
        // Step s sends chunk r−s−1 (summed over the s+1 ranks before) and adds the received chunk r−s−2 to
        // this rank's own: after W−1 steps chunk r has every rank's part, added in the ring's order.
        for s in 0..w - 1 {
            let send = bounds[(r + 2 * w - s - 1) % w].clone();
            let recv = bounds[(r + 2 * w - s - 2) % w].clone();
            let got = self.ring_step(&data[send])?;
            if got.len() != recv.len() {
                return Err(TrainError::Other("ranks passed buffers of different sizes to a reduction".into()));
            }
            for (d, g) in data[recv].iter_mut().zip(got) {
                *d += g;
            }
        }
        Ok(())
    }

    /// Ring all-gather in place: `data[bounds[rank]]` is this rank's; afterwards every chunk is its owner's.
    fn ring_all_gather(&self, data: &mut [f32], bounds: &[std::ops::Range<usize>]) -> Result<(), TrainError> {
        let (r, w) = (self.inner.rank, self.inner.size);
        for s in 0..w - 1 {
            let send = bounds[(r + w - s) % w].clone();
            let recv = bounds[(r + 2 * w - s - 1) % w].clone();
            let got = self.ring_step(&data[send])?;
            if got.len() != recv.len() {
                return Err(TrainError::Other("ranks passed tensors of different sizes to all-gather".into()));
            }
            data[recv].copy_from_slice(&got);
        }
        Ok(())
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
        link.send_message(payload).map_err(|e| {
            let why = format!("{} stopped receiving ({e})", link.who);
            self.inner.abort_all(why.clone());
            TrainError::Distributed(self.inner.abort.reason().unwrap_or(why))
        })?;
        self.inner.sent.fetch_add(payload.len() as u64, Ordering::SeqCst);
        Ok(())
    }
}

/// Chunk boundaries of `n` elements over `w` ranks: as even as can be, the first ones one longer.
fn even_chunks(n: usize, w: usize) -> Vec<std::ops::Range<usize>> {
    let (base, extra) = (n / w, n % w);
    let mut at = 0;
    (0..w)
        .map(|i| {
            let len = base + usize::from(i < extra);
            at += len;
            at - len..at
        })
        .collect()
}

/// A tensor's elements as f32 on the host.
fn host_f32(t: &Tensor) -> Result<Vec<f32>, TrainError> {
    t.to_dtype(DType::F32).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).ctx("copying a tensor to the host")
}

/// Wraps an established stream: the link (its writer) and the reader half with the channel its reader thread
/// feeds.
#[allow(clippy::type_complexity)]
fn open_link(
    peer: usize,
    who: String,
    stream: TcpStream,
) -> Result<(Arc<Link>, (TcpStream, Sender<Vec<u8>>)), TrainError> {
    let reader = stream.try_clone().map_err(|e| TrainError::Distributed(format!("socket to {who}: {e}")))?;
    let _ = stream.set_nodelay(true);
    // A peer that stops reading (stopped, host gone) must not block a write forever.
    let _ = stream.set_write_timeout(Some(silence()));
    let _ = reader.set_read_timeout(None);
    let (tx, rx) = channel();
    let link = Arc::new(Link {
        peer,
        who,
        writer: Mutex::new(stream),
        inbox: Mutex::new(rx),
        last_seen: Mutex::new(Instant::now()),
        said_bye: AtomicBool::new(false),
    });
    Ok((link, (reader, tx)))
}

#[cfg(test)]
impl TcpWorld {
    /// Closes every connection without a goodbye, as a killed process does.
    pub(crate) fn vanish(self) {
        self.inner.leaving.store(true, Ordering::SeqCst);
        let ring = self.inner.ring.as_ref().map(|(next, prev)| [next, prev]).into_iter().flatten();
        for l in self.inner.links.iter().chain(ring) {
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

    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        if self.inner.size == 1 {
            return Ok(t.clone());
        }
        let mut data = host_f32(t)?;
        let bounds = even_chunks(data.len(), self.inner.size);
        self.ring_reduce_scatter(&mut data, &bounds)?;
        self.ring_all_gather(&mut data, &bounds)?;
        Tensor::from_vec(data, t.shape(), t.device()).and_then(|x| x.to_dtype(t.dtype())).ctx("all-reduce")
    }

    fn reduce_scatter_sum(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        let (n, w) = (t.elem_count(), self.inner.size);
        if super::scatter_is_identity(t, w)? {
            return Ok(t.clone());
        }
        let mut data = host_f32(t)?;
        let bounds = even_chunks(n, w);
        self.ring_reduce_scatter(&mut data, &bounds)?;
        let mine = data[bounds[self.inner.rank].clone()].to_vec();
        Tensor::from_vec(mine, n / w, t.device()).and_then(|x| x.to_dtype(t.dtype())).ctx("reduce-scatter")
    }

    fn all_gather(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        let w = self.inner.size;
        if w == 1 {
            return Ok(t.clone());
        }
        let n = t.elem_count();
        let mut data = vec![0f32; n * w];
        data[self.inner.rank * n..(self.inner.rank + 1) * n].copy_from_slice(&host_f32(t)?);
        let bounds: Vec<_> = (0..w).map(|i| i * n..(i + 1) * n).collect();
        self.ring_all_gather(&mut data, &bounds)?;
        Tensor::from_vec(data, n * w, t.device()).and_then(|x| x.to_dtype(t.dtype())).ctx("all-gather")
    }

    /// Waits for every rank, then says goodbye, so that closing the connections is not
    /// taken for a death.
    fn finish(&self) -> Result<(), TrainError> {
        super::barrier(self)?;
        self.inner.leaving.store(true, Ordering::SeqCst);
        for l in self.inner.links.iter().chain(self.inner.ring.as_ref().map(|(next, _)| next)) {
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
        for l in self.inner.links.iter().chain(self.inner.ring.as_ref().map(|(next, _)| next)) {
            if let Ok(w) = l.writer.lock() {
                let _ = w.shutdown(Shutdown::Write);
            }
        }
    }
}

fn silence() -> Duration {
    super::env::seconds_from_env("AGENT_DIST_TIMEOUT_SECS", DEFAULT_SILENCE)
}

fn read_loop(inner: &Inner, link: &Link, mut stream: TcpStream, tx: Sender<Vec<u8>>) {
    let mut pieces = wire::Reassembly::default();
    loop {
        match read_frame(&mut stream, wire::MAX_FRAME, &|| link.seen()) {
            Ok((kind, payload)) => {
                link.seen();
                match kind {
                    wire::DATA | wire::DATA_MORE => {
                        if let Some(whole) = pieces.push(kind, payload) {
                            let _ = tx.send(whole);
                        }
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
